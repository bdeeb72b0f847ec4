"""The short-contact builders of the distillation data: rigid molecules, contacts at their targets, seeded."""

import numpy as np
import pytest

from tcemu.mlip import systems
from tcemu.mlip.distill.water_contacts import (
    closest_contacts,
    compressed,
    molecule_indices,
    push_molecule,
    random_push,
    unwrapped,
)


@pytest.fixture(scope="module")
def box():
    atoms = systems.water_box()
    atoms.info = {}
    return atoms


def _intramolecular(atoms) -> np.ndarray:
    """Each molecule's two O-H lengths and H-H distance (rigid-body invariants)."""
    pos = unwrapped(atoms)[molecule_indices(atoms)]
    return np.stack([np.linalg.norm(pos[:, 1] - pos[:, 0], axis=1), np.linalg.norm(pos[:, 2] - pos[:, 0], axis=1),
                     np.linalg.norm(pos[:, 2] - pos[:, 1], axis=1)], axis=1)


def test_molecules_must_be_ordered_o_h_h(box):
    assert molecule_indices(box).shape == (64, 3)
    with pytest.raises(ValueError, match="ordered O, H, H"):
        molecule_indices(box[[1, 0, 2]])


def test_compressed_scales_the_cell_and_keeps_molecules_rigid(box):
    atoms, factor = compressed(box, np.random.default_rng(3), (0.90, 0.97))
    assert 0.90 <= factor <= 0.97
    np.testing.assert_allclose(atoms.cell.array, box.cell.array * factor)
    np.testing.assert_allclose(_intramolecular(atoms), _intramolecular(box), atol=1e-9)
    before, after = closest_contacts(box), closest_contacts(atoms)
    assert all(after[k] < before[k] for k in before)
    again, _ = compressed(box, np.random.default_rng(3), (0.90, 0.97))
    np.testing.assert_array_equal(again.positions, atoms.positions)


@pytest.mark.parametrize("kind,target", [("O-O", 2.1), ("O-H", 1.3), ("H-H", 1.6)])
def test_push_stops_at_the_first_target(box, kind, target):
    targets = {"O-O": 1.0, "O-H": 0.5, "H-H": 0.5, kind: target}  # the others far below: this one comes first
    atoms, reached = push_molecule(box, 0, targets)
    assert reached == kind
    contacts = closest_contacts(atoms, 0)
    assert contacts[kind] == pytest.approx(target, abs=1e-6)
    assert all(contacts[k] >= t - 1e-6 for k, t in targets.items())
    np.testing.assert_allclose(_intramolecular(atoms), _intramolecular(box), atol=1e-9)
    moved = np.ones(len(box), bool)
    moved[molecule_indices(box)[0]] = False  # every other atom stays where it was
    np.testing.assert_allclose(atoms.positions[moved], box.positions[moved], atol=1e-9)


def test_push_refuses_a_contact_already_below_its_target(box):
    assert push_molecule(box, 0, {"O-O": 3.5}) == (None, None)


def test_random_push_reaches_one_target_and_follows_the_seed(box):
    ranges = {"O-O": (1.9, 2.4), "O-H": (1.1, 1.6), "H-H": (1.4, 1.8)}
    a, molecule, kind, target = random_push(box, np.random.default_rng(7), ranges)
    contacts = closest_contacts(a, molecule)
    assert contacts[kind] == pytest.approx(target, abs=1e-6)
    assert all(contacts[k] >= lo - 1e-6 for k, (lo, _) in ranges.items())
    b, *rest = random_push(box, np.random.default_rng(7), ranges)
    np.testing.assert_array_equal(a.positions, b.positions)
    assert rest == [molecule, kind, target]
