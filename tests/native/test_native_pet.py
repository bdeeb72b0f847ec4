"""An exported emulated PET (metatomic ``.pt`` written by ``tcemu.native.export_script``) run where only the native
library provides the ``tcemu::`` ops: in Python (metatomic's ASE calculator, the library loaded explicitly or by
metatomic's extensions mechanism) and in the C++ host demo (no Python), with the bits of tcemu's Python path
(``backend="torch"``) and FP32 accuracy against FP64."""

from __future__ import annotations

import copy
import functools
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import tcemu
import tcemu.ase
import tcemu.native
from tcemu.native._export import saved_code

pytest.importorskip("metatrain")
pytest.importorskip("metatomic_ase")
from tcemu.mlip import models, systems  # noqa: E402

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "engines"))
import _host_inputs  # noqa: E402
from _enginetest import assert_fp32_accurate  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
METHOD = "tf32x3"


@functools.cache
def _pet():
    return models.build_pet("tiny")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, native_library):
    """The emulated PET's .pt (the native library among its extensions), its plain FP32 and FP64 exports, and
    the water cluster as the ASE worker and the C++ host read it."""
    import ase.io

    out = tmp_path_factory.mktemp("native-pet")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        counts = tcemu.native.export_script(copy.deepcopy(_pet()).export(), METHOD, out / "pet.pt",
                                            native_library=native_library)
        copy.deepcopy(_pet()).export().save(str(out / "pet32.pt"))
        copy.deepcopy(_pet()).double().export().save(str(out / "pet64.pt"))
    water = systems.water_cluster(4)
    ase.io.write(out / "water.xyz", water)
    _host_inputs.write_atoms(water, out / "water.txt")
    return {"dir": out, "counts": counts, "water": water}


def _load(path):
    from metatomic.torch import load_atomistic_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_atomistic_model(str(path))


def _calculator_runs(model, device: str = "cpu") -> np.ndarray:
    """What the worker computes, here with tcemu's Python ops."""
    from metatomic_ase import MetatomicCalculator

    calc = MetatomicCalculator(model, device=device)
    runs = []
    for optimized in (True, True, False):
        calc.reset()
        a = systems.water_cluster(4)
        a.calc = calc
        with torch.jit.optimized_execution(optimized):
            runs.append(np.concatenate([[a.get_potential_energy()], np.asarray(a.get_forces()).ravel()]))
    return np.stack(runs)


def test_the_export_calls_tcemus_ops(exported):
    assert exported["counts"]["tcemu::linear"] > 0 and exported["counts"]["tcemu::scaled_dot_product_attention"] > 0
    code = saved_code(exported["dir"] / "pet.pt")
    assert f'ops.tcemu.linear(input, weight, bias, "{METHOD}", "{METHOD}", "torch")' in code


def _worker_runs(exported, native_library, mode: str, device: str, tmp_path: Path) -> np.ndarray:
    out = tmp_path / "runs.npy"
    done = subprocess.run([sys.executable, str(HERE / "_native_pet_worker.py"), mode, str(native_library),
                           str(exported["dir"] / "pet.pt"), str(exported["dir"] / "water.xyz"), str(out), device],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out)


