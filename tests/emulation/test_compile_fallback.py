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


def test_the_row_limit_is_the_last_row_count_that_runs_as_sgemm(monkeypatch):
    """sgemm_row_limit bisects the backend's (monotone) rule: here M <= 50 rows of any N x K."""
    from tcemu.emulation.ops import sgemm_row_limit

    monkeypatch.setattr(ReferenceBackend, "runs_as_sgemm", lambda self, M, N, K, device, spec: M <= 50)
    assert sgemm_row_limit("auto:tf32x3", "cpu", -1, 32, 16) == 50
    monkeypatch.setattr(ReferenceBackend, "runs_as_sgemm", lambda self, M, N, K, device, spec: False)
    assert sgemm_row_limit("auto:tf32x3", "cpu", -1, 32, 16) == 0


@pytest.mark.parametrize("rows, as_fp32", [(37, True), (80, False)])
def test_compiled_layers_take_fp32s_linear_up_to_the_row_limit(monkeypatch, rows, as_fp32):
    """Under torch.compile a layer checks the row count against the limit (one shape guard): up to it the FP32
    model's linear and its bits, above it the emulated op."""
    monkeypatch.setattr(ReferenceBackend, "runs_as_sgemm", lambda self, M, N, K, device, spec: M <= 50)
    fp32 = _mlp()
    emulated = tcemu.emulate_(_mlp(), "tf32x3")
    x = torch.randn(rows, 16)
    graphs, out, grad = _graphs_of(emulated, x)
    assert _has_autograd_function(graphs) is not as_fp32
    x_ref = x.clone().requires_grad_(True)
    ref = fp32(x_ref)
    (ref_grad,) = torch.autograd.grad(ref.sum(), x_ref)
    assert torch.equal(out, ref) is as_fp32
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-5)


def test_the_layer_keeps_its_sgemm_key_with_its_methods():
    """The key the compiled path reads changes with set_method and leaves with restore (no stale method)."""
    layer = tcemu.emulate_(nn.Linear(4, 3), "tf32x3")
    assert layer._tcemu_sgemm_key == "auto:tf32x3"
    layer.set_method("bf16x6")
    assert layer._tcemu_sgemm_key == "auto:bf16x6"
    layer.set_method("tf32x3", grad_weight_method="bf16x3")
    assert layer._tcemu_sgemm_key is None  # a mixed product is never FP32's linear
    tcemu.restore_(layer)
    assert "_tcemu_sgemm_key" not in layer.__dict__ and type(layer) is nn.Linear


def test_the_fallback_query_is_not_counted():
    """runs_as_sgemm (a trace-time query, called many times by sgemm_row_limit) leaves the fallback counts alone."""
    pytest.importorskip("triton", reason="the Triton backend needs triton")
    from tcemu.emulation.gemm import triton_backend
    from tcemu.emulation.methods import get_method

    before = dict(triton_backend._FALLBACKS)
    assert triton_backend._use_fallback(get_method("tf32x3"), 7, 8, 9, torch.device("cuda"), count=False)
    assert dict(triton_backend._FALLBACKS) == before


def test_the_fallback_decision_keeps_symbolic_sizes_dynamic():
    """Under torch.compile's dynamic shapes an activation's size in N or K (a weight gradient's rows) is symbolic:
    the decision takes the FLOP rule there, one graph for every row count (the table's lookup needs constants,
    which would specialize the size: a graph per size, or an error in other torch versions)."""
    from torch._dynamo.utils import counters

    from tcemu.emulation.gemm import triton_backend

    spec, device = tcemu.get_method("tf32x3"), torch.device("cuda", 0)  # (the decision only: nothing runs there)

    def weight_gradient_like(x, w):
        a, b = w, x.mT  # N: the rows
        (M, K), N = a.shape[-2:], b.shape[-1]
        return (a @ b) * (2.0 if triton_backend._use_fallback(spec, M, N, K, device, count=False) else 3.0)

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(weight_gradient_like, dynamic=True, backend="eager")
    w = torch.randn(16, 8)
    for rows in (64, 100, 200):
        x = torch.randn(rows, 8)
        assert torch.equal(compiled(x, w), (w @ x.mT) * 2.0)  # tiny: the fallback
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()
