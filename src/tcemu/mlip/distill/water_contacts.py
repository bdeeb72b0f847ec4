"""Short contacts of liquid water for the distillation data: compressed boxes and one molecule pushed into its
neighbour. The student learns repulsion only where its data holds short intermolecular distances; MD near room
temperature never reaches them, and a model without them lets molecules fall into each other in long MD.

Molecules are rigid here (their O-H bonds and H-O-H angle as in the frame they come from): only intermolecular
distances shrink. Atoms must be ordered O, H, H per molecule (as :func:`tcemu.mlip.systems.water_box` is).
"""

from __future__ import annotations

import numpy as np

__all__ = ["CONTACT_TYPES", "closest_contacts", "compressed", "molecule_indices", "push_molecule", "random_push",
           "unwrapped"]

#: Intermolecular contact types, each a pair of elements.
CONTACT_TYPES = {"O-O": ("O", "O"), "O-H": ("O", "H"), "H-H": ("H", "H")}


def molecule_indices(atoms) -> np.ndarray:
    """The ``(n_molecules, 3)`` atom indices of each molecule (O, H, H); raises if atoms are not so ordered."""
    symbols = np.array(atoms.get_chemical_symbols())
    if len(symbols) % 3 or not (np.all(symbols[0::3] == "O") and np.all(symbols[1::3] == "H")
                                and np.all(symbols[2::3] == "H")):
        raise ValueError("atoms must be water ordered O, H, H per molecule")
    return np.arange(len(symbols)).reshape(-1, 3)


def _mic(vectors: np.ndarray, cell: np.ndarray) -> np.ndarray:
    """Minimum-image vectors in a periodic cell (exact for the cubic boxes used here)."""
    frac = vectors @ np.linalg.inv(cell)
    frac -= np.round(frac)
    return frac @ cell


def unwrapped(atoms) -> np.ndarray:
    """Positions with each H placed at its O plus the minimum-image O-H vector: whole molecules."""
    mols = molecule_indices(atoms)
    pos = atoms.positions.copy()
    cell = atoms.cell.array
    for h in (1, 2):
        pos[mols[:, h]] = pos[mols[:, 0]] + _mic(pos[mols[:, h]] - pos[mols[:, 0]], cell)
    return pos


def closest_contacts(atoms, molecule: int | None = None) -> dict[str, float]:
    """The shortest intermolecular O-O, O-H and H-H distances (minimum image), in Angstrom; with ``molecule``,
    only contacts of that molecule's atoms."""
    mols = molecule_indices(atoms)
    owner = np.repeat(np.arange(len(mols)), 3)
    symbols = np.array(atoms.get_chemical_symbols())
    rows = np.arange(len(atoms)) if molecule is None else mols[molecule]
    d = np.linalg.norm(_mic(atoms.positions[None, :, :] - atoms.positions[rows, None, :], atoms.cell.array), axis=-1)
    d[owner[rows][:, None] == owner[None, :]] = np.inf  # intramolecular pairs
    out = {}
    for name, (a, b) in CONTACT_TYPES.items():
        mask = ((symbols[rows][:, None] == a) & (symbols[None, :] == b)) | (
            (symbols[rows][:, None] == b) & (symbols[None, :] == a))
        out[name] = float(d[mask].min())
    return out


def compressed(frame, rng: np.random.Generator, length_factor_range: tuple[float, float]):
    """``frame`` with its cell scaled by a length factor drawn from ``length_factor_range`` and each molecule moved
    rigidly with it (its centre of mass keeps its fractional coordinates). Returns the atoms and the factor."""
    factor = float(rng.uniform(*length_factor_range))
    atoms = frame.copy()
    atoms.calc = None
    mols = molecule_indices(atoms)
    pos = unwrapped(atoms)
    masses = atoms.get_masses()[mols]
    centres = (pos[mols] * masses[..., None]).sum(axis=1) / masses.sum(axis=1)[:, None]
    shift = (factor - 1.0) * centres
    pos[mols] += shift[:, None, :]
    atoms.set_cell(atoms.cell.array * factor, scale_atoms=False)
    atoms.positions = pos
    atoms.wrap()
    return atoms, factor


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.normal(size=(3, 3)))
    q *= np.sign(np.diag(r))  # uniform over rotations
    if np.linalg.det(q) < 0:
        q[:, 0] *= -1
    return q


def push_molecule(frame, molecule: int, targets_A: dict[str, float], rotation: np.ndarray | None = None,
                  step_A: float = 0.02, max_shift_A: float = 4.0):
    """Move one molecule rigidly toward its nearest neighbour molecule (along their O-O vector) until one of its
    intermolecular contacts reaches its target in ``targets_A`` (keys of :data:`CONTACT_TYPES`; a missing key has
    no target). ``rotation`` first turns the molecule about its O. Returns the atoms and the contact reached
    (its type), or ``None`` when a contact is at or below its target before the move."""
    atoms = frame.copy()
    atoms.calc = None
    mols = molecule_indices(atoms)
    pos = unwrapped(atoms)
    own = mols[molecule]
    o = pos[own[0]].copy()
    if rotation is not None:
        pos[own] = o + (pos[own] - o) @ rotation.T
    others = np.delete(np.arange(len(mols)), molecule)
    oo = _mic(pos[mols[others, 0]] - o, atoms.cell.array)
    direction = oo[np.argmin(np.linalg.norm(oo, axis=1))]
    direction /= np.linalg.norm(direction)
    start = pos[own].copy()

    def margin(shift: float) -> tuple[float, str]:
        atoms.positions = pos
        atoms.positions[own] = start + shift * direction
        contacts = closest_contacts(atoms, molecule)
        return min((contacts[k] - t, k) for k, t in targets_A.items())

    lo, hi = 0.0, step_A
    if margin(lo)[0] <= 0:
        return None, None
    while margin(hi)[0] > 0:
        lo, hi = hi, hi + step_A
        if hi > max_shift_A:
            raise RuntimeError("no contact reached its target")
    for _ in range(30):  # bisection to about 1e-8 A
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if margin(mid)[0] > 0 else (lo, mid)
    _, kind = margin(hi)
    atoms.wrap()
    return atoms, kind


def random_push(frame, rng: np.random.Generator, ranges_A: dict[str, tuple[float, float]], tries: int = 20):
    """:func:`push_molecule` of a random molecule, turned by a random rotation, with each contact type's target drawn
    from ``ranges_A``; redrawn (molecule and rotation) when a contact is already below its target."""
    n_molecules = len(frame) // 3
    for _ in range(tries):
        molecule = int(rng.integers(n_molecules))
        rotation = _random_rotation(rng)
        targets = {k: float(rng.uniform(*r)) for k, r in ranges_A.items()}
        atoms, kind = push_molecule(frame, molecule, targets, rotation)
        if atoms is not None:
            return atoms, molecule, kind, targets[kind]
    raise RuntimeError(f"no molecule could be pushed in {tries} tries")
