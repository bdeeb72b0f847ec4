"""The suite's ``report.md`` and ``verdicts.csv``: tables of each check, its thresholds and a verdict per method.

Every verdict reads as :class:`~tcemu.mlip.criteria.Verdict` writes it: pass, fail, marginal pass or fail (within
10 % of the threshold), or not discriminating (with the measured reason). Names are as a reader should see them
(:mod:`tcemu.mlip.labels`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from tcemu.mlip.criteria import (
    REFERENCE_METHODS,
    THRESHOLDS,
    WORKFLOWS,
    conclusion_changes,
    curve_threshold,
    method_status,
    method_verdicts,
    nve_energy_deviation_meV_per_atom,
    nve_thresholds,
    relax_step_threshold,
    second_order_threshold,
    single_point_threshold,
    workflow_status,
)
from tcemu.mlip.labels import case_label, potential_label, system_label
from tcemu.mlip.results import environment

if TYPE_CHECKING:
    from tcemu.mlip.results import SuiteResult

__all__ = ["coverage_table", "criteria_notes", "potentials_line", "verdict_table", "weights_comparison",
           "workflow_table", "write_report", "write_verdicts"]

VERDICT_COLUMNS = ["method", "check", "value", "threshold", "verdict", "reason"]


def write_verdicts(res: SuiteResult, out: Path) -> None:
    """``out/verdicts.csv``: one row per (method, criterion) with the columns of :meth:`Verdict.row`."""
    with (Path(out) / "verdicts.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=VERDICT_COLUMNS)
        w.writeheader()
        for v in res.verdicts:
            w.writerow(v.row())


def _fmt(x: float) -> str:
    if isinstance(x, float) and math.isnan(x):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf (floor 0)"
    return f"{x:.3g}"


def _mark(verdicts, method: str, check_prefix: str) -> str:
    """The verdict word of ``method``'s criterion whose check starts with ``check_prefix`` ("" if none)."""
    for v in verdicts:
        if v.method == method and v.check.startswith(check_prefix):
            return v.verdict
    return ""


def verdict_table(res: SuiteResult) -> str:
    """Markdown table: one row per method, its verdict, the failed, marginal and not discriminating criteria."""
    methods = list(dict.fromkeys(v.method for v in res.verdicts))
    mv = method_verdicts(res.verdicts, methods)
    lines = ["| method | verdict | criteria passed | failed criteria | marginal (within 10 % of the threshold) |",
             "|---|---|---|---|---|"]
    for m in methods:
        _, failed = mv[m]
        judged = [v for v in res.verdicts if v.method == m and v.discriminating]
        why = "; ".join(f"{v.check} = {_fmt(v.value)} > {_fmt(v.threshold)} {v.unit}" for v in failed) or "-"
        marginal = "; ".join(f"{v.check} = {_fmt(v.value)} vs {_fmt(v.threshold)} {v.unit} ({v.verdict})"
                             for v in judged if v.marginal) or "-"
        lines.append(f"| {m} | **{method_status(res.verdicts, m)}** | {len(judged) - len(failed)}/{len(judged)} | "
                     f"{why} | {marginal} |")
    text = "\n".join(lines)
    cases = {}
    for check, rs in (("single point", res.single_point), ("energy curve", res.energy_curve), ("nve", res.nve),
                      ("relax", res.relax), ("second order", res.second_order)):
        for r in rs:
            cases.setdefault(f"{r.potential}/{r.system}", case_label(r.potential, r.system, r.n_atoms))
    if cases:
        text += "\n\nCases in brackets: " + "; ".join(f"`{k}` is {v}" for k, v in cases.items()) + "."
    undecided = {}
    for v in res.verdicts:
        if not v.discriminating:
            undecided.setdefault(v.check, v.reason)
    if undecided:
        text += ("\n\n**Not discriminating at this size** (no pass or fail; these criteria count for no method):\n\n"
                 + "\n".join(f"- `{check}`: {reason.removeprefix('not discriminating at this size: ')}"
                             for check, reason in undecided.items()))
    return text


