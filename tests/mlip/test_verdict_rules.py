"""The verdict rules on hand-made results (no model runs): marginal within 10 % of a threshold, and criteria that
cannot separate the methods at their size reported as not discriminating, with the reason, instead of pass/fail."""

import math

import numpy as np
import pytest
from _mlip_results import nve_check, relax_check

from tcemu.mlip.criteria import THRESHOLDS, Verdict, method_status, method_verdicts, nve_thresholds, verdicts
from tcemu.mlip.report import SuiteConfig, SuiteResult, verdict_table


@pytest.mark.parametrize(("value", "word"), [
    (1.00, "marginal pass"), (0.91, "marginal pass"), (0.89, "pass"),
    (1.09, "marginal fail"), (1.11, "fail"), (0.0, "pass"),
])
def test_marginal_within_ten_percent_on_either_side(value, word):
    v = Verdict("m", "c", value, 1.0, "eV", value <= 1.0)
    assert THRESHOLDS["marginal_band"] == 0.10
    assert v.verdict == word and v.row()["verdict"] == word


def test_marginal_pass_is_safe_and_shown_marginal_fail_is_not_safe():
    vs = [Verdict("a", "x", 0.95, 1.0, "eV", True), Verdict("b", "x", 1.05, 1.0, "eV", False)]
    assert method_status(vs, "a") == "safe" and method_status(vs, "b") == "not safe"
    table = verdict_table(SuiteResult(SuiteConfig.quick(), verdicts=vs))
    assert "x = 0.95 vs 1 eV (marginal pass)" in table and "x = 1.05 vs 1 eV (marginal fail)" in table


def test_a_zero_threshold_is_never_marginal():
    assert Verdict("m", "c", 0.0, 0.0, "eV", True).verdict == "pass"


def test_short_nve_drift_is_not_discriminating_but_its_energy_change_against_fp64_is():
    """0.05 ps of an oscillating energy (the quick suite's case: FP64 'drifts' 2.4 meV/atom/ps, fluctuation 0.087
    meV/atom): the drift is the slope of the fluctuation, so no drift verdict; the energy change against FP64's
    along the same start still separates a method 500x off FP32 (TF32 in the quick suite)."""
    t = np.linspace(0, 0.05, 11)
    base = 24e-3 * (0.1 * np.sin(2 * np.pi * t / 0.013) + 2.4 * t)  # eV: meV/atom x 24 atoms
    wiggle = 24e-3 * np.cos(2 * np.pi * t / 0.007) * t / 0.05
    res = SuiteResult(SuiteConfig.quick(), nve=[nve_check(t, {
        "fp64": base, "fp32": base + 2e-4 * wiggle, "tf32": base + 0.1 * wiggle, "bf16x3": base + 4e-4 * wiggle})])
    thr = nve_thresholds(res.nve[0])
    assert abs(res.nve[0].runs["fp64"].drift_meV_per_atom_per_ps) < 2 * thr["resolvable"]
    assert thr["drift_reason"].startswith("not discriminating at this size: over 0.05 ps FP64 itself drifts")
    got = {(v.method, v.check.split("[")[0]): v for v in verdicts(res)}
    for m in ("fp32", "tf32", "bf16x3"):
        drift = got[(m, "nve:abs_drift")]
        assert drift.verdict == "not discriminating" and not drift.failed and "0.05 ps" in drift.reason
    assert got[("tf32", "nve:energy_dev_vs_fp64")].verdict == "fail"
    assert got[("bf16x3", "nve:energy_dev_vs_fp64")].verdict == "pass"  # 2x FP32's, within 3x
    assert got[("fp32", "nve:energy_dev_vs_fp64")].discriminating
    assert method_status(list(got.values()), "tf32") == "not safe"
    assert method_status(list(got.values()), "bf16x3") == "safe"
    table = verdict_table(SuiteResult(SuiteConfig.quick(), verdicts=list(got.values())))
    assert "**Not discriminating at this size**" in table and "nve:abs_drift[ani1x/water_cluster_24]" in table


def test_long_nve_with_a_resolved_drift_is_judged():
    t = np.linspace(0, 2.0, 401)
    base = 24e-3 * (0.02 * np.sin(2 * np.pi * t / 0.013) + 0.5 * t)
    res = SuiteResult(SuiteConfig.quick(), nve=[nve_check(t, {"fp64": base, "fp32": base, "tf32": base + 24e-3 * 2 * t})])
    got = {(v.method, v.check.split("[")[0]): v for v in verdicts(res)}
    assert nve_thresholds(res.nve[0])["drift_reason"] == ""
    assert got[("fp32", "nve:abs_drift")].verdict == "pass"
    assert got[("tf32", "nve:abs_drift")].verdict == "fail"  # 2.5 > 3 x 0.5


