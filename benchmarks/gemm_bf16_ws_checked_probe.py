"""GPU probe (H200): BF16x3/BF16x6's warp-specialised kernel (``tgw``: A's FP32 tiles split by splitter warps)
against the kernel on A split beforehand (``ptgw``: a split pass first), with the splitter's three modes.

1. Bits (``--bits``): ``tgw`` with the checked split (the hardware conversion where the K-tile's values allow it,
   else the exact split) and with the exact split, against ``ptgw``, on ragged shapes with A holding each kind
   of value the range check must catch (Inf/NaN, NaN payloads, magnitudes at and around 2^-134 and the BF16
   saturation boundary, random bit patterns, exponents from 2^-140 to 2^120).
2. Times, through ``emu_mm`` on PET-S edge shapes at 17,280 atoms and 8192^3: ``ptgw`` (split pass included),
   ``tgw`` exact, ``tgw`` checked and ``tgw`` with ``checked_split=2`` (DIAGNOSTIC ONLY, wrong results: no split,
   the kernel as if the split were free). Two rounds, variants in rotated order, against SGEMM (TF32 off).

Run: ``PYTHONPATH=src python3 benchmarks/gemm_bf16_ws_nosplit_probe.py --out $OUT [--bits]``. The first recorded
run (``bf16_ws_nosplit_probe_h200.csv``) had no checked split: its "tgw" is the exact split.
"""
import argparse
import csv
import importlib
import os

import torch
from _probe_util import bench, f32, print_environment, same_bits, tf32_a_values

#: values around the BF16 checked split's range bounds, scattered into A
BF16_KINDS = {"inf_nan": [float("inf"), float("-inf"), float("nan"), f32(0x7F800001), f32(0xFFC00123)],
              "tiny": [f32(0x00000001), f32(0x80008000), f32(0x00008000), f32(0x00008001), f32(0x80007FFF),
                       f32(0x00010000), f32(0x0000FFFF)],
              "saturating": [f32(0x7F7F8000), f32(0xFF7F7FFF), f32(0x7F7FFFFF), f32(0x7F7F7FFF), f32(0xFF7F8001)],
              "boundary": [0.0, -0.0, f32(0x7F7F0000), f32(0x00800000), f32(0x807FFFFF)]}

#: (M, K, N) products
SHAPES = [(604800, 256, 1024), (604800, 256, 768), (604800, 512, 256), (604800, 768, 256), (604800, 256, 256),
          (604800, 512, 512), (604800, 1024, 256), (8192, 8192, 8192)]
CONFIGS = {"bf16x3": "128x128x64w8s3m1", "bf16x6": "128x64x64w8s3m1"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--bits", action="store_true", help="check the bits first")
    args = p.parse_args()
    from tcemu.emulation import gemm
    from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
    em = importlib.import_module("tcemu.emulation.gemm.emu_mm")
    gemm.SMALL_SHAPE_FALLBACK = False
    print_environment()
    gen = torch.Generator(device="cuda").manual_seed(0)
    if args.bits:
        bits_rows = []
        cpu = torch.Generator().manual_seed(1)
        for M, K, N in ((1000, 200, 136), (4099, 256, 520)):
            base = torch.randn(M, K, generator=cpu)
            w = torch.randn(N, K, generator=cpu).cuda()
            for kind in ["normal", "random_bits", "mixed_scale", *BF16_KINDS]:
                if kind in BF16_KINDS:
                    a = base.clone()
                    idx = torch.randint(0, M * K, (40,), generator=cpu)
                    vals = torch.tensor(BF16_KINDS[kind])
                    a.view(-1)[idx] = vals[torch.arange(40) % len(vals)]
                else:
                    a = tf32_a_values(kind, base, cpu)
                a = a.cuda()
                for meth, base_cfg in CONFIGS.items():
                    bt = split_t(w.T, meth)
                    want = emu_mm(a, bt, meth, config=KernelConfig.parse(base_cfg + "ptgw"))
                    for checked in (True, False):
                        em._WS_CHECKED_SPLIT_BF16 = checked
                        got = emu_mm(a, bt, meth, config=KernelConfig.parse(base_cfg + "tgw"))
                        ok = same_bits(got, want)
                        bits_rows.append({"method": meth, "M": M, "K": K, "N": N, "kind": kind,
                                          "checked": checked, "same_bits_as_ptgw": ok})
                        print(f"bits {meth} {M}x{K}x{N} {kind:12s} checked={checked}: {ok}", flush=True)
                    em._WS_CHECKED_SPLIT_BF16 = True
        with open(os.path.join(args.out, "bf16_ws_checked_bits_h200.csv"), "w", newline="") as f:
            wr = csv.DictWriter(f, fieldnames=list(bits_rows[0]))
            wr.writeheader()
            wr.writerows(bits_rows)
        print("bits: all equal" if all(r["same_bits_as_ptgw"] for r in bits_rows) else "bits: SOME DIFFER",
              flush=True)
    rows = []
    path = os.path.join(args.out, "bf16_ws_checked_probe_h200.csv")
    for rnd in range(args.rounds):
        for M, K, N in SHAPES:
            a = torch.randn(M, K, device="cuda", generator=gen)
            w = torch.randn(N, K, device="cuda", generator=gen)
            sgemm = bench(lambda a=a, w=w: a @ w.T)
            for meth, base in CONFIGS.items():
                bt = split_t(w.T, meth)
                variants = [("ptgw", base + "ptgw", None), ("tgw exact", base + "tgw", False),
                            ("tgw checked", base + "tgw", True), ("tgw no split (diagnostic)", base + "tgw", 2)]
                variants = variants[rnd % 4:] + variants[: rnd % 4]
                ref = emu_mm(a, bt, meth, config=KernelConfig.parse(base + "ptgw"))
                for label, cfg, checked in variants:
                    em._WS_CHECKED_SPLIT_BF16 = checked if checked is not None else True
                    c = KernelConfig.parse(cfg)
                    out = emu_mm(a, bt, meth, config=c)
                    ok = same_bits(out, ref) if checked != 2 else ""
                    t = bench(lambda a=a, bt=bt, meth=meth, c=c: emu_mm(a, bt, meth, config=c))
                    em._WS_CHECKED_SPLIT_BF16 = True
                    rows.append({"round": rnd, "method": meth, "variant": label, "config": cfg, "M": M, "K": K,
                                 "N": N, "ms": f"{t:.5g}", "x_sgemm": f"{sgemm / t:.4g}", "same_bits_as_ptgw": ok})
                    print(f"r{rnd} {meth} {M} {K} {N} {label:28s} {t:8.4f} ms  {sgemm / t:5.2f}x SGEMM  bits {ok}",
                          flush=True)
                    del out
                del bt, ref
            del a, w
            torch.cuda.empty_cache()
            with open(path, "w", newline="") as f:
                wr = csv.DictWriter(f, fieldnames=list(rows[0]))
                wr.writeheader()
                wr.writerows(rows)


if __name__ == "__main__":
    main()
