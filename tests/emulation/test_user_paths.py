"""Paths a PyTorch user takes around an emulated model: forwards replaced on the instance (hooks and wrappers of
accelerate, PEFT, the user), module hooks, activation checkpointing, and products tcemu does not emulate inside
``emulation_mode`` (passed to torch unchanged, with torch's errors)."""

import copy
import functools
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tcemu
from tcemu.emulation.configuration import get_config
from tcemu.emulation.scope import scope_of

METHOD = "tf32x3"


class Product(nn.Module):
    """One functional product (what emulate_ reaches through the scope, not the nn.Linear swap)."""

    def __init__(self, n=48):
        super().__init__()
        g = torch.Generator().manual_seed(1)
        self.w = nn.Parameter(torch.randn(n, n, generator=g))

    def forward(self, x):
        return torch.matmul(x, self.w)


def _x(n=48, rows=8):
    return torch.randn(rows, n, generator=torch.Generator().manual_seed(2))


def _closure_wrapper(mod):
    inner = mod.forward
    calls = []

    @functools.wraps(inner)
    def wrapped(*args, **kwargs):
        calls.append(1)
        return inner(*args, **kwargs)

    return wrapped, calls


def _accelerate_style(mod):
    """accelerate's add_hook_to_module: a partial of a function of the module, the old forward kept."""
    calls = []
    mod._old_forward = mod.forward

    def new_forward(module, *args, **kwargs):
        calls.append(1)
        return module._old_forward(*args, **kwargs)

    return functools.update_wrapper(functools.partial(new_forward, mod), mod._old_forward), calls


def _bound_method(mod):
    """A bound method of another object assigned as the forward."""
    calls = []

    class Logger:
        def __init__(self, fwd):
            self.fwd = fwd

        def run(self, *args):
            calls.append(1)
            return self.fwd(*args)

    return Logger(mod.forward).run, calls


@pytest.mark.parametrize("make", [_closure_wrapper, _accelerate_style, _bound_method])
def test_a_forward_replaced_on_the_instance_is_emulated_and_put_back(make):
    """The replaced forward runs inside the scope (the module called directly: no parent's scope helps), bit for
    bit tcemu.matmul's result; restore_ puts the very same object back."""
    mod = Product()
    x = _x()
    plain = mod(x)
    wrapper, calls = make(mod)
    mod.forward = wrapper
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: everything is reached
        tcemu.emulate_(mod, METHOD)
    assert tcemu.unreachable_layers(mod) == []
    with tcemu.coverage() as cov:
        y = mod(x)
    assert calls and cov.fraction == 1.0
    want = tcemu.matmul(x, mod.w.detach(), METHOD)
    assert torch.equal(y, want) and not torch.equal(y, plain)
    tcemu.restore_(mod)
    assert mod.__dict__["forward"] is wrapper and scope_of(mod) is None
    assert torch.equal(mod(x), plain)


def test_a_replaced_forward_of_an_nn_linear():
    """A hook on an nn.Linear captures nn.Linear's forward before the swap: with the functional scope it is
    emulated; with functional=False it is named by unreachable_layers and emulate_ warns."""
    x = _x(32)
    lin = nn.Linear(32, 16)
    old = lin.forward
    lin.forward = lambda inp: old(inp)
    plain = lin(x)
    tcemu.emulate_(lin, METHOD)
    with tcemu.coverage() as cov:
        y = lin(x)
    assert cov.fraction == 1.0
    assert torch.equal(y, tcemu.linear(x, lin.weight.detach(), lin.bias.detach(), METHOD))
    tcemu.restore_(lin)
    assert type(lin) is nn.Linear and lin.__dict__["forward"].__name__ == "<lambda>"
    assert torch.equal(lin(x), plain)
    with pytest.warns(UserWarning, match="replaced on the instance"):
        tcemu.emulate_(lin, METHOD, functional=False)
    (u,) = tcemu.unreachable_layers(lin, functional=False)
    assert "functional=True" in u.reason


def test_a_replaced_forward_inside_a_model_keeps_its_emulation_in_a_deepcopy():
    model = nn.Sequential(nn.Tanh(), Product())
    model[1].forward, _ = _accelerate_style(model[1])
    tcemu.emulate_(model, METHOD)
    twin = copy.deepcopy(model)
    x = _x()
    with tcemu.coverage() as cov:
        y = twin[1](x)  # called directly: its own scope, bound to the copy
    assert cov.fraction == 1.0 and torch.equal(y, tcemu.matmul(x, twin[1].w.detach(), METHOD))
    assert twin[1].forward.args[0] is twin[1]


