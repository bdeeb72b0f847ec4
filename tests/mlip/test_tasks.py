"""The four checks at a small size: results, units, CSV rows, plots, and the physics they must show."""

import math

import numpy as np
import pytest

from tcemu.mlip import systems, tasks
from tcemu.mlip._common import CSV_COLUMNS


@pytest.fixture(scope="module")
def sp(pet_tiny, water):
    return tasks.single_point(pet_tiny, water, ["tf32", "tf32x3"], show_progress=False)


def test_single_point_errors_and_floor(sp):
    assert sp.n_atoms == 192 and sp.system == "water_192"
    floor = sp.floor
    assert 0 < floor.force_mean_err_eV_per_A < 1e-4  # FP32 reordered vs FP32: rounding only
    fp32 = sp.error("fp32", "fp64")
    tf32 = sp.error("tf32", "fp64")
    tf32x3 = sp.error("tf32x3", "fp64")
    # single-pass TF32 is far above the FP32 floor; TF32x3 is at FP32's level
    assert sp.floor_multiple("tf32") > 30
    assert tf32.force_mean_err_eV_per_A > 30 * fp32.force_mean_err_eV_per_A
    assert tf32x3.force_mean_err_eV_per_A < 3 * max(
        fp32.force_mean_err_eV_per_A, floor.force_mean_err_eV_per_A
    )
    assert not math.isnan(tf32.stress_mean_err_eV_per_A3)  # periodic: stress compared too
    assert sp.error("tf32", "fp32").force_mean_err_eV_per_A > 0


def test_single_point_rows(sp):
    rows = sp.to_rows()
    assert all(list(r) == list(CSV_COLUMNS) for r in rows)
    metrics = {(r["method"], r["reference"], r["metric"]) for r in rows}
    assert ("tf32", "fp64", "force_mean_err_floor_multiple") in metrics
    assert ("fp32-permute", "fp32", "force_max_err") in metrics
    assert ("tf32x3", "fp32", "stress_mean_err") in metrics


def test_single_point_bad_floor(pet_tiny, water):
    with pytest.raises(ValueError, match="unknown floor"):
        tasks.single_point(pet_tiny, water, ["tf32"], floor="threads", show_progress=False)


def test_second_difference():
    rms, mx = tasks.second_difference_stats(np.array([0.0, 1.0, 2.0, 3.0]))  # a line: no jitter
    assert rms == 0 and mx == 0
    rms, mx = tasks.second_difference_stats(np.array([0.0, 1.0, 0.0, 1.0]))
    assert mx == 2 and rms == 2


def test_energy_curve_tf32_is_jittery(pet_tiny, tmp_path):
    # 12 heights: with every product of PET in TF32 (its periodic-image shifts times the cell included), 8
    # heights happened to sample TF32's deviation where it is smooth (2.5x TF32x3's jitter; 35-48x at 10 and 20)
    res = tasks.energy_curve(pet_tiny, ["tf32", "tf32x3"], np.linspace(1.2, 6.0, 12), show_progress=False)
    assert len(res.energies_eV["fp64"]) == 12
    assert res.jitter_rms_meV("tf32") > 10 * res.jitter_rms_meV("tf32x3")
    assert res.jitter_rms_meV("tf32x3") < 3 * max(res.jitter_rms_meV("fp32"), 1e-9)
    # the curve has physics: the CO-surface energy changes from 1.2 to 6 A by far more than the jitter
    e = np.asarray(res.energies_eV["fp64"])
    assert abs(e[0] - e[-1]) > 1e3 * res.jitter_max_meV("tf32") * 1e-3
    from tcemu.mlip.plots import save_check_figures

    (png,) = save_check_figures(res, tmp_path, "curve")
    assert png.stat().st_size > 10_000


def test_nve_conserves_energy(ani, tmp_path):
    res = tasks.nve_check(
        ani,
        systems.water_cluster(2),
        ["tf32x3"],
        picoseconds=0.01,
        timestep_fs=0.5,
        interval=4,
        show_progress=False,
    )
    assert set(res.runs) == {"fp64", "fp32", "tf32x3"}
    for r in res.runs.values():
        assert r.finite and r.steps == 20 and len(r.time_ps) == 6
        assert r.fluct_meV_per_atom < 5.0  # velocity Verlet at 0.5 fs: small fluctuations
        assert 50 < np.mean(r.temperature_K) < 1000
    # same start, same dynamics for FP64 and TF32x3 over 10 fs
    assert np.allclose(res.runs["fp64"].etot_eV, res.runs["tf32x3"].etot_eV, atol=1e-3)
    rows = res.to_rows()
    assert {"drift", "fluctuation", "etot"} <= {r["metric"] for r in rows}
    from tcemu.mlip.plots import save_check_figures

    assert save_check_figures(res, tmp_path, "nve")[0].exists()


