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
from tcemu.testing import (ETA_FP32, assert_within_elementwise_bound, elementwise_bound, normwise_bound,
                           relative_errors)

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


# --------------------------------------------------------------------------- an MLIP's force constants


class ToyPotential(torch.nn.Module):
    """An MLIP in miniature: Gaussian radial features of the pair distances, summed per atom by an einsum
    (a functional product), two layers (a linear one and a matmul) and a linear readout, summed to an energy."""

    def __init__(self, n_basis: int = 8, hidden: int = 16) -> None:
        super().__init__()
        self.register_buffer("mu", torch.linspace(0.5, 4.0, n_basis))
        self.embed = torch.nn.Linear(n_basis, hidden)
        self.mix = torch.nn.Parameter(torch.randn(hidden, hidden) / hidden**0.5)
        self.readout = torch.nn.Linear(hidden, 1)

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        r2 = (pos[:, None, :] - pos[None, :, :]).square().sum(-1)
        g = torch.exp(-(r2[..., None] - self.mu) ** 2)
        feats = torch.einsum("ijb,ij->ib", g, 1 - torch.eye(pos.shape[0], dtype=pos.dtype))
        h = torch.tanh(torch.tanh(self.embed(feats)) @ self.mix)
        return self.readout(h).sum()


#: products on one path from the positions to the energy (einsum, embed, mix, readout): each adds at most its
#: method's normwise error to the FP32 model's own
PRODUCTS_ON_A_PATH = 4


@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_force_constants_of_an_emulated_potential_match_fp64(method):
    """The phonons' Hessian of an emulate_'d potential, forward over reverse (torch.func.hessian) and reverse
    over reverse (is_grads_batched=True): as close to FP64 as the FP32 model's, plus the method's bound per
    product on a path; every product emulated."""
    import copy

    torch.manual_seed(0)
    base = ToyPotential().requires_grad_(False)
    pos = torch.randn(6, 3, generator=torch.Generator().manual_seed(1)) * 1.2
    h64 = hessian(copy.deepcopy(base).double())(pos.double())
    h32 = hessian(copy.deepcopy(base))(pos)
    model = tcemu.emulate_(copy.deepcopy(base), method)
    with tcemu.coverage(model) as cov:
        h = hessian(model)(pos)
        x = pos.clone().requires_grad_()
        (g,) = torch.autograd.grad(model(x), x, create_graph=True)
        h_batched = torch.autograd.grad(g, x, torch.eye(18).reshape(18, 6, 3), is_grads_batched=True)[0]
    assert cov.fraction == 1.0 and cov.flops("emulated") > 0, cov.table()
    tol = relative_errors(h32, h64)[0] + PRODUCTS_ON_A_PATH * normwise_bound(method, 16)
    for got in (h, h_batched.reshape(6, 3, 6, 3)):
        assert relative_errors(got, h64)[0] <= tol
    assert not torch.equal(h, h32)  # the emulated products, not FP32's rounding


# --------------------------------------------------------------------------- attention


def _attention64(q, k, v):
    """softmax(Q K^T / sqrt(D)) V in float64, written out (torch's CPU SDPA has no forward-mode AD)."""
    return torch.softmax(q @ k.mT / q.shape[-1] ** 0.5, dim=-1) @ v


def _attention_transforms(q, k, v, t):
    """jvp, vmap and is_grads_batched of the query's attention inside emulation_mode(attention=True)."""

    def attend(z):
        with tcemu.emulation_mode(METHOD, attention=True):
            return F.scaled_dot_product_attention(z, k, v)

    tangent = jvp(attend, (q,), (t,))[1]
    batched = vmap(attend)(torch.stack([q, t]))
    x = q.clone().requires_grad_()
    out = attend(x)
    cotangents = torch.stack([t, 2 * t])
    vjps = torch.autograd.grad(out, x, cotangents, is_grads_batched=True)[0]
    return tangent, batched, vjps, cotangents


def _check_attention(q, k, v, t, got) -> None:
    tangent, batched, vjps, cotangents = got
    q64, k64, v64, t64 = (z.double() for z in (q, k, v, t))
    want = (jvp(lambda z: _attention64(z, k64, v64), (q64,), (t64,))[1],
            torch.stack([_attention64(z, k64, v64) for z in (q64, t64)]),
            torch.stack([torch.func.vjp(lambda z: _attention64(z, k64, v64), q64)[1](c.double())[0]
                         for c in cotangents]))
    want32 = (jvp(lambda z: _attention64(z, k, v), (q,), (t,))[1],
              torch.stack([_attention64(z, k, v) for z in (q, t)]),
              torch.stack([torch.func.vjp(lambda z: _attention64(z, k, v), q)[1](c)[0] for c in cotangents]))
    for got_i, want_i, fp32_i in zip((tangent, batched, vjps), want, want32):
        # the two products of attention (and their tangents): each within the method's normwise error of FP32's
        tol = relative_errors(fp32_i, want_i)[0] + 2 * normwise_bound(METHOD, max(q.shape[-2], q.shape[-1]))
        assert relative_errors(got_i, want_i)[0] <= tol


