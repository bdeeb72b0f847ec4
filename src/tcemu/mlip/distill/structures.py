"""The structures of the distillation data set and their labels: what each group holds, how each structure is
built from its seed, and the teacher's energy, forces and stress on it (:mod:`tcemu.mlip.distill.dataset` splits
and writes them; its docstring describes the groups)."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace

import numpy as np

__all__ = ["GROUPS", "TEACHER", "DistillDataConfig", "label", "structure"]

#: The teacher, as written into every structure's info.
TEACHER = "CHGNet 0.3.0 pretrained (chgnet 0.4.2 wheel), FP32, through tcemu.mlip.models.chgnet"
#: Structure groups, in the order they are generated (their index seeds their random numbers).
GROUPS = (
    "water_md",
    "water_strained",
    "co_curve",
    "co_displaced",
    "pt_clean",
    "cantor_539",
    "cantor_relax",
    "cantor_small",
    "water_hot_md",
    "water_compressed",
    "water_contact",
)


@dataclass(frozen=True)
class DistillDataConfig:
    """What :func:`generate` builds. The defaults are the committed set.

    Counts are structures per group; ``water_md_temperatures_K`` and ``water_hot_md_temperatures_K`` have one
    trajectory per entry. The ``water_contact_*_range_A`` are the targets of the intermolecular O-O, O-H and H-H
    distances in ``water_contact`` (the first contact to reach its target stops the push).
    """

    seed: int = 0
    water_md_temperatures_K: tuple[float, ...] = (300.0, 400.0, 500.0)
    water_md_steps: int = 200
    water_md_stride: int = 4
    water_md_timestep_fs: float = 0.5
    water_md_friction_per_fs: float = 0.02
    water_strained: int = 150
    co_curve_points: int = 60
    co_displaced: int = 1200
    co_height_range_A: tuple[float, float] = (1.5, 6.5)
    co_max_tilt_deg: float = 35.0
    co_max_offset_A: float = 1.0
    co_bond_range_A: tuple[float, float] = (1.08, 1.22)
    pt_clean: int = 40
    cantor_539: int = 50
    cantor_relax_steps: int = 45
    cantor_relax_stride: int = 3
    cantor_small: int = 600
    cantor_small_size: tuple[int, int, int] = (3, 3, 5)
    rattle_range_A: tuple[float, float] = (0.01, 0.12)
    max_strain: float = 0.03
    water_rattle_range_A: tuple[float, float] = (0.005, 0.04)
    water_max_strain: float = 0.02
    water_hot_md_temperatures_K: tuple[float, ...] = (700.0, 900.0)
    water_hot_md_steps: int = 120
    water_hot_md_stride: int = 4
    water_compressed: int = 60
    water_compressed_length_range: tuple[float, float] = (0.90, 0.97)
    water_contact: int = 100
    water_contact_oo_range_A: tuple[float, float] = (1.8, 2.4)
    water_contact_oh_range_A: tuple[float, float] = (1.0, 1.6)
    water_contact_hh_range_A: tuple[float, float] = (1.3, 1.8)
    max_force_eV_per_A: float = 25.0
    val_fraction: float = 0.1
    test_fraction: float = 0.1

    @classmethod
    def tiny(cls, **kw) -> DistillDataConfig:
        """A few structures of every kind but the 539-atom slab: seconds, for tests and the CPU pipeline check."""
        base = cls(
            water_md_temperatures_K=(300.0,),
            water_md_steps=6,
            water_md_stride=2,
            water_strained=2,
            co_curve_points=6,
            co_displaced=12,
            pt_clean=2,
            cantor_539=0,
            cantor_relax_steps=0,
            cantor_small=8,
            water_hot_md_temperatures_K=(900.0,),
            water_hot_md_steps=4,
            water_hot_md_stride=2,
            water_compressed=2,
            water_contact=2,
            val_fraction=0.2,
            test_fraction=0.2,
        )
        return replace(base, **kw)

    def settings(self) -> str:
        """The configuration as compact JSON (written into the files' info)."""
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)


def _rng(cfg: DistillDataConfig, group: str, index: int) -> np.random.Generator:
    return np.random.default_rng([cfg.seed, GROUPS.index(group), index])


def label(atoms, calc):
    """A copy of ``atoms`` with the teacher's energy, forces and stress (one evaluation of all three)."""
    from ase.calculators.calculator import all_changes

    calc.calculate(atoms, ["energy", "forces", "stress"], all_changes)
    return _with_results(atoms, calc.results)


def _with_results(atoms, results):
    from ase.calculators.singlepoint import SinglePointCalculator

    out = atoms.copy()
    out.arrays.pop("momenta", None)  # MD velocities are not labels (and metatrain reads them when present)
    out.wrap()
    out.calc = SinglePointCalculator(
        out,
        energy=float(results["energy"]),
        forces=np.asarray(results["forces"], dtype=np.float64).copy(),
        stress=np.asarray(results["stress"], dtype=np.float64).copy(),
    )
    return out


