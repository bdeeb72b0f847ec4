"""pet-distilled: the shipped checkpoint loads offline, reproduces its recorded energies, runs the suite; its random
twin has the same architecture and other weights; the report labels trained and random weights."""

import math

import numpy as np
import pytest
import torch

from tcemu.mlip import distilled, labels, models, systems
from tcemu.testing import gamma, normwise_bound

if not (distilled._data_file(distilled.CHECKPOINT_FILE)).is_file():
    pytest.skip("no src/tcemu/mlip/data/pet_distilled.ckpt in this tree: train one with "
                "`python -m tcemu.mlip.distill train` (docs/mlip.md)", allow_module_level=True)

#: PET's depth in FP32 GEMMs from the input to an atom's energy (2 GNN layers of ~5 products each, the heads).
PET_GEMM_DEPTH = 12
#: The widest reduction in those GEMMs (the node MLP, 4 d_node).
PET_MAX_K = 1024


def fp32_energy_rtol(n_atoms: int) -> float:
    """FP32 vs FP64 of the same weights, relative to the total energy: the sum over the atoms (same-sign terms,
    ``gamma(n - 1)``, rigorous) plus each atom's energy through PET_GEMM_DEPTH FP32 products of K <= PET_MAX_K
    (``normwise_bound("fp32", K)`` each, the model for random data). Measured on the CPU smoke checkpoint:
    4.7e-7 (water_192) and 5.0e-7 (pt111_co)."""
    return gamma(n_atoms - 1) + PET_GEMM_DEPTH * normwise_bound("fp32", PET_MAX_K)


#: FP64 on this machine vs FP64 where the reference was made (another device, other summation orders).
FP64_ENERGY_RTOL = 1e-10


@pytest.fixture(scope="module")
def pot():
    return models.get_potential("pet-distilled")


def test_loads_offline_from_the_package(pot):
    assert pot.name == "pet-distilled"
    assert pot.elements == frozenset({1, 6, 8, 24, 25, 26, 27, 28, 78})
    assert "not a production potential" in pot.description
    meta = distilled.metadata()
    assert meta["status"] in ("h200", "cpu-smoke") and meta["teacher"].startswith("CHGNet 0.3.0")
    assert meta["model"]["weights_MB"] <= 20 and distilled.checkpoint_path().stat().st_size < 16e6
    with pytest.raises(ValueError, match="does not know element"):
        a = systems.water_box()
        a.numbers[0] = 7  # N
        a.calc = pot.calculator("fp32")
        a.get_potential_energy()


@pytest.mark.parametrize("name", ["water_192", "pt111_co"])
def test_reproduces_recorded_energies(pot, name):
    ref = distilled.metadata()["reference"][name]
    e = {}
    for m in ("fp64", "fp32"):
        a = systems.build(name)
        a.calc = pot.calculator(m)
        e[m] = a.get_potential_energy()
    assert e["fp64"] == pytest.approx(ref["energy_fp64_eV"], rel=FP64_ENERGY_RTOL)
    assert e["fp32"] == pytest.approx(ref["energy_fp64_eV"], rel=fp32_energy_rtol(ref["n_atoms"]))
    assert e["fp32"] != e["fp64"]  # really two precisions


def test_random_twin_has_the_architecture_and_other_weights(pot):
    twin = models.get_potential("pet-distilled-random")
    a, b = pot.module("fp32"), twin.module("fp32")
    assert a.hypers == b.hypers and twin.elements == pot.elements
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert {k: v.shape for k, v in pa.items()} == {k: v.shape for k, v in pb.items()}
    assert not torch.equal(pa["backend.edge_embedder.weight"], pb["backend.edge_embedder.weight"])
    assert distilled.is_random_weights("pet-distilled-random") and not distilled.is_random_weights("pet-distilled")


def test_labels_name_random_and_trained_weights():
    assert labels.potential_label("pet-s") == "PET-S (random weights)"
    assert labels.potential_label("pet-xs-compiled").endswith("(random weights)")
    label = labels.potential_label("pet-distilled")
    assert label.startswith("PET distilled from CHGNet (")
    # "trained" only for the trained checkpoint; the CPU smoke checkpoint says it is not trained to use
    trained = distilled.metadata().get("status") == "h200"
    assert ("(trained, for validation)" in label) == trained and ("not trained to use" in label) != trained
    assert labels.potential_label("ani1x") == "ANI-1x"
    with pytest.raises(ValueError, match="unknown distilled potential"):
        distilled.get("pet-distilled-large")


def test_suite_runs_on_it_and_compares_trained_with_random(tmp_path):
    from tcemu.mlip.report import SuiteConfig, run_suite

    cfg = SuiteConfig.quick(
        methods=("tf32", "tf32x3"),
        single_point=(("pet-distilled", "water_cluster_6"), ("pet-distilled-random", "water_cluster_6")),
        curve_potentials=("pet-distilled",),
        curve_points=5,
        checks=("single_point", "energy_curve"),
    )
    res = run_suite(cfg, tmp_path, show_progress=False, log=lambda s: None)
    assert not res.failures
    assert {sp.potential for sp in res.single_point} == {"pet-distilled", "pet-distilled-random"}
    assert all(math.isfinite(sp.error("tf32x3", "fp64").force_mean_err_eV_per_A) for sp in res.single_point)
    report = (tmp_path / "report.md").read_text()
    assert "## Trained and random weights" in report
    assert "### PET, pet-distilled's architecture (random weights) on water cluster, 6 atoms" in report
    assert "| tf32x3 |" in report.split("## Trained and random weights")[1]
    curve = res.energy_curve[0]
    assert np.all(np.isfinite(curve.energies_eV["fp32"]))
