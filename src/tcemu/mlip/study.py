"""The published NVIDIA PET study beside tcemu's own results: its numbers, the rule that says "agree" or "differ"
for each, and the summary of a ``benchmarks/nve_long.py`` folder.

The study (PET-MAD, trained; ALCHEMI Toolkit) reports four findings, one row each in :data:`PUBLISHED`. tcemu
measures the same protocols on ``pet-distilled`` (a PET distilled from CHGNet, not PET-MAD: the comparison is of
what precision does to a trained PET, not of the models). Each row's rule is fixed here, before any result, from
the study's own words; a row tcemu did not measure says so:

- NVE: the study finds single-pass TF32's drift larger than FP32's and TF32x3's bounded like FP32's. Agree when
  TF32's drift differs from FP32's beyond the 95 % interval of the difference and is larger in size, and
  TF32x3's cannot be told apart from FP32's (:mod:`tcemu.mlip.tasks.nve_stats`).
- FIRE2: FP32 and TF32x3 converge in every repeat within 500 steps, TF32 in none (neither with 500 nor 1,000).
- CO curve: TF32 jitters, TF32x3 is smooth: TF32's second-difference RMS above, TF32x3's within, the suite's
  bound (3 x FP32's, ``criteria.THRESHOLDS["curve_factor"]``).
- Single points: TF32x3's force error about FP32's (3x its recompile noise): within the suite's bound
  (3 x max(FP32's error, FP32's noise floor)).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

__all__ = ["PUBLISHED", "comparison_markdown", "compare", "curve_jitter", "nve_drift_rows", "read_nve",
           "read_relax", "relax_rows", "write_summary"]

#: The study's findings (issue 43), one per check: what it ran and what it found.
PUBLISHED = {
    "nve": "30 ps NVE of the 192-atom water box (0.5 fs): FP32 and TF32x3 bounded, single-pass TF32 a larger "
           "systematic drift",
    "relax": "FIRE2 (ALCHEMI), 539-atom Co-Cr-Fe-Mn-Ni slab to 1e-3 eV/A, 500-step limit, 3 repeats: FP32 218 "
             "steps, TF32x3 218-222, TF32 never converges (plateau near 1.2e-3 eV/A, also with 1,000 steps)",
    "curve": "CO dragged off the Pt(111) top site, 1.2-6.0 A in 0.081 A steps (60 heights): TF32 jitters, "
             "TF32x3 smooth",
    "single_point": "single points: TF32x3's force error about 3x FP32's recompile noise",
}
CURVE_FACTOR = 3.0  # = criteria.THRESHOLDS["curve_factor"] and ["sp_factor"], restated to keep this module a leaf
SP_FACTOR = 3.0
STUDY_NVE_PS = 30.0


# ------------------------------------------------------------------------------------------------------
# reading results
# ------------------------------------------------------------------------------------------------------


def read_nve(folder: str | Path) -> dict[str, dict]:
    """``{potential: {method: LongNVESeries}}`` of a ``benchmarks/nve_long.py`` folder (its ``nve/``)."""
    from tcemu.mlip.tasks.nve_long import CHECKPOINT, load_series

    out: dict[str, dict] = {}
    for ck in sorted(Path(folder, "nve").glob(f"*/*/{CHECKPOINT}")):
        out.setdefault(ck.parent.parent.name, {})[ck.parent.name] = load_series(ck.parent)
    return out


def nve_drift_rows(series: dict, n_atoms: int) -> list[dict]:
    """:func:`~tcemu.mlip.tasks.nve_stats.drift_table` of ``{method: object with time_ps, etot_eV}`` (finite runs
    with enough records), with the steps and speed of each run where it has them."""
    from tcemu.mlip.tasks.nve_stats import drift_table

    ok = {m: s for m, s in series.items() if getattr(s, "finite", True) and len(s.time_ps) >= 8}
    if not ok:
        return []
    rows = drift_table({m: (np.asarray(s.time_ps), np.asarray(s.etot_eV)) for m, s in ok.items()}, n_atoms)
    for r in rows:
        s = ok[r["method"]]
        r["steps_done"] = getattr(s, "steps_done", getattr(s, "steps", ""))
        r["ms_per_step"] = 1e3 * s.s_per_step if hasattr(s, "s_per_step") else ""
    return rows + [{"method": m, "finite": False} for m, s in series.items() if m not in ok]


def read_relax(folder: str | Path) -> dict[str, dict[str, list]]:
    """``{optimizer: {method: [RelaxResult per repeat]}}`` of a ``benchmarks/nve_long.py`` folder."""
    from tcemu.mlip.tasks.relax import RelaxResult

    fields = set(RelaxResult.__dataclass_fields__)
    out: dict[str, dict[str, list]] = {}
    for f in sorted(Path(folder, "relax").glob("*/*/repeat*.json")):
        d = json.loads(f.read_text())
        d["fmax_trace_eV_per_A"] = tuple(d["fmax_trace_eV_per_A"])
        r = RelaxResult(**{k: v for k, v in d.items() if k in fields})
        out.setdefault(f.parent.parent.name, {}).setdefault(f.parent.name, []).append(r)
    return out


def relax_rows(runs: dict[str, list], limits: tuple[int, ...] = (500, 1000), optimizer: str = "") -> list[dict]:
    """Per method and step limit: repeats, converged repeats, steps of each, median steps, lowest fmax, ms/step."""
    rows = []
    for m, rs in runs.items():
        for lim in limits:
            if lim > max(r.max_steps for r in rs):
                continue
            cut = [r.with_limit(lim) for r in rs]
            rows.append({"optimizer": optimizer, "method": m, "limit": lim, "repeats": len(cut),
                         "converged": sum(r.converged for r in cut),
                         "steps": " ".join(str(r.steps) for r in cut),
                         "steps_median": float(np.median([r.steps for r in cut])),
                         "fmax_min_eV_per_A": min(r.fmax_min_eV_per_A for r in cut),
                         "ms_per_step": 1e3 * float(np.median([r.s_per_step for r in rs]))})
    return rows


def curve_jitter(rows: list[dict]) -> dict[str, float]:
    """``{method: d2 RMS (meV)}`` from an energy curve's long rows (``mlip_energy_curve.csv``)."""
    return {r["method"]: float(r["value"]) for r in rows if r["metric"] == "d2_rms"}


