"""einsum / tensordot / bilinear / multi_dot lowered to tcemu.matmul, and what emulation_mode routes there.

Tolerances are the rigorous elementwise bound of tcemu.testing applied to each accumulating step: a chain of
n - 1 pairwise products has |C - C64| <= ((n-1) (b + u) + (n-1)^2 b^2) * contraction(|A|, |B|, ...) + eta,
with b = elementwise_bound(method, K) at the largest K (the bound grows with K) and u one FP32 rounding of an
elementwise product step. Single-pass TF32 misses that bound, so the products are emulated.
"""

import math

import pytest
import torch
import torch.nn.functional as F

import tcemu
from tcemu.emulation.contractions import bilinear, einsum, multi_dot, tensordot
from tcemu.testing import U_FP32, elementwise_bound, eta_bound

EQUATIONS = [  # (equation, shapes): matmul-like, batched, broadcast, ellipsis, diagonals, one-operand sums, chains
    ("ij,jk->ik", [(5, 70), (70, 6)]),
    ("ij,jk", [(5, 70), (70, 6)]),
    ("bij,bjk->bik", [(3, 4, 70), (3, 70, 5)]),
    ("bij,bjk->bik", [(1, 4, 70), (3, 70, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 70), (3, 70, 4)]),
    ("iij,jk->ik", [(3, 3, 70), (70, 2)]),
    ("ij,ij->", [(3, 70), (3, 70)]),
    ("ij,ij->i", [(3, 70), (3, 70)]),
    ("ijk,ikl->ijl", [(2, 3, 70), (2, 70, 5)]),
    ("zui,zvi->zuv", [(6, 4, 3), (6, 5, 3)]),  # e3nn's l=1 block: K = 3
    ("uvw,zu,zv->zw", [(8, 9, 6), (7, 8), (7, 9)]),  # three operands (opt_einsum path)
    ("ab,bc,cd,de->ae", [(2, 30), (30, 40), (40, 5), (5, 3)]),
    ("ijk,k->ij", [(2, 3, 70), (70,)]),
    ("Ab,bA->A", [(3, 70), (70, 3)]),
    ("ij,kj->ik", [(3, 1), (4, 70)]),  # a size-1 summed label broadcasts
    ("i...,i...->...", [(70, 2, 4), (70, 1, 4)]),
    ("ab,cd->", [(2, 3), (4, 5)]),  # sums over indices of one operand each, then a product of scalars
]


def _operands(shapes, seed=0, grad=False):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen).requires_grad_(grad) for s in shapes]


def _tolerance(method, equation, ops):
    """The chained elementwise bound of the module docstring, as a tensor of the result's shape."""
    n = len(ops)
    k = max([s for o in ops for s in o.shape] + [1])
    b = elementwise_bound(method, k)
    steps = max(n - 1, 1)
    scale = torch.einsum(equation, *(o.detach().double().abs() for o in ops))
    return (steps * (b + U_FP32) + steps**2 * b**2) * scale + eta_bound(method, k)


@pytest.mark.parametrize("equation,shapes", EQUATIONS)
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_einsum_is_within_the_methods_bound_of_fp64(equation, shapes, method):
    ops = _operands(shapes)
    want = torch.einsum(equation, *(o.double() for o in ops))
    got = einsum(equation, *ops, method=method)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert ((got.double() - want).abs() <= _tolerance(method, equation, ops)).all()


def test_single_pass_tf32_misses_that_bound_so_the_products_are_emulated():
    for equation, shapes in (("bij,bjk->bik", [(3, 4, 256), (3, 256, 5)]), ("uvw,zu,zv->zw", [(8, 9, 6), (7, 8), (7, 9)])):
        ops = _operands(shapes)
        want = torch.einsum(equation, *(o.double() for o in ops))
        err = (einsum(equation, *ops, method="tf32").double() - want).abs()
        assert (err > _tolerance("tf32x3", equation, ops)).any()


@pytest.mark.parametrize("equation,shapes", EQUATIONS[:12])
def test_einsum_gradients_and_double_backward_match_fp64(equation, shapes):
    ops = _operands(shapes, grad=True)
    ops64 = [o.detach().double().requires_grad_() for o in ops]
    out, out64 = einsum(equation, *ops, method="tf32x3"), torch.einsum(equation, *ops64)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(out, ops, g, create_graph=True)
    grads64 = torch.autograd.grad(out64, ops64, g.double(), create_graph=True)
    for a, b in zip(grads, grads64):
        assert (a.double() - b).abs().max() <= 1e-5 * (b.abs().max() + 1)
    # double backward: the gradient of a function of the gradients (training on forces)
    second = torch.autograd.grad(sum((x**2).sum() for x in grads), ops[0])[0]
    second64 = torch.autograd.grad(sum((x**2).sum() for x in grads64), ops64[0])[0]
    assert (second.double() - second64).abs().max() <= 1e-4 * (second64.abs().max() + 1)


