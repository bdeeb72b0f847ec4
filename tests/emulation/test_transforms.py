"""Forward-mode AD, torch.func transforms and batched gradients through every entry point of the emulation.

Each tangent, Jacobian, batched result and Hessian is checked three ways: bit for bit against the same emulated
products called directly (where the transform runs them as one call), against FP64 within the method's
elementwise bound (:func:`tcemu.testing.elementwise_bound`, relative to the same quantity computed from the
operands' magnitudes), and in :func:`tcemu.coverage`: every float32 product of the transform counted as
emulated, none as plain FP32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as F
from torch.func import functional_call, grad, hessian, jacfwd, jacrev, jvp, vmap

import tcemu
from tcemu.testing import ETA_FP32, assert_within_elementwise_bound, elementwise_bound

METHOD = "bf16x6"
M, K, N, S = 5, 24, 7, 3  # rows, contracted size, columns, batch (samples) of vmap


@dataclass
class Entry:
    """An entry point: ``f(x, w)`` in float32, its weight ``w`` and bias, and the weight's role: ``"matmul"``
    (x @ w, w (K, N)) or ``"linear"`` (x @ w^T, w (N, K)); either plus the bias where there is one."""

    f: Callable
    w: torch.Tensor
    role: str
    bias: torch.Tensor | None = None

    def matrix(self, w: torch.Tensor | None = None) -> torch.Tensor:
        """The weight as the right operand of the product (K, N)."""
        w = self.w if w is None else w
        return w if self.role == "matmul" else w.mT

    def product(self, t: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        """The emulated product of ``t`` with the weight, called directly (eager): a tangent's bits."""
        w = (self.w if w is None else w).detach()
        return tcemu.matmul(t, w, METHOD) if self.role == "matmul" else tcemu.linear(t, w, None, METHOD)

    def ref(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """What ``f`` computes, exactly (FP64 operands)."""
        y = x @ self.matrix(w)
        return y if self.bias is None else y + self.bias.double()


def _entries() -> dict[str, Entry]:
    g = torch.Generator().manual_seed(0)
    B = torch.randn(K, N, generator=g)
    W = torch.randn(N, K, generator=g)
    bias = torch.randn(N, generator=g)

    def in_mode(fn):
        def run(x, w):
            with tcemu.emulation_mode(METHOD):
                return fn(x, w)
        return run

    def module(mod: torch.nn.Module, trainable: bool) -> Entry:
        with torch.no_grad():
            mod.weight.copy_(W)
            mod.bias.copy_(bias)
        mod.requires_grad_(trainable)

        def run(x, w):  # the module as called; functional_call for another (batched, transformed) weight
            return mod(x) if w is mod.weight else functional_call(mod, {"weight": w, "bias": mod.bias}, (x,))

        return Entry(run, mod.weight, "linear", bias)

    return {
        "tcemu.matmul": Entry(lambda x, w: tcemu.matmul(x, w, METHOD), B, "matmul"),
        "tcemu.linear": Entry(lambda x, w: tcemu.linear(x, w, bias, METHOD), W, "linear", bias),
        "mode torch.matmul": Entry(in_mode(torch.matmul), B, "matmul"),
        "mode einsum": Entry(in_mode(lambda x, w: torch.einsum("mk,kn->mn", x, w)), B, "matmul"),
        "mode F.linear": Entry(in_mode(lambda x, w: F.linear(x, w, bias)), W, "linear", bias),
        "mode addmm": Entry(in_mode(lambda x, w: torch.addmm(bias, x, w)), B, "matmul", bias),
        "EmulatedLinear frozen": module(tcemu.EmulatedLinear(K, N, method=METHOD), False),
        "EmulatedLinear trainable": module(tcemu.EmulatedLinear(K, N, method=METHOD), True),
        "emulate_ model": module(tcemu.emulate_(torch.nn.Linear(K, N), METHOD), False),
    }


ENTRIES = _entries()
entry_names = pytest.mark.parametrize("name", list(ENTRIES))


def _inputs(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _assert_within(got: torch.Tensor, want64: torch.Tensor, magnitude64: torch.Tensor, rel: float) -> None:
    """``|got - want| <= rel * magnitude + eta`` elementwise (``magnitude``: the same quantity computed from the
    operands' magnitudes, the |A||B| of the bound)."""
    err = (got.detach().double() - want64).abs()
    tol = rel * magnitude64 + 4 * K * ETA_FP32
    worst = (err - tol).argmax()
    assert (err <= tol).all(), (f"error {err.flatten()[worst]:.3e} > {tol.flatten()[worst]:.3e} at flat index "
                                f"{int(worst)} (got {got.flatten()[worst].item():.9e}, "
                                f"FP64 {want64.flatten()[worst].item():.9e})")


def _assert_all_emulated(cov: tcemu.Coverage, flops: float) -> None:
    assert cov.flops("fp32") == 0 and cov.flops("fallback") == 0, cov.table()
    assert cov.flops("emulated") == flops, cov.table()
    assert set(cov.methods) == {METHOD}


PRODUCT_FLOPS = 2.0 * M * N * K


# --------------------------------------------------------------------------- forward mode


def _tangent(how: str, f: Callable, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    if how == "torch.func.jvp":
        return jvp(f, (x,), (t,))[1]
    with fwAD.dual_level():
        return fwAD.unpack_dual(f(fwAD.make_dual(x, t))).tangent


@entry_names
@pytest.mark.parametrize("how", ["torch.func.jvp", "forward_ad dual"])
def test_tangent_is_the_emulated_product_of_the_tangent(name, how):
    """torch's tangent of x @ B is T @ B: here the emulated product of T, bit for bit (it was zero)."""
    e = ENTRIES[name]
    x, t = _inputs(1, M, K), _inputs(2, M, K)
    with tcemu.coverage() as cov:
        tangent = _tangent(how, lambda z: e.f(z, e.w), x, t)
    assert torch.equal(tangent, e.product(t).detach())
    assert_within_elementwise_bound(tangent, t, e.matrix(), METHOD)
    _assert_all_emulated(cov, 2 * PRODUCT_FLOPS)  # the output and its tangent


@entry_names
def test_tangent_of_the_weight(name):
    """A weight tangent (forward-mode sensitivity to parameters): x @ dW, emulated."""
    e = ENTRIES[name]
    x, dw = _inputs(3, M, K), _inputs(4, *e.w.shape)
    with tcemu.coverage() as cov:
        tangent = jvp(lambda w: e.f(x, w), (e.w.detach(),), (dw,))[1]
    assert torch.equal(tangent, tcemu.matmul(x, e.matrix(dw), METHOD))
    assert_within_elementwise_bound(tangent, x, e.matrix(dw), METHOD)
    _assert_all_emulated(cov, 2 * PRODUCT_FLOPS)


# --------------------------------------------------------------------------- Jacobians


@entry_names
@pytest.mark.parametrize("transform", ["jacfwd", "jacrev"])
def test_jacobian_is_emulated_and_within_the_bound(name, transform):
    """jacfwd: the emulated products of the basis tangents (one batched product); jacrev: the emulated products
    of the basis cotangents with the weight, as tcemu.matmul gives them."""
    e = ENTRIES[name]
    x = _inputs(5, M, K)
    with tcemu.coverage() as cov:
        jac = (jacfwd if transform == "jacfwd" else jacrev)(lambda z: e.f(z, e.w))(x)
    assert jac.shape == (M, N, M, K)
    if transform == "jacfwd":
        basis = torch.eye(M * K).reshape(M * K, M, K)
        want = e.product(basis).reshape(M, K, M, N).permute(2, 3, 0, 1)
        cotangents = M * K
    else:
        basis = torch.eye(M * N).reshape(M * N, M, N)
        weight = e.w.mT if e.role == "matmul" else e.w
        want = tcemu.matmul(basis, weight.detach(), METHOD).reshape(M, N, M, K)
        cotangents = M * N
    assert torch.equal(jac, want.detach())
    jac64 = jacfwd(lambda z: e.ref(z, e.w.detach().double()))(x.double())
    # each entry is one weight entry times one (a one-hot product): |J - J64| <= bound * |J64|
    _assert_within(jac, jac64, jac64.abs(), elementwise_bound(METHOD, K if transform == "jacfwd" else N))
    _assert_all_emulated(cov, PRODUCT_FLOPS * (1 + cotangents))


# --------------------------------------------------------------------------- vmap


@entry_names
def test_vmap_over_inputs_is_the_batched_emulated_product(name):
    e = ENTRIES[name]
    xs = _inputs(6, S, M, K)
    with tcemu.coverage() as cov:
        out = vmap(lambda z: e.f(z, e.w))(xs)
    assert torch.equal(out, e.f(xs.reshape(S * M, K), e.w).reshape(S, M, N).detach())  # all rows in one call
    assert_within_elementwise_bound(out.reshape(S * M, N), xs.reshape(S * M, K), e.matrix(), METHOD, bias=e.bias)
    _assert_all_emulated(cov, S * PRODUCT_FLOPS)


@entry_names
def test_vmap_over_weights_is_the_batched_emulated_product(name):
    """A weight per batch entry (an ensemble): one batched emulated product."""
    e = ENTRIES[name]
    x, ws = _inputs(7, M, K), _inputs(8, S, *e.w.shape)
    with tcemu.coverage() as cov:
        out = vmap(lambda w: e.f(x, w))(ws)
    want = tcemu.matmul(x, e.matrix(ws), METHOD)
    assert torch.equal(out, want if e.bias is None else want + e.bias)
    for s in range(S):
        assert_within_elementwise_bound(out[s], x, e.matrix(ws[s]), METHOD, bias=e.bias)
    _assert_all_emulated(cov, S * PRODUCT_FLOPS)


# --------------------------------------------------------------------------- second derivatives


def _energy(f: Callable, w) -> Callable:
    return lambda z: 0.5 * f(z, w).square().sum()


def _hessian(how: str, e: Entry, x: torch.Tensor) -> torch.Tensor:
    energy = _energy(e.f, e.w)
    if how == "torch.func.hessian":  # forward over reverse
        return hessian(energy)(x)
    if how == "jacrev(jacrev)":
        return jacrev(jacrev(energy))(x)
    if how == "vmap(vjp)":
        _, vjp_fn = torch.func.vjp(torch.func.grad(energy), x)
        return vmap(vjp_fn)(torch.eye(M * K).reshape(M * K, M, K))[0].reshape(M, K, M, K)
    xg = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(energy(xg), xg, create_graph=True)
    if how == "is_grads_batched":  # reverse over reverse, all rows at once (the phonons' batched Hessian)
        return torch.autograd.grad(g, xg, torch.eye(M * K).reshape(M * K, M, K),
                                   is_grads_batched=True)[0].reshape(M, K, M, K)
    raise ValueError(how)


HESSIANS = ["torch.func.hessian", "jacrev(jacrev)", "vmap(vjp)", "is_grads_batched"]


@entry_names
@pytest.mark.parametrize("how", HESSIANS)
def test_hessian_is_emulated_and_within_the_bound(name, how):
    """H of E = |f(x)|^2 / 2 is I (x) B B^T: two chained products per entry, each within the bound, so
    |H - H64| <= ((1 + eps)^2 - 1) |B| |B|^T (the same Hessian from the weights' magnitudes)."""
    e = ENTRIES[name]
    x = _inputs(9, M, K)
    with tcemu.coverage() as cov:
        h = _hessian(how, e, x)
    w64 = e.w.detach().double()
    h64 = hessian(_energy(e.ref, w64))(x.double())
    magnitude = hessian(_energy(lambda z, w: z @ e.matrix(w), w64.abs()))(x.double())
    eps = elementwise_bound(METHOD, max(K, N))
    _assert_within(h, h64, magnitude, (1 + eps) ** 2 - 1)
    assert cov.flops("fp32") == 0 and cov.flops("emulated") > 0, cov.table()


@entry_names
def test_hessian_vector_product_forward_over_autograd_grad(name):
    """A dual input through autograd.grad(create_graph=True): the backward's products carry the tangent."""
    e = ENTRIES[name]
    x, t = _inputs(10, M, K), _inputs(11, M, K)
    with tcemu.coverage() as cov, fwAD.dual_level():
        xd = fwAD.make_dual(x.clone().requires_grad_(), t)
        (g,) = torch.autograd.grad(_energy(e.f, e.w)(xd), xd, create_graph=True)
        hvp = fwAD.unpack_dual(g).tangent
    bb = e.matrix().detach().double()
    hvp64 = (t.double() @ bb) @ bb.T
    magnitude = (t.double().abs() @ bb.abs()) @ bb.abs().T
    eps = elementwise_bound(METHOD, max(K, N))
    _assert_within(hvp, hvp64, magnitude, (1 + eps) ** 2 - 1)
    assert cov.flops("fp32") == 0 and cov.flops("emulated") > 0, cov.table()


@entry_names
def test_per_sample_gradients_of_the_weight(name):
    """vmap(grad): one weight gradient per sample (x_s^T C, or C^T x_s for a linear layer), emulated."""
    e = ENTRIES[name]
    xs, c = _inputs(12, S, M, K), _inputs(13, M, N)

    def loss(x, w):
        return (e.f(x, w) * c).sum()

    with tcemu.coverage() as cov:
        grads = vmap(grad(loss, argnums=1), in_dims=(0, None))(xs, e.w.detach())
    assert grads.shape == (S, *e.w.shape)
    per_sample = [x.double().T @ c.double() for x in xs]
    magnitude = [x.double().abs().T @ c.double().abs() for x in xs]
    if e.role == "linear":
        per_sample, magnitude = [g.T for g in per_sample], [g.T for g in magnitude]
    _assert_within(grads, torch.stack(per_sample), torch.stack(magnitude), elementwise_bound(METHOD, M))
    assert cov.flops("fp32") == 0 and cov.flops("emulated") == S * 2 * PRODUCT_FLOPS, cov.table()


@pytest.mark.parametrize("entry", ["matmul", "linear"])
def test_legacy_batched_products_on_a_thread_outside_the_vmap(entry):
    """autograd runs a CUDA backward (is_grads_batched: a legacy vmap) on threads of its own, whose legacy vmap
    nesting is 0: a product of operands batched there is still the batched product, its batch level read off
    the operand."""
    import threading

    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(3, 5, 7, generator=g), torch.randn(4, 7, generator=g)
    product = (lambda x: tcemu.matmul(x, b.T, "tf32x3")) if entry == "matmul" else \
        (lambda x: tcemu.linear(x, b, None, "tf32x3"))
    want = torch.stack([product(x) for x in a])
    level = torch._C._vmapmode_increment_nesting()
    try:
        batched, result = torch._add_batch_dim(a, 0, level), {}

        def run():
            result["out"] = torch._remove_batch_dim(product(batched), level, 3, 0)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    finally:
        torch._C._vmapmode_decrement_nesting()
    assert torch.equal(result["out"], want)
