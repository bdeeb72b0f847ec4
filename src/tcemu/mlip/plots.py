"""Plots of the four checks: each takes a result (or its CSV rows), draws on ``ax`` (made if None), returns ``ax``.

matplotlib is imported lazily (``Agg`` when no display) and every axis carries its unit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = [
    "METHOD_COLORS",
    "plot_curve_deviation",
    "plot_energy_curve",
    "plot_nve",
    "plot_relax",
    "plot_single_point",
    "save_check_figures",
]

METHOD_COLORS = {
    "fp64": "black",
    "fp32": "tab:blue",
    "tf32": "tab:red",
    "tf32x3": "tab:orange",
    "bf16x3": "tab:purple",
    "bf16x6": "tab:green",
    "bf16x9": "tab:cyan",
}


def _plt():
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "pdf", "svg", "ps", "cairo") and not _has_display():
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _has_display() -> bool:
    import os

    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _ax(ax):
    if ax is None:
        plt = _plt()
        _, ax = plt.subplots(figsize=(6.4, 4.2))
    return ax


def plot_single_point(res, metric: str = "force_mean_err", ax=None):
    """Bar chart: each method's error vs FP64 (log scale), with FP32's noise floor as a dashed line."""
    ax = _ax(ax)
    methods = res.methods
    vals = [res.error(m, "fp64").get(metric) for m in methods]
    ax.bar(methods, vals, color=[METHOD_COLORS.get(m, "grey") for m in methods])
    floor = res.floor.get(metric)
    unit = dict((n, u) for n, u, _ in res.floor.METRICS)[metric]
    if floor > 0:
        ax.axhline(floor, ls="--", color="k", lw=1, label=f"FP32 noise floor ({res.floor_kind})")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"{metric.replace('_', ' ')} vs FP64 ({unit})")
    ax.set_title(f"{res.potential} on {res.system} ({res.n_atoms} atoms)", fontsize=9)
    return ax


def plot_energy_curve(res, ax=None):
    """E(h) for each method, relative to FP64's energy at the largest height."""
    ax = _ax(ax)
    h = np.asarray(res.heights_A)
    e_ref = res.energies_eV["fp64"][-1]
    for m, es in res.energies_eV.items():
        ax.plot(
            h,
            np.asarray(es) - e_ref,
            label=m,
            color=METHOD_COLORS.get(m),
            lw=1.2 if m != "fp64" else 2.0,
            alpha=0.85,
        )
    ax.set_xlabel("C height above top-site Pt (Angstrom)")
    ax.set_ylabel("E - E_FP64(h_max) (eV)")
    ax.set_title(f"CO drag, {res.potential}", fontsize=9)
    ax.legend(fontsize=8)
    return ax


def plot_curve_deviation(res, ax=None):
    """E_method(h) - E_FP64(h) in meV: jitter here is what the smoothness metric measures."""
    ax = _ax(ax)
    h = np.asarray(res.heights_A)
    for m in res.methods:
        ax.plot(
            h,
            res.deviation_meV(m),
            marker=".",
            ms=3,
            label=f"{m} (d2 rms {res.jitter_rms_meV(m):.2g} meV)",
            color=METHOD_COLORS.get(m),
        )
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_xlabel("C height above top-site Pt (Angstrom)")
    ax.set_ylabel("E_method - E_FP64 (meV)")
    ax.set_title(f"CO drag deviation from FP64, {res.potential}", fontsize=9)
    ax.legend(fontsize=7)
    return ax


def plot_nve(res, ax=None):
    """Total energy per atom vs time (relative to its start), one line per method."""
    ax = _ax(ax)
    for m, r in res.runs.items():
        e = 1e3 * (np.asarray(r.etot_eV) - r.etot_eV[0]) / r.n_atoms
        ax.plot(
            r.time_ps,
            e,
            label=f"{m} (drift {r.drift_meV_per_atom_per_ps:+.2g} meV/atom/ps)",
            color=METHOD_COLORS.get(m),
            lw=1,
        )
    ax.set_xlabel("time (ps)")
    ax.set_ylabel("E_tot - E_tot(0) (meV/atom)")
    ax.set_title(f"NVE, {res.potential} on {res.system} ({res.n_atoms} atoms)", fontsize=9)
    ax.legend(fontsize=7)
    return ax


def plot_relax(res, ax=None):
    """fmax vs step for every repeat of every method (log scale), with the target as a dashed line."""
    ax = _ax(ax)
    target = None
    for m, rs in res.runs.items():
        for i, r in enumerate(rs):
            ax.plot(
                r.fmax_trace_eV_per_A,
                color=METHOD_COLORS.get(m),
                lw=1,
                alpha=0.8,
                label=m if i == 0 else None,
            )
            target = r.fmax_target_eV_per_A
    if target:
        ax.axhline(target, ls="--", color="k", lw=1, label="target fmax")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("fmax (eV/Angstrom)")
    ax.set_title(f"FIRE2 relaxation, {res.potential} on {res.system} ({res.n_atoms} atoms)", fontsize=9)
    ax.legend(fontsize=7)
    return ax


def save_check_figures(result, out: str | Path, stem: str) -> list[Path]:
    """Save the figure(s) of one check result as ``out/stem*.png``; returns the paths."""
    from tcemu.mlip.tasks import EnergyCurveResult, NVECheckResult, RelaxCheckResult, SinglePointResult

    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    if isinstance(result, SinglePointResult):
        fig, axs = plt.subplots(1, 2, figsize=(10, 3.8))
        plot_single_point(result, "force_mean_err", axs[0])
        plot_single_point(result, "energy_abs_err", axs[1])
    elif isinstance(result, EnergyCurveResult):
        fig, axs = plt.subplots(1, 2, figsize=(11, 4))
        plot_energy_curve(result, axs[0])
        plot_curve_deviation(result, axs[1])
    elif isinstance(result, NVECheckResult):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        plot_nve(result, ax)
    elif isinstance(result, RelaxCheckResult):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        plot_relax(result, ax)
    else:
        raise TypeError(f"no plot for {type(result).__name__}")
    fig.tight_layout()
    p = out / f"{stem}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths
