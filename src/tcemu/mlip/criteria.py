"""The criteria of the validation suite: each method against what FP32 itself achieves, and no verdict without
coverage.

Criteria (:data:`THRESHOLDS`) compare each method with what FP32 itself achieves, because the goal
is "as accurate as FP32", not "as accurate as FP64":

- single point: error vs FP64 <= 3 x max(FP32's error vs FP64, FP32 noise floor), for the mean force,
  the energy and the mean stress error. The factor 3 leaves room for a method whose rounding differs
  from FP32's but is of the same size (TF32x3 has been reported at about 3x the FP32 floor). For the
  total energy the reference is at least one FP32 ulp of the energy: an FP32 result cannot be closer
  than half an ulp, and a reordered-FP32 floor of exactly 0 (the same sum by luck) would otherwise set a
  threshold below half an ulp that no differently rounded FP32-accurate result can meet;
- energy curve: RMS second difference of E_method - E_FP64 <= 3 x FP32's;
- NVE: |drift| <= 3 x max(|FP64 drift|, |FP32 drift|, FP64 fluctuation / run length) (the last term is
  the smallest drift the run can resolve), fluctuation <= 2 x max(FP64's, FP32's); a run that blows up fails;
- NVE, besides: the total energy's change along the run, relative to FP64's along the same (still correlated)
  trajectory, max_t |dE_method(t) - dE_FP64(t)| <= 3 x FP32's: the integrator's own error, common to every method,
  cancels, so a short run separates the arithmetic;
- relaxation: every repeat reaches the target fmax within the step limit (value: the worst repeat's lowest
  fmax), and the median number of steps is <= 1.5 x FP32's median (or the step limit when FP32 fails);
- second order (phonons, vibrations, elastic constants): the largest error vs FP64 of any frequency or constant
  <= 3 x max(FP32's largest error vs FP64, FP32 noise floor); and no physical conclusion changed: no value whose
  FP64 sign is resolved (|FP64 value| > that threshold) changes sign (an imaginary mode appears or goes, a
  stability criterion flips), no two modes at one q point whose FP64 order is resolved (they differ by more than
  twice the threshold) exchange their order (modes matched by their eigenvectors).

Marginal: a verdict within 10 % of its threshold (``THRESHOLDS["marginal_band"]``), on either side, is marked
"marginal pass" or "marginal fail": another run of a nearby size may land on the other side.

Not discriminating: a criterion that cannot separate the methods at the size it ran gives no pass or fail but
"not discriminating" with the reason and the measured numbers, and counts neither for nor against a method:

- the two references disagree by more than the threshold's margin: when |FP64's value - FP32's| exceeds
  threshold - FP32's value, rounding alone moves the metric past the threshold (relaxation steps; FP64 is run);
- NVE drift: FP64's own drift is within what the run resolves (|drift| < 2 x fluctuation / length): every
  method's "drift" is then the slope of its fluctuation over a run too short, and the threshold is set by
  the run's length, not by the arithmetic;
- NVE energy change against FP64: FP32's trajectory has decorrelated from FP64's (its deviation reaches half
  of FP64's fluctuation): chaos, not arithmetic, sets the difference;
- relaxation: FP32 itself does not reach the target (the target or the step limit is out of reach here);
- second-order conclusions: no sign and no order of FP64's values is resolved beyond FP32's own noise (every
  value within the threshold of zero and of each other): there is no conclusion to change;
- single-point energy: one FP32 ulp of the energy sets the threshold at more than 10 x what FP32 achieved
  (``energy_ulp_dominance``; a model that sums its energy in float64, such as ANI-1x with its float64
  self energies): the criterion then asks only for the energy's FP32 resolution.

No verdict without coverage: every case records the share of its float32 contraction FLOPs (forward and
backward) that each method's run emulated (:func:`tcemu.coverage`, on the run's first calculation). A method
whose run emulated less than ``THRESHOLDS["min_coverage"]`` (99 %) in any case gets the verdict
"not validated: N % emulated", never "safe": what ran in plain FP32 says nothing about the method.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tcemu.mlip.results import SuiteResult

__all__ = ["REFERENCE_METHODS", "THRESHOLDS", "WORKFLOWS", "Verdict", "conclusion_changes", "coverage_verdicts",
           "curve_threshold", "energy_ulp_reason", "method_status", "method_verdicts",
           "nve_energy_deviation_meV_per_atom", "nve_thresholds", "relax_step_threshold", "second_order_threshold",
           "single_point_threshold", "verdicts", "workflow_status"]

#: Methods that are references (FP64) or the baseline (FP32), not judged.
REFERENCE_METHODS = ("fp64", "fp32")

#: Named factors of the criteria (see the module docstring for their reasons).
THRESHOLDS = {
    "single_point_factor": 3.0,
    "curve_factor": 3.0,
    "nve_drift_factor": 3.0,
    "nve_fluct_factor": 2.0,
    "nve_energy_dev_factor": 3.0,
    "relax_steps_factor": 1.5,
    "min_coverage": 0.99,
    "marginal_band": 0.10,
    "nve_drift_resolved_factor": 2.0,
    "nve_decorrelated_fraction": 0.5,
    "energy_ulp_dominance": 10.0,
    "second_order_factor": 3.0,
}

#: Workflows of the verdict table "which method for which workflow" and the checks that judge each.
WORKFLOWS = {
    "single points": ("single_point", "energy_curve"),
    "MD": ("nve",),
    "relaxation": ("relax",),
    "vibrations": ("phonons", "vibrations"),
    "elastic": ("elastic",),
}


@dataclass(frozen=True)
class Verdict:
    """One criterion for one method: ``value`` (``unit``) against ``threshold``; ``passed`` is value <= threshold.

    ``discriminating`` is False when the criterion cannot separate the methods at this size (``reason`` says
    why, with the numbers): it then counts neither for nor against the method. ``graded`` is False for a
    reached / not reached test whose value stops at the threshold (a relaxation's lowest fmax): never marginal."""

    method: str
    check: str
    value: float
    threshold: float
    unit: str
    passed: bool
    note: str = ""
    discriminating: bool = True
    reason: str = ""
    graded: bool = True

    @property
    def marginal(self) -> bool:
        """Within ``marginal_band`` (10 %) of a positive threshold, on either side (graded criteria only)."""
        t, v = self.threshold, self.value
        return (self.discriminating and self.graded and math.isfinite(t) and t > 0 and not math.isnan(v)
                and abs(v - t) <= THRESHOLDS["marginal_band"] * t)

    @property
    def failed(self) -> bool:
        return self.discriminating and not self.passed

    @property
    def verdict(self) -> str:
        """``pass``, ``fail``, ``marginal pass``, ``marginal fail`` or ``not discriminating``."""
        if not self.discriminating:
            return "not discriminating"
        word = "pass" if self.passed else "fail"
        return f"marginal {word}" if self.marginal else word

    def row(self) -> dict:
        return {
            "method": self.method,
            "check": self.check,
            "value": f"{self.value:.6g}",
            "threshold": f"{self.threshold:.6g}",
            "verdict": self.verdict,
            "reason": self.reason,
        }


def _spread_reason(v32: float, v64: float, threshold: float, what: str, unit: str) -> str:
    """Empty when the references agree within the threshold's margin; else why the criterion cannot separate."""
    if any(math.isnan(x) for x in (v32, v64, threshold)):
        return ""
    spread, margin = abs(v64 - v32), threshold - v32
    if spread <= margin:
        return ""
    return (f"not discriminating at this size: FP64 and FP32 differ by {spread:.3g} {unit} in {what} "
            f"(FP64 {v64:.3g}, FP32 {v32:.3g}), more than the threshold's margin over FP32 ({margin:.3g}): "
            "rounding alone moves this metric past the threshold")


def _le(value: float, threshold: float) -> bool:
    return (not math.isnan(value)) and value <= threshold


def _fp32_ulp(x: float) -> float:
    """The spacing of FP32 numbers at ``x`` (one unit in the last place)."""
    import numpy as np

    x32 = np.float32(abs(x))
    return float(np.spacing(x32)) if np.isfinite(x32) else math.inf


def single_point_threshold(sp, metric: str) -> float:
    """The pass threshold of a single-point metric (``force_mean_err``, ``energy_abs_err``, ``stress_mean_err``):
    3 x max(FP32's error vs FP64, FP32's noise floor), for the energy at least one FP32 ulp of it. NaN if unmeasured."""
    ref = max(sp.error("fp32", "fp64").get(metric), sp.floor.get(metric))
    if math.isnan(ref):
        return math.nan
    if metric == "energy_abs_err":  # the energy's FP32 resolution (see the module docstring)
        ref = max(ref, _fp32_ulp(sp.energies_eV.get("fp64", sp.energies_eV["fp32"])))
    return THRESHOLDS["single_point_factor"] * ref


def energy_ulp_reason(sp) -> str:
    """Why the energy criterion cannot separate the methods when one FP32 ulp of the energy sets its threshold at
    more than ``energy_ulp_dominance`` x what FP32 achieved (a model that sums its energy in float64); else ""."""
    measured = max(sp.error("fp32", "fp64").get("energy_abs_err"), sp.floor.get("energy_abs_err"))
    ulp = _fp32_ulp(sp.energies_eV.get("fp64", sp.energies_eV["fp32"]))
    if not ulp > THRESHOLDS["energy_ulp_dominance"] * measured:
        return ""
    return (f"not discriminating at this size: one FP32 ulp of the total energy ({ulp:.3g} eV) sets the threshold, "
            f"{ulp / measured:.3g} x what FP32 achieved here ({measured:.3g} eV, its error vs FP64 or its noise "
            "floor): the criterion asks only for the energy's FP32 resolution; the forces and stress judge")


def curve_threshold(c) -> float:
    """The pass threshold of the curve's jitter: 3 x FP32's RMS second difference (meV)."""
    return THRESHOLDS["curve_factor"] * c.jitter_rms_meV("fp32")


def nve_energy_deviation_meV_per_atom(n, method: str) -> float:
    """max_t |dE_tot,method(t) - dE_tot,FP64(t)| per atom (meV), dE(t) = E(t) - E(0): the change of the total
    energy along the run against FP64's along the same start; over the records both runs have."""
    import numpy as np

    r, r64 = n.runs[method], n.runs["fp64"]
    k = min(len(r.etot_eV), len(r64.etot_eV))
    if k < 2 or not r.finite:
        return math.nan
    e, e64 = np.asarray(r.etot_eV[:k], dtype=np.float64), np.asarray(r64.etot_eV[:k], dtype=np.float64)
    return float(1e3 * np.max(np.abs((e - e[0]) - (e64 - e64[0]))) / r.n_atoms)


def nve_thresholds(n) -> dict:
    """Thresholds of check 3 and whether each criterion can separate the methods (module docstring):
    ``drift``, ``fluctuation``, ``energy_dev`` (values), ``drift_reason``, ``energy_dev_reason`` ("" if
    discriminating), ``duration_ps``, ``resolvable`` (the smallest drift the run resolves, meV/atom/ps)."""
    k = THRESHOLDS
    r64, r32 = n.runs["fp64"], n.runs["fp32"]
    duration = r64.steps * r64.timestep_fs * 1e-3
    resolvable = r64.fluct_meV_per_atom / duration if duration > 0 else math.inf
    d64, d32 = r64.drift_meV_per_atom_per_ps, r32.drift_meV_per_atom_per_ps
    thr_d = k["nve_drift_factor"] * max(abs(d64), abs(d32), resolvable)
    limit = k["nve_drift_resolved_factor"] * resolvable
    drift_reason = "" if abs(d64) >= limit else (
        f"not discriminating at this size: over {duration:.3g} ps FP64 itself drifts {d64:+.3g} meV/atom/ps, "
        f"within the {limit:.3g} meV/atom/ps that its {r64.fluct_meV_per_atom:.3g} meV/atom fluctuation leaves "
        "unresolved (2 x fluctuation / length): every method's drift here is the slope of its fluctuation; "
        "a longer run resolves it")
    drift_reason = drift_reason or _spread_reason(abs(d32), abs(d64), thr_d, "the drift", "meV/atom/ps")
    dev32 = nve_energy_deviation_meV_per_atom(n, "fp32")
    thr_e = k["nve_energy_dev_factor"] * dev32
    decorrelated = k["nve_decorrelated_fraction"] * r64.fluct_meV_per_atom
    energy_reason = "" if not dev32 >= decorrelated else (
        f"not discriminating at this size: FP32's total energy departs from FP64's by {dev32:.3g} meV/atom, "
        f"at least half of FP64's fluctuation ({r64.fluct_meV_per_atom:.3g} meV/atom): the trajectories have "
        "decorrelated, so chaos, not arithmetic, sets the difference; the drift criterion judges such a run")
    return {"drift": thr_d, "fluctuation": k["nve_fluct_factor"] * max(r64.fluct_meV_per_atom, r32.fluct_meV_per_atom),
            "energy_dev": thr_e, "drift_reason": drift_reason, "energy_dev_reason": energy_reason,
            "duration_ps": duration, "resolvable": resolvable}


def relax_step_threshold(rc) -> float:
    """The most median steps that pass: 1.5 x FP32's median, or the step limit when FP32 does not converge."""
    limit = next(iter(rc.runs.values()))[0].max_steps
    return THRESHOLDS["relax_steps_factor"] * rc.steps_median("fp32") if rc.all_converged("fp32") else float(limit)


def verdicts(result: SuiteResult) -> list[Verdict]:
    """Apply the criteria of the module docstring to every method in ``result``."""
    out: list[Verdict] = []
    for sp in result.single_point:
        tag = f"{sp.potential}/{sp.system}"
        for metric, unit in (("force_mean_err", "eV/A"), ("energy_abs_err", "eV"), ("stress_mean_err", "eV/A^3")):
            thr = single_point_threshold(sp, metric)
            if math.isnan(thr):
                continue
            reason = energy_ulp_reason(sp) if metric == "energy_abs_err" else ""
            for m in sp.methods:
                v = sp.error(m, "fp64").get(metric)
                out.append(Verdict(m, f"single_point:{metric}[{tag}]", v, thr, unit, _le(v, thr),
                                   f"{sp.floor_multiple(m, metric):.3g}x floor", not reason, reason))
    for c in result.energy_curve:
        tag = f"{c.potential}/{c.system}"
        thr = curve_threshold(c)
        for m in c.methods:
            v = c.jitter_rms_meV(m)
            out.append(Verdict(m, f"energy_curve:d2_rms[{tag}]", v, thr, "meV", _le(v, thr)))
    for n in result.nve:
        out.extend(_nve_verdicts(n))
    for rc in result.relax:
        out.extend(_relax_verdicts(rc))
    for r in getattr(result, "second_order", ()):
        out.extend(_second_order_verdicts(r))
        out.extend(coverage_verdicts(r, r.check))
    for check, results in (("single_point", result.single_point), ("energy_curve", result.energy_curve),
                           ("nve", result.nve), ("relax", result.relax)):
        for r in results:
            out.extend(coverage_verdicts(r, check))
    return out


def _nve_verdicts(n) -> list[Verdict]:
    tag = f"{n.potential}/{n.system}"
    t = nve_thresholds(n)
    r64, r32 = n.runs["fp64"], n.runs["fp32"]
    fluct_reason = _spread_reason(r32.fluct_meV_per_atom, r64.fluct_meV_per_atom, t["fluctuation"],
                                  "the fluctuation", "meV/atom")
    out = []
    for m in n.methods:
        r = n.runs[m]
        ok = r.finite
        blew = "" if ok else "blew up"
        drift = abs(r.drift_meV_per_atom_per_ps)
        out.append(Verdict(m, f"nve:abs_drift[{tag}]", drift, t["drift"], "meV/atom/ps",
                           ok and _le(drift, t["drift"]), blew, ok and not t["drift_reason"],
                           t["drift_reason"] if ok else ""))
        out.append(Verdict(m, f"nve:fluctuation[{tag}]", r.fluct_meV_per_atom, t["fluctuation"], "meV/atom",
                           ok and _le(r.fluct_meV_per_atom, t["fluctuation"]), blew, ok and not fluct_reason,
                           fluct_reason if ok else ""))
        dev = nve_energy_deviation_meV_per_atom(n, m)
        out.append(Verdict(m, f"nve:energy_dev_vs_fp64[{tag}]", dev, t["energy_dev"], "meV/atom",
                           ok and _le(dev, t["energy_dev"]), blew, ok and not t["energy_dev_reason"],
                           t["energy_dev_reason"] if ok else ""))
    return out


def _relax_verdicts(rc) -> list[Verdict]:
    tag = f"{rc.potential}/{rc.system}"
    any_run = next(iter(rc.runs.values()))[0]
    target = any_run.fmax_target_eV_per_A
    thr_s = relax_step_threshold(rc)
    fp32_ok = rc.all_converged("fp32")
    target_reason = "" if fp32_ok else (
        f"not discriminating at this size: FP32 itself does not reach fmax {target:g} eV/A within "
        f"{any_run.max_steps} steps (its lowest: {rc.fmax_min_eV_per_A('fp32'):.3g})")
    steps_reason = target_reason
    if not steps_reason and "fp64" in rc.runs and rc.all_converged("fp64"):
        steps_reason = _spread_reason(rc.steps_median("fp32"), rc.steps_median("fp64"), thr_s, "the median steps",
                                      "steps")
    out = []
    for m in rc.methods:
        worst = max(r.fmax_min_eV_per_A for r in rc.runs[m])
        out.append(Verdict(m, f"relax:fmax_min[{tag}]", worst, target, "eV/A", _le(worst, target),
                           f"{sum(r.converged for r in rc.runs[m])}/{len(rc.runs[m])} converged",
                           not target_reason, target_reason, graded=False))
        out.append(Verdict(m, f"relax:steps_median[{tag}]", rc.steps_median(m), thr_s, "steps",
                           rc.all_converged(m) and _le(rc.steps_median(m), thr_s), "", not steps_reason,
                           steps_reason))
    return out


def second_order_threshold(r) -> float:
    """The pass threshold of a second-order result (its unit): 3 x max(FP32's largest error vs FP64, its floor)."""
    return THRESHOLDS["second_order_factor"] * max(r.max_error("fp32"), r.floor())


def conclusion_changes(r, method: str) -> tuple[int, int]:
    """(changed, resolved): of FP64's conclusions resolved beyond :func:`second_order_threshold`, the signs of
    values and (where ``r.ordered``) the order of two modes at one q point, how many ``method`` changes."""
    import numpy as np

    thr = second_order_threshold(r)
    v64, v = np.asarray(r.values["fp64"]), np.asarray(r.values[method])
    signs = np.abs(v64) > thr
    changed = int(np.sum(signs & (np.sign(v) != np.sign(v64))))
    resolved = int(signs.sum())
    if r.ordered:
        groups = [lab.split(" b")[0] if " b" in lab else "" for lab in r.labels]
        for g in dict.fromkeys(groups):
            idx = [i for i, x in enumerate(groups) if x == g]
            d64 = v64[idx][:, None] - v64[idx][None, :]
            d = v[idx][:, None] - v[idx][None, :]
            pairs = np.triu(np.abs(d64) > 2 * thr, 1)
            resolved += int(pairs.sum())
            changed += int(np.sum(pairs & (np.sign(d) != np.sign(d64))))
    return changed, resolved


def _second_order_verdicts(r) -> list[Verdict]:
    tag = f"{r.potential}/{r.system}"
    thr = second_order_threshold(r)
    resolved = conclusion_changes(r, "fp32")[1] if not math.isnan(thr) else 0
    reason = "" if resolved else (
        f"not discriminating at this size: every FP64 value is within {thr:.3g} {r.unit} (3 x FP32's own error or "
        "noise floor) of zero and of the others, so no sign or order is resolved beyond FP32's noise")
    out = []
    for m in r.methods:
        err = r.max_error(m)
        out.append(Verdict(m, f"{r.check}:max_err[{tag}]", err, thr, r.unit, _le(err, thr),
                           f"{r.imaginary(m, thr)} imaginary"))
        changed, _ = conclusion_changes(r, m)
        out.append(Verdict(m, f"{r.check}:conclusions_changed[{tag}]", float(changed), 0.0, "conclusions",
                           changed == 0, "", not reason, reason, graded=False))
    return out


def coverage_verdicts(r, check: str) -> list[Verdict]:
    """One criterion per emulation method of a case, ``<check>:not_emulated[<case>]``: the share of the float32
    contraction FLOPs its run did not emulate, in %, at most ``100 (1 - min_coverage)`` = 1 % (FP64 and FP32 are
    references, not judged; a run without float32 products has nothing to validate: NaN, failed)."""
    tag = f"{r.potential}/{r.system}"
    limit = THRESHOLDS["min_coverage"]
    out = []
    for m, frac in getattr(r, "coverage", {}).items():
        if m in REFERENCE_METHODS:
            continue
        out.append(Verdict(m, f"{check}:not_emulated[{tag}]", 100 * (1 - frac), 100 * (1 - limit),
                           "% not emulated", _ge(frac, limit), "" if frac == frac else "no float32 products"))
    return out


def _ge(value: float, threshold: float) -> bool:
    return (not math.isnan(value)) and value >= threshold


def method_verdicts(vs: list[Verdict], methods: list[str]) -> dict[str, tuple[bool, list[Verdict]]]:
    """Per method: safe (every discriminating criterion passed, coverage included) and the failed criteria."""
    out = {}
    for m in methods:
        judged = [v for v in vs if v.method == m and v.discriminating]
        failed = [v for v in judged if not v.passed]
        out[m] = (bool(judged) and not failed, failed)
    return out


def method_status(vs: list[Verdict], method: str) -> str:
    """``"safe"``, ``"not safe"``, or ``"not validated: N % emulated"`` when a run of the method emulated less
    than the minimum coverage (N: its lowest coverage)."""
    mine = [v for v in vs if v.method == method]
    low = [v for v in mine if ":not_emulated[" in v.check and not v.passed]
    if low:
        worst = max((v.value for v in low), key=lambda x: math.inf if math.isnan(x) else x)
        return f"not validated: {'n/a' if math.isnan(worst) else f'{100 - worst:.3g}'} % emulated"
    judged = [v for v in mine if v.discriminating]
    return "safe" if judged and all(v.passed for v in judged) else "not safe"


def workflow_status(vs: list[Verdict], method: str, checks: tuple[str, ...]) -> str:
    """A method's verdict for one workflow (its ``checks``, :data:`WORKFLOWS`): ``safe``, ``not safe (N failed)``,
    ``not validated`` (coverage below the minimum), ``not discriminating`` (every criterion run is) or ``not run``."""
    mine = [v for v in vs if v.method == method and v.check.split(":")[0] in checks]
    if not mine:
        return "not run"
    if any(":not_emulated[" in v.check and not v.passed for v in mine):
        return "not validated"
    judged = [v for v in mine if v.discriminating]
    if not judged:
        return "not discriminating"
    failed = [v for v in judged if not v.passed]
    return f"not safe ({len(failed)} failed)" if failed else "safe"
