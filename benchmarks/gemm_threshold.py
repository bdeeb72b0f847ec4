# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[triton]"]
# ///
"""Where emulation starts to pay: emulated GEMM vs cuBLAS SGEMM by row count, on PET's layer shapes.

The small-shape fallback (``tcemu.EmulationConfig.small_shape_min_flops``) sends GEMMs below a FLOP count
to cuBLAS SGEMM. This script times, for the PET-S layer shapes (K, N) and row counts M from a 192-atom
system's edges (7,680) upwards, each method's kernel as ``linear`` runs it (weight split beforehand, A
split in the call) against ``torch.mm`` in IEEE FP32, two ways:

* ``gpu_ms``: ``triton.testing.do_bench`` median (GPU time, L2 flushed);
* ``host_ms``: wall time per call of a loop of back-to-back calls (launch overhead included), the
  regime of a host-bound compiled step.

Output: a result file (``tcemu._results``), benchmark ``gemm_threshold``, one case per (method, M, K, N) with
the kernel's and SGEMM's times both ways and their ratios (``UNITS``). Stored run:
``benchmarks/results/h200/gemm/small_shape_threshold.csv``.

    python benchmarks/gemm_threshold.py --out out/gemm_threshold.csv
"""

from __future__ import annotations

import argparse
import time

import torch
import triton

from tcemu._results import Provenance, from_wide, write_results

SHAPES_KN = [(256, 1024), (256, 768), (512, 256), (768, 256), (256, 256), (512, 512), (1024, 256)]
ROWS = [7680, 15360, 30720, 61440, 122880]
METHODS = ["tf32x3", "bf16x3", "bf16x6", "bf16x9"]
CASE_FIELDS = ("M", "K", "N")
UNITS = {"gflop": "GFLOP", "sgemm_gpu_ms": "ms", "gpu_ms": "ms", "gpu_x_sgemm": "x", "sgemm_host_ms": "ms",
         "host_ms": "ms", "host_x_sgemm": "x"}


def host_ms(fn, n: int = 50) -> float:
    """Wall time per call of ``n`` back-to-back calls, synchronised at the end only."""
    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e3


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="out/gemm_threshold.csv", help="result file")
    p.add_argument("--rows", default=",".join(map(str, ROWS)))
    p.add_argument("--methods", default=",".join(METHODS))
    args = p.parse_args(argv)

    from tcemu.emulation.gemm import emu_mm, split_t

    torch.backends.cuda.matmul.fp32_precision = "ieee"
    prov = Provenance.current()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for M in map(int, args.rows.split(",")):
        for K, N in SHAPES_KN:
            a = torch.randn(M, K, device="cuda", generator=gen)
            w = torch.randn(N, K, device="cuda", generator=gen)
            gflop = 2.0 * M * N * K / 1e9
            sg_gpu = triton.testing.do_bench(lambda a=a, w=w: torch.mm(a, w.T), warmup=10, rep=40)
            sg_host = host_ms(lambda a=a, w=w: torch.mm(a, w.T))
            line = f"M={M:6d} K={K:4d} N={N:4d} {gflop:6.2f} GFLOP  sgemm {sg_gpu:.4f} ms"
            for meth in args.methods.split(","):
                pieces = split_t(w.T, meth)  # (N, K) pieces of W^T's transpose: what linear caches
                g = triton.testing.do_bench(lambda a=a, p=pieces, m=meth: emu_mm(a, p, m), warmup=10, rep=40)
                h = host_ms(lambda a=a, p=pieces, m=meth: emu_mm(a, p, m))
                rows.append(dict(method=meth, M=M, K=K, N=N, gflop=gflop, sgemm_gpu_ms=sg_gpu, gpu_ms=g,
                                 gpu_x_sgemm=sg_gpu / g, sgemm_host_ms=sg_host, host_ms=h,
                                 host_x_sgemm=sg_host / h))
                line += f" | {meth} {sg_gpu / g:.2f}x gpu {sg_host / h:.2f}x host"
            print(line, flush=True)
    write_results(args.out, from_wide("gemm_threshold", rows, CASE_FIELDS, UNITS, impl="tcemu"), prov)
    print(f"wrote {args.out} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
