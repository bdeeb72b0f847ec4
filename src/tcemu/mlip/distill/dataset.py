"""The distillation data set: the benchmark systems and their neighbourhoods, labelled by CHGNet.

One teacher for everything: CHGNet 0.3.0 (the weights inside the chgnet 0.4.2 wheel), in FP32, through
:func:`tcemu.mlip.models.chgnet`. It covers every element of the benchmark systems (H, C, O, Pt, Co, Cr, Fe, Mn,
Ni), so the student learns one energy surface with one set of per-element references. Mixing teachers (ANI-1x for
water, CHGNet for the rest) would give two unrelated energy zeros, which a single model cannot fit.

Groups (:class:`DistillDataConfig` sets their sizes):

- ``water_md``: the 192-atom water box, Langevin dynamics with the teacher at several temperatures (every step is
  labelled by the MD force call itself; every ``water_md_stride``-th is kept);
- ``water_strained``: MD frames rattled and strained (the cell deformed, up to ``max_strain``);
- ``co_curve``: CO on the Pt(111) top site at the energy-curve heights of the full suite (60 from 1.2 to 6.0 A);
- ``co_displaced``: CO at random heights, tilted, off the top site, its bond stretched, on a rattled and strained
  slab; ``pt_clean``: the rattled slab without CO;
- ``cantor_539``: the 539-atom Co-Cr-Fe-Mn-Ni slab of other seeds, rattled and strained; ``cantor_relax``: frames
  of the teacher's FIRE2 relaxation of the suite's slab (seed 0); ``cantor_small``: 45-atom slabs of the alloy.

Every structure gets energy (eV), forces (eV/A) and stress (eV/A^3, ASE's sign; every system is periodic).
Structures with a force component above ``max_force_eV_per_A`` are left out (the manifest counts them): the
rigid scan's repulsive wall below about 1.4 A has forces near 100 eV/A, which would dominate the squared error.
Splits: MD trajectories in time blocks (first frames train, then validation, then test: neighbouring frames of
one trajectory are nearly the same structure), all other groups by a seeded permutation.

Reproducible: every random choice comes from ``numpy.random.default_rng([seed, group, index])``, torch runs one
thread, the gzip headers carry no time stamp. The same versions on the same CPU type give the same bytes (the
manifest records the SHA-256 of each file); elsewhere the labels differ by float32 rounding of the teacher, and the
MD frames, whose positions feed back on the forces, drift apart after some steps.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import platform
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

__all__ = ["DistillDataConfig", "GROUPS", "SPLITS", "TEACHER", "generate", "label", "read_split", "structure"]

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
)
SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class DistillDataConfig:
    """What :func:`generate` builds. The defaults are the committed set (about 15 minutes of one idle CPU core).

    Counts are structures per group; ``water_md_temperatures_K`` has one trajectory per entry.
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


def _water_md(cfg: DistillDataConfig, calc) -> list[list]:
    """One labelled trajectory per temperature, from the shipped water box; each a list of frames."""
    from ase import units
    from ase.md.langevin import Langevin
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

    from tcemu.mlip import systems

    trajectories = []
    for t, temperature in enumerate(cfg.water_md_temperatures_K):
        rng = _rng(cfg, "water_md", t)
        atoms = systems.water_box()
        atoms.info = {}
        atoms.calc = calc
        MaxwellBoltzmannDistribution(atoms, temperature_K=temperature, rng=rng)
        dyn = Langevin(atoms, cfg.water_md_timestep_fs * units.fs, temperature_K=temperature,
                       friction=cfg.water_md_friction_per_fs / units.fs, rng=rng, fixcm=False)
        frames = []
        for step in range(cfg.water_md_stride, cfg.water_md_steps + 1, cfg.water_md_stride):
            dyn.run(cfg.water_md_stride)
            # the last force call of the step was at these positions and computed energy, forces and stress
            # (a periodic system); label anew only if it was not
            results = calc.results
            if calc.atoms is None or not np.array_equal(calc.atoms.positions, atoms.positions) or not all(
                k in results for k in ("energy", "forces", "stress")
            ):
                frame = label(atoms, calc)
            else:
                frame = _with_results(atoms, results)
            frame.info.update(group="water_md", temperature_K=temperature, md_step=step, trajectory=t)
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


def _split_counts(n: int, cfg: DistillDataConfig) -> tuple[int, int]:
    n_val = int(round(n * cfg.val_fraction))
    n_test = int(round(n * cfg.test_fraction))
    if n >= 3:
        n_val, n_test = max(n_val, 1), max(n_test, 1)
    return n_val, n_test