@pytest.mark.parametrize("mode", ["load_library", "extensions"])
def test_native_only_python_host_has_the_python_bits(exported, native_library, mode, tmp_path):
    native = _worker_runs(exported, native_library, mode, "cpu", tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        python = _calculator_runs(_load(exported["dir"] / "pet.pt"))
        eager = tcemu.ase.emulate_calculator(_metatomic(copy.deepcopy(_pet()).export()), METHOD, backend="torch")
        first_eager = _calculator_runs_of(eager)
    assert np.array_equal(native, python)  # every run, bit for bit
    assert np.array_equal(native[0], first_eager)  # the eager emulated model's bits (TorchScript's first run)


@pytest.mark.gpu
def test_native_only_python_host_has_the_python_bits_on_cuda(exported, native_library, tmp_path):
    """Both sides with torch's deterministic algorithms (``_host_inputs.deterministic``: PET's index_add)."""
    native = _worker_runs(exported, native_library, "load_library", "cuda", tmp_path)
    with warnings.catch_warnings(), _host_inputs.deterministic("cuda"):
        warnings.simplefilter("ignore")
        python = _calculator_runs(_load(exported["dir"] / "pet.pt"), "cuda")
    assert np.array_equal(native, python)


def _metatomic(model):
    from metatomic_ase import MetatomicCalculator

    return MetatomicCalculator(model, device="cpu")


def _calculator_runs_of(calc) -> np.ndarray:
    a = systems.water_cluster(4)
    a.calc = calc
    return np.concatenate([[a.get_potential_energy()], np.asarray(a.get_forces()).ravel()])


def _host(binary: Path, model: Path, atoms: Path, *extra: str) -> tuple[float, np.ndarray]:
    done = subprocess.run([str(binary), str(model), str(atoms), *extra], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.split("\n")
    energy = float(next(line for line in lines if line.startswith("energy")).split()[1])
    forces = np.array([[float(v) for v in line.split()[1:]] for line in lines if line.startswith("force")])
    return energy, forces


def test_cpp_host_has_the_python_bits_and_fp32_accuracy(exported, native_host, native_library):
    """The C++ program (metatomic's extension mechanism loads the library) against the same computation in
    Python with tcemu's ops (the same neighbor lists), bit for bit; and against FP64 like an FP32 model."""
    d, water = exported["dir"], exported["water"]
    e, f = _host(native_host, d / "pet.pt", d / "water.txt")
    e_lib, f_lib = _host(native_host, d / "pet.pt", d / "water.txt", "--library", str(native_library))
    want_e, want_f = _host_inputs.energy_forces(_load(d / "pet.pt"), water)
    assert np.float32(e) == np.float32(want_e) and np.array_equal(f.astype(np.float32), want_f)
    assert e_lib == e and np.array_equal(f_lib, f)
    e32, f32 = _host_inputs.energy_forces(_load(d / "pet32.pt"), water)
    e64, f64 = _host_inputs.energy_forces(_load(d / "pet64.pt"), water)
    assert_fp32_accurate(e, f, e32, f32, e64, f64)


def test_cpp_host_finds_the_library_in_an_extensions_directory(exported, native_host, native_library, tmp_path):
    """Exported with ``collect_extensions``: the model lists the library relative to that directory, which the
    engine is given (LAMMPS's ``extensions`` keyword); the bits of the host run that loaded it by absolute path."""
    d = exported["dir"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tcemu.native.export_script(d / "pet.pt", METHOD, tmp_path / "pet.pt", native_library=native_library,
                                   collect_extensions=tmp_path / "extensions")
    assert (tmp_path / "extensions" / "tcemu" / native_library.name).is_file()
    e, f = _host(native_host, tmp_path / "pet.pt", d / "water.txt", "--extensions-dir", str(tmp_path / "extensions"))
    want_e, want_f = _host(native_host, d / "pet.pt", d / "water.txt")
    assert e == want_e and np.array_equal(f, want_f)


@pytest.mark.gpu
def test_cpp_host_on_cuda_has_the_python_bits(exported, native_host):
    """Both sides with torch's deterministic algorithms (``_host_inputs.deterministic``: PET's index_add)."""
    d, water = exported["dir"], exported["water"]
    e, f = _host(native_host, d / "pet.pt", d / "water.txt", "--device", "cuda", "--deterministic", "1")
    with _host_inputs.deterministic("cuda"):
        want_e, want_f = _host_inputs.energy_forces(_load(d / "pet.pt"), water, "cuda")
    assert np.float32(e) == np.float32(want_e) and np.array_equal(f.astype(np.float32), want_f)
