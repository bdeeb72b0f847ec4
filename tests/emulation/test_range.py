"""The top of the FP32 range: no false overflow, no lost correction level, Inf/NaN exactly where the exact product
has them (the range check and fix-up, docs/emulation.md "The top of the range"); the reference on the CPU."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tcemu
from tcemu.emulation.methods import METHODS, get_method
from tcemu.emulation.reference import mm_range_scaled, mm_reference
from tcemu.emulation.split import power_of_two, range_scale_exponents, recombine, scale_down, split
from tcemu.testing import (
    TOP_OF_RANGE_CASES,
    assert_fp32_faithful,
    elementwise_bound,
    extreme_operands,
    range_abs_bound,
)

FMAX = torch.finfo(torch.float32).max
INF, NAN = math.inf, math.nan
X = 1.8446743e19  # about 2^64: X * X is just below FLT_MAX
SPLIT_METHODS = [m for m in METHODS if m != "fp32"]


def t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------------------
# the issue's examples, verbatim
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("a", "b", "method", "fp32"), TOP_OF_RANGE_CASES)
def test_issue_examples(a, b, method, fp32):
    a, b = t(a), t(b)
    c = tcemu.matmul(a, b, method)
    assert (a @ b).item() == pytest.approx(fp32, rel=1e-6)  # what FP32 matmul gives, as the issue says
    assert math.isinf(fp32) == math.isinf(c.item()) and not math.isnan(c.item()), (method, c.item())
    assert_fp32_faithful(c, a, b, method)


@pytest.mark.parametrize("method", SPLIT_METHODS)
def test_issue_examples_for_every_method(method):
    for a, b, _, _ in TOP_OF_RANGE_CASES:
        assert_fp32_faithful(tcemu.matmul(t(a), t(b), method), t(a), t(b), method)


@pytest.mark.parametrize("method", ["tf32x3", "bf16x6", "bf16x9"])
def test_issue_accuracy_above_half_float_max(method):
    """9.88536599770615e18 * 1.8599303511086727e19: a correction level overflowed and was zeroed (TF32x3 9.1e-4
    relative error); now within the method's bound, as accurate as FP32 there."""
    a, b = t([[9.88536599770615e18]]), t([[1.8599303511086727e19]])
    c = tcemu.matmul(a, b, method).double().item()
    exact = 9.88536599770615e18 * 1.8599303511086727e19
    assert abs(c - exact) <= get_method(method).split_residual * exact
    assert_fp32_faithful(tcemu.matmul(a, b, method), a, b, method)


@pytest.mark.parametrize("method", SPLIT_METHODS)
def test_single_products_near_float_max(method):
    """The issue's sweep: products within 2^-6 of FLT_MAX (1 % of them overflowed with TF32 pieces, 5 % with
    BF16): all finite and within the bound now; every pair of the outer product also checked (past FLT_MAX:
    Inf of the right sign)."""
    gen = torch.Generator().manual_seed(0)
    n = 300
    ea = torch.randint(1, 127, (n,), generator=gen)  # a in [2, 2^127): b = product / a in (1, 2^127)
    a = (1 + torch.rand(n, generator=gen, dtype=torch.float64)) * torch.exp2(ea.double())
    target = FMAX * (1 - torch.rand(n, generator=gen, dtype=torch.float64) * 2.0**-6)
    b = target / a
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).double()
    a, b = (a * sign).float(), b.float()
    c = tcemu.matmul(a.unsqueeze(1), b.unsqueeze(0), method)  # (n, n): the diagonal is the sweep
    diag = c.diagonal()
    exact = a.double() * b.double()
    keep = exact.abs() < FMAX * (1 - elementwise_bound(method, 1))  # (the float32 b may round past)
    assert keep.sum() > 0.85 * n
    assert torch.isfinite(diag[keep]).all(), f"{method}: {int((~torch.isfinite(diag[keep])).sum())} false overflows"
    assert_fp32_faithful(c, a.unsqueeze(1), b.unsqueeze(0), method)


# ---------------------------------------------------------------------------------------------------------
# the whole exponent range, special values mixed in (property-based)
# ---------------------------------------------------------------------------------------------------------


