"""What a split of A fused into the operation that produces A can give: the ``ptgw`` kernel on A's pieces given
(no split pass of its own), and a producer of A that writes the pieces itself (Inductor-compiled), against cuBLAS
SGEMM and TF32 on PET-S's edge layers and its node layer, both directions of a linear layer (issue 26).

Per shape (M, K, N of y = x @ W^T; W's pieces split beforehand, as a frozen layer's are), direction (``fwd``
y = x W^T, contraction K; ``bwd_input`` dx = dy W, contraction N) and method, these implementations (``impl``),
timed side by side in one run, interleaved round by round (order rotated), CUDA events around each call, medians
and 20th/80th percentiles over all calls:

* ``sgemm`` (cuBLAS, TF32 off) and ``cublas_tf32`` (one TF32 pass: the bound of any emulation);
* ``call:default`` and ``call:ptgw``: ``emu_mm`` as the library runs it, with the configuration it picks and with
  the ``ptgw`` kernel (A split beforehand by a pass of its own, range check and fix-up on);
* ``kernel:ptgw``: the same kernel on A's pieces made before the timed call (flags zeroed, kernel, fix-up
  launch): the call without its split pass, i.e. with a split that costs nothing;
* ``split_pass``: that split pass of A alone (``split_t``);
* ``producer``: a producer of A, ``silu`` of an input of A's shape, compiled by Inductor (``dynamic=True``),
  writing A; ``producer+pieces``: the same producer also writing A's pieces in the layout the kernel reads (the
  library's reference ``split``, fused by Inductor into the producer's kernel), as it must when A is needed
  beside its pieces (the range fix-up reads FP32 A); ``producer:pieces_only``: writing only the pieces.

Derived (``impl`` ``fused:keep_a`` and ``fused:pieces_only``, metric ``x_sgemm``): SGEMM's median over what the GEMM
costs in the fused design, the kernel alone plus what writing the pieces adds to the producer
(``kernel:ptgw + producer+pieces - producer``, resp. ``producer:pieces_only``).

Checks (``same_bits``, must be True): the pieces ``producer+pieces`` writes against ``split_t`` of the A it
writes, and ``kernel:ptgw``'s result against ``call:default``'s. Output: ``<out>/fused_split.csv`` (``tcemu._results`` long rows with the
provenance), metrics ``median_ms``, ``p20_ms``, ``p80_ms``, ``tflops``, ``x_sgemm``, ``same_bits``; ``<out>``:
``--out``, else ``$OUT``, else ``benchmarks/results/h200/gemm_variants``; a figure beside it (``--plot-only CSV``
draws it from a stored file).

Usage: ``PYTHONPATH=src python benchmarks/gemm_fused_split.py [--out DIR] [--budget-s S] [--methods ...]``
"""

from __future__ import annotations

import os
import statistics
import time

import torch

import tcemu
from tcemu._results import Provenance, case, measurement, write_results
from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
from tcemu.emulation.gemm._gluon import _launch_wgmma_pieces_ws
from tcemu.emulation.gemm.configs import pick_config
from tcemu.emulation.gemm.range_fixup import range_fixup
from tcemu.emulation.methods import get_method
from tcemu.emulation.split import split

from _gemm_variants import (  # noqa: E402
    cublas_tf32,
    interleaved_times,
    parse_shapes,
    same_bits,
    save_figure,
    timing_rows,
    variant_parser,
)

#: M, K, N: PET-S's edge layers at 17,280 atoms and its node layer
SHAPES = [(604800, 256, 1024), (604800, 1024, 256), (604800, 512, 256), (604800, 768, 256), (604800, 256, 256),
          (604800, 512, 512), (17280, 1024, 4096)]
DIRECTIONS = ("fwd", "bwd_input")
#: the kernel on A's pieces per method (the library's ``ptgw`` candidates, docs/kernels.md)
PTGW = {"tf32x3": "128x128x32w8s3m1ptgw", "bf16x6": "128x64x64w8s3m1ptgw", "bf16x3": "128x128x64w8s3m1ptgw"}
UNITS = dict(median_ms="ms", p20_ms="ms", p80_ms="ms", tflops="TFLOP/s", x_sgemm="x", same_bits="bool")


