"""Relaxation helpers of the PET study's protocol: a lower step limit read off a longer run, rattled starts."""

import numpy as np
import pytest

from tcemu.mlip.tasks.relax import rattled, relax


@pytest.fixture()
def cluster():
    from ase.calculators.emt import EMT
    from ase.cluster import Octahedron

    atoms = Octahedron("Cu", 3)
    atoms.center(vacuum=5.0)
    return rattled(atoms, 0.05, 0), EMT()


@pytest.mark.parametrize("limit", [5, 40, 1000])
def test_a_lower_limit_read_off_a_longer_run_is_that_run(cluster, limit):
    atoms, calc = cluster
    long = relax(atoms, calc, "fire2", 0.02, 1000, show_progress=False)
    assert long.converged and 5 < long.steps < 1000
    short = relax(atoms, calc, "fire2", 0.02, limit, show_progress=False)
    cut = long.with_limit(limit)
    assert (cut.steps, cut.converged, cut.max_steps) == (short.steps, short.converged, short.max_steps)
    assert cut.fmax_trace_eV_per_A == short.fmax_trace_eV_per_A
    assert cut.fmax_min_eV_per_A == short.fmax_min_eV_per_A


def test_rattled_starts():
    from ase.build import bulk

    a = bulk("Cu", cubic=True)
    assert np.array_equal(rattled(a, 0.0, 3).positions, a.positions)
    r0, r0b, r1 = rattled(a, 0.01, 0), rattled(a, 0.01, 0), rattled(a, 0.01, 1)
    assert np.array_equal(r0.positions, r0b.positions) and not np.array_equal(r0.positions, r1.positions)
    assert 0.001 < np.abs(r0.positions - a.positions).max() < 0.05