RANGE_SETTINGS = settings(max_examples=80, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# Every method on each drawn example: the examples are derandomized, so one draw serves all methods (drawing the
# operands is most of the cost; a failure names its method).
@pytest.mark.filterwarnings("ignore:overflow encountered")
@RANGE_SETTINGS
@given(ops=extreme_operands())
def test_reference_is_fp32_faithful_over_the_whole_range(ops):
    a, b = ops
    for method in SPLIT_METHODS:
        assert_fp32_faithful(mm_reference(a, b, method), a, b, method)


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=extreme_operands(), z=st.integers(1, 3), batched_b=st.booleans())
def test_reference_batched_and_broadcast(ops, z, batched_b):
    """Batched a (and b, or b broadcast): the flagged rows of each batch entry are recomputed with that entry's b."""
    a, b = ops
    a3 = torch.stack([a * (2.0 ** (-i)) for i in range(z)])
    b3 = torch.stack([b * (2.0 ** (-i)) for i in range(z)]) if batched_b else b
    for method in ("tf32x3", "bf16x6"):
        c = mm_reference(a3, b3, method)
        for i in range(z):
            assert_fp32_faithful(c[i], a3[i], b3[i] if batched_b else b, method)


# ---------------------------------------------------------------------------------------------------------
# the pieces of the mechanism
# ---------------------------------------------------------------------------------------------------------


def test_power_of_two_is_exact():
    e = torch.arange(-126, 128)
    assert torch.equal(power_of_two(e).double(), torch.exp2(e.double()))


def test_scale_down_keeps_nonzero_values_and_specials():
    x = t([[3e38, 1e-45, -1e-45, 0.0, -0.0, INF, -INF, NAN, 2.0**-100, -(2.0**-140)]])
    y = scale_down(x, torch.tensor([[70]]))
    assert y[0, 0].item() == x[0, 0].item() * 2.0**-70  # exact in the normal range
    assert y[0, 1].item() == 2.0**-149 and y[0, 2].item() == -(2.0**-149)  # nonzero stays nonzero, signed
    assert y[0, 3].item() == 0 and not torch.signbit(y[0, 3]) and torch.signbit(y[0, 4])
    assert y[0, 5].item() == INF and y[0, 6].item() == -INF and math.isnan(y[0, 7].item())
    assert y[0, 8].item() == 2.0**-149  # 2^-170: kept at the smallest subnormal
    assert y[0, 9].item() == -(2.0**-149)


def test_range_scale_exponents_use_the_largest_finite_magnitude():
    x = t([[1.0, -(2.0**100), INF], [NAN, 0.0, 2.0**-140], [3e38, 1.0, 1.0]])
    k = range_scale_exponents(x, -1, 58)
    assert k.flatten().tolist() == [42, 0, 127 - 58]


@pytest.mark.parametrize("method", SPLIT_METHODS)
@pytest.mark.parametrize("k", [1, 3, 256, 4096])
def test_threshold_leaves_no_level_overflowing(method, k):
    """The worst case of the derivation (every value just below 2^(T+1), its high piece rounded up to it, its
    residual piece at its largest): no level of the scaled product overflows."""
    spec = get_method(method)
    T = spec.range_threshold(k)
    p = 11 if spec.piece_format == "tf32" else 8
    worst = 2.0 ** (T + 1) - 2.0 ** (T - p)  # rounds (away from zero / to even) up to 2^(T+1)
    a, b = torch.full((1, k), worst), torch.full((k, 1), worst)
    assert split(a, spec)[0][0, 0].item() == 2.0 ** (T + 1)
    from tcemu.emulation.reference import _emulate

    _, bad = _emulate(split(a, spec), split(b, spec), spec)
    assert not bad.any(), f"{method} K={k}: a level of the scaled product overflowed at T={T}"
    if spec.n_pieces > 1:
        assert split(a, spec)[1][0, 0].item() == -(2.0**T)


