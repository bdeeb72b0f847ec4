"""Check 5, second-order properties: the finite differences against ASE's own results with EMT (cheap, exact
references), the criteria on made-up results, the report's section and table, and the task on the distilled PET."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tcemu.mlip.criteria import conclusion_changes, second_order_threshold, verdicts, workflow_status
from tcemu.mlip.tasks.second_order import (
    FLOOR,
    SecondOrderConfig,
    SecondOrderResult,
    _elastic_constants,
    _phonon_modes,
    _to_cm1,
    _vibration_modes,
    second_order,
)

#: Agreement of two double-precision routes to the same frequencies (different summation orders only).
FREQ_RTOL = 1e-8


def test_phonon_frequencies_are_ases(tmp_path):
    """The dynamical matrices diagonalised here give ASE's own band structure (EMT Pt, 2 x 2 x 2)."""
    from ase import units
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.phonons import Phonons

    cfg = SecondOrderConfig.quick(band_points=8)
    prim = bulk("Pt", "fcc", a=3.92)
    path = prim.cell.bandpath(cfg.band_path, npoints=cfg.band_points)
    modes, raw = _phonon_modes(prim, path, cfg, EMT())
    ph = Phonons(prim, EMT(), supercell=(2, 2, 2), delta=cfg.displacement_A, name=str(tmp_path / "ph"))
    ph.run()
    ph.read(acoustic=True)
    ase_cm1 = ph.band_structure(path.kpts, verbose=False) / units.invcm
    ours = np.array([w for w, _ in modes])
    np.testing.assert_allclose(ours, ase_cm1, rtol=FREQ_RTOL, atol=1e-6)
    assert ours.max() > 100 and len(raw) == 3


def test_vibration_frequencies_are_ases(tmp_path):
    from ase.build import molecule
    from ase.calculators.emt import EMT
    from ase.vibrations import Vibrations

    atoms = molecule("H2O")
    w, u = _vibration_modes(atoms, SecondOrderConfig.quick(), EMT())
    a = atoms.copy()
    a.calc = EMT()
    vib = Vibrations(a, delta=0.01, nfree=2, name=str(tmp_path / "v"))
    vib.run()
    f = vib.get_frequencies()
    ase_cm1 = np.sort(np.where(np.abs(f.imag) > 0, -np.abs(f.imag), f.real))
    np.testing.assert_allclose(np.sort(w), ase_cm1, rtol=FREQ_RTOL, atol=1e-4)
    np.testing.assert_allclose(np.abs(u.T @ u), np.eye(9), atol=1e-12)  # orthonormal modes for the matching


def test_elastic_constants_match_energy_curvature():
    """C11 and C44 from two stress evaluations agree with the curvature of EMT's energy (a route without stress)."""
    from ase import units
    from ase.build import bulk
    from ase.calculators.emt import EMT

    cell = bulk("Pt", "fcc", a=3.92, cubic=True)
    cfg = SecondOrderConfig.quick(strain=0.002)
    c = dict(zip(("C11", "C12", "C44"), _elastic_constants(cell, cfg, EMT())))
    h = 0.002

    def energy(eps):
        a = cell.copy()
        a.set_cell(cell.cell.array @ (np.eye(3) + eps), scale_atoms=True)
        a.calc = EMT()
        return a.get_potential_energy()

    v = cell.get_volume()
    for name, (i, j), factor in (("C11", (0, 0), 1.0), ("C44", (1, 2), 0.5)):
        eps = np.zeros((3, 3))
        eps[i, j] = eps[j, i] = h * factor  # the shear's engineering strain is h
        curvature = (energy(eps) - 2 * energy(0 * eps) + energy(-eps)) / h ** 2 / v / units.GPa
        assert c[name] == pytest.approx(curvature, rel=0.02), name


def test_frequency_units():
    from ase import units

    # hbar omega = 0.1 eV is 806.55 cm^-1: lambda = (0.1 / s)^2 in eV/(A^2 amu), s = hbar / sqrt(e amu) * 1e10
    s = units._hbar * 1e10 / math.sqrt(units._e * units._amu)
    assert _to_cm1(np.array([(0.1 / s) ** 2, -((0.1 / s) ** 2)])) == pytest.approx([806.554, -806.554], rel=1e-5)