def test_einsum_argument_forms_and_torchs_errors():
    a, b = _operands([(3, 70), (70, 5)])
    want = einsum("ij,jk->ik", a, b)
    assert torch.equal(einsum("ij,jk", [a, b]), want)
    assert torch.equal(einsum(a, [0, 1], b, [1, 2], [0, 2]), want)
    with pytest.raises(RuntimeError):
        einsum("ij,jk->il", a, b)  # torch's own check of the equation
    with pytest.raises(RuntimeError):
        einsum("ij,jk->ik", a, a)  # sizes do not match
    with pytest.raises(TypeError, match="float32"):
        einsum("ij,jk->ik", a.double(), b.double())


@pytest.mark.parametrize("dims", [1, ([1], [0]), [[0, 1], [1, 0]], torch.tensor(1), ([-1], [0])])
def test_tensordot_dims_forms(dims):
    a, b = _operands([(70, 70), (70, 70)])
    want = torch.tensordot(a.double(), b.double(), dims)
    got = tensordot(a, b, dims, method="tf32x3")
    k = 70 * (2 if isinstance(dims, list) else 1)
    scale = torch.tensordot(a.double().abs(), b.double().abs(), dims)
    assert ((got.double() - want).abs() <= elementwise_bound("tf32x3", k) * scale + 1e-40).all()


def test_tensordot_without_summed_dims_is_torchs_outer_product():
    a, b = _operands([(3, 4), (5,)])
    assert torch.equal(tensordot(a, b, 0), torch.tensordot(a, b, 0))


def test_bilinear_and_multi_dot_match_fp64():
    x1, x2, w, bias = _operands([(2, 7, 30), (2, 7, 40), (5, 30, 40), (5,)])
    want = F.bilinear(x1.double(), x2.double(), w.double(), bias.double())
    scale = F.bilinear(x1.double().abs(), x2.double().abs(), w.double().abs(), bias.double().abs())
    b = elementwise_bound("bf16x6", 40)
    assert ((bilinear(x1, x2, w, bias, method="bf16x6").double() - want).abs() <= 2.1 * b * scale + 1e-40).all()
    mats = _operands([(30,), (30, 40), (40, 20), (20, 60), (60,)])
    want = torch.linalg.multi_dot([m.double() for m in mats])
    got = multi_dot(mats, method="tf32x3")
    assert got.shape == want.shape == ()
    scale = torch.linalg.multi_dot([m.double().abs() for m in mats])
    assert abs(got.double() - want) <= 4.1 * elementwise_bound("tf32x3", 60) * scale


# --------------------------------------------------------------------------- emulation_mode's routing


def _routed_cases():
    gen = torch.Generator().manual_seed(3)

    def r(*s):
        return torch.randn(*s, generator=gen)

    a, b, w, v, u = r(8, 96), r(96, 16), r(16, 96), r(96), r(96)
    a3, b3 = r(3, 8, 96), r(3, 96, 16)
    c, bias, wb, bb, i16, i8, i816, i3 = r(16, 4), r(16), r(4, 96, 96), r(4), r(16), r(8), r(8, 16), r(3, 8, 16)
    mm = 2 * 8 * 96 * 16
    return [  # (name, call, expected emulated FLOPs or None)
        ("torch.matmul", lambda: torch.matmul(a, b), mm),
        ("@", lambda: a @ b, mm),
        ("Tensor.matmul", lambda: a.matmul(b), mm),
        ("linalg.matmul", lambda: torch.linalg.matmul(a, b), mm),
        ("__rmatmul__", lambda: b.__rmatmul__(a), mm),
        ("mm", lambda: torch.mm(a, b), mm),
        ("Tensor.mm", lambda: a.mm(b), mm),
        ("bmm", lambda: torch.bmm(a3, b3), 3 * mm),
        ("mv", lambda: torch.mv(a, v), 2 * 8 * 96),
        ("dot", lambda: torch.dot(v, u), 2 * 96),
        ("vdot", lambda: torch.vdot(v, u), 2 * 96),
        ("inner", lambda: torch.inner(a, w), 2 * 8 * 16 * 96),
        ("vecdot", lambda: torch.linalg.vecdot(a, a), 2 * 8 * 96),
        ("multi_dot", lambda: torch.linalg.multi_dot([a, b, c]), None),
        ("linear", lambda: F.linear(a, w, bias), mm),
        ("bilinear", lambda: F.bilinear(a, a, wb, bb), None),
        ("tensordot", lambda: torch.tensordot(a, b, 1), mm),
        ("einsum", lambda: torch.einsum("bij,bjk->bik", a3, b3), 3 * mm),
        ("einsum list", lambda: torch.einsum("ij,jk", [a, b]), mm),
        ("addmm", lambda: torch.addmm(i16, a, b, beta=0.5, alpha=2.0), mm),
        ("Tensor.addmm", lambda: i816.addmm(a, b), mm),
        ("addmv", lambda: torch.addmv(i8, a, v), 2 * 8 * 96),
        ("baddbmm", lambda: torch.baddbmm(i3, a3, b3), 3 * mm),
        ("addbmm", lambda: torch.addbmm(i816, a3, b3), 3 * mm),
        ("addmm_", lambda: i816.clone().addmm_(a, b), mm),
        ("baddbmm_", lambda: i3.clone().baddbmm_(a3, b3), 3 * mm),
    ]