def _split_block(frames: list, cfg: DistillDataConfig) -> dict[str, list]:
    """A trajectory in time order: train, then validation, then test."""
    n_val, n_test = _split_counts(len(frames), cfg)
    n_train = len(frames) - n_val - n_test
    return {"train": frames[:n_train], "val": frames[n_train:n_train + n_val], "test": frames[n_train + n_val:]}


def _split_random(frames: list, cfg: DistillDataConfig, group: str) -> dict[str, list]:
    n_val, n_test = _split_counts(len(frames), cfg)
    order = _rng(cfg, group, 10**9).permutation(len(frames))
    pick = {"val": order[:n_val], "test": order[n_val:n_val + n_test], "train": order[n_val + n_test:]}
    return {k: [frames[i] for i in sorted(v)] for k, v in pick.items()}


def _write_extxyz_gz(frames: list, path: Path) -> str:
    """Write ``frames`` as gzip-compressed extxyz with no time stamp in the header; return the SHA-256."""
    import ase.io

    text = io.StringIO()
    ase.io.write(text, frames, format="extxyz")
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        gz.write(text.getvalue().encode())
    path.write_bytes(raw.getvalue())
    return hashlib.sha256(raw.getvalue()).hexdigest()


def read_split(folder: str | Path, split: str) -> list:
    """The labelled structures of one split (``train``, ``val``, ``test``) from a folder :func:`generate` wrote."""
    import ase.io

    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    path = Path(folder) / f"{split}.extxyz.gz"
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; make it with `python -m tcemu.mlip.distill data --out {folder}`")
    return ase.io.read(path, index=":", format="extxyz")


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    out = {"python": platform.python_version(), "machine": platform.machine()}
    for pkg in ("torch", "numpy", "ase", "chgnet", "pymatgen"):
        try:
            out[pkg] = version(pkg)
        except Exception:  # noqa: BLE001
            out[pkg] = "-"
    return out


#: The configuration fields each group depends on (its cache key); water_strained starts from water_md's frames.
_GROUP_FIELDS = {
    "water_md": ("water_md_temperatures_K", "water_md_steps", "water_md_stride", "water_md_timestep_fs",
                 "water_md_friction_per_fs"),
    "water_strained": ("water_md_temperatures_K", "water_md_steps", "water_md_stride", "water_md_timestep_fs",
                       "water_md_friction_per_fs", "val_fraction", "test_fraction", "water_strained",
                       "water_rattle_range_A", "water_max_strain"),
    "co_curve": ("co_curve_points",),
    "co_displaced": ("co_displaced", "co_height_range_A", "co_max_tilt_deg", "co_max_offset_A", "co_bond_range_A",
                     "rattle_range_A", "max_strain"),
    "pt_clean": ("pt_clean", "rattle_range_A", "max_strain"),
    "cantor_539": ("cantor_539", "rattle_range_A", "max_strain"),
    "cantor_relax": ("cantor_relax_steps", "cantor_relax_stride"),
    "cantor_small": ("cantor_small", "cantor_small_size", "rattle_range_A", "max_strain"),
}
#: Generation order: cheap groups first, water_strained after water_md.
_ORDER = ("co_curve", "co_displaced", "pt_clean", "cantor_small", "water_md", "water_strained", "cantor_539",
          "cantor_relax")


def _as_written(frames: list) -> list:
    """``frames`` after a round trip through extxyz text: what a reader of the files gets, cached or not."""
    import ase.io

    if not frames:
        return []
    text = io.StringIO()
    ase.io.write(text, frames, format="extxyz")
    text.seek(0)
    return ase.io.read(text, index=":", format="extxyz")


def _group(group: str, cfg: DistillDataConfig, build, cache: Path | None, log) -> tuple[list, float]:
    """The frames of one group, from ``cache`` when an earlier run made them with the same settings and versions."""
    import ase.io

    fields = {k: getattr(cfg, k) for k in _GROUP_FIELDS[group]}
    key = hashlib.sha256(json.dumps([group, cfg.seed, fields, _versions()], sort_keys=True).encode()).hexdigest()
    path = cache / f"{group}-{key[:16]}.extxyz" if cache is not None else None
    if path is not None and path.is_file():
        meta = json.loads(path.with_suffix(".json").read_text())
        frames = ase.io.read(path, index=":", format="extxyz") if meta["n"] else []
        log(f"[distill data] {group}: {len(frames)} structures from the cache ({meta['wall_s']:.0f} s when made)")
        return frames, meta["wall_s"]
    t = time.perf_counter()
    frames = _as_written(build())
    wall = time.perf_counter() - t
    log(f"[distill data] {group}: {len(frames)} structures in {wall:.0f} s")
    if path is not None:
        cache.mkdir(parents=True, exist_ok=True)
        if frames:
            ase.io.write(path, frames, format="extxyz")
        else:
            path.write_text("")
        path.with_suffix(".json").write_text(json.dumps({"n": len(frames), "wall_s": wall}))
    return frames, wall


