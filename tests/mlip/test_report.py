"""The suite end to end at a tiny size: files, verdicts.csv columns, and TF32 judged not safe."""

import csv

import pytest

from tcemu.mlip.report import SuiteConfig, Verdict, method_verdicts, run_suite


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    cfg = SuiteConfig.quick(
        methods=("tf32", "tf32x3"),
        single_point=(("pet-tiny", "water_cluster_6"),),
        curve_potentials=("pet-tiny",),
        curve_points=6,
        nve_system="water_cluster_6",
        nve_ps=0.01,
        relax_system="water_cluster_6",
        relax_max_steps=10,
        relax_fmax_eV_per_A=1e-3,
        second_order_potential="pet-tiny",
        second_order_properties=("elastic",),
        pet_relax_potential="pet-tiny",
        pet_relax_max_steps=4,
    )
    res = run_suite(cfg, out, show_progress=False, log=lambda s: None)
    return res, out


def test_files(suite):
    _, out = suite
    for name in (
        "mlip_single_point.csv",
        "mlip_energy_curve.csv",
        "mlip_nve.csv",
        "mlip_relax.csv",
        "mlip_second_order.csv",
        "verdicts.csv",
        "report.md",
        "single_point_pet-tiny_water_cluster_6.png",
        "energy_curve_pet-tiny.png",
        "nve_ani1x_water_cluster_6.png",
        "relax_ani1x_water_cluster_6.png",
        "elastic_pet-tiny_pt_fcc_4.png",
        "relax_pet-tiny_cantor_27.png",
    ):
        assert (out / name).stat().st_size > 0, name


def test_verdicts_csv(suite):
    res, out = suite
    with (out / "verdicts.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["method", "check", "value", "threshold", "verdict", "reason"]
    assert {r["method"] for r in rows} == {"fp32", "tf32", "tf32x3"}
    assert {r["check"].split(":")[0] for r in rows} == {"single_point", "energy_curve", "nve", "relax", "elastic"}
    assert {r["verdict"] for r in rows} <= {"pass", "fail", "marginal pass", "marginal fail", "not discriminating"}
    for r in rows:
        passed = float(r["value"]) <= float(r["threshold"])
        if r["verdict"] in ("pass", "marginal pass"):
            assert passed
    # every case's coverage, per emulation method: all of PET's and ANI-1x's products emulated
    cov = [r for r in rows if ":not_emulated[" in r["check"]]
    assert {r["method"] for r in cov} == {"tf32", "tf32x3"} and len(cov) == 2 * 6
    assert all(r["verdict"] == "pass" and float(r["value"]) < 0.01 for r in cov), cov
    text = (out / "report.md").read_text()
    assert "**Coverage**" in text and "| single point | PET-tiny (random weights) on water cluster, 6 atoms |" in text
    assert "## NVE drift with its confidence interval" in text and "## Against the published PET study" in text
    assert "| relax | FIRE2 (ALCHEMI)" in text  # the PET relaxation ran, so its row is compared


def test_tf32_is_not_safe_and_tf32x3_passes_single_point(suite):
    res, out = suite
    mv = method_verdicts(res.verdicts, ["fp32", "tf32", "tf32x3"])
    assert mv["tf32"][0] is False
    assert any(v.check.startswith("single_point:force") for v in mv["tf32"][1])
    sp = [v for v in res.verdicts if v.method == "tf32x3" and v.check.startswith("single_point")]
    assert sp and all(v.passed for v in sp)
    text = (out / "report.md").read_text()
    assert "Single-pass TF32" in text and "not safe" in text
    assert "| tf32 | **not safe**" in text


def test_verdict_row():
    v = Verdict("tf32", "x", 2.0, 1.0, "eV", False)
    assert v.row() == {"method": "tf32", "check": "x", "value": "2", "threshold": "1", "verdict": "fail", "reason": ""}


def test_suite_switches_off_the_small_shape_sgemm_fallback():
    """A verdict must judge the method, not cuBLAS SGEMM: the suite turns the CUDA fallback off and back on."""
    import tcemu
    from tcemu.mlip.report import every_gemm_emulated

    before = tcemu.get_config()
    with every_gemm_emulated():
        assert tcemu.get_config().small_shape_fallback is False
        assert tcemu.get_config().attention_fallback is False
    assert tcemu.get_config() == before


def test_energy_threshold_is_at_least_one_fp32_ulp_of_the_energy():
    """A reordered-FP32 floor of exactly 0 must not set an energy threshold below the energy's FP32
    resolution (the CHGNet water case on the H200: E = -979.33 eV, ulp 6.1e-5 eV, FP32 error 9.3e-6 eV)."""
    from tcemu.mlip.report import SuiteConfig, SuiteResult, verdicts
    from tcemu.mlip.tasks.single_point import SinglePointError, SinglePointResult

    e64, ulp = -979.33, 6.103515625e-05

    def err(m, ref, de):
        return SinglePointError(m, ref, de, de / 192e-3, 1e-5, 2e-5, 1e-8, 2e-8)

    shifts = {"fp32": 9.3e-6, "bf16x6": 2 * ulp, "bf16x3": 6 * ulp}
    sp = SinglePointResult(
        "chgnet", "water_192", 192, "permute", err("fp32", "fp32", 0.0),
        tuple(err(m, "fp64", d) for m, d in shifts.items()),
        {"fp64": e64, **{m: e64 + d for m, d in shifts.items()}}, {},
    )
    res = SuiteResult(SuiteConfig.quick(), single_point=[sp])
    got = {v.method: v for v in verdicts(res) if v.check.startswith("single_point:energy_abs_err")}
    assert got["fp32"].threshold == pytest.approx(3 * ulp)
    assert got["bf16x6"].passed and not got["bf16x3"].passed