def _result(values: dict, labels=None, ordered=True, unit="cm^-1", check="vibrations"):
    labels = labels or tuple(f"mode {i}" for i in range(len(values["fp64"])))
    return SecondOrderResult(check, "pot", "water_3", 3, unit, tuple(labels),
                             {m: tuple(map(float, v)) for m, v in values.items()}, ordered,
                             coverage={m: 1.0 for m in values if m not in ("fp64", FLOOR)})


def test_conclusions_changed_only_where_fp64_resolves_them():
    base = [-50.0, 0.0005, 1000.0, 1000.5, 3000.0]
    r = _result({"fp64": base, "fp32": [-50.0, 0.0008, 1000.0, 1000.5, 3000.0],
                 FLOOR: [-50.0, 0.0007, 1000.0, 1000.5, 3000.0],
                 # the imaginary mode goes (its sign, and its order below the ~0 mode); the ~0 mode's sign is noise
                 "flip": [50.0, -0.0005, 1000.0, 1000.5, 3000.0],
                 "swap": [-50.0, 0.0005, 1000.4, 1000.1, 3000.0],  # 1000 and 1000.5 are resolved: thr 0.0009
                 "close": [-50.0, 0.0011, 1000.0, 1000.5, 3000.0]})
    thr = second_order_threshold(r)
    assert thr == pytest.approx(3 * 0.0003)
    assert conclusion_changes(r, "flip")[0] == 2
    assert conclusion_changes(r, "swap")[0] == 1
    assert conclusion_changes(r, "close")[0] == 0
    vs = {(v.method, v.check.split(":")[1].split("[")[0]): v for v in verdicts(_suite(r))}
    assert vs["close", "max_err"].passed and vs["close", "conclusions_changed"].passed
    assert not vs["flip", "conclusions_changed"].passed and not vs["swap", "max_err"].passed
    assert r.imaginary("flip", thr) == 0 and r.imaginary("fp64", thr) == 1


def test_elastic_signs_are_judged_but_not_their_order():
    r = _result({"fp64": [300, 200, 60, 100, 700, 140], "fp32": [300, 200, 60, 100, 700, 140.0001],
                 FLOOR: [300, 200, 60, 100, 700, 140.0001], "m": [300, 200, 250, 100, 700, -50]},
                labels=("C11", "C12", "C44", "C11-C12", "C11+2C12", "C12-C44"), ordered=False, unit="GPa",
                check="elastic")
    assert conclusion_changes(r, "m") == (1, 6)  # the Cauchy pressure's sign; C44 > C12 is no order criterion


def test_no_resolved_conclusion_is_not_discriminating():
    r = _result({"fp64": [0.001, 0.002], "fp32": [0.01, 0.02], FLOOR: [0.02, 0.01], "tf32": [0.05, -0.05]})
    v = next(v for v in verdicts(_suite(r)) if v.method == "tf32" and "conclusions" in v.check)
    assert not v.discriminating and "no sign or order is resolved" in v.reason


def _suite(*second_order):
    from tcemu.mlip.results import SuiteConfig, SuiteResult

    res = SuiteResult(SuiteConfig.quick(checks=("second_order",)))
    res.second_order.extend(second_order)
    res.verdicts = verdicts(res)
    return res


