"""Time the split of A into pieces (the memory pass of the ``p`` kernels): :func:`split_t`'s 64 x 64 tiles
against :func:`split_rows`' flat kernel at several block sizes, with a plain copy as the bandwidth reference,
and the whole ``emu_mm`` with either split, on the PET-S edge shapes. Bits are checked against ``split_t``.

Run on the GPU machine: ``PYTHONPATH=src python3 benchmarks/gemm_split_flat_probe.py --out $OUT``.
"""
import argparse
import csv
import os

import torch
from _probe_util import bench, print_environment, same_bits

#: A's (M, K) of the products whose A is split beforehand
SHAPES = [(604800, 256), (604800, 512), (604800, 768), (604800, 1024), (8192, 8192), (17280, 1024)]
#: (block, warps) of the flat kernel
FLAT = [(1024, 4), (2048, 4), (2048, 8), (4096, 4), (4096, 8), (8192, 8)]
#: emu_mm products (M, K, N) timed with either split (A split beforehand: the ``ptgw`` default of BF16x3/x6)
PRODUCTS = [(604800, 1024, 256), (604800, 256, 1024), (604800, 512, 256), (604800, 256, 256), (8192, 8192, 8192)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    import tcemu.emulation.gemm.emu_mm as em
    from tcemu.emulation import gemm
    from tcemu.emulation.gemm import emu_mm, split_rows, split_t
    gemm.SMALL_SHAPE_FALLBACK = False
    print_environment()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    path = os.path.join(args.out, "split_flat_probe_h200.csv")

    def add(**r):
        rows.append(r)
        print(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in r.items()), flush=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for q in rows for k in q)))
            w.writeheader()
            w.writerows(rows)

    for rnd in range(args.rounds):
        for M, K in SHAPES:
            a = torch.randn(M, K, device="cuda", generator=gen)
            a.view(-1)[:: 9973] = float("nan")  # a few special values for the bits check
            a.view(-1)[1:: 10007] = float("inf")
            copy_ms = bench(lambda a=a: a.clone())
            add(round=rnd, M=M, K=K, method="-", variant="copy", ms=copy_ms, gbs=8 * a.numel() / copy_ms / 1e6)
            for meth in ("tf32x3", "bf16x6", "bf16x3"):
                want = split_t(a.mT, meth)
                nbytes = a.numel() * (4 + sum(q.element_size() for q in want))
                t = bench(lambda a=a, meth=meth: split_t(a.mT, meth))
                add(round=rnd, M=M, K=K, method=meth, variant="split_t 64x64", ms=t, gbs=nbytes / t / 1e6,
                    same_bits=True)
                for block, warps in FLAT:
                    got = split_rows(a, meth, block=block, num_warps=warps)
                    ok = all(same_bits(g.float(), w.float()) for g, w in zip(got, want))
                    t = bench(lambda a=a, meth=meth, block=block, warps=warps:
                              split_rows(a, meth, block=block, num_warps=warps))
                    add(round=rnd, M=M, K=K, method=meth, variant=f"flat {block}/{warps}", ms=t,
                        gbs=nbytes / t / 1e6, same_bits=ok)
                del want
            del a
            torch.cuda.empty_cache()
        for M, K, N in PRODUCTS:
            a = torch.randn(M, K, device="cuda", generator=gen)
            w = torch.randn(N, K, device="cuda", generator=gen)
            sgemm = bench(lambda a=a, w=w: a @ w.T)
            for meth in ("bf16x6", "bf16x3", "tf32x3"):
                bt = split_t(w.T, meth)
                cfg = gemm.KernelConfig.parse("128x64x64w8s3m1ptgw" if meth == "bf16x6" else
                                              ("128x128x64w8s3m1ptgw" if meth == "bf16x3" else "128x128x32w8s3m1ptgw"))
                outs = {}
                for flat in (False, True):
                    em._A_SPLIT_FLAT = flat
                    outs[flat] = emu_mm(a, bt, meth, config=cfg)
                    t = bench(lambda a=a, bt=bt, meth=meth, cfg=cfg: emu_mm(a, bt, meth, config=cfg))
                    add(round=rnd, M=M, K=K, N=N, method=meth, variant=f"emu_mm {cfg} flat={flat}", ms=t,
                        x_sgemm=sgemm / t, same_bits=same_bits(outs[flat], outs[False]))
                em._A_SPLIT_FLAT = True
                del bt, outs
            del a, w
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
