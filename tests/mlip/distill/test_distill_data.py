"""The distillation data: labelled by the teacher with its metadata, split as documented, the same bytes on every
run (cached or not); and the committed set is what the script makes from its recorded settings."""

import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

from tcemu.mlip.distill.dataset import (
    GROUPS,
    SPLITS,
    TEACHER,
    DistillDataConfig,
    generate,
    label,
    read_split,
    structure,
)

SMALL = DistillDataConfig.tiny(water_md_steps=2, water_strained=1, co_curve_points=3, co_displaced=4, pt_clean=1,
                               cantor_small=3)
COMMITTED = Path(__file__).resolve().parents[3] / "benchmarks" / "data" / "pet_distilled"


@pytest.fixture(scope="module")
def teacher():
    from tcemu.mlip import models

    return models.chgnet().calculator("fp32")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("distill_data")
    return out, generate(SMALL, out, cache=True, log=lambda s: None)


def test_same_bytes_from_the_cache_and_without_it(small, tmp_path):
    out, manifest = small
    cached = generate(SMALL, out, cache=True, log=lambda s: None)
    fresh = generate(SMALL, tmp_path, cache=False, log=lambda s: None)
    assert cached["files"] == manifest["files"] == fresh["files"]
    for name, sha in manifest["files"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == sha


def test_labels_metadata_and_splits(small, teacher):
    out, manifest = small
    frames = {s: read_split(out, s) for s in SPLITS}
    assert json.loads(frames["train"][0].info["settings"]) == json.loads(SMALL.settings())
    assert {s: len(f) for s, f in frames.items()} == manifest["n_structures"]
    for s, fr in frames.items():
        for a in fr:
            assert a.info["teacher"] == TEACHER and a.info["split"] == s and a.info["data_seed"] == 0
            assert a.info["group"] in GROUPS and a.pbc.all()
            r = a.calc.results
            assert r["forces"].shape == (len(a), 3) and r["stress"].shape == (6,)
            assert np.abs(r["forces"]).max() <= SMALL.max_force_eV_per_A
    assert sum(manifest["counts"]["co_displaced"].values()) == SMALL.co_displaced
    # the scan's 1.2 A point (forces near 100 eV/A) is left out; the others are training data
    assert manifest["dropped_max_force"]["co_curve"] == 1
    assert manifest["counts"]["co_curve"] == {"train": 2, "val": 0, "test": 0}
    # the short-contact groups: hot MD in time blocks, compressed cells, one pushed molecule each
    assert sum(manifest["counts"]["water_hot_md"].values()) == 2
    compressed = [a for a in frames["train"] if a.info["group"] == "water_compressed"]
    contacts = [a for s in SPLITS for a in frames[s] if a.info["group"] == "water_contact"]
    assert len(compressed) == SMALL.water_compressed and len(contacts) == SMALL.water_contact
    for a in compressed:
        lo, hi = SMALL.water_compressed_length_range
        assert lo <= a.info["length_factor"] <= hi
        np.testing.assert_allclose(a.cell.lengths(), 12.417 * a.info["length_factor"], rtol=1e-6)
    ranges = {"OO": SMALL.water_contact_oo_range_A, "OH": SMALL.water_contact_oh_range_A,
              "HH": SMALL.water_contact_hh_range_A}
    for a in contacts:
        kind = a.info["contact"].replace("-", "")
        assert ranges[kind][0] <= a.info[f"closest_{kind}_A"] <= ranges[kind][1]
        assert all(a.info[f"closest_{k}_A"] >= lo - 1e-6 for k, (lo, _) in ranges.items())
    # the label is the teacher's evaluation of the structure as written
    a = next(f for f in frames["train"] if f.info["group"] == "cantor_small")
    fresh = label(a.copy(), teacher)
    assert fresh.get_potential_energy() == pytest.approx(a.get_potential_energy(), abs=1e-4)
    np.testing.assert_allclose(fresh.get_forces(), a.get_forces(), atol=1e-4)


def test_teacher_repels_a_pushed_molecule(teacher):
    """The labels of water_contact hold a wall: CHGNet's energy rises as one molecule is pushed into its neighbour,
    and the pushed molecule's net force points back (O-O 2.4, 2.2, 2.0 A; the box's shortest O-O is 2.51 A)."""
    from tcemu.mlip import systems
    from tcemu.mlip.distill.water_contacts import _mic, molecule_indices, push_molecule

    box = systems.water_box()
    box.info = {}
    own = molecule_indices(box)[0]
    energies = []
    for oo in (2.4, 2.2, 2.0):
        atoms, kind = push_molecule(box, 0, {"O-O": oo})
        assert kind == "O-O"
        frame = label(atoms, teacher)
        energies.append(frame.get_potential_energy())
        shift = _mic(atoms.positions[own[0]] - box.positions[own[0]], box.cell.array)  # the push, toward the neighbour
        assert frame.get_forces()[own].sum(axis=0) @ shift < 0
    assert energies[0] < energies[1] < energies[2]
    assert energies[2] - energies[0] > 1.0  # eV: a wall, not noise


def test_structures_follow_the_seed():
    a, b = structure(SMALL, "co_displaced", 0), structure(SMALL, "co_displaced", 0)
    c, d = structure(SMALL, "co_displaced", 1), structure(replace(SMALL, seed=1), "co_displaced", 0)
    assert np.array_equal(a.positions, b.positions) and np.array_equal(a.cell, b.cell)
    assert not np.allclose(a.positions, c.positions) and not np.allclose(a.positions, d.positions)
    with pytest.raises(ValueError, match="not a group made from random numbers"):
        structure(SMALL, "water_md", 0)


@pytest.mark.skipif(not (COMMITTED / "manifest.json").is_file(), reason="no committed data set in this tree")
def test_committed_set_is_what_the_script_makes(teacher):
    manifest = json.loads((COMMITTED / "manifest.json").read_text())
    for name, sha in manifest["files"].items():
        assert hashlib.sha256((COMMITTED / name).read_bytes()).hexdigest() == sha, name
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in manifest["settings"].items()}
    cfg = DistillDataConfig(**settings)
    assert asdict(cfg) == asdict(DistillDataConfig())  # the committed set is the default configuration
    checked = 0
    for a in read_split(COMMITTED, "test"):
        if a.info["group"] not in ("co_displaced", "pt_clean", "cantor_small") or checked >= 3:
            continue
        rebuilt = structure(cfg, a.info["group"], int(a.info["index"]))
        rebuilt.wrap()
        np.testing.assert_allclose(rebuilt.positions, a.positions, atol=1e-7)  # extxyz keeps 8 decimals
        np.testing.assert_allclose(rebuilt.cell.array, a.cell.array, atol=1e-7)
        e = label(rebuilt, teacher).get_potential_energy()
        assert e == pytest.approx(a.get_potential_energy(), abs=1e-4)
        checked += 1
    assert checked == 3
