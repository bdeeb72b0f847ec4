# /// script
# requires-python = ">=3.11"
# dependencies = ["tcemu[triton]"]
# ///
"""The per-shape ceiling of an emulated GEMM, measured as cuBLAS running the same Tensor Core work in one call.

An n-product emulation (TF32x3: n = 3; BF16x6: 6; BF16x3: 3) does n single-pass products of (M, K, N) and
writes C once. cuBLAS on the K-concatenated problem (M, nK, N) does the same Tensor Core work with one C write
and no split, so ``SGEMM time (M, K, N) / cuBLAS time (M, nK, N)`` is what an emulation kernel as efficient as
cuBLAS would reach against SGEMM. Section 2 of docs/kernels.md uses it instead of the single-pass ceiling
(cuBLAS (M, K, N) / n), which under-rates short-K shapes since each pass pays its own pipeline fill and C write.

It also times the split of A into pieces (``split_t``: the memory pass that the ``p`` kernels run before
the GEMM) and the library's own time through ``emu_mm``, all in one process, three rounds. The input gradient
is timed in cuBLAS's own layout (dy @ W, "nn") and in the K-major layout of tcemu's kernels ("tn", columns
``*_tn_ms``).

Timing: CUDA events, median of 30 calls after 3 warm-up calls. Output: a result file (``tcemu._results``),
benchmark ``gemm_ceiling``, one case per (round, direction, M, K, N); each timing is a metric named as below
(unit ms) under its implementation (:func:`column_impl`). Stored run:
``benchmarks/results/h200/gemm/ceiling.csv``.

    PYTHONPATH=src python3 benchmarks/gemm_ceiling.py --out out/gemm_ceiling.csv
"""
import argparse
import contextlib
import statistics

import torch

from tcemu._results import Provenance, case, measurement, write_results

#: (M, K, N) of the forward products; the input gradient runs (M, N, K)
SHAPES = [(8192, 8192, 8192), (604800, 256, 1024), (604800, 256, 768), (604800, 512, 256), (604800, 768, 256),
          (604800, 256, 256), (604800, 512, 512), (17280, 1024, 4096), (17280, 2048, 1024)]
CASE_FIELDS = ("round", "direction", "M", "K", "N")


def bench(fn, n=30):
    """Median ms of n calls (CUDA events) after 3 warm-up calls."""
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        start, end = torch.cuda.Event(True), torch.cuda.Event(True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        ts.append(start.elapsed_time(end))
    return statistics.median(ts)


def column_impl(column: str) -> tuple[str, str]:
    """(impl, method) of a timing: ``sgemm_ms`` cuBLAS SGEMM; ``emu_<method>_ms`` tcemu's ``emu_mm`` and
    ``split_a_<method>_ms`` its split pass of A; ``tf32_k<n>_ms``, ``bf16_k<n>_ms`` (BF16 output) and
    ``bf16f32_k<n>_ms`` (FP32 output) cuBLAS's single pass on the product with K times n, ``_tn`` in the
    K-major layout of tcemu's kernels (without: the direction's own layout)."""
    if column == "sgemm_ms":
        return "cublas", "sgemm"
    for prefix in ("emu_", "split_a_"):
        if column.startswith(prefix):
            return "tcemu", column[len(prefix):].removesuffix("_ms")
    for prefix, method in (("tf32_k", "tf32"), ("bf16_k", "bf16"), ("bf16f32_k", "bf16")):
        if column.startswith(prefix):
            return "cublas", method
    raise ValueError(f"unknown timing column {column!r}")


def record_results(rec: dict) -> list:
    """The result rows of one shape and direction's record (its case fields and timings)."""
    where = case(**{k: rec[k] for k in CASE_FIELDS})
    out = []
    for column, value in rec.items():
        if column not in CASE_FIELDS:
            impl, method = column_impl(column)
            out += measurement("gemm_ceiling", impl, method, where, {column: value}, {column: "ms"})
    return out


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


#: the emulation settings of this run (entered for the rest of the process)
_SETTINGS = contextlib.ExitStack()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="out/gemm_ceiling.csv", help="result file")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import tcemu
    from tcemu.emulation.gemm import emu_mm, split_t
    # the kernels themselves; as benchmarks/gemm.py, each shape's first call picks its configuration
    _SETTINGS.enter_context(tcemu.config(small_shape_fallback=False, autotune=True))
    prov = Provenance.current()
    print(prov, flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    results = []
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
                results += record_results(rec)
                write_results(args.out, results, prov)  # as they finish


if __name__ == "__main__":
    main()
