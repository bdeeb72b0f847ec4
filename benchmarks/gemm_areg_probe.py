"""GPU probe (H200, Triton 3.6), session 11: BF16 pieces of A split in the wgmma operand registers, and the
TF32x3 warp-specialised kernel without its splitter's work.

1. ``SPLIT_A = 2`` / ``3`` of ``_emu_mm_wgmma_kernel``: each K-tile's FP32 A tile goes from shared memory into
   the registers of wgmma's A operand and is split there by the checked BF16 split (``cvt.rn.bf16x2``; the
   exact split only on K-tiles with special or extreme values). No piece of A is written to global or shared
   memory. 2 drains every MMA before the split (correct); 3 lets the split overlap the previous K-tile's
   correction MMAs, which read registers ptxas reuses (DIAGNOSTIC ONLY: a race; its bits prove nothing).
   Bits against ``pg`` (A split beforehand), with the value kinds the check must catch.
2. Timing, CUDA events, median of 30 calls after 3 warm-ups: BF16x6 and BF16x3, the library's default
   (``emu_mm``, with its split pass) against the register kernels; TF32x3 ``tgw`` with the exact split, the
   checked split, and no split at all (``checked_split=2``, DIAGNOSTIC ONLY: wrong results, the kernel's time
   without the splitter's work). Two rounds.

Run: ``PYTHONPATH=src OUT=<dir> python3 benchmarks/gemm_areg_probe.py``.
Output: ``$OUT/areg_probe.csv``, ``$OUT/areg_bits.csv``; recorded: ``benchmarks/results/areg_probe_h200*.csv``.
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
AREG = {"bf16x6": ["128x64x64w8s3m1pg", "128x64x32w8s4m1pg"], "bf16x3": ["128x128x64w8s3m1pg", "128x64x64w8s3m1pg"]}
SHAPES = [(604800, 256, 256), (604800, 256, 1024), (604800, 512, 512), (604800, 768, 256), (8192, 8192, 8192)]


def f32(bits):
    return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32).item()


def areg(method, cfg, a, pieces, bias, out, mode):
    M, K = a.shape
    em._launch_wgmma(get_method(method), KernelConfig.parse(cfg), (a.unsqueeze(0),), tuple(pieces), bias,
                     out.unsqueeze(0), M, pieces[0].shape[0], K, mode)


def bench(fn, n=30):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)


def same_bits(got, want):
    nan = torch.isnan(want)
    return bool(torch.equal(torch.isnan(got), nan) and torch.equal(got.view(torch.int32)[~nan],
                                                                     want.view(torch.int32)[~nan]))


KINDS = {"inf_nan": [float("inf"), float("-inf"), float("nan")],
         "nan_low_payload": [f32(0x7F800001), f32(0xFF80FFFF)],
         "tiny": [f32(0x00000001), f32(0x80008000), f32(0x00008000)],
         "saturating": [f32(0x7F7F8000), f32(0xFF7FFFFF)],
         "boundary": [f32(0x00008001), f32(0x80008001), f32(0x7F7F7FFF), f32(0xFF7F7FFF), 0.0, -0.0]}
t0 = time.time()
print(torch.cuda.get_device_name(), torch.__version__, __import__("triton").__version__, flush=True)
gen = torch.Generator().manual_seed(12)
bits_rows = []
for method, cfgs in AREG.items():
    for (M, K, N) in [(2900, 336, 1100), (300, 64, 200)]:
        base = torch.randn(M, K, generator=gen)
        b = torch.randn(K, N, generator=gen)
        b[K // 2, 3] = float("inf")
        bias = torch.randn(N, generator=gen).cuda()
        pieces = split_t(b.cuda(), method)
        for kind in ["normal", *KINDS, "random_bits", "mixed_scale"]:
            a = base.clone()
            if kind == "random_bits":
                a = torch.randint(-2**31, 2**31, (M, K), generator=gen, dtype=torch.int64).to(torch.int32).view(
                    torch.float32)
            elif kind == "mixed_scale":
                a = base * torch.exp2(torch.randint(-140, 120, (M, K), generator=gen).float())
            elif kind != "normal":
                rr, cc = torch.randint(0, M, (30,), generator=gen), torch.randint(0, K, (30,), generator=gen)
                for i, (r, c) in enumerate(zip(rr, cc)):
                    a[r, c] = KINDS[kind][i % len(KINDS[kind])]
                a[11, K // 2] = KINDS[kind][0]
            a = a.cuda()
            want = emu_mm(a, pieces, method, bias, config=KernelConfig.parse(cfgs[0]))  # "pg": A split beforehand
            for cfg in cfgs:
                for mode in (2, 3):
                    out = torch.empty(M, N, device="cuda")
                    try:
                        areg(method, cfg, a, pieces, bias, out, mode); torch.cuda.synchronize()
                        ok = same_bits(out, want)
                    except Exception as exc:  # noqa: BLE001
                        ok = f"ERR {type(exc).__name__}: {str(exc)[:300]}"
                    bits_rows.append(dict(method=method, M=M, K=K, N=N, a_values=kind, config=cfg, split_a=mode,
                                          same_bits_as_pg=ok))
                    if ok is not True:
                        print("BITS DIFFER", method, (M, K, N), kind, cfg, mode, ok, flush=True)
print(f"[bits: {len(bits_rows)} comparisons, {sum(r['same_bits_as_pg'] is not True for r in bits_rows)} differ; "
      f"{time.time()-t0:.0f} s]", flush=True)
with open(f"{OUT}/areg_bits.csv", "w", newline="") as fh:
    w = csv.DictWriter(fh, fieldnames=list(bits_rows[0])); w.writeheader(); w.writerows(bits_rows)

rows = []
TGW = KernelConfig.parse("128x128x32w8s3m1tgw")
for rnd in (1, 2):
    for (M, K, N) in SHAPES:
        a = torch.randn(M, K, device="cuda"); b = torch.randn(K, N, device="cuda"); bias = torch.randn(N, device="cuda")
        out = torch.empty(M, N, device="cuda")
        torch.backends.cuda.matmul.allow_tf32 = False
        sg = bench(lambda: torch.addmm(bias, a, b, out=out))
        line = []
        for method in ("bf16x6", "bf16x3"):
            pieces = split_t(b, method)
            line.append((method, "default (emu_mm)", bench(lambda: emu_mm(a, pieces, method, bias, out=out))))
            for cfg in AREG[method]:
                for mode in (2, 3):
                    line.append((method, f"{cfg} split_a={mode}", bench(lambda: areg(method, cfg, a, pieces, bias, out, mode))))
        pieces = split_t(b, "tf32x3")
        for chk, name in ((False, "tgw exact split"), (True, "tgw checked split"), (2, "tgw NO split (diagnostic)")):
            line.append(("tf32x3", name, bench(lambda: em._launch_wgmma_ws(get_method("tf32x3"), TGW, a.unsqueeze(0), tuple(pieces), bias, out.unsqueeze(0), M, N, K, checked_split=chk))))
        print(f"r{rnd} {M}x{K}x{N} sgemm {sg:.3f} ms | " + " | ".join(f"{m} {n} {t:.3f} ms {sg/t:.2f}x" for m, n, t in line), flush=True)
        for m, n, t in line:
            rows.append(dict(round=rnd, M=M, K=K, N=N, method=m, variant=n, ms=t, sgemm_ms=sg, x_sgemm=sg / t,
                             tflops=2 * M * N * K / t / 1e9, gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                             triton=__import__("triton").__version__))
        with open(f"{OUT}/areg_probe.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)
    print(f"[round {rnd} done {time.time()-t0:.0f} s]", flush=True)
