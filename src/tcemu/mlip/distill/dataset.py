"""The distillation data set: the benchmark systems and their neighbourhoods, labelled by CHGNet.

One teacher for everything: CHGNet 0.3.0 (the weights inside the chgnet 0.4.2 wheel), in FP32, through
:func:`tcemu.mlip.models.chgnet`. It covers every element of the benchmark systems (H, C, O, Pt, Co, Cr, Fe, Mn,
Ni), so the student learns one energy surface with one set of per-element references. Mixing teachers (ANI-1x for
water, CHGNet for the rest) would give two unrelated energy zeros, which a single model cannot fit.

Groups (:class:`DistillDataConfig` sets their sizes):

- ``water_md``: the 192-atom water box, Langevin dynamics with the teacher at several temperatures (every step is
  labelled by the MD force call itself; every ``water_md_stride``-th is kept);
- ``water_strained``: MD frames rattled and strained (the cell deformed, up to ``max_strain``);
- short contacts of water, where a model learns its repulsion (:mod:`tcemu.mlip.distill.water_contacts`):
  ``water_hot_md``, Langevin dynamics of the box at higher temperatures (700 and 900 K); ``water_compressed``,
  MD frames in a cell shrunk by a length factor of 0.90-0.97, rigid molecules moved with it, rattled;
  ``water_contact``, MD frames with one molecule turned at random and pushed rigidly toward its nearest neighbour
  until an intermolecular O-O, O-H or H-H distance reaches a target (1.8-2.4, 1.0-1.6, 1.3-1.8 A);
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
import platform
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .structures import (  # the groups, the configuration and the builders of each structure
    GROUPS,
    TEACHER,
    DistillDataConfig,
    _cantor_relax,
    _co_curve,
    _labelled,
    _rng,
    _water_compressed,
    _water_contact,
    _water_md,
    _water_strained,
    label,
    structure,
)

__all__ = ["DistillDataConfig", "GROUPS", "SPLITS", "TEACHER", "generate", "label", "read_split", "structure"]

SPLITS = ("train", "val", "test")


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


#: The fields that fix water_md's training frames, which water_strained, water_compressed and water_contact start from.
_MD_START_FIELDS = ("water_md_temperatures_K", "water_md_steps", "water_md_stride", "water_md_timestep_fs",
                    "water_md_friction_per_fs", "val_fraction", "test_fraction")
#: The configuration fields each group depends on (its cache key).
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
    "water_hot_md": ("water_hot_md_temperatures_K", "water_hot_md_steps", "water_hot_md_stride",
                     "water_md_timestep_fs", "water_md_friction_per_fs"),
    "water_compressed": _MD_START_FIELDS + ("water_compressed", "water_compressed_length_range",
                                            "water_rattle_range_A"),
    "water_contact": _MD_START_FIELDS + ("water_contact", "water_contact_oo_range_A", "water_contact_oh_range_A",
                                         "water_contact_hh_range_A"),
}
#: Generation order: cheap groups first, the groups built on water_md's frames after it.
_ORDER = ("co_curve", "co_displaced", "pt_clean", "cantor_small", "water_md", "water_strained", "water_hot_md",
          "water_compressed", "water_contact", "cantor_539", "cantor_relax")
#: MD trajectories, split in time blocks.
_MD_GROUPS = ("water_md", "water_hot_md")


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
            "water_hot_md": lambda: [f for traj in _water_md(cfg, calc, "water_hot_md") for f in traj],
            "water_compressed": lambda: _water_compressed(cfg, calc, _md_split(frames["water_md"], cfg)["train"]),
            "water_contact": lambda: _water_contact(cfg, calc, _md_split(frames["water_md"], cfg)["train"]),
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
        if group in _MD_GROUPS:
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