def _strain(atoms, rng: np.random.Generator, max_strain: float, in_plane_only: bool = False) -> None:
    """Deform the cell (and the atoms with it) by a random symmetric strain, components up to ``max_strain``."""
    eps = rng.uniform(-max_strain, max_strain, size=(3, 3))
    eps = (eps + eps.T) / 2
    if in_plane_only:  # slabs: leave the vacuum direction alone
        eps[2, :] = eps[:, 2] = 0.0
    atoms.set_cell(atoms.cell.array @ (np.eye(3) + eps), scale_atoms=True)


def _rattle(atoms, rng: np.random.Generator, sigma_range_A: tuple[float, float], indices=None) -> None:
    """Gaussian displacements of one standard deviation drawn from ``sigma_range_A``, on ``indices`` (all)."""
    sigma = rng.uniform(*sigma_range_A)
    idx = np.arange(len(atoms)) if indices is None else np.asarray(indices)
    atoms.positions[idx] += rng.normal(0.0, sigma, size=(len(idx), 3))


# ---------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------


def _water_md(cfg: DistillDataConfig, calc, group: str = "water_md") -> list[list]:
    """One labelled trajectory per temperature, from the shipped water box; each a list of frames. ``group``
    ``water_md`` or ``water_hot_md`` picks the temperatures, length and stride (and the random numbers)."""
    from ase import units
    from ase.md.langevin import Langevin

    from tcemu.mlip import systems
    from tcemu.mlip._common import maxwell_boltzmann_momenta

    if group == "water_md":
        temperatures, steps, stride = cfg.water_md_temperatures_K, cfg.water_md_steps, cfg.water_md_stride
    elif group == "water_hot_md":
        temperatures, steps, stride = (cfg.water_hot_md_temperatures_K, cfg.water_hot_md_steps,
                                       cfg.water_hot_md_stride)
    else:
        raise ValueError(f"{group!r} is not an MD group")
    trajectories = []
    for t, temperature in enumerate(temperatures):
        rng = _rng(cfg, group, t)
        atoms = systems.water_box()
        atoms.info = {}
        atoms.calc = calc
        maxwell_boltzmann_momenta(atoms, temperature, rng)
        dyn = Langevin(atoms, cfg.water_md_timestep_fs * units.fs, temperature_K=temperature,
                       friction=cfg.water_md_friction_per_fs / units.fs, rng=rng, fixcm=False)
        frames = []
        for step in range(stride, steps + 1, stride):
            dyn.run(stride)
            # the last force call of the step was at these positions and computed energy, forces and stress
            # (a periodic system); label anew only if it was not
            results = calc.results
            if calc.atoms is None or not np.array_equal(calc.atoms.positions, atoms.positions) or not all(
                k in results for k in ("energy", "forces", "stress")
            ):
                frame = label(atoms, calc)
            else:
                frame = _with_results(atoms, results)
            frame.info.update(group=group, temperature_K=temperature, md_step=step, trajectory=t)
            frames.append(frame)
        trajectories.append(frames)
    return trajectories


def _water_strained(cfg: DistillDataConfig, calc, md_frames: list) -> list:
    out = []
    for i in range(cfg.water_strained):
        rng = _rng(cfg, "water_strained", i)
        atoms = md_frames[int(rng.integers(len(md_frames)))].copy()
        atoms.calc = None
        atoms.info = {}
        _strain(atoms, rng, cfg.water_max_strain)
        _rattle(atoms, rng, cfg.water_rattle_range_A)
        frame = label(atoms, calc)
        frame.info["group"] = "water_strained"
        out.append(frame)
    return out


def _water_compressed(cfg: DistillDataConfig, calc, md_frames: list) -> list:
    """MD frames in a smaller cell, rigid molecules moved with it (length factor drawn from
    ``water_compressed_length_range``), rattled: every intermolecular distance shorter at once."""
    from .water_contacts import closest_contacts, compressed

    out = []
    for i in range(cfg.water_compressed):
        rng = _rng(cfg, "water_compressed", i)
        frame = md_frames[int(rng.integers(len(md_frames)))]
        atoms, factor = compressed(frame, rng, cfg.water_compressed_length_range)
        atoms.info = {}
        _rattle(atoms, rng, cfg.water_rattle_range_A)
        contacts = closest_contacts(atoms)
        labelled = label(atoms, calc)
        labelled.info.update(group="water_compressed", length_factor=factor,
                             **{f"closest_{k.replace('-', '')}_A": v for k, v in contacts.items()})
        out.append(labelled)
    return out