@pytest.mark.parametrize("name,call,flops", _routed_cases(), ids=[c[0] for c in _routed_cases()])
def test_emulation_mode_routes_every_listed_contraction(name, call, flops):
    """Each call inside emulation_mode runs as an emulated product (the meter's rows), with bf16x3's visible
    rounding (not FP32's) and within bf16x3's accuracy of FP64."""
    with tcemu.coverage() as cov, tcemu.emulation_mode("bf16x3"):
        got = call()
    assert cov.flops("fp32") == 0 and cov.fraction == 1.0, cov.table()
    assert set(cov.methods) == {"bf16x3"}
    if flops is not None:
        assert cov.flops("emulated") == flops
    plain = call()  # the same call in FP32
    assert not torch.equal(got, plain)
    rel = (got - plain).norm() / plain.norm()
    assert rel < 30 * elementwise_bound("bf16x3", 96)


def test_addmm_family_follows_torchs_alpha_beta_semantics():
    """beta=0 ignores the input (NaN there does not propagate), alpha=0 forms no product (NaN in the matrices
    does not propagate), other values give beta*input + alpha*product, as torch."""
    gen = torch.Generator().manual_seed(4)
    a, b = torch.randn(5, 64, generator=gen), torch.randn(64, 7, generator=gen)
    a3, b3 = a.expand(2, 5, 64), b.expand(2, 64, 7)
    nan = torch.full((5, 7), math.nan)
    bad = a.clone()
    bad[0, 0] = math.nan
    with tcemu.emulation_mode("tf32x3"):
        for op, inp, x, y in ((torch.addmm, nan, a, b), (torch.baddbmm, nan.expand(2, 5, 7), a3, b3),
                              (torch.addbmm, nan, a3, b3), (torch.addmv, nan[:, 0], a, b[:, 0])):
            out = op(inp, x, y, beta=0)
            assert not out.isnan().any(), op
            assert torch.equal(out, op(torch.zeros_like(inp), x, y)), op
        base = torch.randn(5, 7, generator=gen)
        assert torch.equal(torch.addmm(base, bad, b, alpha=0), base)
        assert torch.equal(torch.addmm(base, bad, b, alpha=0, beta=2), 2 * base)
        got = torch.addmm(base[0], a, b, beta=0.5, alpha=-3)
    want = 0.5 * base[0].double() + -3 * (a.double() @ b.double())
    assert (got.double() - want).abs().max() <= 4 * elementwise_bound("tf32x3", 64) * (
        0.5 * base[0].double().abs() + 3 * (a.double().abs() @ b.double().abs())).max()


def test_what_the_mode_leaves_to_torch():
    """Other dtypes, out=, and einsums without a summed index run as torch's own ops; the meter shows them."""
    gen = torch.Generator().manual_seed(5)
    a, b = torch.randn(4, 64, generator=gen), torch.randn(64, 3, generator=gen)
    out = torch.empty(4, 3)
    with tcemu.coverage() as cov, tcemu.emulation_mode("tf32"):
        d = a.double() @ b.double()
        torch.matmul(a, b, out=out)
        outer = torch.einsum("i,j->ij", a[0], b[:, 0])
    assert torch.equal(d, a.double() @ b.double())
    assert torch.equal(out, a @ b)  # plain FP32, not single-pass TF32
    assert torch.equal(outer, torch.einsum("i,j->ij", a[0], b[:, 0]))
    kinds = {(r.kind, r.method) for r in cov.rows}
    assert ("other_dtype", "float64") in kinds and ("fp32", "") in kinds and ("no_contraction", "") in kinds
    assert cov.fraction == 0.0
