"""Measure each method's error against FP64 for chosen shapes and input distributions (table, CSV, plot).

Errors are normwise (||C - C64||_F / ||C64||_F) and max (max|C - C64| / max|C64|), where C64 is
the FP64 product of the same FP32 inputs; "bound" is the random-input error model of
tcemu.testing.normwise_bound, and "x fp32" the error as a multiple of plain FP32's. The run ends with a one-line
summary: the methods whose normwise error stays within FP32's error bound in every case, and each method's worst
error as a multiple of FP32's measured error.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import time

from .args import BadArgument, csv_list, device, output_dir, seed

DEFAULT_SHAPES = "256x16x256,256x256x256,256x4096x256,256x16384x256"
DEFAULT_DISTRIBUTIONS = "normal,uniform,wide,tiny"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, type=_shapes,
                        help=f"comma-separated MxKxN (default {DEFAULT_SHAPES})")
    parser.add_argument("--distributions", default=DEFAULT_DISTRIBUTIONS, type=csv_list,
                        help=f"comma-separated, from normal, uniform, wide, tiny, huge (default {DEFAULT_DISTRIBUTIONS})")
    parser.add_argument("--methods", default=None, type=csv_list, help="comma-separated (default: all)")
    parser.add_argument("--device", default=None, type=device, help="cpu or cuda (default: cuda if present)")
    parser.add_argument("--backend", default="auto", choices=["auto", "torch", "triton"])
    parser.add_argument("--seed", type=seed, default=0)
    parser.add_argument("--out", default=None, type=output_dir, help="directory for accuracy.csv and accuracy.png")
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table (normal inputs)")


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and 0 < int(p) < 2**31 for p in parts):
            raise ValueError(f"bad shape {item!r}: write MxKxN, each from 1 to 2^31 - 1, e.g. 256x4096x256")
        shapes.append(tuple(int(p) for p in parts))
    return shapes


def _shapes(text: str) -> list[tuple[int, int, int]]:
    try:
        return parse_shapes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def measure(shapes, distributions, methods, device, backend="auto", seed=0) -> list[dict]:
    """Rows of errors, one per (shape, distribution, method)."""
    import torch  # noqa: PLC0415

    from .. import _hw  # noqa: PLC0415
    from ..emulation.ops import matmul  # noqa: PLC0415
    from ..testing import make_inputs, normwise_bound, relative_errors  # noqa: PLC0415

    rows = []
    for m, k, n in shapes:
        for dist in distributions:
            a, b = make_inputs(m, k, n, dist, seed=seed, device=device)
            c64 = a.double() @ b.double()
            fp32_norm = None
            for name in methods:
                be = _method_backend(name, backend)
                t0 = time.perf_counter()
                c = matmul(a, b, name, backend=be)
                if c.is_cuda:
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - t0
                err_norm, err_max = relative_errors(c, c64)
                if name == "fp32":
                    fp32_norm = err_norm
                rows.append(dict(
                    method=name, distribution=dist, M=m, K=k, N=n,
                    err_norm=err_norm, err_max=err_max, bound_norm=normwise_bound(name, k),
                    x_fp32=(err_norm / fp32_norm) if fp32_norm else float("nan"),
                    seconds=seconds, device=str(device), backend=be,
                    gpu=_hw.versions()["gpu"] or "", torch=_hw.versions()["torch"],
                ))
    return rows


def _worst_ratios(rows: list[dict], method: str) -> tuple[float, float]:
    """``method``'s largest normwise error over the cases as a multiple of FP32's error bound
    (``normwise_bound("fp32", K)``) and of FP32's measured error in the same case (0/0 counts as 1)."""
    fp32 = {(r["M"], r["K"], r["N"], r["distribution"]): r for r in rows if r["method"] == "fp32"}
    to_bound = to_measured = 0.0
    for r in rows:
        if r["method"] != method:
            continue
        base = fp32[(r["M"], r["K"], r["N"], r["distribution"])]
        to_bound = max(to_bound, r["err_norm"] / base["bound_norm"])
        measured = base["err_norm"]
        to_measured = max(to_measured, r["err_norm"] / measured if measured > 0
                          else (1.0 if r["err_norm"] == 0 else float("inf")))
    return to_bound, to_measured


def summary_line(rows: list[dict]) -> str:
    """One line: the methods within FP32's error in every case measured (normwise error at most FP32's error
    bound, tcemu.testing.normwise_bound), and each method's worst error as a multiple of FP32's measured one."""
    methods = list(dict.fromkeys(r["method"] for r in rows if r["method"] != "fp32"))
    cases = len({(r["M"], r["K"], r["N"], r["distribution"]) for r in rows})
    worst = {m: _worst_ratios(rows, m) for m in methods}
    within = [f"{m} {worst[m][1]:.2g}x" for m in methods if worst[m][0] <= 1.0]
    above = [f"{m} {worst[m][1]:.3g}x" if math.isfinite(worst[m][1]) else f"{m} (FP32 exact, {m} not)"
             for m in methods if worst[m][0] > 1.0]
    text = (f"summary ({cases} case(s); worst normwise error as a multiple of FP32's): within FP32's error bound: "
            f"{', '.join(within) or 'none'}")
    return text + (f"; above it: {', '.join(above)}" if above else "")


