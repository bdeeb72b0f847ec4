"""The comparison with the published PET study: each row's rule says agree, differ or not measured from the
numbers given, and a benchmarks/nve_long.py folder is summarised into its files."""

import json

import numpy as np
import pytest

from tcemu.mlip import study
from tcemu.mlip.tasks.relax import RelaxResult


def _nve(tf32_vs_fp32: str, tf32_drift: float, tf32x3_vs_fp32: str = "cannot tell apart", duration: float = 30.0):
    base = {"duration_ps": duration, "ci_low": -0.1, "ci_high": 0.1}
    return [{**base, "method": "fp64", "drift_meV_per_atom_per_ps": 0.01, "vs_fp32": "cannot tell apart"},
            {**base, "method": "fp32", "drift_meV_per_atom_per_ps": 0.02, "vs_fp64": "cannot tell apart"},
            {**base, "method": "tf32", "drift_meV_per_atom_per_ps": tf32_drift, "vs_fp32": tf32_vs_fp32},
            {**base, "method": "tf32x3", "drift_meV_per_atom_per_ps": 0.02, "vs_fp32": tf32x3_vs_fp32}]


def _relax(converged: dict[str, int], repeats: int = 3):
    return [{"optimizer": "alchemi-fire2", "method": m, "limit": lim, "repeats": repeats, "converged": c,
             "steps": "218 218 218", "fmax_min_eV_per_A": 9e-4 if c else 1.2e-3}
            for m, c in converged.items() for lim in (500, 1000)]


def _verdicts(**kw):
    return {r["check"]: r["verdict"] for r in study.compare(**kw)}


def test_agreeing_results_say_agree():
    v = _verdicts(nve=_nve("differs", 0.5), relax=_relax({"fp32": 3, "tf32x3": 3, "tf32": 0}),
                  curve={"fp32": 0.02, "tf32": 1.3, "tf32x3": 0.02},
                  single_point={"fp32": (4e-6, 1.4e-6), "tf32x3": (4.1e-6, 1.4e-6)})
    assert v == {"nve": "agree", "relax": "agree", "curve": "agree", "single_point": "agree"}


def test_disagreeing_results_say_differ():
    v = _verdicts(nve=_nve("cannot tell apart", 0.5), relax=_relax({"fp32": 3, "tf32x3": 3, "tf32": 3}),
                  curve={"fp32": 0.02, "tf32": 0.05, "tf32x3": 0.02},
                  single_point={"fp32": (4e-6, 1.4e-6), "tf32x3": (4e-5, 1.4e-6)})
    assert set(v.values()) == {"differ"}
    # a TF32 drift that differs but is smaller than FP32's is not the study's finding; nor a TF32x3 that differs
    assert _verdicts(nve=_nve("differs", 0.001))["nve"] == "differ"
    assert _verdicts(nve=_nve("differs", 0.5, "differs"))["nve"] == "differ"


def test_missing_results_say_not_measured_and_short_runs_say_so():
    assert set(_verdicts().values()) == {"not measured"}
    row = study.compare(nve=_nve("differs", 0.5, duration=6.2))[0]
    assert "6.2 ps of 30" in row["tcemu"]
    assert "| nve |" in study.comparison_markdown([row])


def test_relax_rows_read_the_500_step_limit_off_a_1000_step_run():
    trace = tuple([1.0] * 600 + [5e-4])  # converges at step 600
    r = RelaxResult("tf32", "alchemi-fire2", 1e-3, 1000, 600, True, 5e-4, 5e-4, -1.0, trace, 6.0)
    rows = {row["limit"]: row for row in study.relax_rows({"tf32": [r]}, (500, 1000))}
    assert rows[1000]["converged"] == 1 and rows[1000]["steps_median"] == 600
    assert rows[500]["converged"] == 0 and rows[500]["steps_median"] == 500 and rows[500]["fmax_min_eV_per_A"] == 1.0
    assert rows[1000]["ms_per_step"] == pytest.approx(10.0)


def test_write_summary_of_a_folder(tmp_path):
    from ase.calculators.emt import EMT
    from ase.cluster import Octahedron

    from tcemu.mlip._common import write_csv
    from tcemu.mlip.tasks.energy_curve import EnergyCurveResult
    from tcemu.mlip.tasks.nve_long import LongNVEConfig, calculator_forces, run_long_nve
    from tcemu.mlip.tasks.relax import relax

    atoms = Octahedron("Cu", 3)
    atoms.center(vacuum=5.0)
    cfg = LongNVEConfig(timestep_fs=2.0, steps=40, interval=2, checkpoint_every=20, temperature_K=300.0)
    for m in ("fp64", "fp32", "tf32", "tf32x3"):
        run_long_nve(atoms, calculator_forces(EMT(), atoms), cfg, tmp_path / "nve" / "emt" / m)
    for m in ("fp32", "tf32", "tf32x3"):
        a = atoms.copy()
        a.rattle(0.05, seed=1)
        r = relax(a, EMT(), "fire2", 0.05, 50, m, show_progress=False)
        (tmp_path / "relax" / "fire2" / m).mkdir(parents=True)
        d = {k: v for k, v in r.__dict__.items()}
        (tmp_path / "relax" / "fire2" / m / "repeat0.json").write_text(json.dumps(d))
    h = np.linspace(1.2, 6.0, 8)
    es = {m: tuple(np.sin(h) + (0.01 * np.cos(40 * h) if m == "tf32" else 0.0)) for m in ("fp64", "fp32", "tf32",
                                                                                           "tf32x3")}
    (tmp_path / "curve").mkdir()
    write_csv(EnergyCurveResult("x", "pt111_co", 38, tuple(h), es).to_rows(),
              tmp_path / "curve" / "mlip_energy_curve.csv")
    paths = study.write_summary(tmp_path, (20, 50), log=lambda s: None)
    names = {p.name for p in paths}
    assert {"nve_emt.png", "nve_summary.csv", "relax_summary.csv", "curve_summary.csv", "study_comparison.md",
            "results.csv"} <= names
    text = (tmp_path / "study_comparison.md").read_text()
    assert "## NVE, emt" in text and "| curve |" in text and "**agree**" in text  # the curve's rule
    rows = json.loads((tmp_path / "nve_summary.json").read_text())
    assert {r["method"] for r in rows} == {"fp64", "fp32", "tf32", "tf32x3"}
    assert all(r["vs_fp64"] == "cannot tell apart" for r in rows if r["method"] != "fp64")  # the same EMT forces
