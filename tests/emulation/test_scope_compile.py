"""compile_in_scope: an inner method compiled inside an eager emulation scope runs its graph with the scope's
mode entered in the graph (the same bits as eager emulation, one graph, no mode call at run time), where plain
``torch.compile`` leaves the mode intercepting the graph's calls at every step."""

import pytest
import torch
from torch import nn

import tcemu
from tcemu.emulation.mode import emulation_mode
from tcemu.emulation.scope import compile_in_scope


class Inner(nn.Module):
    """A model whose ``forward`` stays eager and calls a method that gets compiled (as PET's backend)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 24))
        self.v = nn.Parameter(torch.randn(24, 4))

    def features(self, x):
        return torch.tanh(x @ self.w) @ self.v

    def forward(self, x):
        return self.features(x).sum(dim=-1)


@pytest.fixture
def mode_calls(monkeypatch):
    """Counts the emulation mode's ``__torch_function__`` calls made outside tracing (at run time)."""
    calls = []
    original = emulation_mode.__torch_function__

    def counted(self, func, types, args=(), kwargs=None):
        if not torch.compiler.is_compiling():
            calls.append(func)
        return original(self, func, types, args, kwargs)

    monkeypatch.setattr(emulation_mode, "__torch_function__", counted)
    return calls


def _run(model, rows):
    x = torch.randn(rows, 16, requires_grad=True)
    out = model(x)
    (grad,) = torch.autograd.grad(out.sum(), x)
    return x, out, grad


@pytest.mark.parametrize("compile_fn", ["compile_in_scope", "torch.compile"])
def test_compiled_method_in_an_eager_scope(compile_fn, mode_calls):
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    eager = Inner()
    tcemu.emulate_(eager, "tf32x3")
    compiled = Inner()
    compiled.load_state_dict(eager.state_dict())
    tcemu.emulate_(compiled, "tf32x3")
    wrap = compile_in_scope if compile_fn == "compile_in_scope" else torch.compile
    compiled.features = wrap(compiled.features, backend="aot_eager", dynamic=True)
    torch._dynamo.reset()
    counters.clear()
    for rows in (40, 57):
        torch.manual_seed(rows)
        x, out, grad = _run(compiled, rows)
        ref = eager(x)
        (ref_grad,) = torch.autograd.grad(ref.sum(), x)
        assert torch.equal(out, ref) and torch.equal(grad, ref_grad)
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1
    mode_calls.clear()
    _run(compiled, 63)
    graph_calls = [f for f in mode_calls if isinstance(f, torch._ops.OpOverload)]
    if compile_fn == "compile_in_scope":
        assert not graph_calls, graph_calls
    else:  # the mode around the call sees the graph's own ops
        assert graph_calls


def test_compile_in_scope_without_a_scope_is_torch_compile(mode_calls):
    """No emulation mode active: the compiled function runs the plain FP32 products."""
    torch.manual_seed(1)
    model = Inner()
    x = torch.randn(30, 16)
    fn = compile_in_scope(model.features, backend="aot_eager", dynamic=True)
    torch._dynamo.reset()
    assert torch.equal(fn(x), model.features(x))
    assert not mode_calls


def test_compile_in_scope_keeps_another_innermost_mode():
    """A mode that is not tcemu's on top of the stack (a user's, a meter) stays active for the compiled call."""
    seen = []

    class Recording(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    model = Inner()
    fn = compile_in_scope(model.features, backend="eager")
    torch._dynamo.reset()
    with emulation_mode("tf32x3"), Recording():
        fn(torch.randn(8, 16))
    assert seen