def write_plot(rows: list[dict], path: str) -> str:
    """accuracy.png: the normwise error of each method per shape against FP32's error bound (the summary's
criterion), one panel per input distribution, log scale."""
    from ..mlip.plots import METHOD_COLORS, _plt  # noqa: PLC0415 - matplotlib is optional

    plt = _plt()
    dists = list(dict.fromkeys(r["distribution"] for r in rows))
    shapes = list(dict.fromkeys((r["M"], r["K"], r["N"]) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(1, len(dists), figsize=(4.2 * len(dists), 3.6), squeeze=False, sharey=True)
    for ax, dist in zip(axes[0], dists, strict=True):
        for method in methods:
            err = {(r["M"], r["K"], r["N"]): r["err_norm"] for r in rows
                   if r["method"] == method and r["distribution"] == dist}
            ys = [max(err.get(s, float("nan")), 1e-30) for s in shapes]
            ax.plot(range(len(shapes)), ys, "o-", label=method, color=METHOD_COLORS.get(method, "grey"),
                    lw=2.5 if method == "fp32" else 1.2)
        bound = {(r["M"], r["K"], r["N"]): r["bound_norm"] for r in rows if r["method"] == "fp32"}
        if bound:
            ax.plot(range(len(shapes)), [bound.get(s, float("nan")) for s in shapes], "k--", lw=1,
                    label="FP32's error bound")
        ax.set_yscale("log")
        ax.set_xticks(range(len(shapes)), [f"{m}x{k}x{n}" for m, k, n in shapes], rotation=30, fontsize=8)
        ax.set_xlabel("M x K x N")
        ax.set_title(f"{dist} inputs", fontsize=10)
    axes[0][0].set_ylabel("normwise error vs FP64")
    axes[0][-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _method_backend(name: str, backend: str) -> str:
    """The backend that measures ``name``: fp32 and tf32 have no Triton kernel (they are cuBLAS SGEMM and TF32),
    so under ``--backend triton`` they run as ``auto`` (the CSV's backend column says so)."""
    if backend != "triton":
        return backend
    from ..emulation.gemm import KERNEL_METHODS  # noqa: PLC0415 - importable: _check resolved the backend

    return backend if name in KERNEL_METHODS else "auto"


def _check(methods: list[str], dists: list[str], device, backend: str) -> None:
    """Refuse unknown names, and a backend that cannot run a method here, before anything is measured."""
    from ..emulation.dispatch import get_backend, resolve_backend  # noqa: PLC0415
    from ..emulation.methods import METHODS  # noqa: PLC0415
    from ..testing import DISTRIBUTIONS  # noqa: PLC0415

    for name in methods:
        if name not in METHODS:
            raise BadArgument(f"--methods: unknown method {name!r}; choose from {', '.join(METHODS)}")
    for dist in dists:
        if dist not in DISTRIBUTIONS:
            raise BadArgument(f"--distributions: unknown distribution {dist!r}; choose from {', '.join(DISTRIBUTIONS)}")
    try:
        if backend == "triton":
            get_backend("triton")  # importable (else the reason)
        for name in methods:
            resolve_backend(_method_backend(name, backend), device, METHODS[name])
    except (RuntimeError, ImportError) as exc:
        raise BadArgument(f"--backend {backend}: {exc}") from None


def run(args: argparse.Namespace) -> int:
    import torch  # noqa: PLC0415

    from ..emulation.dispatch import every_gemm_emulated  # noqa: PLC0415
    from ..emulation.methods import METHODS  # noqa: PLC0415

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    methods = args.methods or list(METHODS)
    # fp32 always, and first: the other rows are reported as multiples of it
    methods = ["fp32"] + [m for m in methods if m != "fp32"]
    shapes, dists = args.shapes, args.distributions
    _check(methods, dists, device, args.backend)
    print(f"accuracy vs FP64 on {device} (backend {args.backend}, seed {args.seed})")
    with every_gemm_emulated():  # the methods themselves, not the small-shape SGEMM fallback
        rows = measure(shapes, dists, methods, device, args.backend, args.seed)
    header = f"{'M x K x N':<18} {'dist':<8} {'method':<8} {'err_norm':>10} {'err_max':>10} {'bound':>10} {'x fp32':>7}"
    print(header)
    print("-" * len(header))
    for r in rows:
        shape = f"{r['M']}x{r['K']}x{r['N']}"
        print(f"{shape:<18} {r['distribution']:<8} {r['method']:<8} {r['err_norm']:>10.2e} {r['err_max']:>10.2e} "
              f"{r['bound_norm']:>10.2e} {r['x_fp32']:>7.2f}")
    if args.markdown:
        ks = sorted({r["K"] for r in rows})
        print()
        print("| method | " + " | ".join(f"K={k}" for k in ks) + " |")
        print("|---|" + "---|" * len(ks))
        for name in methods:
            cells = []
            for k in ks:
                match = [r for r in rows if r["method"] == name and r["K"] == k and r["distribution"] == "normal"]
                cells.append(f"{match[0]['err_norm']:.2e}" if match else "")
            print(f"| {name} | " + " | ".join(cells) + " |")
    if args.out:
        os.makedirs(args.out, exist_ok=True)  # writable: checked when the arguments were read
        path = os.path.join(args.out, "accuracy.csv")
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(f"\nwrote {path}")
        try:
            print(f"wrote {write_plot(rows, os.path.join(args.out, 'accuracy.png'))}")
        except ImportError:
            print("no plot: matplotlib is not installed (pip install 'tcemu[plot]')")
    print(summary_line(rows))
    return 0