def pieces_of(a: torch.Tensor, method: str) -> tuple[torch.Tensor, ...]:
    """A's pieces as the kernel reads them, (M, K) contiguous in the method's piece dtype, by the reference split
    (plain torch operations, so that Inductor can fuse them into A's producer)."""
    ps = split(a, method)
    if get_method(method).piece_format == "bf16":  # the high 16 bits: split() values are BF16-exact
        ps = tuple((p.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16) for p in ps)
    return ps


def producers(method: str):
    """The compiled producers of A: (A only, A and its pieces, the pieces only)."""
    def plain(x):
        return torch.nn.functional.silu(x)

    def keep_a(x):
        a = torch.nn.functional.silu(x)
        return (a, *pieces_of(a, method))

    def pieces_only(x):
        return pieces_of(torch.nn.functional.silu(x), method)

    return tuple(torch.compile(f, dynamic=True) for f in (plain, keep_a, pieces_only))


def piece_bits(x: torch.Tensor) -> torch.Tensor:
    return x.view(torch.int16) if x.dtype == torch.bfloat16 else x.view(torch.int32)


def measure(method: str, direction: str, M: int, K: int, N: int, rounds: int, calls: int, gen: torch.Generator,
            compiled: tuple):
    """({impl: [ms, ...]}, {impl: same_bits}, default config) for one product."""
    w = torch.randn(N, K, device="cuda", generator=gen) / K**0.5
    if direction == "fwd":  # (M, K) @ (K, N)
        x0, b = torch.randn(M, K, device="cuda", generator=gen), w.T
    else:  # dx = dy W: (M, N) @ (N, K)
        x0, b = torch.randn(M, N, device="cuda", generator=gen), w
    plain, keep_a, pieces_only = compiled
    a = plain(x0)
    Mr, Kr = a.shape
    Nr = b.shape[1]
    bpieces = split_t(b, method)
    b_t = b.T  # FP32 B as the pieces are laid out, for the range fix-up
    spec = get_method(method)
    default = pick_config(spec, Mr, Nr, Kr)
    ptgw = KernelConfig.parse(PTGW[method])
    made = keep_a(x0)
    apieces = made[1:]
    ref_pieces = split_t(made[0].mT, method)  # the split of the A that the producer wrote beside its pieces
    bits = {"producer+pieces": all(torch.equal(piece_bits(p), piece_bits(q)) for p, q in zip(apieces, ref_pieces))}
    a3, bt3, out3 = a.unsqueeze(0), tuple(p.unsqueeze(0) for p in bpieces), torch.empty(1, Mr, Nr, device="cuda")
    flags = torch.zeros(Mr, dtype=torch.int8, device="cuda")
    bp = tuple(bpieces)

    def kernel_alone():
        flags.zero_()
        _launch_wgmma_pieces_ws(spec, ptgw, apieces, bp, None, out3, Mr, Nr, Kr, flags=flags, range_check=True)
        range_fixup(a3, bt3, b_t.unsqueeze(0), None, out3, flags, spec)
        return out3[0]

    impls = {
        "sgemm": lambda: torch.mm(a, b),
        "cublas_tf32": cublas_tf32(a, b),
        "call:default": lambda: emu_mm(a, bpieces, method, config=default, b=b_t),
        "call:ptgw": lambda: emu_mm(a, bpieces, method, config=ptgw, b=b_t),
        "kernel:ptgw": kernel_alone,
        "split_pass": lambda: split_t(a.mT, method),
        "producer": lambda: plain(x0),
        "producer+pieces": lambda: keep_a(x0),
        "producer:pieces_only": lambda: pieces_only(x0),
    }
    bits["kernel:ptgw"] = same_bits(kernel_alone().clone(), impls["call:default"]())
    return interleaved_times(impls, rounds, calls), bits, str(default)


