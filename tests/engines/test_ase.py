"""tcemu.ase.emulate_calculator on the ASE calculators users run: metatomic's (PET), torchani's (ANI-1x), CHGNet's
and MACE's, each checked against FP32 and FP64 (tolerance: FP32_NOISE_FACTOR x FP32's own error)."""

import copy
import functools

import numpy as np
import pytest
import torch

import tcemu.ase
from _enginetest import assert_fp32_accurate, fp32_ulp

pytest.importorskip("metatrain")
from tcemu.mlip import models, systems  # noqa: E402


def _ef(calc, atoms):
    a = atoms.copy()
    a.calc = calc
    return float(a.get_potential_energy()), np.array(a.get_forces(), dtype=np.float64)


@functools.cache
def _built(name):
    """Each model built once (ANI-1x reads its eight networks from text files); calculators get copies."""
    return {"pet": lambda: models.build_pet("tiny"), "ani1x": models.build_ani1x, "chgnet": models.build_chgnet}[name]()


def _pet_calc(dtype=torch.float32):
    from metatomic_ase import MetatomicCalculator

    return MetatomicCalculator(copy.deepcopy(_built("pet")).to(dtype).export(), device="cpu")


def _ani_calc(dtype=torch.float32):
    models.import_torchani()
    import torchani.ase

    return torchani.ase.Calculator(list(models.ANI_SPECIES), copy.deepcopy(_built("ani1x")).to(dtype))


def _chgnet_calc():
    from chgnet.model.dynamics import CHGNetCalculator

    with models.warnings_off():
        return CHGNetCalculator(model=copy.deepcopy(_built("chgnet")), use_device="cpu", on_isolated_atoms="ignore")


@pytest.fixture(scope="module")
def mace_model():
    pytest.importorskip("mace")
    from mace.calculators import MACECalculator  # noqa: F401  (first: it lets e3nn load its constants)
    from e3nn import o3
    from mace import modules

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        block = modules.interaction_classes["RealAgnosticResidualInteractionBlock"]
        model = modules.MACE(
            r_max=4.0, num_bessel=4, num_polynomial_cutoff=5, max_ell=2, interaction_cls=block,
            interaction_cls_first=block, num_interactions=2, num_elements=2, hidden_irreps=o3.Irreps("8x0e+8x1o"),
            MLP_irreps=o3.Irreps("8x0e"), atomic_energies=np.array([-1.0, -2.0]), avg_num_neighbors=8.0,
            atomic_numbers=[1, 8], correlation=2, gate=torch.nn.functional.silu)
    return model.float().eval()


def _mace_calc(model, dtype=torch.float32):
    from mace.calculators import MACECalculator

    name = str(dtype).removeprefix("torch.")
    return MACECalculator(models=copy.deepcopy(model).to(dtype), device="cpu", default_dtype=name)


@pytest.fixture(scope="module")
def small_water():
    return systems.water_cluster(4)


@pytest.fixture(scope="module")
def pt_bulk():
    from ase.build import bulk

    a = bulk("Pt", cubic=True)
    a.rattle(0.05, seed=0)
    return a


CASES = ("pet", "ani1x", "chgnet", "mace")


def _calculators(case, request):
    """(FP32 calculator factory, FP64 calculator, atoms) of a case."""
    if case == "pet":
        return _pet_calc, _pet_calc(torch.float64), request.getfixturevalue("small_water")
    if case == "ani1x":
        return _ani_calc, _ani_calc(torch.float64), request.getfixturevalue("small_water")
    if case == "chgnet":
        return _chgnet_calc, models.chgnet().calculator("fp64"), request.getfixturevalue("pt_bulk")
    model = request.getfixturevalue("mace_model")
    return (lambda: _mace_calc(model)), _mace_calc(model, torch.float64), request.getfixturevalue("small_water")


@pytest.mark.parametrize("case", CASES)
def test_one_line_gives_fp32_accuracy(case, request):
    """The calculator the user built, emulated in place with TF32x3: energy and forces as accurate as FP32's."""
    make, calc64, atoms = _calculators(case, request)
    e64, f64 = _ef(calc64, atoms)
    e32, f32 = _ef(make(), atoms)
    calc = make()
    assert tcemu.ase.emulate_calculator(calc, "tf32x3") is calc
    report = calc.tcemu_report
    assert report.method == "tf32x3" and report.models
    e, f = _ef(calc, atoms)
    assert_fp32_accurate(e, f, e32, f32, e64, f64)