def test_emulate_functional_wraps_a_replaced_forward():
    mod = Product()
    wrapper, calls = _closure_wrapper(mod)
    mod.forward = wrapper
    tcemu.emulate_functional_(mod, METHOD, lambda m, fqn: True)
    x = _x()
    assert torch.equal(mod(x), tcemu.matmul(x, mod.w.detach(), METHOD)) and calls
    tcemu.restore_(mod)
    assert mod.__dict__["forward"] is wrapper


def _scripted_double(x: torch.Tensor) -> torch.Tensor:
    return x @ x


def test_a_torchscript_forward_on_the_instance_is_named_as_unreachable():
    mod = Product()
    mod.forward = torch.jit.script(_scripted_double)
    (u,) = tcemu.unreachable_layers(nn.Sequential(mod))
    assert "TorchScript" in u.reason


def test_module_hooks_keep_working():
    """Forward pre-hooks and hooks registered before and after emulate_ run, and what they change is used."""
    mod = Product()
    seen = []
    mod.register_forward_pre_hook(lambda m, args: (args[0] * 2.0,))
    mod.register_forward_hook(lambda m, args, out: seen.append("before") or out + 1.0)
    tcemu.emulate_(nn.Sequential(mod), METHOD)
    mod.register_forward_hook(lambda m, args, out: seen.append("after") or out * 3.0)
    x = _x()
    with tcemu.coverage() as cov:
        y = mod(x)
    assert seen == ["before", "after"] and cov.fraction == 1.0
    assert torch.equal(y, (tcemu.matmul(x * 2.0, mod.w.detach(), METHOD) + 1.0) * 3.0)


# ------------------------------------------------------------------ activation checkpointing


class Checkpointed(nn.Module):
    """A block that checkpoints a bound method of its own (its products reached by the scope only)."""

    def __init__(self, reentrant, checkpointed=True):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.w1 = nn.Parameter(torch.randn(48, 48, generator=g) / 7)
        self.w2 = nn.Parameter(torch.randn(48, 48, generator=g) / 7)
        self.plain = Product()  # left out by filter_fn in one test
        self.reentrant, self.checkpointed = reentrant, checkpointed

    def body(self, x):
        return torch.einsum("ni,ij->nj", torch.tanh(x @ self.w1), self.w2) + self.plain(x)

    def forward(self, x):
        if not self.checkpointed:
            return self.body(x)
        return torch.utils.checkpoint.checkpoint(self.body, x, use_reentrant=self.reentrant)


def _grads(model, x):
    xx = x.clone().requires_grad_(True)
    with tcemu.coverage() as cov:
        y = model(xx)
        (y * y).sum().backward()
    return [y.detach(), xx.grad, *(p.grad for p in model.parameters())], cov


@pytest.mark.parametrize("reentrant", [True, False])
@pytest.mark.parametrize("filtered", [False, True])
def test_checkpoint_recomputes_under_the_emulation(reentrant, filtered):
    """The recompute runs under the forward's emulation: output and every gradient bit for bit those of the
    model without checkpointing; a submodule left out by filter_fn stays plain in the recompute too."""
    keep = (lambda m, fqn: fqn != "plain") if filtered else None
    x = _x()
    want, cov_want = _grads(tcemu.emulate_(Checkpointed(reentrant, checkpointed=False), METHOD, keep), x)
    got, cov = _grads(tcemu.emulate_(Checkpointed(reentrant), METHOD, keep), x)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    # the recompute's products: the left-out module's plain (a non-reentrant recompute may stop before it),
    # the two others emulated
    product = 2.0 * 8 * 48 * 48
    more_fp32 = cov.flops("fp32") - cov_want.flops("fp32")
    more_emulated = cov.flops("emulated") - cov_want.flops("emulated")
    if filtered:
        assert more_emulated == 2 * product and more_fp32 in ((product, 0.0) if not reentrant else (product,))
    else:
        assert more_fp32 == 0.0 and more_emulated >= 2 * product


def _grads_backward_on_a_thread(model, x):
    """Forward here, backward on another thread (as autograd runs a CUDA backward): the recompute there."""
    import threading

    xx = x.clone().requires_grad_(True)
    with tcemu.coverage() as cov:
        y = model(xx)
        done = threading.Thread(target=lambda: (y * y).sum().backward())
        done.start()
        done.join()
    return [y.detach(), xx.grad, *(p.grad for p in model.parameters())], cov