def coverage_table(res: SuiteResult) -> str:
    """Markdown table: each case's coverage per method (% of float32 contraction FLOPs emulated)."""
    cases = [(check, r) for check, rs in (("single point", res.single_point), ("energy curve", res.energy_curve),
                                          ("nve", res.nve), ("relax", res.relax)) for r in rs]
    cases += [(r.check, r) for r in res.second_order]
    methods = list(dict.fromkeys(m for _, r in cases for m in getattr(r, "coverage", {})
                                 if m not in REFERENCE_METHODS))
    if not cases or not methods:
        return "No coverage was measured."
    lines = ["| check | case | " + " | ".join(methods) + " |", "|---|---|" + "---|" * len(methods)]
    for check, r in cases:
        cells = [_fmt(100 * r.coverage[m]) + " %" if m in r.coverage else "-" for m in methods]
        lines.append(f"| {check} | {case_label(r.potential, r.system, r.n_atoms, short=True)} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def _tf32_statement(res: SuiteResult) -> str:
    vs = [v for v in res.verdicts if v.method == "tf32" and v.discriminating]
    if not vs:
        return "Single-pass TF32 was not run."
    failed = [v for v in vs if not v.passed]
    checks = sorted({v.check.split(":")[0] for v in failed})
    if not failed:
        return (
            "Single-pass TF32 passed every discriminating criterion in this run: at these sizes its rounding did "
            "not show above FP32's own. Do not read this as FP32 accuracy: see its single-point errors above."
        )
    return (
        f"Single-pass TF32 is **not safe**: it fails {len(failed)} of {len(vs)} discriminating criteria, in the "
        f"checks {', '.join(checks)} (table above). TF32 keeps 10 mantissa bits per operand, so each product "
        "carries a relative error near 2^-11 instead of FP32's 2^-24. It is the suite's negative control: a check "
        "that it passes did not separate it from FP32 at this size."
    )


def criteria_notes() -> str:
    """The criteria in words, with the named factors of :data:`THRESHOLDS`."""
    k = THRESHOLDS
    return "\n".join([
        "Criteria (each method against what FP32 itself achieves; `tcemu.mlip.criteria`):",
        (f"- single point: error vs FP64 <= {k['single_point_factor']:g} x max(FP32's error vs FP64, FP32 noise "
         "floor) for the mean force, the energy (at least one FP32 ulp of it) and the mean stress;"),
        f"- energy curve: RMS second difference of E - E_FP64 <= {k['curve_factor']:g} x FP32's;",
        (f"- NVE: |drift| <= {k['nve_drift_factor']:g} x max(|FP64 drift|, |FP32 drift|, FP64 fluctuation / length); "
         f"fluctuation <= {k['nve_fluct_factor']:g} x max(FP64's, FP32's); the total energy's change against "
         f"FP64's along the same start <= {k['nve_energy_dev_factor']:g} x FP32's;"),
        f"- relaxation: every repeat reaches the target fmax; median steps <= {k['relax_steps_factor']:g} x FP32's;",
        (f"- second order (phonons, vibrations, elastic constants): largest error vs FP64 <= "
         f"{k['second_order_factor']:g} x max(FP32's, FP32 noise floor); no sign or mode order that FP64 resolves "
         "beyond that threshold changed;"),
        f"- coverage: at least {100 * k['min_coverage']:.0f} % of the float32 contraction FLOPs emulated;",
        f"- **marginal**: within {100 * k['marginal_band']:.0f} % of the threshold, either side;",
        ("- **not discriminating**: the criterion cannot separate the methods at this size (the reason gives the "
         "measured numbers); it counts neither for nor against a method."),
    ]) + "\n"


def _single_point_section(res: SuiteResult, cfg, L: list[str]) -> None:
    L.append("## 1. Single point\n")
    L.append(
        f"Errors against FP64 (force: mean per-atom |dF|; energy: |dE|; stress: mean |ds|), and as a multiple "
        f"of FP32's noise floor (FP32 vs FP32 with the atoms reordered: `{cfg.floor}`). 'vs FP32' compares "
        "each method with plain FP32: a multiple near 1 means it differs from FP32 no more than FP32 differs "
        "from itself when only the order of its sums changes. A floor of 0 means the reordered FP32 run gave "
        "bit-identical values. A verdict word follows each value that has a criterion.\n"
    )
    for sp in res.single_point:
        L.append(f"### {case_label(sp.potential, sp.system, sp.n_atoms)}\n")
        thr = {m: single_point_threshold(sp, m) for m in ("force_mean_err", "energy_abs_err", "stress_mean_err")}
        L.append(
            f"Noise floor: force {_fmt(sp.floor.force_mean_err_eV_per_A)} eV/A, energy "
            f"{_fmt(sp.floor.energy_abs_err_eV)} eV, stress {_fmt(sp.floor.stress_mean_err_eV_per_A3)} eV/A^3. "
            f"Pass thresholds: force {_fmt(thr['force_mean_err'])} eV/A, energy {_fmt(thr['energy_abs_err'])} eV, "
            f"stress {_fmt(thr['stress_mean_err'])} eV/A^3.\n"
        )
        L.append("| method | force err (eV/A) | x floor | force max (eV/A) | energy err (eV) | x floor | "
                 "stress err (eV/A^3) | vs FP32: force (eV/A) | vs FP32: x floor | eval (s) |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        tag = f"[{sp.potential}/{sp.system}]"
        for m in sp.methods:
            e = sp.error(m, "fp64")
            vs32 = sp.error(m, "fp32").force_mean_err_eV_per_A if m != "fp32" else 0.0
            vs32_x = sp.floor_multiple(m, "force_mean_err", "fp32") if m != "fp32" else 0.0

            def cell(value: float, metric: str, m: str = m, tag: str = tag) -> str:
                word = _mark(res.verdicts, m, f"single_point:{metric}{tag}")
                return _fmt(value) + (f" ({word})" if word and word != "pass" else "")

            L.append(
                f"| {m} | {cell(e.force_mean_err_eV_per_A, 'force_mean_err')} | "
                f"{_fmt(sp.floor_multiple(m, 'force_mean_err'))} | {_fmt(e.force_max_err_eV_per_A)} | "
                f"{cell(e.energy_abs_err_eV, 'energy_abs_err')} | {_fmt(sp.floor_multiple(m, 'energy_abs_err'))} | "
                f"{cell(e.stress_mean_err_eV_per_A3, 'stress_mean_err')} | {_fmt(vs32)} | {_fmt(vs32_x)} | "
                f"{sp.times_s[m]:.2f} |"
            )
        L.append(f"\n![single point](single_point_{sp.potential}_{sp.system}.png)\n")


def _curve_section(res: SuiteResult, L: list[str]) -> None:
    L.append("## 2. Energy curve (CO pulled off Pt(111))\n")
    for c in res.energy_curve:
        L.append(f"### {potential_label(c.potential)}, {system_label(c.system)}, {len(c.heights_A)} heights "
                 f"{c.heights_A[0]:.1f}-{c.heights_A[-1]:.1f} A\n")
        L.append(f"Pass threshold: d2 RMS <= {_fmt(curve_threshold(c))} meV ({THRESHOLDS['curve_factor']:g} x FP32's).\n")
        L.append("| method | d2 RMS (meV) | verdict | d2 max (meV) | max abs E - E_FP64 (meV) |")
        L.append("|---|---|---|---|---|")
        for m in c.methods:
            L.append(f"| {m} | {_fmt(c.jitter_rms_meV(m))} | "
                     f"{_mark(res.verdicts, m, f'energy_curve:d2_rms[{c.potential}/{c.system}]')} | "
                     f"{_fmt(c.jitter_max_meV(m))} | {_fmt(float(abs(c.deviation_meV(m)).max()))} |")
        L.append(f"\n![energy curve](energy_curve_{c.potential}.png)\n")


def _nve_section(res: SuiteResult, L: list[str]) -> None:
    L.append("## 3. NVE\n")
    for n in res.nve:
        r0 = n.runs["fp64"]
        t = nve_thresholds(n)
        L.append(f"### {case_label(n.potential, n.system, n.n_atoms)}, {r0.steps} steps of {r0.timestep_fs} fs "
                 f"({t['duration_ps']:.3g} ps)\n")
        L.append(f"Pass thresholds: |drift| <= {_fmt(t['drift'])} meV/atom/ps, fluctuation <= "
                 f"{_fmt(t['fluctuation'])} meV/atom, energy change against FP64's <= {_fmt(t['energy_dev'])} "
                 "meV/atom.\n")
        for reason in (t["drift_reason"], t["energy_dev_reason"]):
            if reason:
                L.append(f"*{reason}.*\n")
        tag = f"[{n.potential}/{n.system}]"
        L.append("| method | drift (meV/atom/ps) | verdict | fluctuation (meV/atom) | verdict | "
                 "energy change vs FP64 (meV/atom) | verdict | max dev (meV/atom) | wall (s) |")
        L.append("|---|---|---|---|---|---|---|---|---|")
        for m, r in n.runs.items():
            dev = nve_energy_deviation_meV_per_atom(n, m)
            L.append(
                f"| {m} | {r.drift_meV_per_atom_per_ps:+.3g} | {_mark(res.verdicts, m, 'nve:abs_drift' + tag)} | "
                f"{_fmt(r.fluct_meV_per_atom)} | {_mark(res.verdicts, m, 'nve:fluctuation' + tag)} | {_fmt(dev)} | "
                f"{_mark(res.verdicts, m, 'nve:energy_dev_vs_fp64' + tag)} | {_fmt(r.max_dev_meV_per_atom)} | "
                f"{r.wall_s:.0f} |"
            )
        L.append(f"\n![nve](nve_{n.potential}_{n.system}.png)\n")


def _relax_section(res: SuiteResult, L: list[str]) -> None:
    L.append("## 4. Relaxation\n")
    for rc in res.relax:
        r0 = next(iter(rc.runs.values()))[0]
        L.append(f"### {case_label(rc.potential, rc.system, rc.n_atoms)}, {r0.optimizer} to "
                 f"{r0.fmax_target_eV_per_A} eV/A, limit {r0.max_steps} steps\n")
        L.append(f"Pass thresholds: every repeat reaches fmax {r0.fmax_target_eV_per_A:g} eV/A; median steps <= "
                 f"{_fmt(relax_step_threshold(rc))}.\n")
        reasons = {v.reason for v in res.verdicts if v.check.endswith(f"[{rc.potential}/{rc.system}]")
                   and v.check.startswith("relax:") and v.reason}
        L.extend(f"*{reason}.*\n" for reason in sorted(reasons))
        tag = f"[{rc.potential}/{rc.system}]"
        L.append("| method | converged | steps (each repeat) | verdict | lowest fmax (eV/A) | verdict | "
                 "final energy (eV) |")
        L.append("|---|---|---|---|---|---|---|")
        for m, rs in rc.runs.items():
            L.append(
                f"| {m} | {sum(r.converged for r in rs)}/{len(rs)} | {', '.join(str(r.steps) for r in rs)} | "
                f"{_mark(res.verdicts, m, 'relax:steps_median' + tag) or 'reference'} | "
                f"{_fmt(min(r.fmax_min_eV_per_A for r in rs))} | "
                f"{_mark(res.verdicts, m, 'relax:fmax_min' + tag) or 'reference'} | {rs[0].energy_final_eV:.6f} |"
            )
        L.append(f"\n![relax](relax_{rc.potential}_{rc.system}.png)\n")


def workflow_table(res: SuiteResult) -> str:
    """Markdown table "which method for which workflow": each method's verdict over the checks of each workflow
    (:data:`~tcemu.mlip.criteria.WORKFLOWS`)."""
    methods = [m for m in dict.fromkeys(v.method for v in res.verdicts) if m not in REFERENCE_METHODS]
    if not methods:
        return "No method was judged."
    lines = ["| method | " + " | ".join(WORKFLOWS) + " |", "|---|" + "---|" * len(WORKFLOWS)]
    for m in methods:
        cells = [workflow_status(res.verdicts, m, checks) for checks in WORKFLOWS.values()]
        lines.append(f"| {m} | " + " | ".join(f"**{c}**" if c == "safe" else c for c in cells) + " |")
    checks = "; ".join(f"{w}: {', '.join(c)}" for w, c in WORKFLOWS.items())
    return ("\n".join(lines) + f"\n\nChecks of each workflow: {checks}. *not discriminating*: every criterion that "
            "ran cannot separate the methods at this size (no verdict); *not run*: no check of it ran.")


def _second_order_section(res: SuiteResult, L: list[str]) -> None:
    L.append("## 5. Second-order properties\n")
    L.append("Finite differences of forces (phonons, vibrations; displacement in the heading) or stresses (elastic "
             "constants), each method against FP64 on the same structure (FP64's zero-pressure lattice constant, "
             "FP64's relaxed water). Modes are matched to FP64's by their eigenvectors; negative frequencies are "
             "imaginary modes. 'Conclusions changed': signs and mode orders that FP64 resolves beyond the "
             "threshold and the method changes.\n")
    for r in res.second_order:
        thr = second_order_threshold(r)
        extra = ", ".join(f"{k} {v:.4g}" for k, v in r.info.items())
        L.append(f"### {r.check.capitalize()}: {case_label(r.potential, r.system, r.n_atoms)} ({extra})\n")
        L.append(f"Pass threshold: largest error <= {_fmt(thr)} {r.unit} ({THRESHOLDS['second_order_factor']:g} x "
                 f"max(FP32's error {_fmt(r.max_error('fp32'))}, noise floor {_fmt(r.floor())})).\n")
        tag = f"[{r.potential}/{r.system}]"
        head = "| method | largest error vs FP64 | verdict | conclusions changed (of resolved) | verdict |"
        if r.unit == "cm^-1":
            head += " imaginary modes (below -threshold) | max frequency |"
        if r.gamma_raw_cm1:
            head += " Gamma without sum rule: lowest |"
        if r.check == "elastic":
            head += " " + " | ".join(r.labels) + " |"
        L.append(head + " wall (s) |")
        L.append("|" + "---|" * (head.count("|") - 1 + 1))
        for m in ["fp64", *r.methods]:
            cells = ["reference", "", "", ""]
            if m != "fp64":
                changed, resolved = conclusion_changes(r, m)
                cells = [f"{_fmt(r.max_error(m))} {r.unit}", _mark(res.verdicts, m, f"{r.check}:max_err{tag}"),
                         f"{changed} of {resolved}", _mark(res.verdicts, m, f"{r.check}:conclusions_changed{tag}")]
            if r.unit == "cm^-1":
                cells += [str(r.imaginary(m, thr)), f"{max(r.values[m]):.2f}"]
            if r.gamma_raw_cm1:
                cells.append(f"{min(r.gamma_raw_cm1[m]):.3g}")
            if r.check == "elastic":
                cells += [f"{v:.2f}" for v in r.values[m]]
            L.append(f"| {m} | " + " | ".join(cells) + f" | {r.times_s.get(m, math.nan):.1f} |")
        if r.check == "phonons":
            _special_points_table(r, L)
        L.append(f"\n![{r.check}]({r.check}_{r.potential}_{r.system}.png)\n")


def _special_points_table(r, L: list[str]) -> None:
    """The phonon frequencies at the named q points (the first Gamma, X, W, K, L, ...) in THz, per method."""
    thz_per_cm1 = 0.0299792458
    first: dict[str, int] = {}
    for i, lab in enumerate(r.labels):
        first.setdefault(lab.split(" b")[0], i)
    rows = {f"{q} b{b}": i + b for q, i in first.items() if not q.startswith("q") for b in range(r.n_branches)}
    methods = ["fp64", *r.methods]
    L.append("\nFrequencies at the special points (THz):\n")
    L.append("| q, branch | " + " | ".join(methods) + " |")
    L.append("|---|" + "---|" * len(methods))
    for lab, i in rows.items():
        L.append(f"| {lab} | " + " | ".join(f"{thz_per_cm1 * r.values[m][i]:.4f}" for m in methods) + " |")


#: Pairs the report compares: (trained, random twin of the same architecture).
WEIGHT_PAIRS = (("pet-distilled", "pet-distilled-random"),)


def weights_comparison(res) -> str:
    """Markdown: each method's errors on trained and on random weights of the same architecture (suite result
    ``res``): single-point errors against FP64 and in FP32 noise floors, curve jitter. Empty when no pair ran."""
    lines: list[str] = []
    for trained, random in WEIGHT_PAIRS:
        sps = {(sp.potential, sp.system): sp for sp in res.single_point}
        for (pot, system), sp_t in sps.items():
            sp_r = sps.get((random, system))
            if pot != trained or sp_r is None:
                continue
            lines.append(f"### {potential_label(trained)} and {potential_label(random)} on "
                         f"{system_label(system, sp_t.n_atoms)}\n")
            lines.append("| method | force err vs FP64 (eV/A): trained | random | ratio | x FP32 floor: trained | "
                         "random | energy err (eV): trained | random |")
            lines.append("|---|---|---|---|---|---|---|---|")
            for m in sp_t.methods:
                if m not in sp_r.methods:
                    continue
                ft = sp_t.error(m, "fp64").force_mean_err_eV_per_A
                fr = sp_r.error(m, "fp64").force_mean_err_eV_per_A
                lines.append(
                    f"| {m} | {_fmt(ft)} | {_fmt(fr)} | {_fmt(ft / fr if fr else float('nan'))} | "
                    f"{_fmt(sp_t.floor_multiple(m, 'force_mean_err'))} | {_fmt(sp_r.floor_multiple(m, 'force_mean_err'))} | "
                    f"{_fmt(sp_t.error(m, 'fp64').energy_abs_err_eV)} | {_fmt(sp_r.error(m, 'fp64').energy_abs_err_eV)} |"
                )
            lines.append("")
        curves = {c.potential: c for c in res.energy_curve}
        if trained in curves and random in curves:
            ct, cr = curves[trained], curves[random]
            lines.append(f"### CO curve jitter, {potential_label(trained)} and {potential_label(random)}\n")
            lines.append("| method | d2 RMS (meV): trained | random |")
            lines.append("|---|---|---|")
            for m in ct.methods:
                if m in cr.methods:
                    lines.append(f"| {m} | {_fmt(ct.jitter_rms_meV(m))} | {_fmt(cr.jitter_rms_meV(m))} |")
            lines.append("")
    if not lines:
        return ""
    head = ("## Trained and random weights\n\nThe same architecture and the same GEMM shapes, once with the distilled "
            "(trained) weights and once with random ones: what changes between the columns is the weights alone. "
            "Emulation error is relative to the size of the numbers multiplied, so trained weights, whose "
            "magnitudes and activations differ from random ones, need not show the same errors.\n")
    return head + "\n" + "\n".join(lines)


def potentials_line(names) -> str:
    """One line for the report: every potential the suite ran, labelled trained or random."""
    return "Potentials: " + "; ".join(potential_label(n) for n in dict.fromkeys(names)) + "."


def write_report(res: SuiteResult, out: str | Path, env: dict[str, str] | None = None) -> Path:
    """Write ``out/report.md`` from a finished :class:`~tcemu.mlip.results.SuiteResult`; ``env``: the environment
    it ran in (default: this process's, :func:`~tcemu.mlip.results.environment`)."""
    out = Path(out)
    cfg = res.config
    env = environment() if env is None else env
    L: list[str] = []
    L.append(f"# tcemu MLIP validation report ({cfg.name} suite)\n")
    L.append("Environment: " + ", ".join(f"{k} {v}" for k, v in env.items()) + "\n")
    L.append(potentials_line([p for p, _ in cfg.single_point] + list(cfg.curve_potentials)
                             + [cfg.nve_potential, cfg.relax_potential]
                             + ([cfg.second_order_potential] if "second_order" in cfg.checks else [])) + "\n")
    L.append(
        f"Device: `{cfg.device}`. Methods: fp64 (reference), fp32, {', '.join(cfg.methods)}. "
        f"Wall time per check (s): " + ", ".join(f"{k} {v:.0f}" for k, v in res.wall_s.items()) + "\n"
    )
    L.append("## Verdicts\n")
    L.append(verdict_table(res) + "\n")
    L.append("**Which method for which workflow:**\n")
    L.append(workflow_table(res) + "\n")
    L.append("**Coverage** (share of the float32 contraction FLOPs, forward and backward, that each method's run "
             "emulated, measured by `tcemu.coverage()` on its first calculation; below "
             f"{100 * THRESHOLDS['min_coverage']:.0f} % a method is not validated):\n")
    L.append(coverage_table(res) + "\n")
    if res.failures:
        L.append("**Cases that failed to run** (no verdict from them):\n")
        L.extend(f"- {c} {case}: `{err}`" for c, case, err in res.failures)
        L.append("")
    L.append("**Single-pass TF32.** " + _tf32_statement(res) + "\n")
    L.append(criteria_notes())
    if res.single_point:
        _single_point_section(res, cfg, L)
    if res.energy_curve:
        _curve_section(res, L)
    if res.nve:
        _nve_section(res, L)
    if res.relax:
        _relax_section(res, L)
    if res.second_order:
        _second_order_section(res, L)
    if comparison := weights_comparison(res):
        L.append(comparison)
    L.append("## Configuration\n")
    L.append("```\n" + "\n".join(f"{k} = {v}" for k, v in asdict(cfg).items()) + "\n```\n")
    p = out / "report.md"
    p.write_text("\n".join(L))
    return p