@pytest.mark.parametrize("case", ("pet", "ani1x", "chgnet"))
def test_the_emulated_layers_run(case, request):
    """Single-pass TF32 through the same call is visibly less accurate than FP32: the layers are emulated."""
    make, calc64, atoms = _calculators(case, request)
    e64, f64 = _ef(calc64, atoms)
    _, f32 = _ef(make(), atoms)
    calc = tcemu.ase.emulate_calculator(make(), "tf32")
    assert calc.tcemu_report.emulated_layers > 0
    _, f = _ef(calc, atoms)
    assert np.abs(f - f64).max() > 10 * max(np.abs(f32 - f64).max(), 1e-7)


def test_mace_report_names_what_the_linear_swap_does_not_reach(mace_model):
    """MACE's products are e3nn's (o3.Linear, tensor products): the report lists them as weights outside nn.Linear."""
    calc = tcemu.ase.emulate_calculator(_mace_calc(mace_model), "tf32x3")
    report = calc.tcemu_report
    assert report.models == ("calc.models[0]",)
    assert any(name.startswith("e3nn.") for name in report.other_weights)
    assert "weights outside nn.Linear" in report.summary()


def test_pet_attention_blocks_and_restore(small_water):
    """attention=True emulates PET's attention blocks too; restore gives back FP32's bits."""
    e32, f32 = _ef(_pet_calc(), small_water)
    e64, f64 = _ef(_pet_calc(torch.float64), small_water)
    calc = tcemu.ase.emulate_calculator(_pet_calc(), "tf32x3+attn")
    assert calc.tcemu_report.attention and calc.tcemu_report.attention_blocks == 1
    assert calc.tcemu_report.linear_weight_fraction == 1.0  # PET: every product weight is an nn.Linear's
    e, f = _ef(calc, small_water)
    assert_fp32_accurate(e, f, e32, f32, e64, f64)
    tcemu.ase.restore(calc)
    assert not hasattr(calc, "tcemu_report")
    e_back, f_back = _ef(calc, small_water)
    assert e_back == e32 and np.array_equal(f_back, f32)


def test_cached_results_are_dropped(small_water):
    """A calculator that already computed this structure in FP32 computes it again once emulated (ASE caches)."""
    atoms = small_water.copy()
    atoms.calc = _pet_calc()
    f32 = atoms.get_forces().copy()
    tcemu.ase.emulate_calculator(atoms.calc, "tf32")
    assert not np.array_equal(atoms.get_forces(), f32)


def test_float64_and_empty_calculators_are_clear_errors_and_torchscript_is_emulated(mace_model):
    from ase.calculators.calculator import Calculator

    with pytest.raises(ValueError, match=r"no float32 parameters \(float64\).*default_dtype='float32'"):
        tcemu.ase.emulate_calculator(_mace_calc(mace_model, torch.float64), "tf32x3")

    class Scripted(Calculator):
        def __init__(self):
            super().__init__()
            self.model = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(3, 3)))

    scripted = tcemu.ase.emulate_calculator(Scripted(), "tf32x3")  # its graphs rewritten (tests/engines/test_exported)
    assert scripted.tcemu_report.emulated_layers == 1 and "tcemu::linear" in str(scripted.model._modules["0"].graph)
    with pytest.raises(ValueError, match="holds no torch.nn.Module"):
        tcemu.ase.emulate_calculator(Calculator(), "tf32x3")
    with pytest.raises(TypeError, match="expected an ASE calculator"):
        tcemu.ase.emulate_calculator(torch.nn.Linear(2, 2), "tf32x3")
    with pytest.raises(ValueError, match="only '\\+attn'"):
        tcemu.ase.emulate_calculator(_pet_calc(), "tf32x3+flash")
    with pytest.raises(ValueError, match="not an emulation"):
        tcemu.ase.emulate_calculator(_pet_calc(), "fp32")


def test_energy_ulp_helper():
    assert fp32_ulp(1.0) == 2.0 ** -23
