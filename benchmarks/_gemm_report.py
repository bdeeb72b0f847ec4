"""The summary table and the figure of ``benchmarks/gemm.py``, from the rows of its result file alone
(``tcemu._results.read_wide``), so that ``--plot-only`` redraws both from a stored run."""

from __future__ import annotations

import math


def summarize(rows: list[dict]) -> None:
    """Ratios to SGEMM, XLA's best FP32-accurate preset and Triton's tf32x3; fraction of the ceiling."""
    by = {(r["impl"], r["method"], r["direction"], int(r["M"]), int(r["K"]), int(r["N"])): r for r in rows}
    n_prod = {"tf32x3": 3, "bf16x3": 3, "bf16x6": 6, "bf16x9": 9}
    print("\nsummary: TFLOP/s (x SGEMM; x best FP32-accurate XLA; x Triton tf32x3; fraction of ceiling) err")
    shapes = list(dict.fromkeys(k[3:] for k in by))
    for direction in ("fwd", "bwd_input"):
        for shp in shapes:
            sg = by.get(("cublas", "sgemm", direction, *shp))
            if sg is None:
                continue
            sgt = float(sg["tflops"])
            xla_best = max([float(by[k]["tflops"]) for k in by if k[0] == "xla" and k[2] == direction
                            and k[3:] == shp and k[1] in ("TF32_TF32_F32_X3", "BF16_BF16_F32_X6",
                                                           "BF16_BF16_F32_X9", "F32_F32_F32")
                            and float(by[k]["err_norm"]) <= float(sg["err_norm"])] or [float("nan")])
            tx3 = by.get(("triton-builtin", "tf32x3", direction, *shp))
            tf32 = by.get(("cublas", "tf32", direction, *shp))
            bf16 = by.get(("cublas", "bf16", direction, *shp))
            parts = [f"{direction:9s} M={shp[0]:6d} K={shp[1]:5d} N={shp[2]:5d} sgemm {sgt:6.1f} "
                     f"({float(sg['err_norm']):.2e})"]
            for meth, n in n_prod.items():
                r = by.get(("tcemu", meth, direction, *shp))
                if r is None:
                    continue
                t = float(r["tflops"])
                base = tf32 if meth == "tf32x3" else bf16
                ceil = float(base["tflops"]) / n if base else float("nan")
                parts.append(f"{meth} {t:6.1f} ({t / sgt:4.2f}x; {t / xla_best:4.2f}x; "
                             f"{t / float(tx3['tflops']) if tx3 else float('nan'):4.2f}x; {t / ceil:4.2f}) "
                             f"{float(r['err_norm']):.2e}")
            cut = by.get(("cutlass", "3xtf32", direction, *shp))
            if cut is not None:  # the study's kernel, and tcemu's TF32x3 against it
                t = float(cut["tflops"])
                mine = by.get(("tcemu", "tf32x3", direction, *shp))
                parts.append(f"cutlass 3xtf32 {t:6.1f} ({t / sgt:4.2f}x; tcemu tf32x3 "
                             f"{float(mine['tflops']) / t if mine else float('nan'):4.2f}x it) "
                             f"{float(cut['err_norm']):.2e}")
            print(" | ".join(parts))


def plot(rows: list[dict], path: str) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    series = sorted({(r["impl"], r["method"]) for r in rows if not (r["impl"] == "cublas" and r["method"] == "bf16")})
    shapes = []
    for r in rows:
        s = (int(r["M"]), int(r["K"]), int(r["N"]))
        if s not in shapes:
            shapes.append(s)
    fig, axes = plt.subplots(2, 2, figsize=(18, 10), sharex=True)
    cmap = plt.get_cmap("tab20")
    colors = {s: cmap(i % 20) for i, s in enumerate(series)}
    for col, direction in enumerate(("fwd", "bwd_input")):
        for impl, meth in series:
            ys_t, ys_e = [], []
            for s in shapes:
                r = next((r for r in rows if r["impl"] == impl and r["method"] == meth and r["direction"] == direction
                          and (int(r["M"]), int(r["K"]), int(r["N"])) == s), None)
                ys_t.append(float(r["tflops"]) if r else math.nan)
                ys_e.append(float(r["err_norm"]) if r else math.nan)
            style = dict(marker="o" if impl == "tcemu" else ".", lw=2.4 if impl == "tcemu" else 1.0,
                         ls={"tcemu": "-", "cublas": "-", "triton-builtin": "--", "xla": ":",
                             "cutlass": "-."}.get(impl, "-"),
                         color=colors[(impl, meth)])
            axes[0, col].plot(range(len(shapes)), ys_t, label=f"{impl} {meth}", **style)
            axes[1, col].plot(range(len(shapes)), ys_e, label=f"{impl} {meth}", **style)
        axes[0, col].set_title(f"{direction}: throughput")
        axes[0, col].set_ylabel("TFLOP/s (2MNK / median time)")
        axes[0, col].set_yscale("log")
        axes[1, col].set_title(f"{direction}: error vs FP64")
        axes[1, col].set_ylabel("||C - C64||_F / ||C64||_F")
        axes[1, col].set_yscale("log")
        axes[1, col].set_xticks(range(len(shapes)))
        axes[1, col].set_xticklabels([f"{m}x{k}x{n}" for m, k, n in shapes], rotation=70, fontsize=7)
        axes[1, col].set_xlabel("M x K x N (linear layer x (M,K) @ W^T (K,N))")
    axes[0, 1].legend(fontsize=7, ncol=2, loc="lower right")
    info = rows[0]  # provenance: the same on every row of a run
    fig.suptitle(f"FP32-emulation GEMMs on {info['gpu']} (driver {info['driver']}, torch {info['torch']}, "
                 f"triton {info['triton']}, commit {info['commit']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")
