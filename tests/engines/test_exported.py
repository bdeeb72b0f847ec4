"""Exported (TorchScript) models as users download and run them, emulated in Python hosts: metatomic's ``.pt``
(a PET saved with ``AtomisticModel.save`` and loaded back), a MACE scripted with e3nn's ``jit.compile`` and a
scripted torchani network, each against the eager emulated model and FP64.

Scripted and eager runs are compared bit for bit with TorchScript's graph optimizations off
(``torch.jit.optimized_execution(False)``; PET's also on its first, profiling, call): with them on, TorchScript's
profiling executor differentiates the other ops (activations, reshapes, sums) with its own autodiff formulas,
which changes the last bits of the forces of a plain FP32 scripted model just as much; those runs are compared
with FP64 within the harness's bound (FP32_NOISE_FACTOR x FP32's own error)."""

import copy
import functools
import warnings

import numpy as np
import pytest
import torch

import tcemu
import tcemu.ase
from _enginetest import assert_fp32_accurate

pytest.importorskip("metatrain")
from tcemu.mlip import models, systems  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _ef(calc, atoms):
    calc.reset()
    a = atoms.copy()
    a.calc = calc
    return float(a.get_potential_energy()), np.array(a.get_forces(), dtype=np.float64)


def _same(a, b):
    return a[0] == b[0] and np.array_equal(a[1], b[1])


@pytest.fixture(scope="module")
def water():
    return systems.water_cluster(4)


@functools.cache
def _pet():
    return models.build_pet("tiny")


@pytest.fixture(scope="module")
def pet_file(tmp_path_factory):
    """A PET exported with metatomic and saved as a .pt file, as metatrain's ``mtt export`` writes it."""
    path = tmp_path_factory.mktemp("exported") / "pet.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copy.deepcopy(_pet()).export().save(str(path))
    return str(path)


def _metatomic(model):
    from metatomic_ase import MetatomicCalculator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MetatomicCalculator(model, device="cpu")


def test_metatomic_pt_file_is_emulated_with_the_eager_models_bits(pet_file, water):
    """The issue's user: ``MetatomicCalculator("model.pt")`` passed to tcemu.ase.emulate_calculator."""
    scripted = tcemu.ase.emulate_calculator(_metatomic(pet_file), "tf32x3", backend="torch")
    report = scripted.tcemu_report
    assert report.emulated_layers > 0 and report.linear_weight_fraction == 1.0 and not report.unreached
    eager = tcemu.ase.emulate_calculator(_metatomic(copy.deepcopy(_pet()).export()), "tf32x3", backend="torch")
    want = _ef(eager, water)
    with tcemu.coverage() as cov:
        first = _ef(scripted, water)  # the profiling call
    assert _same(first, want)
    assert cov.fraction > 0.999 and cov.flops("emulated", "backward") > 0, cov.table()
    assert {"scaled_dot_product_attention", "linear"} <= {r.op for r in cov.rows if r.kind == "emulated"}
    with torch.jit.optimized_execution(False):
        assert _same(_ef(scripted, water), want)


def test_metatomic_pt_file_optimized_runs_are_fp32_accurate_and_restore_is_exact(pet_file, water):
    scripted = tcemu.ase.emulate_calculator(_metatomic(pet_file), "tf32x3", backend="torch")
    e64, f64 = _ef(_metatomic(copy.deepcopy(_pet()).double().export()), water)
    plain = _metatomic(pet_file)
    e32, f32 = _ef(plain, water)
    for _ in range(2):  # the profiling call, then TorchScript's optimized runs
        assert_fp32_accurate(*_ef(scripted, water), e32, f32, e64, f64)
    tcemu.ase.restore(scripted)  # its original graphs, which have not run yet: the first call profiles
    fresh = _metatomic(pet_file)
    for _ in range(2):
        assert _same(_ef(scripted, water), _ef(fresh, water))


def test_load_atomistic_model_then_emulate_as_a_new_user_does(pet_file, water):
    """``tcemu.emulate_(load_atomistic_model(path))`` once raised "Method 'forward' is not defined."."""
    from metatomic.torch import load_atomistic_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = load_atomistic_model(pet_file)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing unreached: no warning
        tcemu.emulate_(loaded, "bf16x6", backend="torch")
    assert tcemu.unreachable_layers(loaded) == []
    eager = tcemu.emulate_(copy.deepcopy(_pet()).export(), "bf16x6", backend="torch")
    assert _same(_ef(_metatomic(loaded), water), _ef(_metatomic(eager), water))


@pytest.fixture(scope="module")
def mace():
    """A small MACE (random weights) and its TorchScript form, scripted by e3nn's jit.compile as mace deploys
    models."""
    pytest.importorskip("mace")
    from e3nn.util import jit
    from mace.calculators import MACECalculator  # noqa: F401  (first: it lets e3nn load its constants)

    model = _mace()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, jit.compile(copy.deepcopy(model))


def _mace_calc(model, dtype="float32"):
    from mace.calculators import MACECalculator

    return MACECalculator(models=model, device="cpu", default_dtype=dtype)