def test_recombine_is_exact_for_three_bf16_pieces():
    """The fix-up may rebuild b from its pieces (where the caller passes pieces only): exact for BF16x6/x9 on
    every finite FP32 value, Inf and NaN; for two pieces within the split residual."""
    gen = torch.Generator().manual_seed(3)
    bits = torch.randint(-(2**31), 2**31 - 1, (200_000,), generator=gen, dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    x = torch.cat([x, t([INF, -INF, NAN, FMAX, -FMAX, 0.0, -0.0, 2.0**-149])])
    for method in ("bf16x6", "bf16x9"):
        back = recombine(split(x, method), method)
        nan = torch.isnan(x)
        assert torch.equal(torch.isnan(back), nan)
        assert torch.equal(back[~nan].view(torch.int32), x[~nan].view(torch.int32)), method
    for method in ("tf32x3", "bf16x3"):
        spec = get_method(method)
        fin = torch.isfinite(x)
        back = recombine(split(x, method), method)
        err = (back[fin].double() - x[fin].double()).abs()
        assert (err <= 2.0 ** (-2 * spec.shift) * x[fin].double().abs() + spec.subnormal_abs_error).all()


def test_inf_times_a_value_scaled_below_the_subnormals_stays_inf():
    """A row scaled by 2^-69 (it holds 3e38) would turn 1e-45 into 0 and Inf * 0 into NaN: the scaling keeps
    it at the smallest subnormal, so the result is Inf as in FP32."""
    a, b = t([[3e38, 1e-45]]), t([[1e-30], [INF]])
    for method in SPLIT_METHODS:
        assert mm_range_scaled(a, b, method).item() == INF
        assert tcemu.matmul(a, b, method).item() == INF


def test_elements_without_a_nonfinite_level_keep_their_bits():
    """Only the elements with a non-finite level (or result) are computed again: every other one keeps the plain
    algorithm's bits, in flagged rows too."""
    from tcemu.emulation.reference import _emulate

    gen = torch.Generator().manual_seed(4)
    a, b = torch.randn(6, 9, generator=gen), torch.randn(9, 5, generator=gen)
    a[2, 3] = 3e38  # row 2: products past FLT_MAX (columns 0, 3), near it (1), far below (2, 4)
    b[3, :] = t([2.0, 0.9, 1e-3, -3.0, 1e-5])
    a[4, 0] = X * 1.2  # row 4: every product past FLT_MAX
    b[0, :] = X
    for method in SPLIT_METHODS:
        plain, bad = _emulate(split(a, method), split(b, method), get_method(method))
        assert bad.any(-1).tolist() == [False, False, True, False, True, False]
        assert not bad[2, 2] and not bad[2, 4] and bad[2, 0] and bad[2, 3]
        full = mm_reference(a, b, method)
        assert torch.equal(full[~bad], plain[~bad])
        assert_fp32_faithful(full, a, b, method)


def test_range_abs_bound_grows_with_the_scaling():
    """The absolute term is the subnormal slack where nothing is scaled, and 2^(k+l) times the scaled operands'
    subnormal losses where rows and columns are scaled."""
    small = range_abs_bound("tf32x3", torch.ones(2, 3), torch.ones(3, 2))
    assert (small < 1e-40).all()
    a, b = t([[3e38, 1e-40]]), t([[1e-30], [1.0]])
    big = range_abs_bound("tf32x3", a, b).item()
    k = 127 - get_method("tf32x3").range_threshold(2)
    assert big >= 2.0 ** (k - 149)  # the 1e-40 entry of the scaled row loses its value to 2^-149 rounding


# ---------------------------------------------------------------------------------------------------------
# signed zeros
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", SPLIT_METHODS)
def test_zero_results_are_positive_as_torch_matmul(method):
    """A sum of -0 products is +0, as torch's FP32 matmul/mm/bmm/F.linear give on the CPU (they accumulate from
    +0); also in recomputed rows. Products that underflow give a zero whose sign follows the CPU's BLAS kernels
    (FMA kernels round a negative exact sum to -0), checked as zero only. (IEEE would give -0; docs/emulation.md.)"""
    for m, k, n in ((1, 1, 1), (3, 5, 4), (40, 33, 20)):
        a = -torch.zeros(m, k)
        b = torch.rand(k, n) + 0.5
        under = -torch.rand(m, k) * 1e-30
        for x, y in ((a, b), (under, b * 1e-30)):
            c = tcemu.matmul(x, y, method)
            ref = x @ y
            assert (c == 0).all() and (ref == 0).all()
            if x is a:
                assert not torch.signbit(c).any() and not torch.signbit(ref).any()
    # a flagged row (it holds Inf elsewhere: recomputed) keeps +0 where its products are -0
    a, b = t([[-0.0, 1.0]]), t([[1.0, 1.0], [-0.0, INF]])
    c = tcemu.matmul(a, b, method)
    assert c[0, 0].item() == 0 and not torch.signbit(c[0, 0]) and c[0, 1].item() == INF


def test_compiled_reference_fixes_the_same_rows():
    """Under torch.compile (no host decision) the reference computes every row scaled too and selects the flagged
    ones: the same result as eager, in one graph."""
    a = t([[X, 1.0], [2.0, 3.0], [X, INF]])
    b = t([[X, 1.0], [1.0, -INF]])
    eager = mm_reference(a, b, "tf32x3")
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, y: mm_reference(x, y, "tf32x3"), backend="eager", fullgraph=True)(a, b)
    assert torch.equal(torch.isnan(compiled), torch.isnan(eager))
    assert torch.equal(compiled[~torch.isnan(eager)], eager[~torch.isnan(eager)])
    assert_fp32_faithful(compiled, a, b, "tf32x3")