# ------------------------------------------------------------------------------------------------------
# the comparison
# ------------------------------------------------------------------------------------------------------


def _f(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def compare(nve: list[dict] | None = None, relax: list[dict] | None = None, curve: dict[str, float] | None = None,
            single_point: dict[str, tuple[float, float]] | None = None) -> list[dict]:
    """Rows ``check, study, tcemu, verdict`` (``agree``, ``differ`` or ``not measured``).

    ``nve``: :func:`nve_drift_rows`; ``relax``: :func:`relax_rows` of one optimizer (limits 500 and 1000);
    ``curve``: :func:`curve_jitter`; ``single_point``: ``{method: (force error vs FP64, FP32's noise floor)}``.
    """
    out = []
    by = {r["method"]: r for r in nve or [] if "vs_fp32" in r or r.get("method") == "fp32"}
    if {"fp32", "tf32", "tf32x3"} <= set(by):
        t, x, f = by["tf32"], by["tf32x3"], by["fp32"]
        larger = abs(t["drift_meV_per_atom_per_ps"]) > abs(f["drift_meV_per_atom_per_ps"])
        ok = t["vs_fp32"] == "differs" and larger and x["vs_fp32"] == "cannot tell apart"
        dur = f["duration_ps"]
        text = "; ".join(f"{m} {by[m]['drift_meV_per_atom_per_ps']:+.3g} [{by[m]['ci_low']:+.3g}, "
                         f"{by[m]['ci_high']:+.3g}]" for m in ("fp64", "fp32", "tf32", "tf32x3") if m in by)
        who = f"{f['potential']}, " if f.get("potential") else ""
        short = "" if dur >= STUDY_NVE_PS - 1e-9 else f" of {STUDY_NVE_PS:g}"
        text = (f"{who}{dur:.3g} ps{short}; drift meV/atom/ps [95 % CI]: {text}; TF32 vs FP32: {t['vs_fp32']}, "
                f"TF32x3 vs FP32: {x['vs_fp32']}")
        out.append({"check": "nve", "study": PUBLISHED["nve"], "tcemu": text,
                    "verdict": "agree" if ok else "differ"})
    else:
        out.append({"check": "nve", "study": PUBLISHED["nve"], "tcemu": "-", "verdict": "not measured"})
    rel = {(r["method"], r["limit"]): r for r in relax or []}
    need = [(m, lim) for m in ("fp32", "tf32x3", "tf32") for lim in (500,)]
    if all(k in rel for k in need):
        conv = {m: rel[(m, 500)]["converged"] == rel[(m, 500)]["repeats"] for m in ("fp32", "tf32x3")}
        tf = [rel[(m, lim)] for (m, lim) in rel if m == "tf32"]
        ok = conv["fp32"] and conv["tf32x3"] and all(r["converged"] == 0 for r in tf)
        text = "; ".join(f"{r['method']} (limit {r['limit']}): {r['converged']}/{r['repeats']} converged, steps "
                         f"{r['steps']}, lowest fmax {_f(r['fmax_min_eV_per_A'])}"
                         for r in relax if r["method"] in ("fp32", "tf32x3", "tf32"))
        out.append({"check": "relax", "study": PUBLISHED["relax"], "tcemu": text,
                    "verdict": "agree" if ok else "differ"})
    else:
        out.append({"check": "relax", "study": PUBLISHED["relax"], "tcemu": "-", "verdict": "not measured"})
    if curve and {"fp32", "tf32", "tf32x3"} <= set(curve):
        bound = CURVE_FACTOR * curve["fp32"]
        ok = curve["tf32"] > bound and curve["tf32x3"] <= bound
        text = (f"d2 RMS vs FP64 (meV): fp32 {_f(curve['fp32'])}, tf32 {_f(curve['tf32'])}, tf32x3 "
                f"{_f(curve['tf32x3'])} (bound {_f(bound)})")
        out.append({"check": "curve", "study": PUBLISHED["curve"], "tcemu": text,
                    "verdict": "agree" if ok else "differ"})
    else:
        out.append({"check": "curve", "study": PUBLISHED["curve"], "tcemu": "-", "verdict": "not measured"})
    if single_point and {"fp32", "tf32x3"} <= set(single_point):
        (e32, floor), (e3, _) = single_point["fp32"], single_point["tf32x3"]
        bound = SP_FACTOR * max(e32, floor)
        text = (f"mean force error vs FP64 (eV/A): fp32 {_f(e32)}, tf32x3 {_f(e3)} ({_f(e3 / floor)} x FP32's noise "
                f"floor {_f(floor)}; bound {_f(bound)})")
        out.append({"check": "single_point", "study": PUBLISHED["single_point"], "tcemu": text,
                    "verdict": "agree" if e3 <= bound else "differ"})
    else:
        out.append({"check": "single_point", "study": PUBLISHED["single_point"], "tcemu": "-",
                    "verdict": "not measured"})
    return out


def comparison_markdown(rows: list[dict], model: str = "pet-distilled") -> str:
    """The comparison as a markdown table, with a line saying what was compared."""
    lines = [f"Published PET study (PET-MAD) beside tcemu ({model}): the rule of each row is in "
             "`tcemu.mlip.study`.\n", "| check | the study | tcemu | |", "|---|---|---|---|"]
    lines += [f"| {r['check']} | {r['study']} | {r['tcemu']} | **{r['verdict']}** |" for r in rows]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------------
# the summary of a benchmarks/nve_long.py folder
# ------------------------------------------------------------------------------------------------------

#: units of the summary's values in results.csv (``tcemu._results``)
UNITS = {"drift_meV_per_atom_per_ps": "meV/atom/ps", "stderr": "meV/atom/ps", "ci_low": "meV/atom/ps",
         "ci_high": "meV/atom/ps", "fluct_meV_per_atom": "meV/atom", "duration_ps": "ps", "steps_done": "steps",
         "ms_per_step": "ms", "block_lag1": "1", "vs_fp64": "text", "vs_fp32": "text", "converged": "repeats",
         "repeats": "repeats", "steps": "text", "steps_median": "steps", "fmax_min_eV_per_A": "eV/A",
         "d2_rms_meV": "meV", "verdict": "text"}


def _write_csv(rows: list[dict], path: Path) -> Path:
    import csv

    keys = list(dict.fromkeys(k for r in rows for k in r))
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return path


def _md_table(rows: list[dict], keys: list[str]) -> str:
    def cell(v) -> str:
        return _f(v) if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(cell(r.get(k, "")) for k in keys) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _plot_nve(path: Path, potential: str, series: dict, rows: list[dict]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    for m, s in series.items():
        e = 1e3 * (np.asarray(s.etot_eV) - s.etot_eV[0]) / s.n_atoms
        ax.plot(s.time_ps, e, lw=0.6, label=m)
    ax.set(xlabel="time (ps)", ylabel="E_tot - E_tot(0) (meV/atom)", title=f"NVE, {potential}, water 192 atoms")
    ax.legend(fontsize=8)
    ok = [r for r in rows if "ci_low" in r]
    y = np.arange(len(ok))
    d = np.array([r["drift_meV_per_atom_per_ps"] for r in ok])
    err = np.array([[r["drift_meV_per_atom_per_ps"] - r["ci_low"] for r in ok],
                    [r["ci_high"] - r["drift_meV_per_atom_per_ps"] for r in ok]])
    bx.errorbar(d, y, xerr=err, fmt="o", capsize=3)
    bx.axvline(0, color="grey", lw=0.5)
    bx.set_yticks(y, [r["method"] for r in ok])
    bx.set(xlabel="drift (meV/atom/ps), 95 % CI",
           title=f"over {ok[0]['duration_ps']:.3g} ps" if ok else "no run long enough")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _plot_relax(path: Path, relax: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(relax), figsize=(6 * len(relax), 4.5), squeeze=False)
    for ax, (opt, runs) in zip(axes[0], relax.items()):
        for i, (m, rs) in enumerate(runs.items()):
            for k, r in enumerate(rs):
                ax.semilogy(r.fmax_trace_eV_per_A, lw=0.7, color=f"C{i}", label=m if k == 0 else None)
        ax.axhline(1e-3, color="k", lw=0.5, ls="--")
        ax.set(xlabel="step", ylabel="fmax (eV/A)", title=f"{opt}, pet-distilled, Cantor slab")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_summary(folder: str | Path, limits: tuple[int, ...] = (500, 1000), log=print) -> list[Path]:
    """Summarise a ``benchmarks/nve_long.py`` folder: ``nve_summary.csv``/``.json``, ``relax_summary.csv``,
    ``curve_summary.csv``, ``results.csv`` (with provenance), figures and ``study_comparison.md``."""
    from tcemu._results import Provenance, case, measurement, write_results
    from tcemu.mlip._common import read_csv

    folder = Path(folder)
    paths: list[Path] = []
    results = []
    nve_all: list[dict] = []
    md = ["# The published PET study's protocols with pet-distilled\n"]
    for pot, series in read_nve(folder).items():
        rows = nve_drift_rows(series, next(iter(series.values())).n_atoms)
        nve_all += [{"potential": pot, **r} for r in rows]
        paths.append(_plot_nve(folder / f"nve_{pot}.png", pot, series, rows))
        md += [f"## NVE, {pot}\n", _md_table(rows, ["method", "duration_ps", "steps_done", "ms_per_step",
                                                   "drift_meV_per_atom_per_ps", "ci_low", "ci_high",
                                                   "fluct_meV_per_atom", "block_lag1", "vs_fp64", "vs_fp32"])]
        for r in rows:
            vals = {k: r[k] for k in UNITS if k in r}
            results += measurement("nve_long", pot, r["method"], case(check="nve", system="water_192"), vals, UNITS)
    if nve_all:
        paths.append(_write_csv(nve_all, folder / "nve_summary.csv"))
        (folder / "nve_summary.json").write_text(json.dumps(nve_all, indent=1, default=str))
        paths.append(folder / "nve_summary.json")
    relax = read_relax(folder)
    relax_all = [r for opt, runs in relax.items() for r in relax_rows(runs, limits, opt)]
    if relax_all:
        paths.append(_write_csv(relax_all, folder / "relax_summary.csv"))
        paths.append(_plot_relax(folder / "relax_fmax.png", relax))
        md += ["## FIRE2, pet-distilled, 539-atom Cantor slab, to 1e-3 eV/A\n",
               _md_table(relax_all, ["optimizer", "method", "limit", "converged", "repeats", "steps", "steps_median",
                                     "fmax_min_eV_per_A", "ms_per_step"])]
        for r in relax_all:
            vals = {k: r[k] for k in ("converged", "repeats", "steps", "steps_median", "fmax_min_eV_per_A",
                                      "ms_per_step")}
            results += measurement("nve_long", "pet-distilled", r["method"],
                                   case(check="relax", system="cantor_539", optimizer=r["optimizer"],
                                        limit=r["limit"]), vals, UNITS)
    curve_csv = folder / "curve" / "mlip_energy_curve.csv"
    jitter = curve_jitter(read_csv(curve_csv)) if curve_csv.is_file() else {}
    if jitter:
        crow = [{"method": m, "d2_rms_meV": v, "x_fp32": v / jitter["fp32"] if jitter.get("fp32") else math.nan}
                for m, v in jitter.items()]
        paths.append(_write_csv(crow, folder / "curve_summary.csv"))
        md += ["## CO on Pt(111), the study's 60 heights, pet-distilled\n", _md_table(crow, ["method", "d2_rms_meV",
                                                                                           "x_fp32"])]
        for m, v in jitter.items():
            results += measurement("nve_long", "pet-distilled", m, case(check="curve", system="pt111_co"),
                                   {"d2_rms_meV": v}, UNITS)
    opt = "alchemi-fire2" if "alchemi-fire2" in relax else next(iter(relax), "")
    pots = list(dict.fromkeys(r["potential"] for r in nve_all))
    nve_pot = "pet-distilled" if "pet-distilled" in pots else (pots[0] if pots else "")
    comp = compare([r for r in nve_all if r["potential"] == nve_pot] or None,
                   [r for r in relax_all if r["optimizer"] == opt] or None, jitter or None)
    for r in comp:
        results += measurement("nve_long", "pet-distilled", "", case(check="study", row=r["check"]),
                               {"verdict": r["verdict"]}, UNITS)
    md += [f"## Against the published study (FIRE2 rows: {opt or '-'})\n", comparison_markdown(comp)]
    (folder / "study_comparison.md").write_text("\n".join(md))
    paths.append(folder / "study_comparison.md")
    paths.append(write_results(folder / "results.csv", results, Provenance.current()))
    log("\n" + comparison_markdown(comp))
    return paths


# ------------------------------------------------------------------------------------------------------
# the section of tcemu mlip report
# ------------------------------------------------------------------------------------------------------


def suite_section(res) -> str:
    """Markdown for ``report.md`` from a suite result (``tcemu.mlip.report.SuiteResult``): each NVE run's drift
    with its 95 % interval against FP64 and FP32, and the published study beside the suite's PET results (its
    PET relaxation at the step limits 500 and its own, the distilled PET's CO curve and single point)."""
    lines = ["## NVE drift with its confidence interval\n"]
    nve_rows = []
    for nc in res.nve:
        try:
            rows = [{"potential": nc.potential, **r} for r in nve_drift_rows(nc.runs, nc.n_atoms)]
        except ValueError as exc:
            lines.append(f"{nc.potential} on {nc.system}: {exc}\n")
            continue
        nve_rows = rows if not nve_rows or nc.potential.startswith("pet") else nve_rows
        lines += [f"{nc.potential} on {nc.system} ({nc.n_atoms} atoms), blocks of the energy series "
                  "(`tcemu.mlip.tasks.nve_stats`): \"differs\" when the 95 % interval of the difference excludes 0.\n",
                  _md_table(rows, ["method", "duration_ps", "drift_meV_per_atom_per_ps", "ci_low", "ci_high",
                                   "fluct_meV_per_atom", "block_lag1", "vs_fp64", "vs_fp32"])]
    pet_relax = [rc for rc in res.relax if rc.potential.startswith("pet")]
    relax = None
    if pet_relax:
        rc = pet_relax[0]
        limit = max(r.max_steps for rs in rc.runs.values() for r in rs)
        relax = relax_rows(dict(rc.runs), tuple(sorted({min(500, limit), limit})), rc.runs["fp32"][0].optimizer)
    curve = next((c for c in res.energy_curve if c.potential == "pet-distilled"), None)
    jitter = {"fp32": curve.jitter_rms_meV("fp32"), **{m: curve.jitter_rms_meV(m) for m in curve.methods}} \
        if curve else None
    sp = next((s for s in res.single_point if s.potential == "pet-distilled"), None)
    sp_errors = {m: (sp.error(m, "fp64").force_mean_err_eV_per_A, sp.floor.force_mean_err_eV_per_A)
                 for m in ("fp32", *sp.methods)} if sp else None
    comp = compare(nve_rows or None, relax, jitter, sp_errors)
    size = ("at this suite's sizes, not the study's: the rows say what ran" if res.config.name != "full"
            else "at the full suite's sizes")
    lines += [f"## Against the published PET study\n\nThe suite's own runs, {size}. The study-length NVE, FIRE2 "
              "with 500 and 1,000 steps and the 60-height curve on a GPU: `benchmarks/nve_long.py`.\n",
              comparison_markdown(comp)]
    return "\n".join(lines)
