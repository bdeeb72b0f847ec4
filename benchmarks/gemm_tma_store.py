"""The TMA-store epilogue (config suffix ``e``) of the warp-specialised Gluon kernels against their register-store
epilogue, cuBLAS SGEMM and cuBLAS TF32, on PET-S's edge layers, its node layer and 8192^3, in both directions of a
linear layer (issue 26).

With ``e`` the MMA warps put each finished tile of C (bias added, range check marked) into a shared-memory tile and
hand it to an asynchronous TMA store, then start the next tile's MMAs while the store runs; without it they store
the tile from their registers with masked global stores before the next tile. The staging tile (64 KB at 128 x 128)
comes out of the rings' shared memory, so the rings get shallower (``_gluon._ws_stages``).

Per shape (M, K, N of y = x @ W^T; W's pieces split beforehand, as a frozen layer's are), direction (``fwd``
y = x W^T, contraction K; ``bwd_input`` dx = dy W, contraction N) and method, these implementations (``impl``),
timed side by side in one run, interleaved round by round (order rotated), CUDA events around each call, medians
and 20th/80th percentiles over all calls:

* ``sgemm`` (cuBLAS, TF32 off) and ``cublas_tf32`` (one TF32 pass: the bound of any emulation);
* ``<config>`` for each warp-specialised candidate of the method (``tgw``: A split by splitter warps; ``ptgw``: A
  split beforehand), and ``<config>e``, the same with the TMA-store epilogue as the library runs it (the staging
  tile half the tile's columns, the two halves stored in turn), and ``<config>e:whole_tile`` with the whole
  tile staged (``_gluon._C_STAGING_PARTS = 1``: one store, shallower rings); ``default`` marks the one the
  library picks for the product (``pick_config``).

Each ``e`` result is compared bit for bit with its twin without ``e`` (``same_bits``: must be True). Output:
``<out>/tma_store_epilogue.csv`` (``tcemu._results`` long rows with the provenance), metrics ``median_ms``,
``p20_ms``, ``p80_ms``, ``tflops``, ``x_sgemm`` (SGEMM's median over this one's), ``same_bits``; ``<out>``:
``--out``, else ``$OUT``, else ``benchmarks/results/h200/gemm_variants``; a figure beside it
(``tma_store_epilogue.png``: each kernel's x SGEMM with the TMA-store epilogue over its x SGEMM without, per
product; ``--plot-only CSV`` draws it from a stored file).

``--once METHOD:MxKxN:CONFIG`` runs that forward product twice and exits (for a profiler: the second call's GEMM
kernel is the one to read, e.g. ``ncu --kernel-name regex:wgmma --launch-skip 1 --launch-count 1``).

Usage: ``PYTHONPATH=src python benchmarks/gemm_tma_store.py [--out DIR] [--budget-s S] [--methods ...]``
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import torch

import tcemu
from tcemu._results import Provenance, case, write_results
from tcemu.emulation.gemm import KernelConfig, _gluon, emu_mm, split_t
from tcemu.emulation.gemm.configs import pick_config
from tcemu.emulation.methods import get_method

from _gemm_variants import (  # noqa: E402
    cublas_tf32,
    interleaved_times,
    parse_shapes,
    same_bits,
    save_figure,
    timing_rows,
    variant_parser,
)

#: M, K, N: PET-S's edge layers at 17,280 atoms, its node layer, and the square reference
SHAPES = [(604800, 256, 1024), (604800, 1024, 256), (604800, 512, 256), (604800, 768, 256), (604800, 256, 256),
          (604800, 512, 512), (17280, 1024, 4096), (8192, 8192, 8192)]
DIRECTIONS = ("fwd", "bwd_input")
#: the warp-specialised candidates per method (docs/kernels.md, section 5), each timed with and without ``e``
BASES = {"tf32x3": ["128x128x32w8s3m1tgw", "128x128x32w8s3m1ptgw"],
         "bf16x6": ["128x64x64w8s3m1ptgw"],
         "bf16x3": ["128x128x64w8s3m1ptgw", "128x128x64w8s3m1tgw"]}
UNITS = dict(median_ms="ms", p20_ms="ms", p80_ms="ms", tflops="TFLOP/s", x_sgemm="x", same_bits="bool")


def measure(method: str, direction: str, M: int, K: int, N: int, rounds: int, calls: int, gen: torch.Generator):
    """({impl: [ms, ...]}, {impl: same_bits}, default config) for one product."""
    w = torch.randn(N, K, device="cuda", generator=gen) / K**0.5
    if direction == "fwd":  # (M, K) @ (K, N)
        a, b = torch.randn(M, K, device="cuda", generator=gen), w.T
    else:  # dx = dy W: (M, N) @ (N, K)
        a, b = torch.randn(M, N, device="cuda", generator=gen), w
    pieces = split_t(b, method)
    b_t = b.T  # FP32 B as the pieces are laid out, for the range fix-up
    spec = get_method(method)
    default = pick_config(spec, a.shape[0], b.shape[1], b.shape[0])

    impls = {"sgemm": lambda: torch.mm(a, b), "cublas_tf32": cublas_tf32(a, b)}
    default_parts = _gluon._C_STAGING_PARTS

    def run(cfg: KernelConfig, parts: int = default_parts):
        _gluon._C_STAGING_PARTS = parts
        try:
            return emu_mm(a, pieces, method, config=cfg, b=b_t)
        finally:
            _gluon._C_STAGING_PARTS = default_parts

    twins = {}
    for text in BASES[method]:
        cfg = KernelConfig.parse(text)
        e = replace(cfg, tma_store=True)
        impls[str(cfg)] = (lambda c: lambda: run(c))(cfg)
        impls[str(e)] = (lambda c: lambda: run(c))(e)
        impls[f"{e}:whole_tile"] = (lambda c: lambda: run(c, 1))(e)
        twins[str(e)] = twins[f"{e}:whole_tile"] = str(cfg)
    bits = {}
    for name, base in twins.items():
        bits[name] = same_bits(impls[name](), impls[base]())
    return interleaved_times(impls, rounds, calls), bits, str(default)


def plot(csv_path: str) -> str:
    """Per product, each warp-specialised kernel's time without ``e`` over its time with it (> 1: ``e`` faster),
    half-tile and whole-tile staging; returns the PNG's path."""
    import collections
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x: dict = collections.defaultdict(dict)
    for r in csv.DictReader(open(csv_path)):
        if r["metric"] == "x_sgemm" and r["method"] != "fp32":
            f = dict(kv.split("=") for kv in r["case"].split(";"))
            key = f"{f['direction']}\n{f['M']}x{f['K']}x{f['N']}"
            x[(r["method"], key)][r["impl"].removeprefix("default:")] = float(r["value"])
    cases = list(dict.fromkeys(c for _, c in x))
    series = [(m, base, staging) for m, bases in BASES.items() for base in bases for staging in ("", ":whole_tile")]
    fig, ax = plt.subplots(figsize=(19, 5.5))
    width = 0.8 / len(series)
    for i, (m, base, staging) in enumerate(series):
        ys = [x[(m, c)].get(f"{base}e{staging}", float("nan")) / x[(m, c)].get(base, float("nan")) for c in cases]
        xs = [j + (i - len(series) / 2 + 0.5) * width for j in range(len(cases))]
        label = f"{m} {base[base.index('m1') + 2:]}e" + (" (whole tile)" if staging else "")
        ax.bar(xs, ys, width, label=label)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(cases)), cases, fontsize=6.5)
    ax.set_ylim(0.4, 1.12)
    ax.set_ylabel("x SGEMM with e / without e (M, K, N)")
    ax.set_title("TMA-store epilogue against the register-store epilogue (H200)")
    ax.legend(fontsize=7, ncol=5)
    return save_figure(fig, csv_path)


def main() -> None:
    parser = variant_parser(__doc__, budget_s=300.0)
    parser.add_argument("--once", default="", help="METHOD:MxKxN:CONFIG: run that forward product twice and exit")
    args = parser.parse_args()
    if args.plot_only:
        print("wrote", plot(args.plot_only))
        return
    if args.once:
        method, shape, text = args.once.split(":")
        M, K, N = map(int, shape.split("x"))
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(M, K, device="cuda", generator=gen)
        w = torch.randn(N, K, device="cuda", generator=gen) / K**0.5
        pieces = split_t(w.T, method)
        with tcemu.config(small_shape_fallback=False):
            for _ in range(2):
                emu_mm(x, pieces, method, config=KernelConfig.parse(text), b=w)
        torch.cuda.synchronize()
        return
    shapes = parse_shapes(args.shapes, SHAPES)
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    from tcemu.emulation.gemm.launch import _WGMMA_FAILED

    with tcemu.config(small_shape_fallback=False):
        prov = Provenance.current()
        print(prov, flush=True)
        path = os.path.join(args.out, "tma_store_epilogue.csv")
        gen = torch.Generator(device="cuda").manual_seed(0)
        rows, t0 = [], time.time()
        for M, K, N in shapes:
            for method in args.methods.split(","):
                for direction in DIRECTIONS:
                    if time.time() - t0 > args.budget_s:
                        print(f"budget spent: {method} {direction} {M}x{K}x{N} not measured", flush=True)
                        continue
                    times, bits, default = measure(method, direction, M, K, N, args.rounds, args.calls, gen)
                    new, logged = timing_rows(
                        "gemm_tma_store", method, case(direction=direction, M=M, K=K, N=N), times, 2.0 * M * N * K,
                        UNITS, {name: dict(same_bits=b) for name, b in bits.items()},
                        lambda name: f"default:{name}" if name == default else name)
                    rows += new
                    line = [f"{'default:' if name == default else ''}{name} {values['x_sgemm']:.2f}x"
                            + (f" bits={bits[name]:d}" if name in bits else "") for name, values in logged]
                    print(f"{method} {direction} {M}x{K}x{N}: " + ", ".join(line) + f"  [{time.time() - t0:.0f} s]",
                          flush=True)
                    write_results(path, rows, prov)
                    torch.cuda.empty_cache()
        print("Gluon failures:", _WGMMA_FAILED, flush=True)
        print("wrote", path, plot(path))


if __name__ == "__main__":
    main()