def _attention_inputs():
    g = torch.Generator().manual_seed(20)
    return [torch.randn(2, 2, 8, 16, generator=g) for _ in range(4)]


def test_attention_under_forward_ad_vmap_and_batched_gradients():
    q, k, v, t = _attention_inputs()
    with tcemu.coverage() as cov:
        got = _attention_transforms(q, k, v, t)
    _check_attention(q, k, v, t, got)
    assert cov.fraction == 1.0 and set(cov.methods) == {METHOD}, cov.table()


@pytest.mark.interpret
def test_fused_attention_leaves_transforms_to_the_reference_interpret():
    """Where the fused kernels apply (here the interpreter), a transformed attention runs the reference (the
    fused ops have no jvp or vmap rule), and a batched gradient of a fused forward is the reference's."""
    from tcemu.emulation.attention import _fused_unsupported

    q, k, v, t = _attention_inputs()
    assert _fused_unsupported(q, k, v, None, tcemu.get_method(METHOD)) is None
    with tcemu.coverage() as cov:
        got = _attention_transforms(q, k, v, t)
    _check_attention(q, k, v, t, got)
    assert cov.fraction == 1.0, cov.table()


# --------------------------------------------------------------------------- the Triton backend


@pytest.mark.interpret
@pytest.mark.parametrize("op", ["matmul", "linear"])
def test_triton_backend_under_transforms_interpret(op):
    """The Triton kernels serve the same Functions: a tangent, a vmapped product and a batched Hessian are
    the kernels' own products (bit for bit) and counted as emulated."""
    g = torch.Generator().manual_seed(30)
    x, t = torch.randn(M, K, generator=g), torch.randn(M, K, generator=g)
    w = torch.randn(K, N, generator=g) if op == "matmul" else torch.randn(N, K, generator=g)

    def f(z, w=w):
        return (tcemu.matmul(z, w, METHOD, backend="triton") if op == "matmul"
                else tcemu.linear(z, w, None, METHOD, backend="triton"))

    with tcemu.coverage() as cov:
        tangent = jvp(f, (x,), (t,))[1]
        batched = vmap(f)(torch.stack([x, t]))
        xg = x.clone().requires_grad_()
        (gr,) = torch.autograd.grad(0.5 * f(xg).square().sum(), xg, create_graph=True)
        h = torch.autograd.grad(gr, xg, torch.eye(M * K).reshape(M * K, M, K), is_grads_batched=True)[0]
    assert torch.equal(tangent, f(t))
    assert torch.equal(batched, f(torch.stack([x, t]).reshape(2 * M, K)).reshape(2, M, N))
    assert cov.flops("fp32") == 0 and cov.flops("emulated") > 0, cov.table()
    bb = (w if op == "matmul" else w.T).double()
    h64 = torch.kron(torch.eye(M, dtype=torch.float64), bb @ bb.T).reshape(M, K, M, K)
    magnitude = torch.kron(torch.eye(M, dtype=torch.float64), bb.abs() @ bb.abs().T).reshape(M, K, M, K)
    eps = elementwise_bound(METHOD, max(K, N))
    _assert_within(h.reshape(M, K, M, K), h64, magnitude, (1 + eps) ** 2 - 1)


# --------------------------------------------------------------------------- more transforms and layouts


def _quadratic(z, w, bias):
    """E = |z w^T + bias|^2 / 2: its derivatives are chains of products with w."""
    return 0.5 * (F.linear(z, w, bias) if z.dtype == torch.float64 else tcemu.linear(z, w, bias, METHOD)).square().sum()


def _second_derivatives():
    """(name, float32 result, FP64 result, the same from magnitudes, products in a chain)."""
    g = torch.Generator().manual_seed(40)
    x, t = torch.randn(M, K, generator=g), torch.randn(M, K, generator=g)
    w, bias = torch.randn(N, K, generator=g), torch.randn(N, generator=g)
    x64, t64, w64, b64 = x.double(), t.double(), w.double(), bias.double()
    af = torch.autograd.functional
    hess64 = hessian(lambda z: _quadratic(z, w64, b64))(x64)
    hess_mag = hessian(lambda z: _quadratic(z, w64.abs(), b64))(x64)
    jac64 = jacfwd(lambda z: F.linear(z, w64, b64))(x64)
    return [
        ("jacfwd(jacfwd)", lambda: jacfwd(jacfwd(lambda z: _quadratic(z, w, bias)))(x), hess64, hess_mag, 2),
        ("grad of jvp", lambda: grad(lambda z: jvp(lambda u: _quadratic(u, w, bias), (z,), (t,))[1])(x),
         (t64 @ w64.T) @ w64, (t64.abs() @ w64.abs().T) @ w64.abs(), 2),
        ("autograd.functional.hessian", lambda: af.hessian(lambda z: _quadratic(z, w, bias), x, vectorize=True),
         hess64, hess_mag, 2),
        ("autograd.functional.hessian forward-over-reverse",
         lambda: af.hessian(lambda z: _quadratic(z, w, bias), x, vectorize=True,
                            outer_jacobian_strategy="forward-mode"), hess64, hess_mag, 2),
        ("autograd.functional.jacobian forward-mode",
         lambda: af.jacobian(lambda z: tcemu.linear(z, w, bias, METHOD), x, vectorize=True, strategy="forward-mode"),
         jac64, jac64.abs(), 1),
        ("autograd.functional.hvp", lambda: af.hvp(lambda z: _quadratic(z, w, bias), x, t)[1],
         (t64 @ w64.T) @ w64, (t64.abs() @ w64.abs().T) @ w64.abs(), 2),
        ("autograd.functional.jvp", lambda: af.jvp(lambda z: tcemu.linear(z, w, bias, METHOD), x, t)[1],
         t64 @ w64.T, t64.abs() @ w64.abs().T, 1),
        ("jvp of the bias alone", lambda: jvp(lambda b: tcemu.linear(x, w, b, METHOD), (bias,), (torch.ones(N),))[1],
         torch.ones(M, N, dtype=torch.float64), torch.ones(M, N, dtype=torch.float64), 0),
    ]