def generate(cfg: DistillDataConfig, out: str | Path, cache: bool = True, log=print) -> dict:
    """Build, label and split the data set of ``cfg`` into ``out/{train,val,test}.extxyz.gz`` and ``manifest.json``.

    Every structure's info carries ``teacher``, ``data_seed``, ``group`` and ``split``; the first structure of each
    file also carries ``settings`` (the configuration as JSON). With ``cache``, each finished group is kept in
    ``out/cache/`` and reused by a later call with the same settings (a long run that stops keeps its work; the files
    come out the same). Returns the manifest.
    """
    import torch

    from tcemu.mlip import models

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same sums in the same order on every run
    t0 = time.perf_counter()
    frames: dict[str, list] = {}
    wall: dict[str, float] = {}
    try:
        calc = models.chgnet().calculator("fp32")
        builders = {
            "co_curve": lambda: _co_curve(cfg, calc),
            "co_displaced": lambda: _labelled(cfg, calc, "co_displaced", cfg.co_displaced),
            "pt_clean": lambda: _labelled(cfg, calc, "pt_clean", cfg.pt_clean),
            "cantor_small": lambda: _labelled(cfg, calc, "cantor_small", cfg.cantor_small),
            "water_md": lambda: [f for traj in _water_md(cfg, calc) for f in traj],
            "water_strained": lambda: _water_strained(cfg, calc, _md_split(frames["water_md"], cfg)["train"]),
            "cantor_539": lambda: _labelled(cfg, calc, "cantor_539", cfg.cantor_539),
            "cantor_relax": lambda: _cantor_relax(cfg, calc),
        }
        for group in _ORDER:
            frames[group], wall[group] = _group(group, cfg, builders[group], out / "cache" if cache else None, log)
    finally:
        torch.set_num_threads(threads)

    # the wall of the rigid scan below 1.4 A (forces near 100 eV/A) would dominate a squared-error loss
    dropped = {}
    for group in GROUPS:
        for i, atoms in enumerate(frames[group]):
            atoms.info["index"] = i  # its place in the group (``structure(cfg, group, index)`` rebuilds it)
        keep = [a for a in frames[group] if np.abs(a.calc.results["forces"]).max() <= cfg.max_force_eV_per_A]
        dropped[group] = len(frames[group]) - len(keep)
        frames[group] = keep
    splits: dict[str, list] = {s: [] for s in SPLITS}
    counts: dict[str, dict[str, int]] = {}
    for group in GROUPS:
        if group == "water_md":
            parts = _md_split(frames[group], cfg)
        elif group in ("co_curve", "cantor_relax"):  # the suite's own scan, and one relaxation path: training
            parts = {"train": frames[group], "val": [], "test": []}
        else:
            parts = _split_random(frames[group], cfg, group)
        counts[group] = {s: len(parts[s]) for s in SPLITS}
        for s in SPLITS:
            splits[s].extend(parts[s])
    manifest = {
        "teacher": TEACHER,
        "settings": asdict(cfg),
        "versions": _versions(),
        "counts": counts,
        "dropped_max_force": dropped,
        "n_structures": {s: len(splits[s]) for s in SPLITS},
        "n_atoms": {s: int(sum(len(a) for a in splits[s])) for s in SPLITS},
        "label_wall_s": {k: round(v, 1) for k, v in wall.items()},
        "wall_s": round(time.perf_counter() - t0, 1),
        "torch_threads": 1,
        "files": {},
    }
    for s in SPLITS:
        for i, atoms in enumerate(splits[s]):
            atoms.info.update(teacher=TEACHER, data_seed=cfg.seed, split=s)
            if i == 0:
                atoms.info["settings"] = cfg.settings()
        manifest["files"][f"{s}.extxyz.gz"] = _write_extxyz_gz(splits[s], out / f"{s}.extxyz.gz")
    # the manifest's wall times change from run to run; the data files' hashes do not
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def _md_split(frames: list, cfg: DistillDataConfig) -> dict[str, list]:
    """Each trajectory of ``water_md`` split in time blocks, the parts of all trajectories joined."""
    parts: dict[str, list] = {s: [] for s in SPLITS}
    for t in sorted({int(f.info["trajectory"]) for f in frames}):
        traj = [f for f in frames if int(f.info["trajectory"]) == t]
        for s, part in _split_block(traj, cfg).items():
            parts[s].extend(part)
    return parts