def test_nve_deadline_and_truncation(ani):
    import time

    atoms = systems.water_cluster(1)
    r = tasks.run_nve(atoms, ani.calculator("fp32"), steps=40, interval=4, show_progress=False)
    assert r.steps == 40 and len(r.time_ps) == 11
    cut = r.truncated(20)  # the first 20 steps of the same run, drift refitted
    assert cut.steps == 20 and cut.time_ps == r.time_ps[:6] and cut.etot_eV == r.etot_eV[:6]
    assert r.truncated(40) is r
    # a deadline already past stops the run at the first recorded step after the start
    late = tasks.run_nve(
        atoms, ani.calculator("fp32"), steps=40, interval=4, show_progress=False, deadline=time.time() - 1
    )
    assert late.steps in (0, 4) and len(late.time_ps) == late.steps // 4 + 1
    assert late.etot_eV == r.etot_eV[: len(late.etot_eV)]


def test_relax_deadline_marks_interrupted(ani):
    import time

    res = tasks.relax(
        systems.water_cluster(2),
        ani.calculator("fp32"),
        fmax=1e-9,
        max_steps=50,
        show_progress=False,
        deadline=time.time() - 1,
    )
    assert res.interrupted and not res.converged and res.steps < 50
    full = tasks.relax(
        systems.water_cluster(2), ani.calculator("fp32"), fmax=1e-9, max_steps=3, show_progress=False
    )
    assert not full.interrupted and full.steps == 3


def test_drift_fit():
    from tcemu.mlip.tasks.nve import fit_drift

    t = np.linspace(0, 2, 50)
    drift, fluct, maxdev = fit_drift(t, 0.001 * t * 10, 10)  # 1 meV per ps over 10 atoms -> 1 meV/atom/ps
    assert (
        drift == pytest.approx(1.0) and fluct == pytest.approx(0, abs=1e-9) and maxdev == pytest.approx(2.0)
    )


@pytest.mark.parametrize("optimizer,repeats", [("fire2", 2), ("ase-fire2", 1)])
def test_relax_converges_with_fp32_accurate_methods(ani, optimizer, repeats):
    atoms = systems.water_cluster(1)
    atoms.rattle(0.05, seed=0)
    res = tasks.relax_check(
        ani,
        atoms,
        ["tf32x3"],
        repeats=repeats,
        optimizer=optimizer,
        fmax=1e-3,
        max_steps=300,
        show_progress=False,
    )
    assert set(res.runs) == {"fp32", "tf32x3"}
    for m in ("fp32", "tf32x3"):
        assert res.all_converged(m)
        assert res.fmax_min_eV_per_A(m) < 5e-3
        assert len({r.steps for r in res.runs[m]}) == 1  # CPU reference backend: deterministic repeats
    assert abs(res.runs["fp32"][0].energy_final_eV - res.runs["tf32x3"][0].energy_final_eV) < 1e-3
    rows = res.to_rows()
    assert {"steps", "converged", "fmax_min", "fmax"} <= {r["metric"] for r in rows}


def test_relax_step_limit_is_reported(ani):
    res = tasks.relax(
        systems.water_cluster(2), ani.calculator("fp32"), fmax=1e-9, max_steps=5, show_progress=False
    )
    assert not res.converged and res.steps == 5 and len(res.fmax_trace_eV_per_A) == 6


@pytest.mark.slow
def test_compiled_floor(pet_tiny):
    """The noise floor from torch.compile (Inductor on the CPU: slow, so deselected by default)."""
    res = tasks.single_point(
        pet_tiny, systems.water_cluster(4), ["tf32x3"], floor="compile", show_progress=False
    )
    assert res.floor.method == "fp32-compile"
    assert res.floor.force_mean_err_eV_per_A < 1e-4


def test_chgnet_curve_and_relax_small():
    """CHGNet through the curve (energy-only task, FP64 copy) and a few FIRE2 steps on a small Cantor slab."""
    from tcemu.mlip.models import chgnet

    pot = chgnet()
    curve = tasks.energy_curve(pot, ["tf32"], np.linspace(1.2, 6.0, 5), show_progress=False)
    e = np.asarray(curve.energies_eV["fp64"])
    assert np.isfinite(e).all() and np.ptp(e) > 0.1  # CO binding changes the energy by more than 0.1 eV
    assert curve.jitter_rms_meV("tf32") > curve.jitter_rms_meV("fp32")
    res = tasks.relax_check(
        pot, systems.cantor_slab(size=(2, 2, 3)), ["tf32x3"], repeats=1, max_steps=5, show_progress=False
    )
    for m in ("fp32", "tf32x3"):
        (r,) = res.runs[m]
        assert r.steps == 5 and r.fmax_trace_eV_per_A[-1] < r.fmax_trace_eV_per_A[0]
