"""GPU probe (H200, Triton 3.6) of the warp-specialised TF32x3 kernel with two consumer partitions (session 11).

Nsight Compute (session 10) found three ``BAR.SYNC`` across the MMA partition's two warpgroups per K-tile:
Triton lowers an ``mbarrier.arrive`` in a partition by synchronising its warps first. With
``two_consumers=True`` each warpgroup is a partition of its own: it runs the MMAs of its 64 rows of the
128 x 128 tile, and releases the ring slots by its own arrival (the slots' "empty" barriers count two).

1. Bits: against ``pg`` (A split beforehand), batched and ragged shapes, A with every kind of value of
   ``_probe_util.TF32_KINDS``, B with Inf, bias; the exact and the checked split.
2. Timing: CUDA events, median of 30 calls after 3 warm-ups, against torch.addmm SGEMM (TF32 off), on five PET-S
   edge shapes at 17,280 atoms and 8192^3; the library default (one consumer partition), two consumer
   partitions, each also without its split (DIAGNOSTIC ONLY: wrong results, the MMA side's own speed), and
   ``gw`` (one program per tile) with two. Two rounds, the variants in rotated order.

Run: ``PYTHONPATH=src OUT=<dir> python3 benchmarks/gemm_ws_two_consumers_probe.py``.
Output: ``$OUT/ws_two_consumers_probe.csv``, ``$OUT/ws_two_consumers_bits.csv``; recorded under
``benchmarks/results/ws_two_consumers_*_h200.csv``.
"""
import csv
import importlib
import os
import sys
import time

import torch

sys.path.insert(0, "src")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _probe_util import TF32_KINDS, bench, print_environment, rotated_times, same_bits, tf32_a_values

from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
em = importlib.import_module("tcemu.emulation.gemm.emu_mm")  # the module (the package exports the function)
from tcemu.emulation.methods import get_method
OUT = os.environ.get("OUT", ".")
spec = get_method("tf32x3")
T, G = "128x128x32w8s3m1tgw", "128x128x32w8s3m1gw"
# (name, configuration, two consumers, checked split: False exact, True checked, 2 none); the first is the default
VARS = [("one consumer", T, False, False), ("two consumers", T, True, False),
        ("two consumers, checked", T, True, True), ("gw two consumers", G, True, False),
        ("one consumer, no split (diag.)", T, False, 2), ("two consumers, no split (diag.)", T, True, 2)]
SHAPES = [(604800, 256, 256), (604800, 256, 1024), (604800, 256, 768), (604800, 512, 512), (604800, 768, 256),
          (8192, 8192, 8192)]


def run(a3, pieces, bias, out3, v):
    """The kernel launched directly with variant v on (Z, M, K) A (exceptions propagate)."""
    Z, M, K = a3.shape
    em._launch_wgmma_ws(spec, KernelConfig.parse(v[1]), a3, tuple(pieces), bias, out3, M, pieces[0].shape[0], K,
                        two_consumers=v[2], checked_split=v[3])


t0 = time.time()
print_environment()
gen = torch.Generator().manual_seed(13)
bits_rows = []
for (Z, M, K, N) in [(2, 2900, 336, 1100), (1, 300, 48, 200), (3, 333, 1000, 129), (1, 20000, 256, 256)]:
    base = torch.randn(M, K, generator=gen)
    b = torch.randn(K, N, generator=gen)
    b[K // 2, N // 3] = float("inf")
    bias = torch.randn(N, generator=gen).cuda()
    pieces = split_t(b.cuda(), "tf32x3")
    for kind in ["normal", *TF32_KINDS, "random_bits", "mixed_scale"]:
        a = torch.stack([tf32_a_values(kind, base, gen) for _ in range(Z)]).cuda()
        want = emu_mm(a, pieces, "tf32x3", bias, config=KernelConfig.parse("128x128x32w8s3m1pg"))
        for v in VARS:
            if v[3] == 2:
                continue  # diagnostic: wrong results by design
            out = torch.empty(Z, M, N, device="cuda")
            try:
                run(a, pieces, bias, out, v); torch.cuda.synchronize()
                ok = same_bits(out, want)
            except Exception as exc:  # noqa: BLE001
                ok = f"ERR {type(exc).__name__}: {str(exc)[:300]}"
            bits_rows.append(dict(Z=Z, M=M, K=K, N=N, a_values=kind, variant=v[0], same_bits_as_pg=ok))
            if ok is not True:
                print("BITS DIFFER", (Z, M, K, N), kind, v, ok, flush=True)
n_bad = sum(r["same_bits_as_pg"] is not True for r in bits_rows)
print(f"[bits: {len(bits_rows)} comparisons, {n_bad} differ; {time.time()-t0:.0f} s]", flush=True)
with open(f"{OUT}/ws_two_consumers_bits.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(bits_rows[0])); w.writeheader(); w.writerows(bits_rows)

rows = []
for rnd in (1, 2):
    for (M, K, N) in SHAPES:
        a = torch.randn(1, M, K, device="cuda"); b = torch.randn(K, N, device="cuda")
        bias = torch.randn(N, device="cuda")
        pieces = split_t(b, "tf32x3"); out = torch.empty(1, M, N, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        sg = bench(lambda: torch.addmm(bias, a[0], b, out=out[0]))
        line = rotated_times(VARS, rnd, lambda v: run(a, pieces, bias, out, v))
        base_t = line[VARS[0]]
        print(f"r{rnd} {M}x{K}x{N} sgemm {sg:.3f} ms | " + " | ".join(
            f"{v[0]} {line[v]:.3f} ms {sg/line[v]:.2f}x sg {base_t/line[v]:.3f}x default" for v in VARS), flush=True)
        for v in VARS:
            t = line[v]
            rows.append(dict(round=rnd, M=M, K=K, N=N, variant=v[0], config=v[1], two_consumers=v[2],
                             checked_split=v[3], ms=t, sgemm_ms=sg, x_sgemm=sg / t, vs_default=base_t / t,
                             tflops=2 * M * N * K / t / 1e9, gpu=torch.cuda.get_device_name(),
                             torch=torch.__version__, triton=__import__("triton").__version__))
        with open(f"{OUT}/ws_two_consumers_probe.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    print(f"[round {rnd} done {time.time()-t0:.0f} s]", flush=True)
