"""Function transforms beyond the entry-point table of test_transforms.py: an MLIP's force constants, attention,
the Triton kernels (interpreter), other transforms (torch.autograd.functional, nested ones), vmap layouts, and
the one refusal (make_fx tracing outside torch.compile). Each result against FP64 within the method's bound, and
counted as emulated by :func:`tcemu.coverage`."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, hessian, jacfwd, jvp, vmap

import tcemu
from tcemu.emulation.dispatch import _pick_backend, every_gemm_emulated
from tcemu.testing import ETA_FP32, elementwise_bound, normwise_bound, relative_errors

METHOD = "bf16x6"
M, K, N, S = 5, 24, 7, 3  # rows, contracted size, columns, batch of vmap


def _assert_within(got: torch.Tensor, want64: torch.Tensor, magnitude64: torch.Tensor, rel: float) -> None:
    """``|got - want| <= rel * magnitude + eta`` elementwise (``magnitude``: the same quantity computed from the
    operands' magnitudes, the |A||B| of the bound)."""
    err = (got.detach().double() - want64).abs()
    tol = rel * magnitude64 + 4 * K * ETA_FP32
    assert (err <= tol).all(), f"error {(err - tol).max():.3e} beyond the bound"


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
        feats = torch.einsum("ijb,ij->ib", g, 1 - torch.eye(pos.shape[0], dtype=pos.dtype, device=pos.device))
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


def test_third_derivatives_by_successive_batched_gradients():
    """is_grads_batched on a Hessian made by is_grads_batched (create_graph): the third derivative, emulated;
    x^3 terms so that it is not zero: d3/dx3 sum((x b)^3) contracted with ones = 6 sum over columns of b^3."""
    g = torch.Generator().manual_seed(42)
    b, x0 = torch.randn(K, N, generator=g), torch.randn(M, K, generator=g)

    def third(dtype, mm):
        x = x0.to(dtype).requires_grad_()
        (gr,) = torch.autograd.grad(mm(x, b.to(dtype)).pow(3).sum(), x, create_graph=True)
        h = torch.autograd.grad(gr, x, torch.ones(2, M, K, dtype=dtype), is_grads_batched=True, create_graph=True)[0]
        return torch.autograd.grad(h, x, torch.ones(3, 2, M, K, dtype=dtype), is_grads_batched=True)[0]

    with tcemu.coverage() as cov:
        got = third(torch.float32, lambda p, q: tcemu.matmul(p, q, METHOD))
    want = third(torch.float64, torch.matmul)
    assert relative_errors(got, want)[0] <= 4 * normwise_bound(METHOD, K)  # four chained products
    assert cov.flops("fp32") == 0 and cov.flops("emulated") > 0, cov.table()


def test_training_through_a_batched_hessian():
    """is_grads_batched with create_graph, then the weights' gradient of a loss on that Hessian (trainable
    weights inside the batched backward): emulated, and as close to FP64 as FP32's plus the bound per product
    on a path (two layers, their backward and its batched backward, then the weights' backward: 8)."""

    def run(dtype, lin):
        g = torch.Generator().manual_seed(43)
        w = torch.randn(N, K, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        x = torch.randn(M, K, generator=g, dtype=torch.float64).to(dtype).requires_grad_()
        energy = lin(torch.tanh(lin(x, w)), w[:, :N]).square().sum()
        (gr,) = torch.autograd.grad(energy, x, create_graph=True)
        eye = torch.eye(M * K, dtype=dtype).reshape(M * K, M, K)
        h = torch.autograd.grad(gr, x, eye, is_grads_batched=True, create_graph=True)[0]
        return torch.autograd.grad(h.square().sum(), w)[0]

    with tcemu.coverage() as cov:
        got = run(torch.float32, lambda p, q: tcemu.linear(p, q, None, METHOD))
    want = run(torch.float64, F.linear)
    fp32 = run(torch.float32, F.linear)
    assert relative_errors(got, want)[0] <= relative_errors(fp32, want)[0] + 8 * normwise_bound(METHOD, M * K)
    assert cov.flops("fp32") == 0 and cov.flops("emulated") > 0, cov.table()


def test_nested_legacy_vmap_is_refused_with_one_line():
    from torch._vmap_internals import _vmap

    with pytest.raises(NotImplementedError, match=r"^tcemu: .*legacy vmap nested"):
        _vmap(_vmap(lambda z: tcemu.matmul(z, torch.ones(K, N), METHOD)))(torch.randn(2, 3, M, K))


def test_make_fx_tracing_is_refused_with_one_line():
    """torch.func.linearize traces the jvp with make_fx, which cannot hold the range fix-up's decision on the
    data (nor the Triton kernels launched in eager code): a line naming tcemu and what to use instead."""
    x = torch.randn(M, K)
    with pytest.raises(RuntimeError, match=r"^tcemu\.matmul: .*make_fx.*torch\.func\.jvp"):
        torch.func.linearize(lambda z: tcemu.matmul(z, torch.ones(K, N), METHOD), x)


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_transforms_on_the_triton_kernels_gpu(method):
    """CUDA, backend auto (the Triton GEMMs, no small-shape fallback): a tangent is the kernels' product of the
    tangent, vmap is one batched kernel call, and an emulated potential's force constants (forward over reverse
    and is_grads_batched) are as close to FP64 as the FP32 model's plus the bound; all counted as emulated."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(50)
    x, t = (torch.randn(64, 96, generator=g, device=dev) for _ in range(2))
    w = torch.randn(80, 96, generator=g, device=dev)
    with every_gemm_emulated(), tcemu.coverage() as cov:
        tangent = jvp(lambda z: tcemu.linear(z, w, None, method), (x,), (t,))[1]
        batched = vmap(lambda z: tcemu.matmul(z, w.T, method))(torch.stack([x, t]))
        direct = tcemu.linear(t, w, None, method), tcemu.matmul(torch.stack([x, t]), w.T, method)
    assert torch.equal(tangent, direct[0]) and torch.equal(batched, direct[1])
    assert cov.fraction == 1.0 and cov.flops("fallback") == 0, cov.table()

    torch.manual_seed(0)
    base = ToyPotential().requires_grad_(False).to(dev)
    pos = torch.randn(6, 3, generator=g, device=dev) * 1.2
    h64 = hessian(copy.deepcopy(base).double())(pos.double())
    h32 = hessian(copy.deepcopy(base))(pos)
    model = tcemu.emulate_(copy.deepcopy(base), method)
    with every_gemm_emulated(), tcemu.coverage(model) as cov:
        h = hessian(model)(pos)
        xg = pos.clone().requires_grad_()
        (gr,) = torch.autograd.grad(model(xg), xg, create_graph=True)
        h_batched = torch.autograd.grad(gr, xg, torch.eye(18, device=dev).reshape(18, 6, 3), is_grads_batched=True)[0]
    assert cov.fraction == 1.0, cov.table()
    assert _pick_backend("auto", dev, tcemu.get_method(method)).name == "triton"
    tol = relative_errors(h32, h64)[0] + PRODUCTS_ON_A_PATH * normwise_bound(method, 16)
    for got in (h, h_batched.reshape(6, 3, 6, 3)):
        assert relative_errors(got, h64)[0] <= tol



@pytest.mark.gpu
def test_fused_attention_leaves_transforms_to_the_reference_gpu():
    """On CUDA, where the fused kernels run: a transformed attention (and a batched gradient of a fused forward)
    is the reference's, within the bound, all emulated."""
    from tcemu.emulation.attention import _fused_unsupported

    q, k, v, t = (z.cuda() for z in _attention_inputs())
    assert _fused_unsupported(q, k, v, None, tcemu.get_method(METHOD)) is None
    with every_gemm_emulated(), tcemu.coverage() as cov:
        got = _attention_transforms(q, k, v, t)
    _check_attention(q, k, v, t, got)
    assert cov.fraction == 1.0, cov.table()


# --------------------------------------------------------------------------- transforms inside torch.compile


def _compiled_transforms(method: str, compiler: str):
    """Forward-mode, reverse-mode and second derivatives of emulated products, each inside torch.compile, with
    the eager and FP64 values; 3 rows of ``a`` are zero (signed zeros of the primal)."""
    g = torch.Generator().manual_seed(2)
    a, b, t = torch.randn(M, K, generator=g), torch.randn(K, N, generator=g), torch.randn(M, K, generator=g)
    a[:3] = 0.0
    b[:, 0] = -b[:, 0].abs()  # column 0: a zero row times it gives -0 in some elements (and +0 in others)
    w, bias = torch.randn(N, K, generator=g), torch.randn(N, generator=g)

    def mm(z):
        return tcemu.matmul(z, b, method)

    def lin(z):
        return tcemu.linear(z, w, bias, method)

    def energy(z):  # a nonlinear scalar through both products: its gradient and Hessian
        return _energy(mm(z), lin(z))

    fns = {
        "primal": lambda z: (mm(z), lin(z)),
        "jvp": lambda z: (jvp(mm, (z,), (t,))[1], jvp(lin, (z,), (t,))[1]),
        "grad": lambda z: (grad(energy)(z),),
        "hessian": lambda z: (hessian(energy)(z[:2]),),
    }
    out = {}
    for name, fn in fns.items():
        torch._dynamo.reset()
        out[name] = (torch.compile(fn, backend=compiler)(a), fn(a))
    return a, b, t, w, bias, out


def _energy(product: torch.Tensor, layer: torch.Tensor) -> torch.Tensor:
    return (torch.tanh(product) * layer).sum()


@pytest.mark.parametrize("compiler", [
    "aot_eager",  # Dynamo and AOTAutograd, as inductor sees the graphs
    pytest.param("inductor", marks=pytest.mark.slow(reason="inductor compiles 4 functions: a minute on 2 cores")),
])
def test_transforms_inside_torch_compile_give_the_fp32_derivatives(compiler):
    """torch.func's grad, jvp and hessian inside torch.compile (where the Functions' rules are not seen and the
    traced split has zero derivative): the primal keeps the emulated bits, signed zeros included, and each
    derivative is the FP32 product's, within FP32's bound of FP64 (not zero, as the traced split alone gives)."""
    a, b, t, w, bias, out = _compiled_transforms(METHOD, compiler)
    for got, eager in zip(*out["primal"]):
        assert torch.equal(got, eager) and torch.equal(got.signbit(), eager.signbit())
    assert (out["primal"][0][0] == 0).any() and out["primal"][0][0].signbit().any()
    a64, b64, t64, w64, bias64 = (x.double() for x in (a, b, t, w, bias))
    jvp_mm, jvp_lin = out["jvp"][0]
    _assert_within(jvp_mm, t64 @ b64, t64.abs() @ b64.abs(), normwise_bound("fp32", K))
    _assert_within(jvp_lin, t64 @ w64.T, t64.abs() @ w64.abs().T, normwise_bound("fp32", K))
    def energy64(z):
        return _energy(z @ b64, z @ w64.T + bias64)

    for name in ("grad", "hessian"):
        (got,), (eager,) = out[name]
        want = grad(energy64)(a64) if name == "grad" else hessian(energy64)(a64[:2])
        assert got.abs().max() > 0
        assert relative_errors(got, want)[0] <= relative_errors(eager, want)[0] + 2 * normwise_bound(METHOD, K)
