"""Under torch.compile, an emulated layer whose GEMMs all take the small-shape SGEMM fallback is traced as the FP32
model's own ``F.linear`` (no autograd.Function in the graph; Inductor fuses and differentiates it as in FP32),
and gives FP32's bits; a layer above the threshold keeps the emulated op."""

import pytest
import torch
from torch import nn

import tcemu
from tcemu.emulation.dispatch import ReferenceBackend


def _mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Linear(32, 4))


def _graphs_of(model, x):
    """The Dynamo graphs of ``model`` compiled with dynamic shapes, and its output and input gradient."""
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=capture, dynamic=True)
    x = x.clone().requires_grad_(True)
    out = compiled(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    return graphs, out, grad


def _has_autograd_function(graphs) -> bool:
    return any("autograd_function_apply" in str(n.target) or "Function" in str(n.target)
               for gm in graphs for n in gm.graph.nodes)


@pytest.mark.parametrize("runs_as_sgemm", [True, False])
def test_layers_that_run_as_sgemm_trace_as_the_fp32_linear(monkeypatch, runs_as_sgemm):
    """On the CPU the reference backend never falls back; pretending it does shows the trace it gets."""
    monkeypatch.setattr(ReferenceBackend, "runs_as_sgemm", lambda self, *a: runs_as_sgemm)
    fp32 = _mlp()
    emulated = tcemu.emulate_(_mlp(), "tf32x3")
    x = torch.randn(37, 16)
    graphs, out, grad = _graphs_of(emulated, x)
    x_ref = x.clone().requires_grad_(True)
    ref = fp32(x_ref)
    (ref_grad,) = torch.autograd.grad(ref.sum(), x_ref)
    assert _has_autograd_function(graphs) is not runs_as_sgemm
    if runs_as_sgemm:  # FP32's own op: FP32's bits
        assert torch.equal(out, ref) and torch.equal(grad, ref_grad)
    else:  # the emulated product: an FP32-accurate result, not FP32's rounding
        assert not torch.equal(out, ref)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_different_gradient_methods_keep_the_emulated_op(monkeypatch):
    """A weight gradient under another method than the output's is not FP32's linear: the op stays."""
    monkeypatch.setattr(ReferenceBackend, "runs_as_sgemm", lambda self, *a: True)
    emulated = tcemu.emulate_(_mlp(), "tf32x3", grad_weight_method="bf16x3")
    graphs, _, _ = _graphs_of(emulated, torch.randn(12, 16))
    assert _has_autograd_function(graphs)


@pytest.mark.gpu
def test_small_layers_compile_to_fp32s_graph_gpu():
    """CUDA, Inductor, dynamic shapes: 64 rows (under the 6 GFLOP threshold) give the FP32 compiled model's bits,
    forward and input gradient, with no autograd.Function traced; 2^17 rows of 1024 x 1024 keep the emulated op."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    torch.manual_seed(0)
    fp32 = nn.Sequential(nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 8)).cuda()
    emulated = tcemu.emulate_(nn.Sequential(nn.Linear(64, 64), nn.SiLU(), nn.Linear(64, 8)).cuda(), "tf32x3")
    emulated.load_state_dict(fp32.state_dict())
    x = torch.randn(64, 64, device="cuda")
    graphs, out, grad = _graphs_of(emulated, x)
    assert not _has_autograd_function(graphs)
    torch._dynamo.reset()
    ref_model = torch.compile(fp32, dynamic=True)
    emu_model = torch.compile(emulated, dynamic=True)
    for rows in (64, 100):
        xr = torch.randn(rows, 64, device="cuda", requires_grad=True)
        ref = ref_model(xr)
        (ref_grad,) = torch.autograd.grad(ref.sum(), xr)
        out = emu_model(xr)
        (grad,) = torch.autograd.grad(out.sum(), xr)
        assert torch.equal(out, ref) and torch.equal(grad, ref_grad)
    big = tcemu.emulate_(nn.Linear(1024, 1024).cuda(), "tf32x3")
    graphs, _, _ = _graphs_of(big, torch.randn(2**17, 1024, device="cuda"))
    assert _has_autograd_function(graphs)