def test_workflow_table_and_report_section(tmp_path):
    from tcemu.mlip.plots import save_check_figures
    from tcemu.mlip.report_text import workflow_table, write_report, write_verdicts

    good = [1000.0, 2000.0, 3000.0]
    r = _result({"fp64": good, "fp32": [1000.0001, 2000.0, 3000.0], FLOOR: [1000.0, 2000.0001, 3000.0],
                 "tf32": [1003.0, 1995.0, 3010.0], "tf32x3": [1000.0002, 2000.0, 3000.0]})
    res = _suite(r)
    assert workflow_status(res.verdicts, "tf32", ("phonons", "vibrations")) == "not safe (1 failed)"
    assert workflow_status(res.verdicts, "tf32x3", ("phonons", "vibrations")) == "safe"
    assert workflow_status(res.verdicts, "tf32x3", ("nve",)) == "not run"
    table = workflow_table(res)
    assert "| tf32 | not run | not run | not run | not safe (1 failed) | not run |" in table
    assert "| tf32x3 | not run | not run | not run | **safe** | not run |" in table
    save_check_figures(r, tmp_path, f"vibrations_{r.potential}_{r.system}")
    write_verdicts(res, tmp_path)
    text = write_report(res, tmp_path, env={"python": "-"}).read_text()
    assert "## 5. Second-order properties" in text and "Which method for which workflow" in text
    assert "| tf32 | 10 cm^-1 | fail | 0 of 6 | pass |" in text
    assert "vibrations:max_err[pot/water_3]" in (tmp_path / "verdicts.csv").read_text()


def test_branches_per_q_point_on_a_path_through_gamma_twice():
    labels = ("G b0", "G b1", "X b0", "X b1", "G b0", "G b1")
    r = _result({"fp64": range(6), "fp32": range(6), FLOOR: range(6)}, labels=labels, check="phonons")
    assert r.n_branches == 2 and _result({"fp64": [1.0], "fp32": [1.0], FLOOR: [1.0]}).n_branches == 1


def test_bad_size_and_property():
    with pytest.raises(ValueError, match="unknown size"):
        SecondOrderConfig.for_size("huge")
    with pytest.raises(ValueError, match="unknown properties"):
        second_order(None, (), SecondOrderConfig.quick(properties=("phonon",)))


def _distilled():
    from tcemu.mlip import distilled, models

    if not distilled._data_file(distilled.CHECKPOINT_FILE).is_file():
        pytest.skip("no shipped pet_distilled.ckpt")
    return models.get_potential("pet-distilled")


def _tf32_fails_tf32x3_passes(r):
    thr = second_order_threshold(r)
    assert r.max_error("tf32") > 100 * thr, r.check
    assert r.max_error("tf32x3") <= thr, r.check
    assert r.coverage["tf32"] > 0.99 and r.coverage["tf32x3"] > 0.99


def test_distilled_pet_elastic_tf32_fails_and_tf32x3_passes():
    """The task on the trained PET: TF32 far outside FP32's error and floor, TF32x3 inside (numbers: docs/mlip.md)."""
    (ela,) = second_order(_distilled(), ("tf32", "tf32x3"), SecondOrderConfig.quick(properties=("elastic",)),
                          show_progress=False)
    _tf32_fails_tf32x3_passes(ela)
    assert 3.9 < ela.info["a_A"] < 4.0
    assert ela.values["fp64"][0] > ela.values["fp64"][1] > ela.values["fp64"][2] > 0  # C11 > C12 > C44 > 0


@pytest.mark.slow(reason="about 45 s on 2 busy cores: 7 evaluations of an 8-atom cell per method")
def test_distilled_pet_phonons_tf32_fails_and_tf32x3_passes():
    (phon,) = second_order(_distilled(), ("tf32", "tf32x3"),
                           SecondOrderConfig.quick(band_points=4, properties=("phonons",)), show_progress=False)
    _tf32_fails_tf32x3_passes(phon)
    assert max(phon.values["fp64"]) > 100 and phon.imaginary("fp64", second_order_threshold(phon)) == 0


def test_vibrations_of_a_cluster_keep_its_internal_modes():
    """A 2-molecule cluster (the full size's kind of system): 3N - 6 = 12 modes kept, matched per method."""
    from tcemu.mlip import models
    from tcemu.mlip.tasks.second_order import vibrations

    r = vibrations(models.get_potential("pet-tiny"), ("tf32x3",),
                   SecondOrderConfig.quick(water_molecules=2, relax_steps=3), show_progress=False)
    assert r.system == "water_cluster_6" and len(r.labels) == 12
    assert set(r.values) == {"fp64", "fp32", FLOOR, "tf32x3"} and r.coverage["tf32x3"] > 0.99
    assert r.max_error("fp32") < 1e-3 * max(abs(v) for v in r.values["fp64"])
