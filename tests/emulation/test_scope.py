"""emulate_'s scoped functional emulation: the selected modules' products emulated, unselected ones not (even
inside selected ones), nothing outside; copies, pickles and state dicts unaffected; restore_ removes it."""

import copy
import io
import pickle
import warnings

import pytest
import torch
from torch import nn

import tcemu
from tcemu.emulation.scope import scope_of


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(32, 32))

    def forward(self, h):
        return torch.einsum("ni,ij->nj", h, self.w)


class Body(nn.Module):
    """A functional product of its own, and a child (``head``) with another."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 32))
        self.head = Head()

    def forward(self, x):
        return self.head(torch.tanh(x @ self.w))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = Body()
        self.v = nn.Parameter(torch.randn(32))

    def forward(self, x):
        return torch.mv(self.body(x), self.v).sum()


def _run(model, x):
    xx = x.clone().requires_grad_(True)
    with tcemu.coverage() as cov:
        e = model(xx)
        (f,) = torch.autograd.grad(e, xx)
    return e.detach(), f, cov


def _by_module(cov):
    """Module -> kinds of its products that accumulate (mv's input gradient is an outer product: not judged)."""
    out = {}
    for r in cov.rows:
        if r.kind != "no_contraction":
            out.setdefault(r.module, set()).add(r.kind)
    return out


def test_the_whole_model_is_emulated_forward_and_backward():
    x = torch.randn(8, 16)
    model = Net()
    e32, f32, _ = _run(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing unreachable, something reached: no warning
        tcemu.emulate_(model, "bf16x3")
    e, f, cov = _run(model, x)
    assert cov.fraction == 1.0 and cov.flops("emulated", "backward") > 0, cov.table()
    assert _by_module(cov) == {"Net": {"emulated"}, "Net.body": {"emulated"}, "Net.body.head": {"emulated"}}
    assert not torch.equal(f, f32) and torch.allclose(f, f32, rtol=1e-3, atol=1e-3)


def test_filter_fn_scope_excludes_unselected_modules_even_inside_selected_ones():
    x = torch.randn(8, 16)
    model = tcemu.emulate_(Net(), "bf16x3", filter_fn=lambda m, fqn: fqn != "body.head")
    _, _, cov = _run(model, x)
    assert _by_module(cov) == {"Net": {"emulated"}, "Net.body": {"emulated"}, "Net.body.head": {"fp32"}}
    model = tcemu.emulate_(Net(), "bf16x3", filter_fn=lambda m, fqn: fqn == "body.head")
    _, _, cov = _run(model, x)
    assert _by_module(cov) == {"Net": {"fp32"}, "Net.body": {"fp32"}, "Net.body.head": {"emulated"}}
    # re-emulating replaces the scopes: everything now
    tcemu.emulate_(model, "bf16x3")
    _, _, cov = _run(model, x)
    assert cov.fraction == 1.0


def test_a_submodule_called_directly_is_emulated_too():
    """As MACE's ASE calculator calls model.atomic_energies_fn itself: every selected module has the mode."""
    model = tcemu.emulate_(Net(), "tf32x3")
    with tcemu.coverage() as cov:
        model.body.head(torch.randn(4, 32))
    assert cov.fraction == 1.0


def test_code_outside_the_scoped_modules_runs_without_the_mode():
    model = tcemu.emulate_(Net(), "tf32x3")
    with tcemu.coverage() as cov:
        model(torch.randn(2, 16))
        torch.randn(3, 8) @ torch.randn(8, 3)  # not inside the model
    assert cov.flops("fp32") == 2 * 3 * 3 * 8 and torch._C._len_torch_function_stack() == 0


def test_scopes_survive_state_dict_deepcopy_and_pickle_and_restore_removes_them():
    x = torch.randn(8, 16)
    model = Net()
    keys = list(model.state_dict())
    tcemu.emulate_(model, "bf16x3")
    assert list(model.state_dict()) == keys
    want = _run(model, x)[0]
    twin = copy.deepcopy(model)
    assert twin.body.forward.args[0] is twin.body and scope_of(twin.body) is not None
    assert scope_of(twin.body) is scope_of(twin.body.head)  # one scope, entered once per call
    for other in (twin, pickle.loads(pickle.dumps(model))):
        e, _, cov = _run(other, x)
        assert torch.equal(e, want) and cov.fraction == 1.0
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    assert torch.equal(_run(torch.load(buf, weights_only=False), x)[0], want)
    tcemu.restore_(model)
    assert all("forward" not in m.__dict__ for m in model.modules())
    assert _run(model, x)[2].fraction == 0.0


def test_emulate_warns_when_it_reaches_nothing():
    with pytest.warns(UserWarning, match="nothing was emulated"):
        model = tcemu.emulate_(Net(), "tf32x3", functional=False)  # no nn.Linear, and the functional scope off
    assert _run(model, torch.randn(2, 16))[2].fraction == 0.0  # as the warning says
    with pytest.warns(UserWarning, match="filter_fn selected no module"):
        tcemu.emulate_(Net(), "tf32x3", filter_fn=lambda m, fqn: False)


def test_a_foreign_instance_forward_is_kept():
    """Someone else's instance forward runs inside the scope, and restore_ puts it back
    (tests/emulation/test_user_paths.py has the values)."""
    model = Net()
    calls = []
    original = model.body.head.forward
    wrapper = model.body.head.forward = lambda h: calls.append(1) or original(h)
    tcemu.emulate_(model, "tf32x3")
    model(torch.randn(2, 16))
    assert calls == [1] and scope_of(model.body.head) is not None
    tcemu.restore_(model)
    assert model.body.head.__dict__["forward"] is wrapper


def test_emulated_scopes_compile_in_one_graph_with_the_eager_results():
    """torch.compile(fullgraph=True) traces through the scopes: one graph, no einsum or mv left in it (they were
    lowered to the emulation), the eager values."""
    torch._dynamo.reset()
    x = torch.randn(8, 16)
    model = tcemu.emulate_(Net(), "tf32x3")
    graphs = []

    def capture(gm, _example):
        graphs.append(gm)
        return gm.forward

    want = model(x)
    got = torch.compile(model, backend=capture, fullgraph=True)(x)
    assert len(graphs) == 1
    code = str(graphs[0].graph)
    assert "einsum" not in code and "torch.mv" not in code, code
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_scoped_fx_graph_modules_compile():
    """A model holding torch.fx GraphModules (what e3nn's generated code and MACE's compile preparation make):
    Dynamo inlining a scoped GraphModule's forward finds that forward's code, and the compiled model gives the
    eager values."""
    torch._dynamo.reset()
    model = Net()
    model.body.head = torch.fx.symbolic_trace(model.body.head)
    tcemu.emulate_(model, "tf32x3")
    assert scope_of(model.body.head) is not None
    x = torch.randn(8, 16)
    want = model(x)
    got = torch.compile(model, backend="eager", fullgraph=True)(x)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):  # no code object in the wrapper
        with tcemu.coverage() as cov:
            assert torch.equal(twin(x), want)
        assert cov.fraction == 1.0  # the GraphModule's products emulated (its parent's scope covers a pickle)


def test_a_scoped_graph_module_keeps_its_scope_in_a_deepcopy():
    """GraphModule's deepcopy rebuilds the module from its graph: the scope comes back through torch.fx's
    preserved attributes, and restore_ removes it there too."""
    gm = tcemu.emulate_(torch.fx.symbolic_trace(Head()), "tf32x3")
    twin = copy.deepcopy(gm)
    assert scope_of(twin) is not None and scope_of(twin).method.name == "tf32x3"
    with tcemu.coverage() as cov:
        twin(torch.randn(4, 32))
    assert cov.fraction == 1.0
    tcemu.restore_(gm)
    assert scope_of(gm) is None and scope_of(copy.deepcopy(gm)) is None
