"""An e3nn network (o3.Linear, FullyConnectedTensorProduct, FullyConnectedNet) emulated whole.

e3nn 0.4 compiles its generated code with TorchScript, where a torch-function mode sees nothing: emulate_
rebuilds that code in eager form (checked against the scripted code), so every product, forward and backward,
is emulated; what cannot be rebuilt is named by unreachable_layers.
"""

import copy
import io
import pickle

import numpy as np
import pytest
import torch

pytest.importorskip("e3nn")

import e3nn_net as net  # noqa: E402  (tests/emulation/e3nn_net.py)

import tcemu  # noqa: E402
from tcemu.emulation import codegen  # noqa: E402


@pytest.fixture(scope="module")
def system():
    rs = np.random.RandomState(0)
    return torch.tensor(rs.rand(12, 3) * 5, dtype=torch.float64), [1, 8] * 6


@pytest.fixture(scope="module")
def built():
    """One scripted network for the module (scripting is most of a build); each test takes a deep copy."""
    return net.build()


def _scripted(model):
    return [n for n, m in model.named_modules() if isinstance(m, torch.jit.ScriptModule) and codegen._computes(m)]


def test_e3nn_code_is_torchscript_and_a_plain_mode_misses_it(system, built):
    """The issue's finding: with e3nn's defaults its code is scripted, and emulation_mode around the model
    leaves those products in FP32 (the meter sees them at the aten level)."""
    model = copy.deepcopy(built)
    assert set(_scripted(model)) >= {"embed._compiled_main", "tp._compiled_main_left_right",
                                     "mix._compiled_main", "square._compiled_main_left_right"}
    with tcemu.coverage() as cov, tcemu.emulation_mode("tf32"):
        net.energy_and_forces(model, *system)
    plain = {r.module.split("._compiled")[0] for r in cov.rows if r.kind == "fp32"}
    assert {"E3Net.tp", "E3Net.square", "E3Net.mix"} <= plain and cov.fraction < 0.99


def test_emulate_reaches_every_product_and_tf32_shows(system, built):
    model = copy.deepcopy(built)
    e64, f64 = net.energy_and_forces(copy.deepcopy(model).double(), *system)
    e32, f32 = net.energy_and_forces(model, *system)
    errs = {}
    for method in ("tf32", "tf32x3", "bf16x6"):
        emulated = tcemu.emulate_(copy.deepcopy(model), method)
        assert tcemu.unreachable_layers(emulated) == [] and _scripted(emulated) == []
        with tcemu.coverage() as cov:
            e, f = net.energy_and_forces(emulated, *system)
        assert cov.fraction == 1.0 and cov.flops("emulated", "backward") > 0, cov.table()
        errs[method] = (f - f64).abs().max().item()
    ref = (f32 - f64).abs().max().item()
    assert errs["tf32"] > 100 * ref  # single-pass TF32 reached the products: its error shows
    assert errs["tf32x3"] < 3 * ref and errs["bf16x6"] < 3 * ref


def test_rebuilt_code_equals_the_scripted_code_and_stays_eager_in_copies(system, built):
    model = copy.deepcopy(built)
    x = torch.randn(5, model.tp.irreps_in1.dim)
    y = torch.randn(5, model.tp.irreps_in2.dim)
    w = torch.randn(5, model.tp.weight_numel)
    want = model.tp(x, y, w)
    assert codegen.make_eager_(model.tp) == ["_compiled_main_left_right"]
    assert isinstance(model.tp._compiled_main_left_right, torch.fx.GraphModule)
    torch.testing.assert_close(model.tp(x, y, w), want, rtol=1e-6, atol=1e-6)
    tcemu.emulate_(model, "tf32x3")
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):  # e3nn 0.4 would re-script them
        assert _scripted(twin) == []
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    with tcemu.coverage() as cov:
        net.energy_and_forces(loaded, *system)
    assert cov.fraction == 1.0


def test_code_that_cannot_be_rebuilt_is_emulated_through_its_graphs(monkeypatch, system, built):
    """An e3nn version whose code generator tcemu cannot call: the o3.Linear code stays TorchScript, and
    emulate_ rewrites its graphs instead (tcemu.emulation.script), so every product is still emulated."""
    def broken(mod):
        raise RuntimeError("an e3nn version with other internals")

    monkeypatch.setattr(codegen, "_linear_code", broken)
    model = tcemu.emulate_(copy.deepcopy(built), "tf32x3")
    assert set(_scripted(model)) == {"embed._compiled_main", "mix._compiled_main", "out._compiled_main"}
    assert tcemu.unreachable_layers(model) == []
    with tcemu.coverage() as cov:
        net.energy_and_forces(model, *system)
    assert cov.fraction == 1.0, cov.table()


def test_training_on_forces_double_backward_through_the_emulated_network(system, built):
    """The gradient of a force loss with respect to the weights goes through the emulated einsum and tensordot
    twice (double backward); it matches FP64's."""
    model = tcemu.emulate_(copy.deepcopy(built), "tf32x3")
    ref = copy.deepcopy(built).double()
    grads = []
    for m, dtype in ((model, torch.float32), (ref, torch.float64)):
        pos = system[0].to(dtype).requires_grad_(True)
        e = m(pos, net.onehot(system[1], dtype))
        (f,) = torch.autograd.grad(e, pos, create_graph=True)
        (g,) = torch.autograd.grad((f**2).sum(), m.radial[0].weight)
        grads.append(g.double())
    assert ((grads[0] - grads[1]).norm() / grads[1].norm()).item() < 1e-4


def test_the_emulated_run_does_the_fp32_runs_products(system, built):
    """Module by module, the emulated step's products have the FLOPs of the FP32 step's (frozen weights, as an MD
    potential's): the lowering adds no product and drops none (a sum over a label of size 1 on one side is a
    sum, as in torch, not a GEMM)."""
    model = copy.deepcopy(built)
    for p in model.parameters():
        p.requires_grad_(False)

    def per_module(m, kind):
        with tcemu.coverage(m) as cov:
            net.energy_and_forces(m, *system)
        out = {}
        for r in cov.rows:
            if r.kind == kind:
                key = (r.module, r.phase)
                out[key] = out.get(key, 0.0) + r.flops
        return out

    assert per_module(tcemu.emulate_(copy.deepcopy(model), "bf16x6"), "emulated") == per_module(model, "fp32")