@pytest.mark.parametrize("method", sorted(METHODS))
def test_threshold_table_is_the_formula(method):
    """``range_threshold`` reads T off the spec's table of steps (comparisons only, which trace with symbolic
    sizes): the same T as the closed form at every step's edges and at random K."""
    from tcemu.emulation.methods import _range_threshold

    spec = get_method(method)
    n, levels = spec.max_level_products, len(spec.levels)
    gen = torch.Generator().manual_seed(5)
    ks = [1, 2, 3, 127, 128, 4096, 2**20, 2**40, 2**62, 2**63]
    ks += [int(k) for k in torch.randint(1, 2**40, (500,), generator=gen)]
    for _, k_max in spec.threshold_steps:
        ks += [k_max - 1, k_max, k_max + 1]
    for k in ks:
        assert spec.range_threshold(k) == _range_threshold(n, levels, max(k, 1)), k
    assert [t for t, _ in spec.threshold_steps] == list(range(spec.threshold_steps[0][0], 1, -1))


def test_emulated_layers_compile_with_dynamic_shapes():
    """A model of emulated layers in a row compiles with ``dynamic=True`` (every size symbolic, as
    ``tcemu.mlip.models.compile_pet_`` compiles PET) in one graph, no graph break, and gives the eager run's bits for
    two row counts, forward and input gradient."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 8), torch.nn.SiLU(),
                                torch.nn.Linear(8, 1))
    tcemu.emulate_(model, "tf32x3")
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="aot_eager", dynamic=True)
    for rows in (50, 71):
        x = torch.randn(rows, 16, requires_grad=True)
        (grad,) = torch.autograd.grad(model(x).sum(), x)
        out = compiled(x)
        (grad_c,) = torch.autograd.grad(out.sum(), x)
        assert torch.equal(out, model(x)) and torch.equal(grad_c, grad)
    assert not counters["graph_break"] and counters["stats"]["unique_graphs"] == 1


def test_frozen_emulated_layers_compile_once_for_every_row_count():
    """With frozen weights (an MD potential) no GEMM has the row count as K, so one dynamic-shape graph serves
    rows from 20 to 20,000 (with trainable weights the weight gradient's K is M, and the range threshold's
    comparisons add a graph per step of the table crossed: docs/emulation.md)."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 4))
    tcemu.emulate_(model, "tf32x3", functional=False)
    model.requires_grad_(False)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="aot_eager", dynamic=True)
    for rows in (20, 40, 1000, 20000):
        x = torch.randn(rows, 16, requires_grad=True)
        torch.autograd.grad(compiled(x).sum(), x)
    assert counters["stats"]["unique_graphs"] == 1
