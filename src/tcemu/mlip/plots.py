"""Plots of the five checks: each takes a result (or its CSV rows), draws on ``ax`` (made if None), returns ``ax``.

matplotlib is imported lazily (``Agg`` when no display) and every axis carries its unit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = [
    "METHOD_COLORS",
    "plot_curve_deviation",
    "plot_curve_jitter",
    "plot_energy_curve",
    "plot_nve",
    "plot_nve_deviation",
    "plot_relax",
    "plot_second_order",
    "plot_second_order_values",
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


def _wrapped(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points (about 0.55 em a character)."""
    import textwrap

    return textwrap.fill(text, width=max(20, int(width_in * 72 / (0.55 * fontsize))))


def _title(ax, text: str, fontsize: float = 9) -> None:
    """An axis title wrapped to the axis' width."""
    fig = ax.figure
    width_in = ax.get_position().width * fig.get_figwidth()
    ax.set_title(_wrapped(text, width_in, fontsize), fontsize=fontsize)


def _suptitle(fig, text: str, fontsize: float = 10) -> None:
    """A figure title wrapped to the figure's width."""
    fig.suptitle(_wrapped(text, 0.95 * fig.get_figwidth(), fontsize), fontsize=fontsize)


def _legend(ax, **kw) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kw)


def _room_for_legend(ax, values) -> None:
    """On a log axis, raise the top so that a legend in the upper corner covers no bar."""
    pos = [v for v in values if v == v and v > 0]  # noqa: PLR0124 - NaN test
    if pos:
        lo, hi = min(pos), max(pos)
        ax.set_ylim(top=hi * max(30.0, (hi / lo) ** 0.4))


def _has_suptitle(fig) -> bool:
    return getattr(fig, "_suptitle", None) is not None


def _not_discriminating(reason: str) -> str:
    return " (not discriminating here)" if reason else ""


_METRIC_TITLES = {"force_mean_err": "mean force error", "energy_abs_err": "energy error",
                  "stress_mean_err": "mean stress error"}


def plot_single_point(res, metric: str = "force_mean_err", ax=None):
    """Bar chart: each method's error vs FP64 (log scale), FP32's noise floor (dashed) and the pass threshold."""
    from tcemu.mlip.criteria import THRESHOLDS, energy_ulp_reason, single_point_threshold
    from tcemu.mlip.labels import case_label

    ax = _ax(ax)
    methods = res.methods
    vals = [res.error(m, "fp64").get(metric) for m in methods]
    ax.bar(methods, vals, color=[METHOD_COLORS.get(m, "grey") for m in methods])
    floor = res.floor.get(metric)
    unit = dict((n, u) for n, u, _ in res.floor.METRICS)[metric]
    if floor > 0:
        ax.axhline(floor, ls="--", color="k", lw=1, label=f"FP32 noise floor ({res.floor_kind})")
    thr = single_point_threshold(res, metric)
    if thr == thr and thr > 0:  # noqa: PLR0124 - NaN test
        k = THRESHOLDS["single_point_factor"]
        by_ulp = metric == "energy_abs_err" and energy_ulp_reason(res)
        how = f"{k:g} x one FP32 ulp of E (not discriminating here)" if by_ulp else f"{k:g} x max(FP32 err, floor)"
        ax.axhline(thr, ls="-", color="tab:red", lw=1.2, label=f"pass threshold {thr:.2g}: {how}")
    ax.set_yscale("log")
    _room_for_legend(ax, [*vals, floor, thr])
    _legend(ax, loc="upper right", fontsize=7)
    ax.set_ylabel(f"{_METRIC_TITLES.get(metric, metric)} vs FP64 ({unit})")
    ax.tick_params(axis="x", labelsize=8)
    _title(ax, _METRIC_TITLES.get(metric, metric) if _has_suptitle(ax.figure)
           else case_label(res.potential, res.system, res.n_atoms, short=True))
    return ax


def plot_energy_curve(res, ax=None):
    """E(h) for each method, relative to FP64's energy at the largest height."""
    from tcemu.mlip.labels import potential_label

    ax = _ax(ax)
    h = np.asarray(res.heights_A)
    e_ref = res.energies_eV["fp64"][-1]
    for m, es in res.energies_eV.items():
        ax.plot(h, np.asarray(es) - e_ref, label=m, color=METHOD_COLORS.get(m), lw=1.2 if m != "fp64" else 2.0,
                alpha=0.85)
    ax.set_xlabel("C height above top-site Pt (Angstrom)")
    ax.set_ylabel("E - E_FP64(h_max) (eV)")
    _title(ax, f"energy, {potential_label(res.potential, short=True)}" if not _has_suptitle(ax.figure) else "energy")
    _legend(ax, fontsize=7)
    return ax


def plot_curve_deviation(res, ax=None):
    """E_method(h) - E_FP64(h) in meV: jitter here is what the smoothness metric measures."""
    ax = _ax(ax)
    h = np.asarray(res.heights_A)
    for m in res.methods:
        ax.plot(h, res.deviation_meV(m), marker=".", ms=3, label=m, color=METHOD_COLORS.get(m))
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_xlabel("C height above top-site Pt (Angstrom)")
    ax.set_ylabel("E_method - E_FP64 (meV)")
    _title(ax, "deviation from FP64")
    _legend(ax, fontsize=7)
    return ax