SECOND = _second_derivatives()


@pytest.mark.parametrize("case", range(len(SECOND)), ids=[c[0] for c in SECOND])
def test_other_transforms_are_emulated_and_within_the_bound(case):
    name, run, want64, magnitude, chain = SECOND[case]
    with tcemu.coverage() as cov:
        got = run()
    eps = elementwise_bound(METHOD, max(K, N))
    _assert_within(got, want64, magnitude, (1 + eps) ** chain - 1)
    assert cov.flops("fp32") == 0 and cov.flops("emulated") > 0, cov.table()


def _layouts():
    """(name, vmapped call, the same products called directly)."""
    g = torch.Generator().manual_seed(41)
    xs, x, v = torch.randn(S, M, K, generator=g), torch.randn(M, K, generator=g), torch.randn(S, K, generator=g)
    b, w = torch.randn(K, N, generator=g), torch.randn(N, K, generator=g)
    ws, bs, bias = torch.randn(S, N, K, generator=g), torch.randn(S, N, generator=g), torch.randn(N, generator=g)
    bmats = torch.randn(K, N, S, generator=g)

    def mm(p, q):
        return tcemu.matmul(p, q, METHOD)

    def lin(p, q, r):
        return tcemu.linear(p, q, r, METHOD)

    def mode_bmm(p, q):
        with tcemu.emulation_mode(METHOD):
            return torch.bmm(p, q)

    return [
        ("batch dimension not first", lambda: vmap(lambda z: mm(z, b), in_dims=1)(xs.movedim(0, 1)), mm(xs, b)),
        ("both operands batched, other dimensions", lambda: vmap(mm, in_dims=(1, 2))(xs.movedim(0, 1), bmats),
         mm(xs, bmats.movedim(2, 0))),
        ("vector times matrix", lambda: vmap(lambda z: mm(z, b))(v), mm(v, b)),
        ("matrix times vector", lambda: vmap(lambda z: mm(w, z))(v), mm(w, v.T).T),
        ("vmap of vmap", lambda: vmap(vmap(lambda z: mm(z, b)))(xs.reshape(S, 1, M, K)), mm(xs, b).reshape(S, 1, M, N)),
        ("linear, vectors", lambda: vmap(lambda z: lin(z, w, bias))(v), lin(v, w, bias)),
        ("linear, a bias per entry", lambda: vmap(lambda r: lin(x, w, r))(bs), lin(x, w, None) + bs[:, None, :]),
        ("linear, everything batched", lambda: vmap(lin)(xs, ws, bs), mm(xs, ws.mT) + bs[:, None, :]),
        ("mode bmm", lambda: vmap(mode_bmm)(xs.reshape(S, 1, M, K), b.expand(S, 1, K, N)),
         mm(xs, b).reshape(S, 1, M, N)),
        ("emulation_mode around vmap", lambda: _in_mode(lambda: vmap(lambda z: torch.matmul(z, b))(xs)), mm(xs, b)),
    ]


def _in_mode(fn):
    with tcemu.emulation_mode(METHOD):
        return fn()


LAYOUTS = _layouts()


@pytest.mark.parametrize("case", range(len(LAYOUTS)), ids=[c[0] for c in LAYOUTS])
def test_vmap_layouts_give_the_direct_products(case):
    name, run, want = LAYOUTS[case]
    with tcemu.coverage() as cov:
        got = run()
    assert torch.equal(got, want)
    assert cov.flops("fp32") == 0 and cov.flops("emulated") > 0, cov.table()


def test_make_fx_tracing_is_refused_with_one_line():
    """torch.func.linearize traces the jvp with make_fx, which cannot hold the range fix-up's decision on the
    data (nor the Triton kernels launched in eager code): a line naming tcemu and what to use instead."""
    x = torch.randn(M, K)
    with pytest.raises(RuntimeError, match=r"^tcemu\.matmul: .*make_fx.*torch\.func\.jvp"):
        torch.func.linearize(lambda z: tcemu.matmul(z, torch.ones(K, N), METHOD), x)