class ConfigRecording(Checkpointed):
    """Records the tcemu.config each pass of its body runs under."""

    def __init__(self, reentrant, checkpointed=True):
        super().__init__(reentrant, checkpointed)
        self.seen = []

    def body(self, x):
        self.seen.append(get_config().small_shape_min_flops)
        return super().body(x)


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_recompute_on_another_thread_keeps_the_forwards_configuration(reentrant):
    """A backward on another thread (autograd's own threads on CUDA) recomputes under the forward's tcemu.config
    and counts its products for the forward's meter; output and gradients are those of the model without
    checkpointing."""
    x = _x()
    with tcemu.config(small_shape_min_flops=123.0):
        want, cov_want = _grads_backward_on_a_thread(
            tcemu.emulate_(ConfigRecording(reentrant, checkpointed=False), METHOD), x)
        model = tcemu.emulate_(ConfigRecording(reentrant), METHOD)
        got, cov = _grads_backward_on_a_thread(model, x)
    assert model.seen == [123.0, 123.0]  # the forward, and the recompute on the other thread
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert cov.flops("emulated") - cov_want.flops("emulated") >= 2 * (2.0 * 8 * 48 * 48)  # the recompute counted


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_under_a_user_emulation_mode(reentrant):
    """emulation_mode around the forward only: the recompute in the backward (outside the mode) is emulated."""
    w = torch.randn(48, 48, generator=torch.Generator().manual_seed(4), requires_grad=True)
    x = _x().requires_grad_(True)

    def f(h):
        return torch.tanh(h @ w) @ w

    grads = []
    for checkpointed in (False, True):
        with tcemu.emulation_mode(METHOD):
            y = torch.utils.checkpoint.checkpoint(f, x, use_reentrant=reentrant) if checkpointed else f(x)
        grads.append(torch.autograd.grad(y.sum(), (x, w)) if not reentrant else None)
        if reentrant:
            x.grad = w.grad = None
            y.sum().backward()
            grads[-1] = (x.grad.clone(), w.grad.clone())
    for a, b in zip(*grads):
        assert torch.equal(a, b)


def test_checkpoint_outside_the_emulation_keeps_a_scoped_module_emulated_and_the_rest_plain():
    """checkpoint called in plain code around a scoped module and a plain product: the recompute emulates the
    module (its own scope) and leaves the plain product plain, as the forward did."""
    sub = tcemu.emulate_(Product(), METHOD)
    w = torch.randn(48, 48, generator=torch.Generator().manual_seed(5), requires_grad=True)
    x = _x().requires_grad_(True)

    def f(h):
        return torch.tanh(sub(h)) @ w

    want = torch.autograd.grad(f(x).sum(), (x, w, sub.w))
    got = torch.autograd.grad(torch.utils.checkpoint.checkpoint(f, x, use_reentrant=False).sum(), (x, w, sub.w))
    for a, b in zip(got, want):
        assert torch.equal(a, b)


# ------------------------------------------------------------------ what tcemu does not emulate: torch's own call


def _operands():
    g = torch.Generator().manual_seed(6)
    return torch.randn(4, 5, generator=g), torch.randn(5, 3, generator=g), torch.randn(3, 5, generator=g)


@pytest.mark.parametrize("call", [
    lambda a, b, w: torch.mm(a.to_sparse(), b),
    lambda a, b, w: torch.matmul(a.to_sparse(), b),
    lambda a, b, w: a.to_sparse_csr() @ b,
    lambda a, b, w: F.linear(a.to_sparse(), w),
    lambda a, b, w: torch.addmm(torch.ones(4, 3), a.to_sparse(), b),
    lambda a, b, w: torch.matmul(a.to("meta"), b.to("meta")),
    lambda a, b, w: F.linear(a.to("meta"), w.to("meta"), torch.empty(3, device="meta")),
], ids=["coo-mm", "coo-matmul", "csr-matmul", "coo-linear", "coo-addmm", "meta-matmul", "meta-linear"])
def test_sparse_and_meta_products_are_torchs_own(call):
    a, b, w = _operands()
    want = call(a, b, w)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's beta warning for CSR
        with tcemu.emulation_mode(METHOD):
            got = call(a, b, w)
    assert got.shape == want.shape and got.device == want.device and got.layout == want.layout
    if got.device.type != "meta":
        assert torch.equal(got.to_dense(), want.to_dense())


@pytest.mark.parametrize("bias_shape", [(1, 3), (), (1,), (4, 3), (4, 1)])
def test_a_bias_that_broadcasts_is_added_to_the_emulated_product(bias_shape):
    a, _, w = _operands()
    bias = torch.randn(bias_shape, generator=torch.Generator().manual_seed(7))
    with tcemu.emulation_mode(METHOD):
        got = F.linear(a, w, bias)
    assert got.shape == F.linear(a, w, bias).shape
    assert torch.equal(got, tcemu.linear(a, w, None, METHOD) + bias)


