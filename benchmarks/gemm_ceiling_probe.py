"""The per-shape ceiling of an emulated GEMM, measured as cuBLAS running the same Tensor Core work in one call.

An n-product emulation (TF32x3: n = 3; BF16x6: 6; BF16x3: 3) does n single-pass products of (M, K, N) and
writes C once. cuBLAS on the K-concatenated problem (M, nK, N) does the same Tensor Core work with one C write
and no split, so ``SGEMM time (M, K, N) / cuBLAS time (M, nK, N)`` is what an emulation kernel as efficient as
cuBLAS would reach against SGEMM. Section 1 of docs/kernels.md compares it with the single-pass ceiling
(cuBLAS (M, K, N) / n), which under-rates short-K shapes since each pass pays its own pipeline fill and C write.

The probe also times the split of A into pieces (``split_t``: the memory pass that the ``p`` kernels run before
the GEMM) and the library's own time through ``emu_mm``, all in one process, three rounds. The input gradient
is timed in cuBLAS's own layout (dy @ W, "nn") and in the K-major layout of tcemu's kernels ("tn", columns
``*_tn_ms``).

Run on the GPU machine: ``PYTHONPATH=src python3 benchmarks/gemm_ceiling_probe.py --out $OUT``.
"""
import argparse
import csv
import os

import torch
from _probe_util import bench, print_environment

#: (M, K, N) of the forward products; the input gradient runs (M, N, K)
SHAPES = [(8192, 8192, 8192), (604800, 256, 1024), (604800, 256, 768), (604800, 512, 256), (604800, 768, 256),
          (604800, 256, 256), (604800, 512, 512), (17280, 1024, 4096), (17280, 2048, 1024)]


def operands(layout, M, K, N, dtype, gen):
    """A (M, K) row-major and B (K, N): ``"tn"`` B = W^T with W (N, K) row-major (the forward's layout, and that
    of every tcemu kernel, whose B pieces are K-major), ``"nn"`` B row-major (the input gradient dy @ W as
    cuBLAS runs it)."""
    a = torch.randn(M, K, device="cuda", generator=gen).to(dtype)
    if layout == "tn":
        b = torch.randn(N, K, device="cuda", generator=gen).to(dtype).T
    else:
        b = torch.randn(K, N, device="cuda", generator=gen).to(dtype)
    return a, b


def bf16_fp32_out(a, b):
    """cuBLAS BF16 with an FP32 output (the emulation writes FP32), where torch has it."""
    try:
        return torch.mm(a, b, out_dtype=torch.float32)
    except (TypeError, RuntimeError):
        return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    from tcemu.emulation import gemm
    from tcemu.emulation.gemm import emu_mm, split_t
    gemm.SMALL_SHAPE_FALLBACK = False  # time the kernels themselves
    gemm.AUTOTUNE = True  # as benchmarks/gemm.py: each shape's first call picks its configuration
    print_environment()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    path = os.path.join(args.out, "gemm_ceiling_h200.csv")
    for rnd in range(args.rounds):
        for M, K0, N0 in SHAPES:
            for direction in ("fwd", "bwd_input"):
                K, N = (K0, N0) if direction == "fwd" else (N0, K0)
                flops = 2.0 * M * K * N
                rec = {"round": rnd, "direction": direction, "M": M, "K": K, "N": N}
                layout = "tn" if direction == "fwd" else "nn"
                a, b = operands(layout, M, K, N, torch.float32, gen)
                torch.backends.cuda.matmul.allow_tf32 = False
                rec["sgemm_ms"] = bench(lambda a=a, b=b: a @ b)
                for meth in ("tf32x3", "bf16x6", "bf16x3"):
                    bt = split_t(b, meth)  # the weight's pieces, split once (as a converted layer holds them)
                    rec[f"emu_{meth}_ms"] = bench(lambda a=a, meth=meth, bt=bt: emu_mm(a, bt, meth))
                    rec[f"split_a_{meth}_ms"] = bench(lambda a=a, meth=meth: split_t(a.mT, meth))
                    del bt
                del a, b
                # the input gradient's ceilings in both layouts: cuBLAS's own (nn) and that of tcemu's kernels (tn)
                for lay in dict.fromkeys((layout, "tn")):
                    sfx = "" if lay == layout else "_tn"
                    for n in (1, 3):
                        a, b = operands(lay, M, n * K, N, torch.float32, gen)
                        torch.backends.cuda.matmul.allow_tf32 = True
                        rec[f"tf32_k{n}{sfx}_ms"] = bench(lambda a=a, b=b: a @ b)
                        torch.backends.cuda.matmul.allow_tf32 = False
                        del a, b
                    for n in (1, 3, 6):
                        a, b = operands(lay, M, n * K, N, torch.bfloat16, gen)
                        rec[f"bf16_k{n}{sfx}_ms"] = bench(lambda a=a, b=b: a @ b)  # BF16 output
                        if bf16_fp32_out(a, b) is not None:
                            rec[f"bf16f32_k{n}{sfx}_ms"] = bench(lambda a=a, b=b: bf16_fp32_out(a, b))
                        del a, b
                torch.cuda.empty_cache()
                s = rec["sgemm_ms"]
                line = (f"r{rnd} {direction:9s} {M:6d} {K:5d} {N:5d} SGEMM {flops / s / 1e9:5.1f} TF/s | ceiling x SGEMM: "
                        f"TF32 3K {s / rec['tf32_k3_ms']:.2f} (1K/3 {s / rec['tf32_k1_ms'] / 3:.2f}), "
                        f"BF16 6K {s / rec['bf16_k6_ms']:.2f}, 3K {s / rec['bf16_k3_ms']:.2f}")
                if "tf32_k3_tn_ms" in rec:
                    line += (f" | as tn: TF32 3K {s / rec['tf32_k3_tn_ms']:.2f}, BF16 6K FP32 out "
                             f"{s / rec.get('bf16f32_k6_tn_ms', float('nan')):.2f}")
                if "bf16f32_k6_ms" in rec:
                    line += f" (FP32 out: 6K {s / rec['bf16f32_k6_ms']:.2f}, 3K {s / rec['bf16f32_k3_ms']:.2f})"
                line += (f" | tcemu x SGEMM: tf32x3 {s / rec['emu_tf32x3_ms']:.2f}, bf16x6 {s / rec['emu_bf16x6_ms']:.2f},"
                         f" bf16x3 {s / rec['emu_bf16x3_ms']:.2f} | split A ms: tf32 {rec['split_a_tf32x3_ms']:.3f},"
                         f" bf16x6 {rec['split_a_bf16x6_ms']:.3f}, bf16x3 {rec['split_a_bf16x3_ms']:.3f}")
                print(line, flush=True)
                rows.append(rec)
                keys = list(dict.fromkeys(k for r in rows for k in r))
                with open(path, "w", newline="") as f:
                    w = csv.DictWriter(f, fieldnames=keys)
                    w.writeheader()
                    w.writerows(rows)


if __name__ == "__main__":
    main()
