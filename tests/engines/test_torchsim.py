"""tcemu.torchsim: an emulated TorchSim model runs TorchSim's batched NVE and FIRE like the FP32 model does
(TorchSim 0.3, the release that installs on Python 3.11; its MetatomicModel for PET, its MaceModel)."""

import numpy as np
import pytest
import torch

import tcemu
import tcemu.torchsim
from _enginetest import FP32_NOISE_FACTOR

pytest.importorskip("torch_sim")
pytest.importorskip("metatrain")
from tcemu.mlip import models, systems  # noqa: E402

METHODS = ("fp64", "fp32", "tf32x3")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("pet") / "pet-tiny.ckpt"
    torch.save(models.build_pet("tiny", 0).get_checkpoint(), path)
    return str(path)


def _pet_model(checkpoint, method):
    """TorchSim 0.3's MetatomicModel of the tiny PET in ``method`` (its FP64 copy swapped in for fp64)."""
    from torch_sim.models.metatomic import MetatomicModel

    model = MetatomicModel(model=checkpoint, device="cpu", compute_stress=False)
    if method == "fp64":
        model._model = models.build_pet("tiny", 0).double().export()
        model._dtype = torch.float64
    elif method != "fp32":
        tcemu.torchsim.emulate_model(model, method)
    return model


def _batch():
    """Three small periodic systems of different sizes (water clusters in boxes)."""
    out = []
    for n in (3, 4, 5):
        a = systems.water_cluster(n)
        a.pbc = True
        out.append(a)
    return out


def _run(step_fn, state, n):
    for _ in range(n):
        state = step_fn(state)
    return state


def _errors(results, key):
    """{method: max |x_method - x_fp64|} of the final states' ``key``."""
    ref = getattr(results["fp64"], key).double()
    return {m: (getattr(s, key).double() - ref).abs().max().item() for m, s in results.items()}


def test_batched_nve_with_tf32x3_stays_within_fp32_noise(checkpoint):
    results = {}
    for method in METHODS:
        model = _pet_model(checkpoint, method)
        state, step = tcemu.torchsim.nve(model, _batch(), dt_fs=0.5, temperature_K=300.0, seed=0)
        assert state.n_systems == 3
        results[method] = _run(step, state, 10)
    for key in ("positions", "momenta", "energy"):
        err = _errors(results, key)
        assert 0 < err["fp32"]  # FP32 is not FP64: the comparison can see rounding
        assert err["tf32x3"] <= FP32_NOISE_FACTOR * err["fp32"], (key, err)


def test_batched_fire_with_tf32x3_ends_where_fp32_does(checkpoint):
    results, start = {}, {}
    for method in METHODS:
        model = _pet_model(checkpoint, method)
        state, step = tcemu.torchsim.fire(model, _batch())
        start[method] = state.energy.clone()
        results[method] = _run(step, state, 15)
    assert torch.all(results["tf32x3"].energy < start["tf32x3"])  # every system relaxed
    err = _errors(results, "energy")
    ulp = float(np.spacing(np.float32(results["fp64"].energy.abs().max().item())))
    assert err["tf32x3"] <= FP32_NOISE_FACTOR * max(err["fp32"], ulp), err


def test_report_and_restore(checkpoint):
    model = tcemu.torchsim.emulate_model(_pet_model(checkpoint, "fp32"), "tf32x3+attn")
    report = model.tcemu_report
    assert report.emulated_layers > 10 and report.attention_blocks == 1
    tcemu.torchsim.restore_model(model)
    assert not any(isinstance(m, tcemu.EmulatedLinear) for m in model.modules())


def test_float64_and_non_module_models_are_clear_errors():
    class Float64Model(torch.nn.Module):  # TorchSim's own models (MaceModel, ...) default to float64
        dtype = torch.float64

    with pytest.raises(ValueError, match="computes in torch.float64.*dtype=torch.float32"):
        tcemu.torchsim.emulate_model(Float64Model(), "tf32x3")
    with pytest.raises(TypeError, match="ModelInterface"):
        tcemu.torchsim.emulate_model(object(), "tf32x3")

