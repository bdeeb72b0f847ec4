"""The long-NVE integrator: ASE's velocity Verlet step for step, a resumed run equal to an unbroken one, and the
direct metatomic force path equal to the calculator's."""

import numpy as np
import pytest
import torch

from tcemu.mlip.tasks.nve_long import (
    LongNVEConfig,
    calculator_forces,
    load_series,
    metatomic_forces,
    run_long_nve,
)


@pytest.fixture()
def cluster():
    from ase.calculators.emt import EMT
    from ase.cluster import Octahedron

    atoms = Octahedron("Cu", 3)  # 19 atoms, EMT: milliseconds a step
    atoms.center(vacuum=5.0)
    return atoms, EMT()


def test_matches_ase_velocity_verlet(cluster, tmp_path):
    from ase import units
    from ase.md.verlet import VelocityVerlet

    from tcemu.mlip.tasks.nve_long import _initial_momenta

    atoms, calc = cluster
    cfg = LongNVEConfig(timestep_fs=2.0, steps=30, interval=5, checkpoint_every=10, temperature_K=600.0)
    series = run_long_nve(atoms, calculator_forces(calc, atoms), cfg, tmp_path)
    ref = atoms.copy()
    ref.calc = calc
    ref.set_momenta(_initial_momenta(atoms, 600.0, 0))
    e_ref = []
    dyn = VelocityVerlet(ref, timestep=2.0 * units.fs)
    dyn.attach(lambda: e_ref.append(ref.get_total_energy()), interval=5)
    dyn.run(30)
    assert series.steps_done == 30 and series.done and series.finite
    np.testing.assert_allclose(series.etot_eV, e_ref, rtol=0, atol=1e-10)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    np.testing.assert_allclose(state["positions"].numpy(), ref.positions, rtol=0, atol=1e-10)
    assert np.ptp(series.etot_eV) < 0.05 * np.ptp(series.epot_eV)  # energy conserved, potential energy moving
    csv = np.loadtxt(tmp_path / "energies.csv", delimiter=",", skiprows=1)
    np.testing.assert_array_equal(csv[:, 2], series.etot_eV)


def test_resumed_run_equals_unbroken_run(cluster, tmp_path):
    atoms, calc = cluster
    cfg = LongNVEConfig(timestep_fs=2.0, steps=40, interval=5, checkpoint_every=20)
    whole = run_long_nve(atoms, calculator_forces(calc, atoms), cfg, tmp_path / "whole")
    first = run_long_nve(atoms, calculator_forces(calc, atoms), cfg, tmp_path / "parts", deadline=0.0)
    assert first.steps_done == 5 and not first.done  # stopped at the first record after the deadline
    second = run_long_nve(atoms, calculator_forces(calc, atoms), cfg, tmp_path / "parts")
    assert second.steps_done == 40
    np.testing.assert_array_equal(second.etot_eV, whole.etot_eV)
    np.testing.assert_array_equal(second.step, np.arange(0, 41, 5))
    longer = run_long_nve(atoms, calculator_forces(calc, atoms), LongNVEConfig(2.0, 50, 5, 20), tmp_path / "parts")
    assert longer.steps_done == 50 and load_series(tmp_path / "parts").steps_target == 50
    with pytest.raises(ValueError, match="tcemu: .* was made with"):
        run_long_nve(atoms, calculator_forces(calc, atoms), LongNVEConfig(1.0, 50, 5, 20), tmp_path / "parts")


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="multiple of interval"):
        LongNVEConfig(interval=10, checkpoint_every=25)


def test_metatomic_forces_equal_the_calculators():
    from tcemu.mlip.models import get_potential
    from tcemu.mlip.systems import water_box

    atoms = water_box()
    pot = get_potential("pet-distilled")
    calc = pot.calculator("fp32")
    fn = metatomic_forces(calc, atoms)
    assert calc.coverage is not None  # the first calculation went through the calculator, measured
    pos = torch.as_tensor(atoms.positions + 0.01, dtype=torch.float64)
    energy, forces = fn(pos)
    ref = atoms.copy()
    ref.positions = pos.numpy()
    ref.calc = pot.calculator("fp32")
    np.testing.assert_allclose(forces.numpy(), ref.get_forces(), rtol=0, atol=2e-5)
    assert float(energy) == pytest.approx(ref.get_potential_energy(), abs=2e-4)
    with pytest.raises(TypeError, match="tcemu: metatomic_forces needs"):
        metatomic_forces(object(), atoms)
