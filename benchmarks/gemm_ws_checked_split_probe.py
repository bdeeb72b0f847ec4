"""GPU probe (H200, Triton 3.6) of the warp-specialised TF32x3 kernel with the checked split (session 11).

Session 10's Nsight Compute profile put the splitter warps on the critical path: 598 instructions per K-tile
and warp, about 17 integer and float operations per value for the exact split. The checked split
(``_split_rows_tf32_fast``) takes 5 operations per value plus 2 to 3 for the range check. The exact split then
runs only on K-tiles that hold Inf, NaN, |x| >= 3.39e38 or 0 < |x| < 2^-137. Its low piece keeps junk in its
low 13 bits, which the Tensor Core ignores.

1. Bits: the checked and the exact splitter against ``pg`` (A split beforehand by ``split3``), on ragged
   shapes with A holding each kind of value the check must catch: Inf/NaN, NaN with a payload only in the
   low 13 bits, tiny nonzero values (the high piece must not become 0), values that round past the largest
   TF32 (the high piece saturates), the range's boundary values, and random bit patterns.
2. Timing: CUDA events, median of 30 calls after 3 warm-up calls, against torch.addmm SGEMM (TF32 off), on
   five PET-S edge shapes at 17,280 atoms and 8192^3. Two rounds, with the variants in rotated order.

Run: ``PYTHONPATH=src OUT=<dir> python3 benchmarks/gemm_ws_checked_split_probe.py``.
Output: ``$OUT/ws_checked_split_probe.csv``; recorded: ``benchmarks/results/ws_checked_split_probe_h200.csv``.
"""
import csv
import importlib
import os
import sys
import time

import torch

sys.path.insert(0, "src")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _probe_util import bench, print_environment, rotated_times, same_bits, tf32_a_values
from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
em = importlib.import_module("tcemu.emulation.gemm.emu_mm")  # the module (the package exports the function)
from tcemu.emulation.methods import get_method
OUT = os.environ.get("OUT", ".")
spec = get_method("tf32x3")
T = "128x128x32w8s3m1tgw"
# (name, configuration, split_vecs, checked); the first is session 10's default
VARS = [("exact v4", T, 4, False), ("checked v4", T, 4, True), ("checked v2", T, 2, True),
        ("checked v8", T, 8, True), ("checked v1", T, 1, True), ("exact 64x256", "64x256x32w8s2m1tgw", 4, False),
        ("checked 64x256", "64x256x32w8s2m1tgw", 4, True)]
SHAPES = [(604800, 256, 256), (604800, 256, 1024), (604800, 256, 768), (604800, 512, 512), (604800, 768, 256),
          (604800, 512, 256), (8192, 8192, 8192)]


def run(a, pieces, bias, out, v):
    """The kernel launched directly with variant v (exceptions propagate; emu_mm would fall back)."""
    M, K = a.shape
    em._launch_wgmma_ws(spec, KernelConfig.parse(v[1]), a.unsqueeze(0), tuple(pieces), bias, out.unsqueeze(0), M,
                        pieces[0].shape[0], K, split_vecs=v[2], checked_split=v[3])


rows, bits_rows = [], []
t0 = time.time()
print_environment()
gen = torch.Generator().manual_seed(11)
n_fail = 0
for (M, K, N) in [(2900, 336, 1100), (300, 48, 200), (20000, 256, 256)]:
    base = torch.randn(M, K, generator=gen)
    b = torch.randn(K, N, generator=gen)
    b[K // 2, N // 3] = float("inf")  # Inf * tiny must stay Inf: the high piece of a tiny value is not 0
    b[K // 3, N // 2] = 0.0
    bias = torch.randn(N, generator=gen).cuda()
    pieces = split_t(b.cuda(), "tf32x3")
    for kind in ("normal", "inf_nan", "nan_low_payload", "tiny", "saturating", "boundary", "random_bits",
                 "mixed_scale"):
        a = tf32_a_values(kind, base, gen).cuda()
        want = emu_mm(a, pieces, "tf32x3", bias, config=KernelConfig.parse("128x128x32w8s3m1pg"))
        for v in VARS:
            out = torch.empty(M, N, device="cuda")
            try:
                run(a, pieces, bias, out, v); torch.cuda.synchronize()
                ok = same_bits(out, want)
            except Exception as exc:  # noqa: BLE001
                ok = f"ERR {type(exc).__name__}: {str(exc)[:200]}"
            n_fail += ok is not True
            bits_rows.append(dict(M=M, K=K, N=N, a_values=kind, variant=v[0], same_bits_as_pg=ok))
            if ok is not True:
                print("BITS DIFFER", (M, K, N), kind, v, ok, flush=True)
print(f"[bits: {len(bits_rows)} comparisons, {n_fail} differ; {time.time()-t0:.0f} s]", flush=True)
with open(f"{OUT}/ws_checked_split_bits.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(bits_rows[0])); w.writeheader(); w.writerows(bits_rows)

for rnd in (1, 2):
    for (M, K, N) in SHAPES:
        a = torch.randn(M, K, device="cuda"); b = torch.randn(K, N, device="cuda"); bias = torch.randn(N, device="cuda")
        pieces = split_t(b, "tf32x3"); out = torch.empty(M, N, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        sg = bench(lambda: torch.addmm(bias, a, b, out=out))
        line = rotated_times(VARS, rnd, lambda v: run(a, pieces, bias, out, v))
        base_t = line[VARS[0]]
        print(f"r{rnd} {M}x{K}x{N} sgemm {sg:.3f} ms | " + " | ".join(
            f"{v[0]} {line[v]:.3f} ms {sg/line[v]:.2f}x sg {base_t/line[v]:.3f}x exact" for v in VARS), flush=True)
        for v in VARS:
            t = line[v]
            rows.append(dict(round=rnd, M=M, K=K, N=N, variant=v[0], config=v[1], split_vecs=v[2], checked=v[3],
                             ms=t, sgemm_ms=sg, x_sgemm=sg / t, vs_exact_v4=base_t / t, tflops=2 * M * N * K / t / 1e9,
                             gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                             triton=__import__("triton").__version__))
        with open(f"{OUT}/ws_checked_split_probe.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    print(f"[round {rnd} done {time.time()-t0:.0f} s]", flush=True)
