"""PotentialCalculator hands out only results computed for the structure it was given."""

import numpy as np

from tcemu.mlip import models, systems


def test_energy_only_call_does_not_leave_stale_forces():
    """CHGNet's own calculator merges new results into old ones: after an energy-only evaluation of a moved
    structure, the forces of the previous structure must not be returned as if they were current."""
    pot = models.chgnet()
    calc = pot.calculator("fp32")
    atoms = systems.co_on_pt111(2.0)
    atoms.calc = calc
    before = atoms.get_forces().copy()
    atoms.positions[-1, 2] += 0.2  # move the C atom: the forces change by far more than rounding
    atoms.get_potential_energy()
    after = atoms.get_forces()
    fresh = atoms.copy()
    fresh.calc = pot.calculator("fp32")
    assert np.abs(fresh.get_forces() - before).max() > 0.1
    np.testing.assert_array_equal(after, fresh.get_forces())
