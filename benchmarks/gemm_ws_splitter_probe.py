"""GPU probe (H200, Triton 3.6) of the warp-specialised TF32x3 kernel's splitter partition (session 10).

Nsight Compute showed the splitter warps to be the persistent kernel's critical path (``docs/kernels.md`` §1,
session 10). This probe launches ``tgw`` (128x128x32, persistent) directly with splitter variants
(warps, registers per thread, ``split_vecs``: vectors of 4 FP32 values a splitter thread splits per step) and
a 64x256 tile (A's 64-row tile split once for 256 columns: half the splitter work per MMA; two consumer
warpgroups side by side along N):

1. bits: each variant against ``pg`` (A split beforehand) on ragged shapes with Inf/NaN in A and B, bias;
2. timing: CUDA events, median of 30 calls after 3 warm-up calls, against torch.addmm SGEMM (TF32 off), on
   four PET-S edge shapes at 17,280 atoms and 8192^3; two rounds.

Run: ``PYTHONPATH=src OUT=<dir> python3 benchmarks/gemm_ws_splitter_probe.py`` (about 30 s on the H200).
Output: ``$OUT/ws_splitter_probe.csv``; recorded: ``benchmarks/results/ws_splitter_probe_h200.csv``.
"""
import csv
import importlib
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, "src")
from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
em = importlib.import_module("tcemu.emulation.gemm.emu_mm")  # the module (the package exports the function)
from tcemu.emulation.methods import get_method
OUT = os.environ.get("OUT", ".")
spec = get_method("tf32x3")
# (configuration, splitter warps, splitter registers, split_vecs); the first is the library default
T = "128x128x32w8s3m1tgw"
VARS = [(T, 4, 72, 4), (T, 4, 72, 8), (T, 4, 88, 8), (T, 4, 72, 2), (T, 4, 88, 4),
        ("64x256x32w8s2m1tgw", 4, 72, 4), ("64x256x32w8s2m1gw", 4, 72, 4)]
SHAPES = [(604800, 256, 256), (604800, 256, 1024), (604800, 256, 768), (604800, 512, 512), (604800, 768, 256),
          (8192, 8192, 8192)]



def run(a, pieces, bias, out, v):
    """The kernel launched directly with variant v (exceptions propagate; emu_mm would fall back)."""
    Z, M, K = 1, *a.shape
    em._launch_wgmma_ws(spec, KernelConfig.parse(v[0]), a.unsqueeze(0), tuple(pieces), bias, out.unsqueeze(0), M,
                        pieces[0].shape[0], K, split_warps=v[1], split_regs=v[2], split_vecs=v[3])



def bench(fn, n=30):
    """Median ms of n calls (CUDA events) after 3 warm-up calls."""
    for _ in range(3): fn()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)


rows = []
t0 = time.time()
gen = torch.Generator().manual_seed(5)
# bits: ragged + Inf/NaN
for (M, K, N) in [(2900, 336, 1100), (300, 48, 200), (604800, 256, 256)]:
    a = torch.randn(M, K, generator=gen); a[7, K // 3] = float("inf"); a[5, 2] = float("nan"); a[M-1, K-1] = float("-inf")
    b = torch.randn(K, N, generator=gen); b[K // 2, N // 3] = float("inf")
    a, b = a.cuda(), b.cuda(); bias = torch.randn(N, generator=gen).cuda()
    pieces = split_t(b, "tf32x3")
    want = emu_mm(a, pieces, "tf32x3", bias, config=KernelConfig.parse("128x128x32w8s3m1pg"))
    for v in VARS:
        out = torch.empty(M, N, device="cuda")
        try:
            run(a, pieces, bias, out, v); torch.cuda.synchronize()
            nan = torch.isnan(want)
            ok = torch.equal(torch.isnan(out), nan) and torch.equal(out.view(torch.int32)[~nan], want.view(torch.int32)[~nan])
        except Exception as exc:
            ok = f"ERR {type(exc).__name__}: {str(exc)[:200]}"
        print("bits", (M, K, N), v, ok, flush=True)
print(f"[bits done {time.time()-t0:.0f} s]", flush=True)
for rnd in (1, 2):
    for (M, K, N) in SHAPES:
        a = torch.randn(M, K, device="cuda"); b = torch.randn(K, N, device="cuda"); bias = torch.randn(N, device="cuda")
        pieces = split_t(b, "tf32x3"); out = torch.empty(M, N, device="cuda")
        bt = b.t().contiguous()
        torch.backends.cuda.matmul.allow_tf32 = False
        sg = bench(lambda: torch.addmm(bias, a, b, out=out))
        line = {}
        for v in VARS:
            try:
                line[v] = bench(lambda: run(a, pieces, bias, out, v))
            except Exception as exc:
                line[v] = float("nan"); print("ERR", v, exc)
        base = line[VARS[0]]
        print(f"r{rnd} {M}x{K}x{N} sgemm {sg:.3f} ms | " + " | ".join(f"{v} {t:.3f} ms {sg/t:.2f}x sg {base/t:.3f}x base" for v, t in line.items()), flush=True)
        for v, t in line.items():
            rows.append(dict(round=rnd, M=M, K=K, N=N, config=v[0], split_warps=v[1], split_regs=v[2], split_vecs=v[3], ms=t, sgemm_ms=sg,
                             x_sgemm=sg / t, vs_default=base / t, tflops=2 * M * N * K / t / 1e9, gpu=torch.cuda.get_device_name(),
                             torch=torch.__version__, triton=__import__("triton").__version__))
        with open(f"{OUT}/ws_splitter_probe.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    print(f"[round {rnd} done {time.time()-t0:.0f} s]", flush=True)