def test_scripted_mace_is_emulated_whole(mace, water, monkeypatch):
    """Every product of the scripted MACE emulated, with the results of the eager emulated MACE that keeps e3nn's
    TorchScript code (its graphs rewritten too). The eager emulated MACE by default runs e3nn's code rebuilt as
    eager torch.fx code instead (tcemu.emulation.codegen), whose force computation differs in the last bits
    (about 1e-9 eV/A; the same energy); the FP64 check is the next test."""
    from tcemu.emulation import codegen

    model, scripted = mace
    calc = tcemu.ase.emulate_calculator(_mace_calc(scripted), "tf32x3", backend="torch")
    assert not calc.tcemu_report.unreached
    rebuilt = tcemu.ase.emulate_calculator(_mace_calc(copy.deepcopy(model)), "tf32x3", backend="torch")
    monkeypatch.setattr(codegen, "make_eager_", lambda mod: [])
    kept = tcemu.ase.emulate_calculator(_mace_calc(copy.deepcopy(model)), "tf32x3", backend="torch")
    with torch.jit.optimized_execution(False):
        with tcemu.coverage() as cov:
            _ef(calc, water)
        got = _ef(calc, water)  # (outside the meter, whose dispatch mode can change the last bits)
        want = _ef(kept, water)
    assert cov.fraction == 1.0, cov.table()
    assert got[0] == want[0] == _ef(rebuilt, water)[0]
    # bit for bit in a fresh process; here within about one FP32 ulp of the forces (0.1 eV/A): the eager MACE
    # calls e3nn's global scripted functions (spherical harmonics), whose TorchScript executors other tests may
    # have optimized already, which optimized_execution(False) does not undo
    assert np.abs(got[1] - want[1]).max() <= 1e-8
    tcemu.ase.restore(calc)


def test_scripted_mace_is_fp32_accurate_and_tf32_shows(mace, water):
    model, scripted = mace
    calc = tcemu.ase.emulate_calculator(_mace_calc(scripted), "tf32x3", backend="torch")
    e64, f64 = _ef(_mace_calc(copy.deepcopy(model).double(), "float64"), water)
    e32, f32 = _ef(_mace_calc(copy.deepcopy(model)), water)
    assert_fp32_accurate(*_ef(calc, water), e32, f32, e64, f64)
    tf32 = tcemu.ase.emulate_calculator(calc, "tf32", backend="torch")
    assert abs(_ef(tf32, water)[0] - e64) > 10 * abs(e32 - e64)  # single-pass TF32 reached the products
    tcemu.ase.restore(calc)


def _mace():
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


def test_scripted_torchani_is_emulated_and_fp32_accurate(water):
    """torchani's models script (``torch.jit.script``); one ANI-1x network (of the eight) keeps the test short."""
    torchani = models.import_torchani()
    import torchani.ase

    full = models.build_ani1x()
    model = torchani.nn.Sequential(full[0], full[1][0], full[2]).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(copy.deepcopy(model))
    species = list(models.ANI_SPECIES)
    calc = tcemu.ase.emulate_calculator(torchani.ase.Calculator(species, scripted), "tf32x3", backend="torch")
    assert calc.tcemu_report.emulated_layers == 16 and calc.tcemu_report.linear_weight_fraction == 1.0
    eager = tcemu.ase.emulate_calculator(torchani.ase.Calculator(species, copy.deepcopy(model)), "tf32x3",
                                         backend="torch")
    with torch.jit.optimized_execution(False):
        with tcemu.coverage() as cov:
            _ef(calc, water)
        e, f = _ef(calc, water)  # (outside the meter: its dispatch mode changes the last bits of ANI's forces)
    assert cov.fraction == 1.0, cov.table()
    assert _same((e, f), _ef(eager, water))  # the eager emulated network's bits
    e64, f64 = _ef(torchani.ase.Calculator(species, copy.deepcopy(model).double()), water)
    e32, f32 = _ef(torchani.ase.Calculator(species, copy.deepcopy(model)), water)
    assert_fp32_accurate(e, f, e32, f32, e64, f64)
    tf32 = tcemu.ase.emulate_calculator(calc, "tf32", backend="torch")
    assert np.abs(_ef(tf32, water)[1] - f64).max() > 10 * np.abs(f32 - f64).max()


def test_autoload_emulates_an_exported_model(pet_file, water):
    """``tcemu run`` / TCEMU_FP32_PRECISION: a script that loads the .pt file and never imports tcemu."""
    from tcemu import autoload

    eager = tcemu.ase.emulate_calculator(_metatomic(copy.deepcopy(_pet()).export()), "tf32x3")
    autoload.install("tf32x3")
    try:
        calc = _metatomic(pet_file)
        got = _ef(calc, water)
        report = autoload.reports()[-1][1]
    finally:
        autoload.uninstall()
    assert report.emulated_layers > 0 and report.linear_weight_fraction == 1.0
    assert _same(got, _ef(eager, water))