def plot(csv_path: str) -> str:
    """Per product and method: x SGEMM of the library's call, of the ``ptgw`` call, of the kernel alone and of the
    fused designs; returns the PNG's path."""
    import collections
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x: dict = collections.defaultdict(dict)
    gpus = set()
    for r in csv.DictReader(open(csv_path)):
        gpus.add(r["gpu"])
        if r["metric"] == "x_sgemm" and r["method"] != "fp32":
            f = dict(kv.split("=") for kv in r["case"].split(";"))
            key = f"{'fwd' if f['direction'] == 'fwd' else 'bwd'}\n{f['M']}x{f['K']}x{f['N']}"
            x[(r["method"], key)][r["impl"].split("=")[0]] = float(r["value"])
    methods = list(dict.fromkeys(m for m, _ in x))
    series = ["call:default", "call:ptgw", "fused:keep_a", "fused:pieces_only", "kernel:ptgw"]
    goals = {"tf32x3": 2.2, "bf16x6": 2.0, "bf16x3": 3.0}
    fig, axes = plt.subplots(len(methods), 1, figsize=(15, 3.6 * len(methods)), squeeze=False)
    for ax, m in zip(axes[:, 0], methods):
        cases = [c for mm, c in x if mm == m]
        width = 0.8 / len(series)
        for i, s in enumerate(series):
            ys = [x[(m, c)].get(s, float("nan")) for c in cases]
            xs = [j + (i - len(series) / 2 + 0.5) * width for j in range(len(cases))]
            ax.bar(xs, ys, width, label=s)
        if m in goals:
            ax.axhline(goals[m], color="k", lw=0.8, ls="--", label=f"goal {goals[m]}x")
        ax.set_xticks(range(len(cases)), cases, fontsize=7)
        ax.set_ylabel(f"{m}: x SGEMM")
        ax.legend(fontsize=7, ncol=6)
    axes[0, 0].set_title("The GEMM with a split of A that costs nothing (kernel:ptgw) or is fused into A's producer "
                         f"({', '.join(sorted(gpus))})")
    return save_figure(fig, csv_path)


def main() -> None:
    args = variant_parser(__doc__, budget_s=400.0).parse_args()
    if args.plot_only:
        print("wrote", plot(args.plot_only))
        return
    shapes = parse_shapes(args.shapes, SHAPES)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    from tcemu.emulation.gemm.launch import _WGMMA_FAILED

    with tcemu.config(small_shape_fallback=False):
        prov = Provenance.current()
        print(prov, flush=True)
        path = os.path.join(args.out, "fused_split.csv")
        gen = torch.Generator(device="cuda").manual_seed(0)
        compiled = {m: producers(m) for m in args.methods.split(",")}
        rows, t0 = [], time.time()
        for M, K, N in shapes:
            for method in args.methods.split(","):
                for direction in DIRECTIONS:
                    if time.time() - t0 > args.budget_s:
                        print(f"budget spent: {method} {direction} {M}x{K}x{N} not measured", flush=True)
                        continue
                    times, bits, default = measure(method, direction, M, K, N, args.rounds, args.calls, gen,
                                                   compiled[method])
                    med = {k: statistics.median(v) for k, v in times.items()}
                    sg = med["sgemm"]
                    this = case(direction=direction, M=M, K=K, N=N)
                    new, logged = timing_rows(
                        "gemm_fused_split", method, this, times, 2.0 * M * N * K, UNITS,
                        {name: dict(same_bits=b) for name, b in bits.items()},
                        lambda name: f"call:default={default}" if name == "call:default" else name)
                    rows += new
                    line = [f"{name} {med[name]:.3f} ms {values['x_sgemm']:.2f}x"
                            + (f" bits={bits[name]:d}" if name in bits else "") for name, values in logged]
                    fused = {"fused:keep_a": med["kernel:ptgw"] + med["producer+pieces"] - med["producer"],
                             "fused:pieces_only": med["kernel:ptgw"] + med["producer:pieces_only"] - med["producer"]}
                    for name, ms in fused.items():
                        rows += measurement("gemm_fused_split", name, method, this,
                                            dict(median_ms=ms, x_sgemm=sg / ms), UNITS)
                        line.append(f"{name} {sg / ms:.2f}x")
                    print(f"{method} {direction} {M}x{K}x{N} (default {default}): " + ", ".join(line)
                          + f"  [{time.time() - t0:.0f} s]", flush=True)
                    write_results(path, rows, prov)
                    torch.cuda.empty_cache()
        print("Gluon failures:", _WGMMA_FAILED, flush=True)
        print("wrote", path, plot(path))


if __name__ == "__main__":
    main()