def plot_curve_jitter(res, ax=None):
    """Each method's jitter (RMS second difference of E - E_FP64) against the pass threshold."""
    from tcemu.mlip.criteria import THRESHOLDS, curve_threshold

    ax = _ax(ax)
    methods = res.methods
    ax.bar(methods, [res.jitter_rms_meV(m) for m in methods], color=[METHOD_COLORS.get(m, "grey") for m in methods])
    thr = curve_threshold(res)
    if thr == thr and thr > 0:  # noqa: PLR0124 - NaN test
        ax.axhline(thr, color="tab:red", lw=1.2,
                   label=f"pass threshold {thr:.2g} meV: {THRESHOLDS['curve_factor']:g} x FP32's")
    ax.set_yscale("log")
    _room_for_legend(ax, [*(res.jitter_rms_meV(m) for m in methods), thr])
    _legend(ax, loc="upper right", fontsize=7)
    ax.set_ylabel("d2 RMS of E - E_FP64 (meV)")
    ax.tick_params(axis="x", labelsize=8)
    _title(ax, "jitter (the criterion)")
    return ax


def plot_nve(res, ax=None):
    """Total energy per atom vs time (relative to its start), one line per method, and the drift threshold as
    lines of slope +-threshold through the start."""
    from tcemu.mlip.criteria import nve_thresholds
    from tcemu.mlip.labels import case_label

    ax = _ax(ax)
    t = nve_thresholds(res)
    for m, r in res.runs.items():
        e = 1e3 * (np.asarray(r.etot_eV) - r.etot_eV[0]) / r.n_atoms
        ax.plot(r.time_ps, e, label=f"{m} ({r.drift_meV_per_atom_per_ps:+.2g} meV/atom/ps)",
                color=METHOD_COLORS.get(m), lw=1)
    t_end = t["duration_ps"]
    thr = t["drift"]
    if thr == thr and t_end > 0:  # noqa: PLR0124 - NaN test
        ts = np.array([0.0, t_end])
        label = f"drift threshold +-{thr:.2g} meV/atom/ps{_not_discriminating(t['drift_reason'])}"
        ax.plot(ts, thr * ts, color="tab:red", ls=":", lw=1.2, label=label)
        ax.plot(ts, -thr * ts, color="tab:red", ls=":", lw=1.2)
    ax.set_xlabel("time (ps)")
    ax.set_ylabel("E_tot - E_tot(0) (meV/atom)")
    _title(ax, "total energy" if _has_suptitle(ax.figure) else case_label(res.potential, res.system, res.n_atoms, True))
    _legend(ax, fontsize=6)
    return ax


def plot_nve_deviation(res, ax=None):
    """Each method's total-energy change against FP64's along the same start, with the pass threshold."""
    from tcemu.mlip.criteria import nve_thresholds

    ax = _ax(ax)
    t = nve_thresholds(res)
    r64 = res.runs["fp64"]
    for m in res.methods:
        r = res.runs[m]
        k = min(len(r.etot_eV), len(r64.etot_eV))
        e, e64 = np.asarray(r.etot_eV[:k]), np.asarray(r64.etot_eV[:k])
        dev = 1e3 * np.abs((e - e[0]) - (e64 - e64[0])) / r.n_atoms
        ax.plot(r.time_ps[1:k], dev[1:], color=METHOD_COLORS.get(m), lw=1, marker=".", ms=3, label=m)  # 0 at t=0
    thr = t["energy_dev"]
    if thr == thr and thr > 0:  # noqa: PLR0124 - NaN test
        ax.axhline(thr, color="tab:red", lw=1.2, label=f"pass threshold {thr:.2g} meV/atom: 3 x FP32's"
                   + _not_discriminating(t["energy_dev_reason"]))
    ax.set_yscale("log")
    ax.set_xlabel("time (ps)")
    ax.set_ylabel("|dE_tot - dE_tot,FP64| (meV/atom)")
    _title(ax, "energy change against FP64's (the criterion)")
    _legend(ax, fontsize=6)
    return ax


def plot_relax(res, ax=None):
    """fmax vs step for every repeat of every method (log scale), the target fmax and the step threshold."""
    from tcemu.mlip.criteria import relax_step_threshold
    from tcemu.mlip.labels import case_label

    ax = _ax(ax)
    target = None
    for m, rs in res.runs.items():
        for i, r in enumerate(rs):
            ax.plot(r.fmax_trace_eV_per_A, color=METHOD_COLORS.get(m), lw=1, alpha=0.8, label=m if i == 0 else None)
            target = r.fmax_target_eV_per_A
    if target:
        ax.axhline(target, ls="--", color="k", lw=1, label=f"pass: fmax reaches {target:g} eV/A")
    steps = relax_step_threshold(res)
    ax.axvline(steps, ls=":", color="tab:red", lw=1.2, label=f"pass: median steps <= {steps:.4g}")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("fmax (eV/Angstrom)")
    _title(ax, f"FIRE2 relaxation, {case_label(res.potential, res.system, res.n_atoms, short=True)}")
    _legend(ax, fontsize=7)
    return ax


