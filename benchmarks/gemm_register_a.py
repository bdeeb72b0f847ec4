"""The register-A Gluon kernel ("gr", ``_kernels/_emu_mm_wgmma_rega.py``) against the library's default kernels,
cuBLAS SGEMM and cuBLAS TF32, on PET-S's edge-layer shapes, the node layer and 8192^3 (issue 26).

Per shape (M, K, N of y = x @ W^T, W's pieces split beforehand as a frozen layer's are) and method (TF32x3,
BF16x6, BF16x3), these implementations (``impl``), timed side by side in one run, interleaved round by round
(order rotated), CUDA events around each call, medians and 20th/80th percentiles over all calls:

* ``sgemm`` (cuBLAS, TF32 off) and ``cublas_tf32`` (cuBLAS with TF32: the one-pass bound of any emulation);
* ``default``: ``emu_mm`` with the configuration the library picks (``pick_config``);
* ``gr:<config>``: ``emu_mm`` with a register-A configuration (range check and fix-up on, as the library runs).

Each ``gr`` configuration is compared bit for bit with the Triton kernel of the same tile (``same_bits_as_g``: the
bits every Gluon kernel of that tile gives)
and with ``default`` (``same_bits_as_default``: equal only where the default has the same K-tile). Output:
``<out>/register_a.csv`` (``tcemu._results`` long rows with the provenance), metrics ``median_ms``, ``p20_ms``,
``p80_ms``, ``tflops``, ``x_sgemm`` (SGEMM's median over this one's), and the bit comparisons. ``<out>``:
``--out``, else ``$OUT``, else ``benchmarks/results/h200/gemm_variants``; a figure beside it (``register_a.png``: x SGEMM
per shape, the default and the best register-A tile per method; ``--plot-only CSV`` draws it from a stored file).

Usage: ``PYTHONPATH=src python benchmarks/gemm_register_a.py [--out DIR] [--budget-s S] [--methods ...]``
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import torch

import tcemu
from tcemu._results import Provenance, case, write_results
from tcemu.emulation.gemm import KernelConfig, emu_mm, split_t
from tcemu.emulation.gemm.configs import pick_config
from tcemu.emulation.methods import get_method

from _gemm_variants import (  # noqa: E402
    cublas_tf32,
    interleaved_times,
    same_bits,
    save_figure,
    timing_rows,
    variant_parser,
)

#: M, K, N: PET-S's edge layers at 17,280 atoms, its node layer, and the square reference
SHAPES = [(604800, 256, 1024), (604800, 1024, 256), (604800, 512, 256), (604800, 768, 256), (604800, 256, 256),
          (17280, 1024, 4096), (8192, 8192, 8192)]
#: register-A tiles per method that compile without spills (tests/emulation/gemm/test_register_a_kernel.py)
CANDIDATES = {"tf32x3": ["128x64x32w8s4m1gr", "128x128x16w8s4m1gr", "64x128x16w4s4m1gr", "128x64x64w8s3m1gr"],
              "bf16x6": ["128x64x32w8s4m1gr"],
              "bf16x3": ["128x128x32w8s4m1gr", "128x64x64w8s4m1gr"]}
UNITS = dict(median_ms="ms", p20_ms="ms", p80_ms="ms", tflops="TFLOP/s", x_sgemm="x", same_bits_as_g="bool",
             same_bits_as_default="bool")


def measure(method: str, M: int, K: int, N: int, rounds: int, calls: int, gen: torch.Generator):
    x = torch.randn(M, K, device="cuda", generator=gen)
    w = torch.randn(N, K, device="cuda", generator=gen) / K**0.5
    pieces = split_t(w.T, method)
    spec = get_method(method)
    default = pick_config(spec, M, N, K)
    impls = {"sgemm": lambda: torch.mm(x, w.T), "cublas_tf32": cublas_tf32(x, w.T),
             f"default:{default}": lambda: emu_mm(x, pieces, method, b=w)}
    for text in CANDIDATES[method]:
        cfg = KernelConfig.parse(text)
        impls[f"gr:{text}"] = (lambda c: lambda: emu_mm(x, pieces, method, config=c, b=w))(cfg)
    ref = impls[f"default:{default}"]()
    bits = {}
    for name, fn in list(impls.items()):
        if name.startswith("gr:"):
            cfg = KernelConfig.parse(name[3:])
            try:
                got = fn()
            except Exception as exc:  # noqa: BLE001 - record and go on
                print(f"{method} {name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                del impls[name]
                continue
            g = emu_mm(x, pieces, method, config=replace(cfg, register_a=False, wgmma=False), b=w)
            bits[name] = (same_bits(got, g), same_bits(got, ref))
            del got, g
    return interleaved_times(impls, rounds, calls), bits


def plot(csv_path: str) -> str:
    """x SGEMM per shape: the library's default and the best register-A tile, per method; returns the PNG's path."""
    import collections
    import csv

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    best: dict = collections.defaultdict(dict)
    for r in csv.DictReader(open(csv_path)):
        if r["metric"] != "x_sgemm" or r["method"] == "fp32":
            continue
        kind = "default" if r["impl"].startswith("default:") else "register-A (best tile)"
        key = (r["method"], kind)
        best[key][r["case"]] = max(best[key].get(r["case"], 0.0), float(r["value"]))
    cases = list(dict.fromkeys(c for v in best.values() for c in v))
    fig, ax = plt.subplots(figsize=(13, 5))
    keys = sorted(best)
    width = 0.8 / len(keys)
    for i, key in enumerate(keys):
        xs = [j + (i - len(keys) / 2 + 0.5) * width for j in range(len(cases))]
        ax.bar(xs, [best[key].get(c, 0.0) for c in cases], width, label=f"{key[0]} {key[1]}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(cases)), [c.replace(";", "\n") for c in cases], fontsize=8)
    ax.set_ylabel("x cuBLAS SGEMM")
    ax.set_title("Register-A Gluon kernel against the default kernels (H200)")
    ax.legend(fontsize=8, ncol=3)
    return save_figure(fig, csv_path)


def main() -> None:
    args = variant_parser(__doc__, budget_s=240.0, shapes=False).parse_args()
    if args.plot_only:
        print("wrote", plot(args.plot_only))
        return
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    from tcemu.emulation.gemm.launch import _WGMMA_FAILED

    with tcemu.config(small_shape_fallback=False):
        prov = Provenance.current()
        print(prov, flush=True)
        path = os.path.join(args.out, "register_a.csv")
        gen = torch.Generator(device="cuda").manual_seed(0)
        rows, t0 = [], time.time()
        for M, K, N in SHAPES:
            for method in args.methods.split(","):
                if time.time() - t0 > args.budget_s:
                    print(f"budget spent: {method} {M}x{K}x{N} not measured", flush=True)
                    continue
                times, bits = measure(method, M, K, N, args.rounds, args.calls, gen)
                extra = {name: dict(same_bits_as_g=g, same_bits_as_default=d) for name, (g, d) in bits.items()}
                new, logged = timing_rows("gemm_register_a", method, case(M=M, K=K, N=N), times, 2.0 * M * N * K,
                                          UNITS, extra)
                rows += new
                line = [f"{name} {values['x_sgemm']:.2f}x" + (f" bits g={bits[name][0]:d} def={bits[name][1]:d}"
                                                              if name in bits else "") for name, values in logged]
                print(f"{method} {M}x{K}x{N}: " + ", ".join(line) + f"  [{time.time() - t0:.0f} s]", flush=True)
                write_results(path, rows, prov)
                torch.cuda.empty_cache()
        print("Gluon failures:", _WGMMA_FAILED, flush=True)
        print("wrote", path, plot(path))


if __name__ == "__main__":
    main()