def _water_contact(cfg: DistillDataConfig, calc, md_frames: list) -> list:
    """MD frames with one molecule turned at random and pushed rigidly toward its nearest neighbour until one
    intermolecular O-O, O-H or H-H distance reaches a target drawn from its ``water_contact_*_range_A``."""
    from .water_contacts import closest_contacts, random_push

    ranges = {"O-O": cfg.water_contact_oo_range_A, "O-H": cfg.water_contact_oh_range_A,
              "H-H": cfg.water_contact_hh_range_A}
    out = []
    for i in range(cfg.water_contact):
        rng = _rng(cfg, "water_contact", i)
        frame = md_frames[int(rng.integers(len(md_frames)))]
        atoms, molecule, kind, target = random_push(frame, rng, ranges)
        atoms.info = {}
        contacts = closest_contacts(atoms, molecule)
        labelled = label(atoms, calc)
        labelled.info.update(group="water_contact", molecule=molecule, contact=kind, contact_A=target,
                             **{f"closest_{k.replace('-', '')}_A": v for k, v in contacts.items()})
        out.append(labelled)
    return out


def _co_curve(cfg: DistillDataConfig, calc) -> list:
    from tcemu.mlip import systems
    from tcemu.mlip.tasks.energy_curve import DEFAULT_HEIGHTS_A

    out = []
    for h in np.linspace(DEFAULT_HEIGHTS_A[0], DEFAULT_HEIGHTS_A[-1], cfg.co_curve_points):
        atoms = systems.co_on_pt111(h)
        atoms.info = {}
        frame = label(atoms, calc)
        frame.info.update(group="co_curve", height_A=h)
        out.append(frame)
    return out


def structure(cfg: DistillDataConfig, group: str, index: int):
    """Structure ``index`` of a group made from random numbers alone (``co_displaced``, ``pt_clean``,
    ``cantor_539``, ``cantor_small``), unlabelled: what :func:`generate` labels, rebuilt on its own."""
    from tcemu.mlip import systems

    rng = _rng(cfg, group, index)
    if group == "co_displaced":  # CO (atoms -2: O, -1: C) off the rigid top-site geometry, on a rattled slab
        h = rng.uniform(*cfg.co_height_range_A)
        atoms = systems.co_on_pt111(h)
        atoms.info = {}
        _strain(atoms, rng, cfg.max_strain * 2 / 3, in_plane_only=True)
        _rattle(atoms, rng, cfg.rattle_range_A, indices=range(len(atoms) - 2))
        c = atoms.positions[-1].copy()
        phi = rng.uniform(0, 2 * math.pi)
        offset = rng.uniform(0, cfg.co_max_offset_A) * np.array([math.cos(phi), math.sin(phi), 0.0])
        tilt = math.radians(rng.uniform(0, cfg.co_max_tilt_deg))
        psi = rng.uniform(0, 2 * math.pi)
        bond = rng.uniform(*cfg.co_bond_range_A)
        axis = np.array([math.sin(tilt) * math.cos(psi), math.sin(tilt) * math.sin(psi), math.cos(tilt)])
        atoms.positions[-1] = c + offset
        atoms.positions[-2] = c + offset + bond * axis
        atoms.info.update(group=group, height_A=h)
        return atoms
    if group == "pt_clean":  # the slab without CO, rattled and strained in-plane
        atoms = systems.co_on_pt111()[:-2]
        atoms.info = {}
        _strain(atoms, rng, cfg.max_strain * 2 / 3, in_plane_only=True)
        _rattle(atoms, rng, cfg.rattle_range_A)
        atoms.info["group"] = group
        return atoms
    if group in ("cantor_539", "cantor_small"):  # a random occupation (its own seed), rattled, strained in-plane
        size = (7, 7, 11) if group == "cantor_539" else cfg.cantor_small_size
        atoms = systems.cantor_slab(seed=int(rng.integers(1, 2**31)), size=size)
        atoms.info = {}
        _strain(atoms, rng, cfg.max_strain, in_plane_only=True)
        _rattle(atoms, rng, cfg.rattle_range_A)
        atoms.info["group"] = group
        return atoms
    raise ValueError(f"{group!r} is not a group made from random numbers alone")


def _labelled(cfg: DistillDataConfig, calc, group: str, count: int) -> list:
    out = []
    for i in range(count):
        atoms = structure(cfg, group, i)
        frame = label(atoms, calc)
        frame.info.update(atoms.info)
        out.append(frame)
    return out


def _cantor_relax(cfg: DistillDataConfig, calc) -> list:
    """Frames of the teacher's FIRE2 relaxation of the suite's slab (``cantor_slab()``, seed 0)."""
    from tcemu.mlip import systems
    from tcemu.mlip.fire2 import FIRE2

    if cfg.cantor_relax_steps <= 0:
        return []
    atoms = systems.cantor_slab()
    atoms.info = {}
    atoms.calc = calc
    opt = FIRE2(atoms, logfile=None)
    out = []
    for step in range(0, cfg.cantor_relax_steps, cfg.cantor_relax_stride):
        frame = label(atoms, calc)
        frame.info.update(group="cantor_relax", fire2_step=step)
        out.append(frame)
        opt.run(fmax=1e-3, steps=cfg.cantor_relax_stride)
    return out


# ---------------------------------------------------------------------------------------------
# Splits and files
# ---------------------------------------------------------------------------------------------
