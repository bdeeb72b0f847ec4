"""tcemu.coverage(): emulated FLOPs counted once at their logical size, plain FP32 at the aten level, per module
and phase; tcemu's own piece products never counted as FP32."""

import copy

import pytest
import torch
from torch import nn

import tcemu


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 128), nn.SiLU(), nn.Linear(128, 32))


def _energy_and_force(model, x):
    x = x.clone().requires_grad_(True)
    e = model(x).sum()
    (f,) = torch.autograd.grad(e, x)
    return e, f


def _flops_mlp(batch, with_weight_grad=False):
    """2 M N K per layer forward; input gradients backward (both layers: x requires grad), weight gradients
    only when the weights require them."""
    fwd = 2 * batch * (64 * 128 + 128 * 32)
    bwd = fwd * (2 if with_weight_grad else 1)
    return fwd, bwd


def test_plain_model_runs_in_fp32_and_the_meter_counts_it_at_the_aten_level():
    model = mlp()
    for p in model.parameters():
        p.requires_grad_(False)
    with tcemu.coverage() as cov:
        _energy_and_force(model, torch.randn(10, 64))
    fwd, bwd = _flops_mlp(10)
    assert cov.flops("fp32", "forward") == fwd and cov.flops("fp32", "backward") == bwd
    assert cov.fraction == 0.0 and cov.flops("emulated") == 0
    assert {r.module for r in cov.rows} == {"Sequential.0", "Sequential.2"}


@pytest.mark.parametrize("method", ["tf32x3", "bf16x9"])
def test_emulated_model_counts_the_same_logical_flops_once_with_the_method(method):
    """The emulated run does the same logical work as FP32 (2 M N K per product, not per piece: bf16x9 runs 9
    piece products), and its pieces are not counted as FP32."""
    model = tcemu.emulate_(mlp(), method)
    with tcemu.coverage() as cov:
        _energy_and_force(model, torch.randn(10, 64))
    fwd, bwd = _flops_mlp(10, with_weight_grad=True)
    assert cov.flops("emulated", "forward") == fwd and cov.flops("emulated", "backward") == bwd
    assert cov.flops("fp32") == 0 and cov.fraction == 1.0
    assert cov.methods == {method: fwd + bwd}
    table = cov.table()
    assert "100.00 %" in table and method in table


class Mixed(nn.Module):
    """Products of several kinds, in a named hierarchy."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inner = nn.Sequential(nn.Linear(16, 16))
        self.scripted = torch.jit.script(nn.Linear(16, 16))
        self.w = nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        h = self.inner(x) @ self.w
        return self.scripted(h).sum() + torch.einsum("ij,jk->", h, self.w)


def test_rows_name_module_op_phase_and_the_scripted_module_is_emulated():
    model = Mixed()
    plain = copy.deepcopy(model)
    tcemu.emulate_(model, "tf32x3", warn_unreachable=False)
    assert tcemu.unreachable_layers(model) == []
    x = torch.randn(8, 16)
    with tcemu.coverage() as cov:
        _energy_and_force(model, x)
    rows = {(r.module, r.op, r.phase, r.kind) for r in cov.rows}
    assert ("Mixed.inner.0", "linear", "forward", "emulated") in rows
    assert ("Mixed.inner.0", "linear", "backward", "emulated") in rows  # the input gradient, in backward
    assert ("Mixed", "__matmul__", "forward", "emulated") in rows or ("Mixed", "matmul", "forward", "emulated") in rows
    assert ("Mixed", "einsum", "forward", "emulated") in rows
    # the scripted layer's graph calls tcemu::linear: its product and its input gradient are emulated
    assert ("Mixed.scripted", "linear", "forward", "emulated") in rows
    assert cov.fraction == 1.0, cov.table()
    with tcemu.coverage() as cov:
        _energy_and_force(plain, x)
    scripted = 2 * 8 * 16 * 16 * 2  # forward and input gradient of the scripted 16 x 16 layer, plain
    assert any(r.module == "Mixed.scripted" and r.kind == "fp32" and r.op == "aten.addmm" for r in cov.rows)
    assert cov.flops("fp32") == cov.flops() and cov.flops("fp32") >= scripted


def test_other_dtypes_are_not_float32_work():
    model = copy.deepcopy(mlp()).double()
    with tcemu.coverage() as cov:
        _energy_and_force(model, torch.randn(4, 64, dtype=torch.float64))
    assert cov.flops() == 0 and cov.flops("other_dtype") > 0
    assert cov.fraction != cov.fraction  # NaN: nothing to judge
    assert "n/a" in cov.table()


def test_convolutions_are_counted_as_plain_fp32_and_named_unreachable():
    model = nn.Sequential(nn.Conv1d(4, 8, 3), nn.Flatten(), nn.LazyLinear(1))
    x = torch.randn(2, 4, 10)
    model(x)
    tcemu.emulate_(model, "tf32x3", warn_unreachable=False)
    assert [u.fqn for u in tcemu.unreachable_layers(model)] == ["0"]
    with tcemu.coverage() as cov:
        model(x)
    conv = [r for r in cov.rows if r.op == "aten.convolution"]
    assert conv and conv[0].kind == "fp32" and conv[0].flops == 2 * 2 * 8 * 8 * 4 * 3
    assert cov.flops("emulated") == 2 * 2 * 64


def test_custom_ops_are_listed_as_opaque():
    lib = torch.library.Library("tcemu_test_opaque", "DEF")  # noqa: TOR901
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x * 2, "CPU")
    with tcemu.coverage() as cov:
        torch.ops.tcemu_test_opaque.twice(torch.ones(3))
    assert [(r.kind, r.op, r.calls) for r in cov.rows] == [("opaque", "tcemu_test_opaque.twice", 1)]
    assert "opaque" in cov.table()


def test_the_meter_refuses_to_run_inside_a_compiled_region():
    def f(x):
        with tcemu.coverage():
            return x + 1

    with pytest.raises(Exception, match="inside a compiled region"):
        torch.compile(f, backend="eager", fullgraph=True)(torch.ones(2))


@pytest.mark.gpu
def test_small_shape_sgemm_fallback_is_its_own_kind_on_cuda():
    """Below the small-shape threshold the CUDA backend runs cuBLAS SGEMM: counted as fallback, not emulated, and
    not as plain FP32; with the fallback off the same products are emulated."""
    from tcemu.emulation import gemm

    model = tcemu.emulate_(mlp().cuda(), "tf32x3")
    x = torch.randn(10, 64, device="cuda")
    with tcemu.coverage() as cov:
        _energy_and_force(model, x)
    fwd, bwd = _flops_mlp(10, with_weight_grad=True)
    assert cov.flops("fallback") == fwd + bwd and cov.flops("fp32") == 0 and cov.fraction == 0.0
    with tcemu.config(small_shape_fallback=False), tcemu.coverage() as cov:
        _energy_and_force(model, x)
    assert cov.flops("emulated") == fwd + bwd and cov.fraction == 1.0
