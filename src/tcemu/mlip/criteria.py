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
- relaxation: every repeat reaches the target fmax within the step limit (value: the worst repeat's lowest
  fmax), and the median number of steps is <= 1.5 x FP32's median (or the step limit when FP32 fails).

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
    from tcemu.mlip.report import SuiteResult

__all__ = ["REFERENCE_METHODS", "THRESHOLDS", "Verdict", "coverage_verdicts", "method_status", "method_verdicts",
           "verdicts"]

#: Methods that are references (FP64) or the baseline (FP32), not judged.
REFERENCE_METHODS = ("fp64", "fp32")

#: Named factors of the criteria (see the module docstring for their reasons).
THRESHOLDS = {
    "single_point_factor": 3.0,
    "curve_factor": 3.0,
    "nve_drift_factor": 3.0,
    "nve_fluct_factor": 2.0,
    "relax_steps_factor": 1.5,
    "min_coverage": 0.99,
}


@dataclass(frozen=True)
class Verdict:
    """One criterion for one method: ``value`` (``unit``) against ``threshold``; ``passed`` is value <= threshold."""

    method: str
    check: str
    value: float
    threshold: float
    unit: str
    passed: bool
    note: str = ""

    @property
    def verdict(self) -> str:
        return "pass" if self.passed else "fail"

    def row(self) -> dict:
        return {
            "method": self.method,
            "check": self.check,
            "value": f"{self.value:.6g}",
            "threshold": f"{self.threshold:.6g}",
            "verdict": self.verdict,
        }


def _le(value: float, threshold: float) -> bool:
    return (not math.isnan(value)) and value <= threshold


def _fp32_ulp(x: float) -> float:
    """The spacing of FP32 numbers at ``x`` (one unit in the last place)."""
    import numpy as np

    x32 = np.float32(abs(x))
    return float(np.spacing(x32)) if np.isfinite(x32) else math.inf


def verdicts(result: SuiteResult) -> list[Verdict]:
    """Apply the criteria of the module docstring to every method in ``result``."""
    out: list[Verdict] = []
    k = THRESHOLDS
    for sp in result.single_point:
        tag = f"{sp.potential}/{sp.system}"
        for metric, unit in (
            ("force_mean_err", "eV/A"),
            ("energy_abs_err", "eV"),
            ("stress_mean_err", "eV/A^3"),
        ):
            ref = max(sp.error("fp32", "fp64").get(metric), sp.floor.get(metric))
            if math.isnan(ref):
                continue
            if metric == "energy_abs_err":  # the energy's FP32 resolution (see the module docstring)
                ref = max(ref, _fp32_ulp(sp.energies_eV.get("fp64", sp.energies_eV["fp32"])))
            thr = k["single_point_factor"] * ref
            for m in sp.methods:
                v = sp.error(m, "fp64").get(metric)
                out.append(
                    Verdict(
                        m,
                        f"single_point:{metric}[{tag}]",
                        v,
                        thr,
                        unit,
                        _le(v, thr),
                        f"{sp.floor_multiple(m, metric):.3g}x floor",
                    )
                )
    for c in result.energy_curve:
        tag = f"{c.potential}/{c.system}"
        thr = k["curve_factor"] * c.jitter_rms_meV("fp32")
        for m in c.methods:
            v = c.jitter_rms_meV(m)
            out.append(Verdict(m, f"energy_curve:d2_rms[{tag}]", v, thr, "meV", _le(v, thr)))
    for n in result.nve:
        tag = f"{n.potential}/{n.system}"
        r64, r32 = n.runs["fp64"], n.runs["fp32"]
        duration = r64.steps * r64.timestep_fs * 1e-3
        resolvable = r64.fluct_meV_per_atom / duration if duration > 0 else math.inf
        thr_d = k["nve_drift_factor"] * max(
            abs(r64.drift_meV_per_atom_per_ps), abs(r32.drift_meV_per_atom_per_ps), resolvable
        )
        thr_f = k["nve_fluct_factor"] * max(r64.fluct_meV_per_atom, r32.fluct_meV_per_atom)
        for m in n.methods:
            r = n.runs[m]
            ok = r.finite
            out.append(
                Verdict(
                    m,
                    f"nve:abs_drift[{tag}]",
                    abs(r.drift_meV_per_atom_per_ps),
                    thr_d,
                    "meV/atom/ps",
                    ok and _le(abs(r.drift_meV_per_atom_per_ps), thr_d),
                    "" if ok else "blew up",
                )
            )
            out.append(
                Verdict(
                    m,
                    f"nve:fluctuation[{tag}]",
                    r.fluct_meV_per_atom,
                    thr_f,
                    "meV/atom",
                    ok and _le(r.fluct_meV_per_atom, thr_f),
                )
            )
    for rc in result.relax:
        tag = f"{rc.potential}/{rc.system}"
        any_run = next(iter(rc.runs.values()))[0]
        target, limit = any_run.fmax_target_eV_per_A, any_run.max_steps
        fp32_ok = rc.all_converged("fp32")
        thr_s = k["relax_steps_factor"] * rc.steps_median("fp32") if fp32_ok else float(limit)
        for m in rc.methods:
            worst = max(r.fmax_min_eV_per_A for r in rc.runs[m])
            out.append(
                Verdict(
                    m,
                    f"relax:fmax_min[{tag}]",
                    worst,
                    target,
                    "eV/A",
                    _le(worst, target),
                    f"{sum(r.converged for r in rc.runs[m])}/{len(rc.runs[m])} converged",
                )
            )
            out.append(
                Verdict(
                    m,
                    f"relax:steps_median[{tag}]",
                    rc.steps_median(m),
                    thr_s,
                    "steps",
                    rc.all_converged(m) and _le(rc.steps_median(m), thr_s),
                )
            )
    for check, results in (("single_point", result.single_point), ("energy_curve", result.energy_curve),
                           ("nve", result.nve), ("relax", result.relax)):
        for r in results:
            out.extend(coverage_verdicts(r, check))
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
    """Per method: safe (every criterion passed, coverage included) and the failed criteria."""
    out = {}
    for m in methods:
        mine = [v for v in vs if v.method == m]
        failed = [v for v in mine if not v.passed]
        out[m] = (bool(mine) and not failed, failed)
    return out


def method_status(vs: list[Verdict], method: str) -> str:
    """``"safe"``, ``"not safe"``, or ``"not validated: N % emulated"`` when a run of the method emulated less
    than the minimum coverage (N: its lowest coverage)."""
    mine = [v for v in vs if v.method == method]
    low = [v for v in mine if ":not_emulated[" in v.check and not v.passed]
    if low:
        worst = max((v.value for v in low), key=lambda x: math.inf if math.isnan(x) else x)
        return f"not validated: {'n/a' if math.isnan(worst) else f'{100 - worst:.3g}'} % emulated"
    return "safe" if mine and all(v.passed for v in mine) else "not safe"
