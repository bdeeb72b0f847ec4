"""The structure builders: sizes, compositions, geometry, determinism."""

import numpy as np
import pytest

from tcemu.mlip import systems


def test_water_box_is_liquid_water_at_1_g_cm3(water):
    assert len(water) == 192
    assert water.get_chemical_formula() == "H128O64"
    assert water.pbc.all()
    density = water.get_masses().sum() * 1.66053906660 / water.get_volume()  # u/A^3 -> g/cm^3
    assert density == pytest.approx(1.0, abs=0.01)
    d = water.get_all_distances(mic=True)
    np.fill_diagonal(d, np.inf)
    o = water.symbols == "O"
    # no clashes between molecules; intact O-H bonds
    assert d[np.ix_(o, o)].min() > 2.3
    assert d[np.ix_(o, ~o)].min(axis=0).max() < 1.15
    assert water.info["name"] == "water_192"


def test_water_box_is_not_the_grid(water):
    grid = systems.water_box_unequilibrated()
    o = water.symbols == "O"
    # oxygen positions moved away from the 4x4x4 grid during equilibration
    shift = water.get_distances(0, range(0, 192, 3), mic=True)
    grid_shift = grid.get_distances(0, range(0, 192, 3), mic=True)
    assert not np.allclose(np.sort(shift), np.sort(grid_shift), atol=0.2)
    assert o.sum() == 64


def test_supercell_has_17280_atoms():
    sc = systems.water_supercell()
    assert len(sc) == 17_280
    assert np.allclose(sc.cell.lengths(), [3 * 12.417, 5 * 12.417, 6 * 12.417], atol=1e-6)


@pytest.mark.parametrize("name, repeat", [("water_1536", (2, 2, 2)), ("water_5184", (3, 3, 3)),
                                          ("water_17280", (3, 5, 6)), ("water_3072", (2, 2, 4)),
                                          ("water_1x2x3", (1, 2, 3))])
def test_named_supercells_of_the_water_box(name, repeat):
    box = systems.water_box()
    sc = systems.build(name)
    assert len(sc) == 192 * np.prod(repeat)
    assert np.allclose(sc.cell.lengths(), np.array(repeat) * 12.417, atol=1e-6)
    assert sc.info["name"] == f"water_{len(sc)}"
    # the first copy is the box itself, and every atom keeps its neighbourhood: the same sorted distances to
    # its neighbours within 6 A (minimum image) as in the box
    assert np.allclose(sc.positions[:192], box.positions)
    for i in (0, 1, 191):
        near = np.sort(box.get_distances(i, range(192), mic=True))
        near_sc = np.sort(sc.get_distances(i, range(len(sc)), mic=True))
        assert np.allclose(near_sc[near_sc < 6.0], near[near < 6.0])  # 6 A: under half the box's edge


def test_cubic_repeat_and_bad_supercells():
    assert [systems.cubic_repeat(n) for n in (1, 8, 27, 90, 7)] == [(1, 1, 1), (2, 2, 2), (3, 3, 3), (3, 5, 6),
                                                                    (1, 1, 7)]
    for bad in ("water_100", "water_0", "water_2x2", "water_0x1x1"):
        with pytest.raises(ValueError, match="unknown system"):
            systems.build(bad)
    with pytest.raises(ValueError, match="repeat must be three positive integers"):
        systems.water_supercell((0, 1, 1))


def test_co_on_pt111_height_and_order():
    for h in (1.2, 3.0, 6.0):
        a = systems.co_on_pt111(h)
        c = np.flatnonzero(a.symbols == "C")[0]
        o = np.flatnonzero(a.symbols == "O")[0]
        top = a.positions[a.symbols == "Pt", 2].max()
        assert a.positions[c, 2] - top == pytest.approx(h, abs=1e-9)
        assert a.positions[o, 2] > a.positions[c, 2]  # O above C
        # C sits above a surface Pt (top site)
        surf = a.positions[(a.symbols == "Pt") & (a.positions[:, 2] > top - 0.1)]
        assert np.min(np.linalg.norm(surf[:, :2] - a.positions[c, :2], axis=1)) < 1e-9


def test_cantor_slab_composition_and_seed():
    a = systems.cantor_slab(seed=0)
    assert len(a) == 539
    counts = {el: int((a.symbols == el).sum()) for el in ("Co", "Cr", "Fe", "Mn", "Ni")}
    assert counts == {"Co": 108, "Cr": 108, "Fe": 108, "Mn": 107, "Ni": 108}
    b = systems.cantor_slab(seed=0)
    c = systems.cantor_slab(seed=1)
    assert list(a.symbols) == list(b.symbols)
    assert list(a.symbols) != list(c.symbols)
    small = systems.cantor_slab(size=(3, 3, 4))
    assert len(small) == 36 and len(set(small.symbols)) == 5


def test_water_cluster_is_whole_molecules(small_water):
    assert small_water.get_chemical_formula() == "H8O4"
    assert not small_water.pbc.any()
    d = small_water.get_all_distances()
    for i in range(0, len(small_water), 3):
        assert d[i, i + 1] < 1.15 and d[i, i + 2] < 1.15


def test_build_by_name():
    assert len(systems.build("pt111_co")) == 38
    assert len(systems.build("water_cluster_9")) == 9
    with pytest.raises(ValueError, match="unknown system"):
        systems.build("nope")
