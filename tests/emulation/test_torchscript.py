"""TorchScript modules emulated by rewriting their graphs (tcemu.emulation.script): the same bits as the eager
emulated model (forward, backward, double backward), the original graphs back after restore_, isolation from
other instances of the compiled class, and what cannot be rewritten listed."""

import copy
import io
import warnings

import pytest
import torch
import torch.nn.functional as F

import tcemu
from tcemu.emulation.script import rewritten_ops
from tcemu.emulation.script_ops import OPS

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _helper(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A free function (TorchScript compiles it beside the module's methods)."""
    return torch.einsum("nij,jk->nik", a, b)


class Block(torch.nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.lin = torch.nn.Linear(d, d)
        self.w = torch.nn.Parameter(torch.randn(d, d) / d**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.lin(x))  # (n, l, d)
        q = h.unsqueeze(1)
        h = h + F.scaled_dot_product_attention(q, q, q).squeeze(1)
        h = _helper(h, self.w)
        h = torch.addmm(h.reshape(-1, h.shape[-1]), h.reshape(-1, h.shape[-1]), self.w, beta=0.5, alpha=2.0)
        return torch.bmm(h.reshape(x.shape), x.transpose(1, 2)).sum((1, 2)) + torch.tensordot(h, self.w, 1).sum()


class Net(torch.nn.Module):
    def __init__(self, d: int = 16):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(d), Block(d)])
        self.out = torch.nn.Linear(d, 1)
        self.table = torch.nn.Parameter(torch.randn(d, d, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        e = torch.zeros(x.shape[0], dtype=x.dtype, device=x.device)
        for block in self.blocks:
            e = e + block(x)
        side = torch.matmul(x.double(), self.table).sum().float()  # float64 product: runs unchanged
        side = side + torch.addmm(self.table, self.table, self.table, beta=0.5).sum().float()  # keywords, unchanged
        side = side + torch.einsum("i,j->ij", x[0, 0], x[0, 1]).sum()  # an outer product: runs as it is
        return (self.out(x).sum() + e.sum() + side).reshape(1)


def _model(seed: int = 0) -> Net:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Net()


def _script(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.jit.script(model)


def _x():
    return torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(1))


def _run(model, x, double: bool = True):
    """Energy, its gradient (forces) and the gradient of the force norm with respect to a weight (training on
    forces: double backward; torch's own CPU attention has none, so not for plain models)."""
    x = x.clone().requires_grad_(True)
    e = model(x)
    (g,) = torch.autograd.grad(e.sum(), x, create_graph=double)
    if not double:
        return e.detach(), g
    weight = dict(model.named_parameters())["blocks.0.lin.weight"]
    (gw,) = torch.autograd.grad(g.square().sum(), weight)
    return e.detach(), g.detach(), gw


def _sub(model, fqn):
    return dict(model.named_modules())[fqn]


def _equal(a, b):
    return all(torch.equal(u, v) for u, v in zip(a, b, strict=True))


@pytest.mark.parametrize("method", ["tf32x3", "bf16x3"])
def test_a_scripted_model_computes_the_bits_of_the_eager_emulated_one(method):
    eager = tcemu.emulate_(_model(), method, backend="torch")
    scripted = tcemu.emulate_(_script(_model()), method, backend="torch")
    assert rewritten_ops(scripted) == {"tcemu::linear": 2, "tcemu::scaled_dot_product_attention": 1,
                                       "tcemu::einsum": 2, "tcemu::addmm": 2, "tcemu::bmm": 1,
                                       "tcemu::tensordot": 1, "tcemu::matmul": 1}
    x = _x()
    want = _run(eager, x)
    with torch.jit.optimized_execution(False):  # TorchScript's own autodiff of the other ops: below
        assert _equal(_run(scripted, x), want)
    assert _equal(_run(scripted, x), want)  # the profiling run


def test_products_run_emulated_and_the_meter_sees_them():
    scripted = tcemu.emulate_(_script(_model()), "tf32x3", backend="torch")
    with tcemu.coverage() as cov:
        _run(scripted, _x())
    assert cov.fraction == 1.0, cov.table()
    assert cov.flops("emulated", "backward") > 0
    ops = {r.op for r in cov.rows if r.kind == "emulated"}
    assert {"linear", "einsum", "addmm", "bmm", "tensordot", "scaled_dot_product_attention"} <= ops
    assert {r.method for r in cov.rows if r.kind == "other_dtype"} == {"float64"}  # the float64 matmul, unchanged


def test_tf32_error_shows_and_tf32x3_is_fp32_accurate():
    """Forces against the FP64 model: single-pass TF32 through the rewritten graphs is far worse than FP32, TF32x3
    within FP32's own error times the validation harness's factor."""
    from tcemu.mlip.report import THRESHOLDS  # noqa: PLC0415

    x = _x()
    g64 = _run(_model().double(), x.double(), double=False)[1]

    def err(model):
        return (_run(model, x, double=False)[1].double() - g64).abs().mean().item()

    ref = err(_script(_model()))
    errs = {m: err(tcemu.emulate_(_script(_model()), m, backend="torch")) for m in ("tf32", "tf32x3")}
    assert errs["tf32"] > 10 * ref and errs["tf32x3"] <= THRESHOLDS["single_point_factor"] * ref, (errs, ref)


def test_restore_gives_back_the_original_graphs_and_results():
    scripted = _script(_model())
    x = _x()
    code = {name: mod.code for name, mod in scripted.named_modules() if hasattr(mod._c, "_get_method")
            and mod._c._has_method("forward")}
    graph = str(scripted.graph)
    _run(scripted, x, double=False)
    plain = _run(scripted, x, double=False)  # after the profiling run (TorchScript's optimized graphs)
    tcemu.emulate_(scripted, "tf32", backend="torch")
    assert "tcemu::linear" in str(scripted.out.graph)
    assert not _equal(_run(scripted, x, double=False), plain)
    tcemu.restore_(scripted)
    assert str(scripted.graph) == graph
    assert {name: mod.code for name, mod in scripted.named_modules() if mod._c._has_method("forward")} == code
    assert _equal(_run(scripted, x, double=False), plain)


def test_a_model_that_already_ran_is_emulated_and_other_instances_stay_plain():
    """The graph executor keeps the graph it optimized at the first call, and instances of one class share the
    compiled code: the rewrite works on a private copy, so both facts are harmless."""
    a, b = _script(_model()), _script(_model())
    assert a._c._type() == b._c._type()  # one compiled class
    x = _x()
    for _ in range(3):
        plain = a(x)
    tcemu.emulate_(a, "tf32", backend="torch")
    assert not torch.equal(a(x), plain)
    assert torch.equal(b(x), plain) and "tcemu" not in str(_sub(b, "blocks.0").graph)


def test_parameters_are_shared_not_copied():
    scripted = _script(_model())
    before = {n: p for n, p in scripted.named_parameters()}
    tcemu.emulate_(scripted, "tf32x3", backend="torch")
    after = dict(scripted.named_parameters())
    assert after.keys() == before.keys() and all(after[n] is before[n] for n in before)
    eager = tcemu.emulate_(_model(), "tf32x3", backend="torch")
    x = _x()
    with torch.no_grad():
        for model in (scripted, eager):
            model.out.bias += 1.0  # seen by the emulated graphs: the same tensor
    assert torch.equal(scripted(x), eager(x))


def test_filter_fn_leaves_modules_out_and_a_shared_class_must_agree():
    scripted = tcemu.emulate_(_script(_model()), "tf32x3", backend="torch",
                              filter_fn=lambda m, fqn: not fqn.startswith("blocks"))
    assert "tcemu::linear" in str(scripted.out.graph) and "tcemu" not in str(_sub(scripted, "blocks.0").graph)
    with pytest.raises(ValueError, match="share one compiled class"):
        tcemu.emulate_(_script(_model()), "tf32x3", filter_fn=lambda m, fqn: fqn != "blocks.1")


def test_functional_false_rewrites_the_linear_layers_only():
    scripted = tcemu.emulate_(_script(_model()), "tf32x3", backend="torch", functional=False)
    assert rewritten_ops(scripted) == {"tcemu::linear": 2}


def test_grad_weight_method_reaches_the_linear_layers():
    eager = tcemu.emulate_(_model(), "tf32x3", grad_weight_method="tf32", backend="torch")
    scripted = tcemu.emulate_(_script(_model()), "tf32x3", grad_weight_method="tf32", backend="torch")
    assert '"tf32x3", "tf32", "torch"' in scripted.out.code
    x = _x()
    for model in (eager, scripted):
        model(x).sum().backward()
    assert torch.equal(eager.out.weight.grad, scripted.out.weight.grad)


def test_a_traced_module_and_a_scripted_part_of_an_eager_model():
    x = _x()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(_model(), x)
    eager = tcemu.emulate_(_model(), "tf32x3", backend="torch")
    with torch.jit.optimized_execution(False):
        assert torch.equal(tcemu.emulate_(traced, "tf32x3", backend="torch")(x), eager(x))

    class Host(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = _script(_model())

        def forward(self, x):
            return 2 * self.inner(x)

    host = tcemu.emulate_(Host(), "tf32x3", backend="torch")
    assert torch.equal(host(x), 2 * eager(x))


def test_non_float32_products_run_unchanged():
    x = _x().double()
    plain = _script(_model().double())
    emulated = tcemu.emulate_(_script(_model().double()), "tf32", backend="torch", warn_unreachable=False)
    assert "tcemu::linear" in str(emulated.out.graph)
    assert torch.equal(emulated.out(x), plain.out(x))  # float64: the aten op itself


def test_saved_emulated_model_calls_tcemu_ops_and_copies_restore():
    scripted = tcemu.emulate_(_script(_model()), "bf16x3", backend="torch")
    x = _x()
    want = scripted(x)
    buf = io.BytesIO()
    torch.jit.save(scripted, buf)
    buf.seek(0)
    loaded = torch.jit.load(buf)
    assert 'ops.tcemu.linear' in loaded.out.code and torch.equal(loaded(x), want)
    plain = _script(_model())(x)
    for twin in (loaded, copy.deepcopy(scripted)):
        tcemu.restore_(twin)
        assert "tcemu" not in twin.out.code and torch.equal(twin(x), plain)


def test_every_op_schema_matches_its_aten_op():
    """Each tcemu op takes its aten op's arguments, in order, then the method(s) and the backend."""
    for aten_schema, op in OPS.items():
        args = [a.name for a in getattr(torch.ops.tcemu, op.name).default._schema.arguments]
        aten_args = [a.name for a in op.aten._schema.arguments]
        tail = ["method", "grad_weight_method", "backend"] if op.name == "linear" else ["method", "backend"]
        assert args == aten_args + tail, aten_schema


def test_custom_ops_inside_a_scripted_model_are_listed_and_metered():
    lib = torch.library.Library("tcemu_test", "FRAGMENT")  # noqa: TOR901
    lib.define("mystery(Tensor x, Tensor w) -> Tensor")
    lib.impl("mystery", lambda x, w: x @ w, "CompositeExplicitAutograd")

    class Opaque(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.ops.tcemu_test.mystery(self.lin(x), self.lin.weight)

    scripted = _script(Opaque())
    with pytest.warns(UserWarning, match=r"not reached: .*custom op tcemu_test::mystery"):
        tcemu.emulate_(scripted, "tf32x3", backend="torch")
    (u,) = tcemu.unreachable_layers(scripted)
    assert u.fqn == "" and u.type_name == "Opaque" and "own compiled code" in u.reason
    with tcemu.coverage() as cov:
        scripted(torch.randn(2, 4))
    assert any(r.kind == "opaque" and "mystery" in r.op for r in cov.rows)
    assert "opaque" in cov.table()


@pytest.mark.interpret
def test_scripted_equals_eager_through_the_triton_kernels_interpreted():
    """The Triton backend (kernels run by Triton's interpreter on the CPU) behind the rewritten graphs: the eager
    emulated model's bits, fused attention included."""
    eager = tcemu.emulate_(_model(), "tf32x3", backend="triton")
    scripted = tcemu.emulate_(_script(_model()), "tf32x3", backend="triton")
    x = _x()
    with tcemu.config(small_shape_fallback=False, attention_fallback=False):
        want = _run(eager, x, double=False)
        with torch.jit.optimized_execution(False):
            assert _equal(_run(scripted, x, double=False), want)


def test_state_changed_while_emulated_stays_after_restore():
    scripted = tcemu.emulate_(_script(_model()), "tf32x3", backend="torch")
    scripted.eval()
    with torch.no_grad():
        scripted.out.weight.mul_(2.0)
    tcemu.restore_(scripted)
    assert not scripted.training and not _sub(scripted, "blocks.0").training
    x = _x()
    want = _model()
    with torch.no_grad():
        want.out.weight.mul_(2.0)
    assert torch.allclose(scripted(x), want(x), rtol=1e-5)


class _PythonInside(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    @torch.jit.ignore
    def python_part(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    def forward(self, x):
        return self.python_part(self.lin(x))


def test_a_module_torch_jit_save_refuses_is_a_clear_error():
    scripted = _script(_PythonInside())
    x = torch.randn(2, 4)
    want = scripted(x)
    with pytest.raises(RuntimeError, match="tcemu: cannot copy the TorchScript module <root>.*torch.jit.save"):
        tcemu.emulate_(scripted, "tf32x3")
    assert torch.equal(scripted(x), want) and "tcemu" not in scripted.code


def test_products_without_a_tcemu_op_are_listed():
    class Conv(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(2, 2, 3)
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(self.conv(x).transpose(1, 2))

    scripted = tcemu.emulate_(_script(Conv()), "tf32x3", warn_unreachable=False)
    assert rewritten_ops(scripted) == {"tcemu::linear": 1}
    (u,) = tcemu.unreachable_layers(scripted)
    assert u.fqn == "conv" and u.type_name == "Conv1d" and "aten::conv1d" in u.reason and "no tcemu op" in u.reason
