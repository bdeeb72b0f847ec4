"""GPU probe (H200, Triton 3.6), session 11: the warp-specialised Gluon kernel on A split beforehand
(``pgw``, persistent ``ptgw``): a loader warp brings A's and B's pieces by TMA, the MMA warps run on them, and
with the persistent tile loop the loader runs into the next tile while the MMA warps store this one.

The lever from BF16x6's Nsight Compute profile (``ncu_po_bf16x6_h200_details.txt``): on the edge shape each
128 x 64 tile of C has only four K-tiles, and the tensor pipe was busy 46 % of the time.

1. Bits: ``pgw`` and ``ptgw`` against ``pg`` (same tiles) for BF16x6, BF16x3 and TF32x3, batched and ragged,
   Inf/NaN in A and B, bias.
2. Timing through ``emu_mm`` (each configuration with its split pass of A), CUDA events, median of 30 calls
   after 3 warm-ups: the library's default, ``pg``, ``pgw``, ``ptgw``, against torch.addmm SGEMM (TF32 off),
   on five PET-S edge shapes at 17,280 atoms and 8192^3. Two rounds, the variants in rotated order.

Run: ``PYTHONPATH=src OUT=<dir> python3 benchmarks/gemm_pieces_ws_probe.py``.
Output: ``$OUT/pieces_ws_probe.csv``, ``$OUT/pieces_ws_bits.csv``; recorded under
``benchmarks/results/pieces_ws_*_h200.csv``.
"""
import csv
import os
import sys
import time

import torch

sys.path.insert(0, "src")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _probe_util import bench, print_environment, same_bits

from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
OUT = os.environ.get("OUT", ".")
TILES = {"bf16x6": "128x64x64w8s3m1", "bf16x3": "128x128x64w8s3m1", "tf32x3": "128x128x32w8s3m1"}
SHAPES = [(604800, 256, 256), (604800, 256, 1024), (604800, 256, 768), (604800, 512, 512), (604800, 768, 256),
          (8192, 8192, 8192)]

t0 = time.time()
print_environment()
gen = torch.Generator().manual_seed(14)
bits_rows = []
for method, tile in TILES.items():
    for (Z, M, K, N) in [(2, 2900, 336, 1100), (1, 300, 48, 200), (3, 333, 1000, 129), (1, 20000, 256, 256)]:
        a = torch.randn(Z, M, K, generator=gen)
        a[Z - 1, 7, 9] = float("inf"); a[0, 5, 2] = float("nan"); a[0, 9, K - 1] = float("-inf")
        b = torch.randn(K, N, generator=gen); b[K // 2, 6] = float("inf")
        a, b = a.cuda(), b.cuda(); bias = torch.randn(N, generator=gen).cuda()
        pieces = split_t(b, method)
        want = emu_mm(a, pieces, method, bias, config=KernelConfig.parse(tile + "pg"))
        for suffix in ("pgw", "ptgw"):
            try:
                got = emu_mm(a, pieces, method, bias, config=KernelConfig.parse(tile + suffix))
                ok = same_bits(got, want)
            except Exception as exc:  # noqa: BLE001
                ok = f"ERR {type(exc).__name__}: {str(exc)[:300]}"
            bits_rows.append(dict(method=method, Z=Z, M=M, K=K, N=N, config=tile + suffix, same_bits_as_pg=ok))
            if ok is not True:
                print("BITS DIFFER", method, (Z, M, K, N), suffix, ok, flush=True)
from tcemu.emulation.gemm.emu_mm import _WGMMA_FAILED  # noqa: E402
print(f"[bits: {len(bits_rows)} comparisons, {sum(r['same_bits_as_pg'] is not True for r in bits_rows)} differ; "
      f"Gluon failures {sorted(_WGMMA_FAILED)}; {time.time()-t0:.0f} s]", flush=True)
with open(f"{OUT}/pieces_ws_bits.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(bits_rows[0])); w.writeheader(); w.writerows(bits_rows)

rows = []
for rnd in (1, 2):
    for (M, K, N) in SHAPES:
        a = torch.randn(M, K, device="cuda"); b = torch.randn(K, N, device="cuda"); bias = torch.randn(N, device="cuda")
        out = torch.empty(M, N, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        sg = bench(lambda: torch.addmm(bias, a, b, out=out))
        line = []
        for method, tile in TILES.items():
            pieces = split_t(b, method)
            variants = [("default", None)] + [(s, KernelConfig.parse(tile + s)) for s in ("pg", "pgw", "ptgw")]
            variants = variants[rnd - 1:] + variants[:rnd - 1]
            for name, cfg in variants:
                t = bench(lambda: emu_mm(a, pieces, method, bias, out=out, config=cfg))
                line.append((method, name, t))
        print(f"r{rnd} {M}x{K}x{N} sgemm {sg:.3f} ms | " + " | ".join(f"{m} {n} {t:.3f} ms {sg/t:.2f}x" for m, n, t in line),
              flush=True)
        for m, n, t in line:
            rows.append(dict(round=rnd, M=M, K=K, N=N, method=m, variant=n, ms=t, sgemm_ms=sg, x_sgemm=sg / t,
                             tflops=2 * M * N * K / t / 1e9, gpu=torch.cuda.get_device_name(),
                             torch=torch.__version__, triton=__import__("triton").__version__))
        with open(f"{OUT}/pieces_ws_probe.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    print(f"[round {rnd} done {time.time()-t0:.0f} s]", flush=True)
