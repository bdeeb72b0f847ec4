"""Named, deterministic structure builders shared by the tests, the CLI and the benchmarks.

Every builder returns a fresh :class:`ase.Atoms`. The water box is equilibrated once (ANI-1x
Langevin dynamics, see :func:`equilibrate_water_box`) and shipped as ``data/water_box_192.extxyz``, so
that its neighbour counts are those of liquid water without an MD run at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources
from pathlib import Path

import numpy as np

__all__ = [
    "SYSTEMS",
    "build",
    "cantor_slab",
    "cubic_repeat",
    "co_on_pt111",
    "equilibrate_water_box",
    "water_box",
    "water_box_unequilibrated",
    "water_cluster",
    "water_supercell",
]

WATER_BOX_FILE = "water_box_192.extxyz"
#: Edge of the cubic 64-molecule box at 1.00 g/cm^3: (64 * 18.015 u / N_A / 1 g cm^-3)^(1/3).
WATER_BOX_EDGE_A = 12.417
#: Lattice constant of the Cantor alloy (Co, Cr, Fe, Mn, Ni), fcc, about 3.59 Angstrom.
CANTOR_A_A = 3.59
CANTOR_COUNTS = {"Co": 108, "Cr": 108, "Fe": 108, "Mn": 107, "Ni": 108}


def water_box_unequilibrated(seed: int = 0):
    """64 randomly rotated H2O molecules on a 4x4x4 grid in a cubic 12.417 Angstrom box (1.00 g/cm^3).

    Atoms are ordered O, H, H per molecule (as ASE's TIP3P and RATTLE expect).
    """
    from ase import Atoms
    from ase.build import molecule

    rng = np.random.default_rng(seed)
    h2o = molecule("H2O")  # O, H, H
    h2o.positions -= h2o.positions[0]
    step = WATER_BOX_EDGE_A / 4
    symbols: list[str] = []
    positions: list[np.ndarray] = []
    for i in range(4):
        for j in range(4):
            for k in range(4):
                q, _ = np.linalg.qr(rng.normal(size=(3, 3)))  # random orthogonal matrix
                if np.linalg.det(q) < 0:
                    q[:, 0] *= -1
                centre = (np.array([i, j, k]) + 0.5) * step
                positions.extend(h2o.positions @ q.T + centre)
                symbols.extend(h2o.get_chemical_symbols())
    return Atoms(symbols, positions=np.array(positions), cell=[WATER_BOX_EDGE_A] * 3, pbc=True)


def equilibrate_water_box(steps: int = 2000, temperature_K: float = 300.0, seed: int = 0, calc=None):
    """Equilibrate the grid-built box: FIRE to 0.5 eV/A, then 1 ps of Langevin dynamics (0.5 fs, 300 K, 0.02/fs).

    This is how ``data/water_box_192.extxyz`` was made, once, with the defaults and ANI-1x (FP32,
    torchani 2.2.4) as the potential: 1 ps of flexible-water dynamics from the grid, a few minutes
    on a CPU. (ASE's rigid TIP3P with RATTLE took seconds per step here.) Velocities are discarded.
    """
    from ase import units
    from ase.md.langevin import Langevin
    from ase.optimize import FIRE

    from tcemu.mlip._common import maxwell_boltzmann_momenta

    atoms = water_box_unequilibrated(seed)
    if calc is None:
        from tcemu.mlip.models import ani1x

        calc = ani1x().calculator("fp32")
    atoms.calc = calc
    FIRE(atoms, logfile=None).run(fmax=0.5, steps=200)
    maxwell_boltzmann_momenta(atoms, temperature_K, np.random.default_rng(seed))
    dyn = Langevin(
        atoms,
        0.5 * units.fs,
        temperature_K=temperature_K,
        friction=0.02 / units.fs,
        rng=np.random.default_rng(seed),
        fixcm=False,
    )
    dyn.run(steps)
    atoms.wrap()
    atoms.calc = None
    atoms.set_velocities(np.zeros((len(atoms), 3)))
    atoms.info = {}
    return atoms


def water_box():
    """192-atom box of liquid water (64 molecules, 1.00 g/cm^3, cubic 12.417 Angstrom, periodic).

    Pre-equilibrated with ANI-1x at 300 K (1 ps, :func:`equilibrate_water_box`); shipped with the package.
    """
    from ase.io import read

    with resources.as_file(resources.files("tcemu.mlip") / "data" / WATER_BOX_FILE) as path:
        atoms = read(Path(path), format="extxyz")
    atoms.calc = None
    atoms.info = {"name": "water_192"}
    return atoms


def water_cluster(n_molecules: int = 8, vacuum: float = 6.0):
    """The ``n_molecules`` molecules of :func:`water_box` nearest its centre, unwrapped, in a vacuum box (no pbc).

    A small, non-periodic system for CPU-sized relaxations and NVE runs with molecular models (ANI-1x).
    """
    from ase import Atoms

    box = water_box()
    n = len(box) // 3
    centre = box.cell.sum(axis=0) / 2
    # Unwrap each molecule around its O, then pick the molecules whose O is nearest the centre.
    pos = box.positions.reshape(n, 3, 3).copy()
    cell = box.cell.array
    inv = np.linalg.inv(cell)
    for h in (1, 2):
        d = pos[:, h] - pos[:, 0]
        d -= np.round(d @ inv) @ cell
        pos[:, h] = pos[:, 0] + d
    d_o = pos[:, 0] - centre
    d_o -= np.round(d_o @ inv) @ cell
    pick = np.argsort(np.linalg.norm(d_o, axis=1))[:n_molecules]
    shift = (centre + d_o[pick]) - pos[pick, 0]
    xyz = (pos[pick] + shift[:, None, :]).reshape(-1, 3)
    atoms = Atoms(box.get_chemical_symbols()[: 3 * n_molecules], positions=xyz)
    atoms.center(vacuum=vacuum)
    atoms.info = {"name": f"water_cluster_{len(atoms)}"}
    return atoms


def water_supercell(repeat: tuple[int, int, int] = (3, 5, 6)):
    """The water box repeated ``repeat`` times: 192 * 90 = 17,280 atoms by default (37.3 x 62.1 x 74.5 Angstrom).

    Every atom keeps its neighbourhood (the box is periodic), so a model's neighbours per atom are the box's."""
    repeat = tuple(int(r) for r in repeat)
    if len(repeat) != 3 or min(repeat) < 1:
        raise ValueError(f"tcemu water_supercell: repeat must be three positive integers, got {repeat!r}")
    atoms = water_box().repeat(repeat)
    atoms.info = {"name": f"water_{len(atoms)}"}
    return atoms


def cubic_repeat(copies: int) -> tuple[int, int, int]:
    """The repeat (a <= b <= c, a b c = ``copies``) closest to a cube (smallest c / a): 8 -> (2, 2, 2),
    27 -> (3, 3, 3), 90 -> (3, 5, 6)."""
    if copies < 1:
        raise ValueError(f"tcemu cubic_repeat: copies must be >= 1, got {copies}")
    best = (1, 1, copies)
    for a in range(1, round(copies ** (1 / 3)) + 2):
        if copies % a:
            continue
        for b in range(a, int((copies // a) ** 0.5) + 1):
            if (copies // a) % b == 0:
                c = copies // a // b
                if c >= b and c / a < best[2] / best[0]:
                    best = (a, b, c)
    return best


def co_on_pt111(height: float = 1.85, size: tuple[int, int, int] = (3, 3, 4), vacuum: float = 10.0):
    """CO standing upright on a top site of a Pt(111) slab, C ``height`` Angstrom above the surface Pt.

    The slab is ``fcc111("Pt", size, vacuum)`` (periodic in x, y; cell with vacuum along z). The CO bond
    is the gas-phase ``molecule("CO")`` geometry, held fixed for rigid scans.
    """
    from ase.build import add_adsorbate, fcc111, molecule

    slab = fcc111("Pt", size=size, vacuum=vacuum)
    co = molecule("CO")  # [O, C]; mol_index=1 puts C at `height`, O above it
    add_adsorbate(slab, co, height=float(height), position="ontop", mol_index=1)
    slab.pbc = True  # the vacuum separates the images along z; models with a cell need all three vectors
    slab.info = {"name": f"pt111_co_{len(slab)}"}
    return slab


def cantor_slab(seed: int = 0, size: tuple[int, int, int] = (7, 7, 11), vacuum: float = 10.0):
    """Co-Cr-Fe-Mn-Ni (Cantor alloy) fcc(111) slab with random occupation from ``seed``.

    The default ``size`` gives 539 atoms, Co108 Cr108 Fe108 Mn107 Ni108. Other sizes keep the
    five elements as close to equimolar as the atom count allows (counts differ by at most one).
    """
    from ase.build import fcc111

    slab = fcc111("Ni", size=size, a=CANTOR_A_A, vacuum=vacuum)
    n = len(slab)
    if n == 539:
        counts = CANTOR_COUNTS
    else:
        base, extra = divmod(n, 5)
        counts = {el: base + (1 if i < extra else 0) for i, el in enumerate(CANTOR_COUNTS)}
    symbols = np.concatenate([[el] * c for el, c in counts.items()])
    rng = np.random.default_rng(seed)
    slab.set_chemical_symbols(list(rng.permutation(symbols)))
    slab.pbc = True
    slab.info = {"name": f"cantor_{n}"}
    return slab


#: Named builders (no arguments needed): the names used by the CLI and the benchmarks.
SYSTEMS: dict[str, Callable] = {
    "water_192": water_box,
    "water_1536": lambda: water_supercell((2, 2, 2)),
    "water_5184": lambda: water_supercell((3, 3, 3)),
    "water_17280": water_supercell,
    "water_cluster_24": water_cluster,
    "pt111_co": co_on_pt111,
    "cantor_539": cantor_slab,
    "cantor_27": lambda: cantor_slab(size=(3, 3, 3)),  # a CPU-sized slab of the alloy (3 x 3 x 3, 27 atoms)
}


def build(name: str):
    """Build a named system (see :data:`SYSTEMS`); ``water_cluster_<n_atoms>`` gives any cluster size,
    ``water_<n_atoms>`` any supercell of the 192-atom box (n a multiple of 192, repeated as :func:`cubic_repeat`
    says) and ``water_<a>x<b>x<c>`` the box repeated (a, b, c) times."""
    if name in SYSTEMS:
        return SYSTEMS[name]()
    if name.startswith("water_cluster_") and name[14:].isdigit() and int(name[14:]) % 3 == 0:
        return water_cluster(int(name[14:]) // 3)
    tail = name[6:] if name.startswith("water_") else ""
    if tail.isdigit() and int(tail) > 0 and int(tail) % 192 == 0:
        return water_supercell(cubic_repeat(int(tail) // 192))
    parts = tail.split("x")
    if len(parts) == 3 and all(p.isdigit() and int(p) > 0 for p in parts):
        return water_supercell(tuple(int(p) for p in parts))
    raise ValueError(f"unknown system {name!r}; choose one of {', '.join(SYSTEMS)}, water_cluster_<3n>, "
                     "water_<192 n> (a supercell of the 192-atom box) or water_<a>x<b>x<c> (the box repeated)")