@pytest.mark.parametrize("beta, alpha", [(True, 1), (False, 1), (1, True), (True, False)])
def test_addmm_takes_bool_scalars_as_torch_does(beta, alpha):
    a, b, _ = _operands()
    c = torch.randn(4, 3)
    with tcemu.emulation_mode(METHOD):
        got = torch.addmm(c, a, b, beta=beta, alpha=alpha)
        want = torch.addmm(c, a, b, beta=int(beta), alpha=int(alpha))
    assert torch.equal(got, want)


_MISFITS = {
    "matmul": lambda a: a @ a,
    "mm": lambda a: torch.mm(a, a),
    "bmm": lambda a: torch.bmm(a[None], a[None]),
    "mv": lambda a: torch.mv(a, torch.ones(4)),
    "dot": lambda a: torch.dot(torch.ones(3), torch.ones(4)),
    "batch": lambda a: torch.ones(2, 4, 5) @ torch.ones(3, 5, 3),
    "linear": lambda a: F.linear(a, torch.ones(3, 4)),
    "linear-bias": lambda a: F.linear(a, torch.ones(3, 5), torch.ones(4)),
    "inner": lambda a: torch.inner(a, torch.ones(4)),
    "vecdot": lambda a: torch.linalg.vecdot(a, torch.ones(4)),
    "addmm": lambda a: torch.addmm(torch.ones(4, 3), a, a),
}


@pytest.mark.parametrize("name", list(_MISFITS))
def test_operands_that_do_not_fit_raise_torchs_error(name):
    a, _, _ = _operands()
    with pytest.raises(Exception) as want:
        _MISFITS[name](a)
    with tcemu.emulation_mode(METHOD), pytest.raises(Exception) as got:
        _MISFITS[name](a)
    assert got.type is want.type and str(got.value) == str(want.value)


def test_an_emulated_linear_leaves_sparse_and_meta_inputs_to_torch_and_raises_torchs_error_type():
    a, _, _ = _operands()
    lin = nn.Linear(5, 3)
    want = lin(a.to_sparse())
    tcemu.emulate_(lin, METHOD)
    assert torch.equal(lin(a.to_sparse()), want)
    with pytest.raises(RuntimeError, match="EmulatedLinear: input has 4 features"):
        lin(torch.ones(2, 4))
    with torch.device("meta"):
        on_meta = nn.Linear(5, 3)
    tcemu.emulate_(on_meta, METHOD)
    assert on_meta(torch.empty(2, 5, device="meta")).shape == (2, 3)


def test_tcemu_shape_errors_are_torchs_type_too():
    with pytest.raises(RuntimeError, match="cannot be multiplied") as err:
        tcemu.matmul(torch.ones(2, 3), torch.ones(2, 3))
    assert isinstance(err.value, ValueError)  # as documented before


# ------------------------------------------------------------------ one coverage meter entered twice


def test_a_coverage_meter_entered_again_adds_and_nested_refuses_leaving_no_mode_behind():
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    a = torch.randn(8, 8)
    modes = len(_get_current_dispatch_mode_stack())
    cov = tcemu.coverage()
    with cov:
        a @ a
    with cov:  # after its block: counts on
        a @ a
    assert cov.flops("fp32") == 2 * 2 * 8**3 and cov.finished
    with cov:
        with pytest.raises(RuntimeError, match="tcemu.coverage: this meter is measuring already"):
            with cov:
                pass
        a @ a  # the outer block still measures
    assert cov.flops("fp32") == 3 * 2 * 8**3
    assert len(_get_current_dispatch_mode_stack()) == modes
    with tcemu.coverage() as other:  # a fresh meter works as before
        a @ a
    assert other.flops("fp32") == 2 * 8**3 and cov.flops("fp32") == 3 * 2 * 8**3


@pytest.mark.gpu
@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_recomputes_the_first_pass_bits_on_cuda(reentrant):
    """On CUDA (the Triton kernels, fallback off so that the small shapes run them): the recompute gives the
    first pass's bits, and the gradients are those of the model without checkpointing."""
    x = _x(48, 512).cuda()
    with tcemu.config(small_shape_fallback=False):
        want, _ = _grads(tcemu.emulate_(Checkpointed(reentrant, checkpointed=False).cuda(), METHOD), x)
        got, cov = _grads(tcemu.emulate_(Checkpointed(reentrant).cuda(), METHOD), x)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert cov.fraction == 1.0