def plot_second_order(res, ax=None):
    """Each method's largest error vs FP64 (log scale) of a second-order result, FP32's noise floor (dashed) and
    the pass threshold."""
    from tcemu.mlip.criteria import THRESHOLDS, second_order_threshold

    ax = _ax(ax)
    methods = res.methods
    vals = [res.max_error(m) for m in methods]
    ax.bar(methods, vals, color=[METHOD_COLORS.get(m, "grey") for m in methods])
    floor = res.floor()
    if floor > 0:
        ax.axhline(floor, ls="--", color="k", lw=1, label="FP32 noise floor (atoms permuted)")
    thr = second_order_threshold(res)
    if thr == thr and thr > 0:  # noqa: PLR0124 - NaN test
        ax.axhline(thr, color="tab:red", lw=1.2,
                   label=f"pass threshold {thr:.2g}: {THRESHOLDS['second_order_factor']:g} x max(FP32 err, floor)")
    ax.set_yscale("log")
    _room_for_legend(ax, [*vals, floor, thr])
    _legend(ax, loc="upper right", fontsize=7)
    ax.set_ylabel(f"largest error vs FP64 ({res.unit})")
    ax.tick_params(axis="x", labelsize=8)
    _title(ax, "error (the criterion)")
    return ax


def plot_second_order_values(res, ax=None):
    """FP64's values beside each method's: phonon branches along the q path, mode frequencies or elastic
    constants (by index)."""
    ax = _ax(ax)
    n_branches = res.n_branches
    for m in ["fp64", *res.methods]:
        v = np.asarray(res.values[m])
        style = dict(color=METHOD_COLORS.get(m, "grey"), lw=2.0 if m == "fp64" else 1.0, alpha=0.85)
        if res.check == "phonons":
            v = v.reshape(-1, n_branches)
            for b in range(n_branches):
                ax.plot(v[:, b], label=m if b == 0 else None, **style)
        else:
            ax.plot(v, marker="o", ms=3, ls="" if m != "fp64" else "-", label=m, **style)
    if res.check == "phonons":
        names = [lab.split(" b")[0] for lab in res.labels[::n_branches]]
        ticks = [k for k, name in enumerate(names) if not name.startswith("q")]
        ax.set_xticks(ticks, [names[k] for k in ticks])
        ax.set_xlabel("q path")
    else:
        ax.set_xticks(range(len(res.labels)), res.labels, rotation=45 if res.check == "elastic" else 90, fontsize=7)
    ax.axhline(0, color="k", lw=0.5)
    freq = res.unit == "cm^-1"
    ax.set_ylabel("frequency (cm^-1; negative: imaginary)" if freq else f"elastic constant ({res.unit})")
    _title(ax, "values")
    _legend(ax, fontsize=6)
    return ax


def save_check_figures(result, out: str | Path, stem: str) -> list[Path]:
    """Save the figure(s) of one check result as ``out/stem*.png``; returns the paths."""
    from tcemu.mlip.tasks import (
        EnergyCurveResult,
        NVECheckResult,
        RelaxCheckResult,
        SecondOrderResult,
        SinglePointResult,
    )

    plt = _plt()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    from tcemu.mlip.labels import case_label, potential_label

    if isinstance(result, SinglePointResult):
        fig, axs = plt.subplots(1, 3, figsize=(13, 4.2))
        _suptitle(fig, f"Single point: {case_label(result.potential, result.system, result.n_atoms, short=True)}")
        for ax, metric in zip(axs, ("force_mean_err", "energy_abs_err", "stress_mean_err")):
            plot_single_point(result, metric, ax)
    elif isinstance(result, EnergyCurveResult):
        fig, axs = plt.subplots(1, 3, figsize=(14, 4.4))
        _suptitle(fig, f"CO pulled off Pt(111), {result.n_atoms} atoms: {potential_label(result.potential, short=True)}")
        plot_energy_curve(result, axs[0])
        plot_curve_deviation(result, axs[1])
        plot_curve_jitter(result, axs[2])
    elif isinstance(result, NVECheckResult):
        fig, axs = plt.subplots(1, 2, figsize=(12, 4.4))
        _suptitle(fig, f"NVE: {case_label(result.potential, result.system, result.n_atoms, short=True)}")
        plot_nve(result, axs[0])
        plot_nve_deviation(result, axs[1])
    elif isinstance(result, RelaxCheckResult):
        fig, ax = plt.subplots(figsize=(7, 4.4))
        plot_relax(result, ax)
    elif isinstance(result, SecondOrderResult):
        fig, axs = plt.subplots(1, 2, figsize=(12, 4.4))
        _suptitle(fig, f"{result.check.capitalize()}: "
                  f"{case_label(result.potential, result.system, result.n_atoms, short=True)}")
        plot_second_order_values(result, axs[0])
        plot_second_order(result, axs[1])
    else:
        raise TypeError(f"no plot for {type(result).__name__}")
    fig.tight_layout()
    p = out / f"{stem}.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)
    return paths