def test_decorrelated_nve_energy_change_is_not_discriminating():
    """FP32's total energy departs from FP64's by half FP64's fluctuation or more: chaos sets the difference."""
    t = np.linspace(0, 2.0, 401)
    base = 24e-3 * 0.1 * np.sin(2 * np.pi * t / 0.013)
    other = 24e-3 * 0.1 * np.sin(2 * np.pi * t / 0.011)
    res = SuiteResult(SuiteConfig.quick(), nve=[nve_check(t, {"fp64": base, "fp32": other, "tf32": other})])
    v = next(v for v in verdicts(res) if v.method == "tf32" and v.check.startswith("nve:energy_dev_vs_fp64"))
    assert v.verdict == "not discriminating" and "decorrelated" in v.reason


def test_relaxation_steps_whose_fp64_fp32_spread_exceeds_the_margin_are_not_discriminating():
    """FP64 57 steps, FP32 190: rounding alone moves the count by 133, more than the threshold's margin over
    FP32 (0.5 x 190 = 95): a method's pass or fail would be luck."""
    res = SuiteResult(SuiteConfig.quick(), relax=[relax_check({"fp64": 57, "fp32": 190, "tf32": 300})])
    got = {(v.method, v.check.split("[")[0]): v for v in verdicts(res)}
    v = got[("tf32", "relax:steps_median")]
    assert v.verdict == "not discriminating" and not v.failed
    assert "FP64 and FP32 differ by 133 steps" in v.reason and "margin over FP32 (95)" in v.reason
    assert got[("tf32", "relax:fmax_min")].discriminating  # reaching the target is still judged


def test_relaxation_steps_are_judged_when_the_references_agree():
    res = SuiteResult(SuiteConfig.quick(), relax=[relax_check({"fp64": 57, "fp32": 57, "tf32": 86, "bf16x3": 60})])
    got = {(v.method, v.check.split("[")[0]): v for v in verdicts(res)}
    assert got[("tf32", "relax:steps_median")].verdict == "marginal fail"  # 86 > 85.5, within 10 %
    assert got[("bf16x3", "relax:steps_median")].verdict == "pass"
    # the optimiser stops just below the target, so the lowest fmax always sits near it: reached is not marginal
    assert got[("bf16x3", "relax:fmax_min")].value == pytest.approx(9.9e-4)
    assert got[("bf16x3", "relax:fmax_min")].verdict == "pass"
    assert method_verdicts(list(got.values()), ["bf16x3"])["bf16x3"][0]


def test_relaxation_that_fp32_cannot_finish_gives_no_verdict():
    res = SuiteResult(SuiteConfig.quick(), relax=[relax_check({"fp32": 300, "tf32": 300}, {"fp32": False,
                                                                                             "tf32": False})])
    vs = [v for v in verdicts(res) if v.method == "tf32"]
    assert vs and all(v.verdict == "not discriminating" for v in vs)
    assert "FP32 itself does not reach fmax 0.001 eV/A within 300 steps" in vs[0].reason
    assert method_status(vs, "tf32") == "not safe"  # no criterion judged: never "safe" by default
    assert not math.isnan(vs[0].value)


def test_energy_whose_threshold_is_set_by_the_ulp_far_above_fp32s_error_is_not_discriminating():
    """ANI-1x on the 192-atom box in the quick suite: FP32's energy error 3.75e-7 eV, floor 3.24e-6 eV, but one
    FP32 ulp of -133,000 eV is 0.0156 eV: TF32's 0.0146 eV (4,500 floors) would pass. No verdict then; a
    threshold set by a ulp of at most 10 x what FP32 achieved (CHGNet on the H200: 6.6 x) is still judged."""
    from tcemu.mlip.tasks.single_point import SinglePointError, SinglePointResult

    def case(e64, fp32_err, floor, tf32_err):
        def err(m, ref, de):
            return SinglePointError(m, ref, de, de / 192e-3, 1e-5, 2e-5, 1e-8, 2e-8)

        shifts = {"fp32": fp32_err, "tf32": tf32_err}
        sp = SinglePointResult("ani1x", "water_192", 192, "permute", err("fp32", "fp32", floor),
                               tuple(err(m, "fp64", d) for m, d in shifts.items()),
                               {"fp64": e64, **{m: e64 + d for m, d in shifts.items()}}, {})
        res = SuiteResult(SuiteConfig.quick(), single_point=[sp])
        return next(v for v in verdicts(res) if v.method == "tf32" and v.check.startswith("single_point:energy"))

    v = case(-133_000.0, 3.75e-7, 3.24e-6, 0.0146)
    assert v.passed and v.verdict == "not discriminating" and not v.failed
    assert "one FP32 ulp of the total energy (0.0156 eV)" in v.reason
    judged = case(-979.33, 9.3e-6, 0.0, 6 * 6.103515625e-05)
    assert judged.discriminating and judged.verdict == "fail"
