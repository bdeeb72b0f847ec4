"""Inf, NaN, huge, tiny, subnormal and zero inputs give the FP32-faithful result, position by position."""

import pytest
import torch

import tcemu
from tcemu.emulation.methods import METHODS
from tcemu.testing import assert_within_elementwise_bound

FMAX = torch.finfo(torch.float32).max
SPECIALS = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, FMAX, -FMAX, 2.0**-149, -(2.0**-140),
            1e-38, 3.0e38, 2.0**-126]
# Random placements of huge finite values could overflow FP32's own partial sums in a BLAS-dependent order;
# the random tests leave them out and test_values_near_float_max covers them deterministically.
NOT_HUGE = [v for v in SPECIALS if not (1e38 < abs(v) < float("inf"))]


def matrices_with_specials(m, k, n, seed, density=0.08, values=SPECIALS):
    g = torch.Generator().manual_seed(seed)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    specials = torch.tensor(values)
    for x in (a, b):
        mask = torch.rand(x.shape, generator=g) < density
        pick = torch.randint(len(values), x.shape, generator=g)
        x[mask] = specials[pick[mask]]
    return a, b


def class_of(x):
    """-1: NaN, 1: +Inf, 2: -Inf, 0: finite."""
    return torch.where(torch.isnan(x), -1, torch.where(x == float("inf"), 1, torch.where(x == float("-inf"), 2, 0)))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("name", list(METHODS))
def test_nonfinite_pattern_equals_fp32_matmul(name, seed):
    a, b = matrices_with_specials(16, 33, 12, seed, values=NOT_HUGE)
    c = tcemu.matmul(a, b, name)
    ref = a @ b  # FP32 matmul on the CPU: IEEE semantics for Inf and NaN
    assert torch.equal(class_of(c), class_of(ref)), f"{name}: Inf/NaN pattern differs from FP32"


@pytest.mark.parametrize("name", list(METHODS))
def test_each_special_alone(name):
    """One special value in a row: the exact IEEE outcome for each partner."""
    b = torch.tensor([[1.0, -2.0, 0.0, 2.0**-149, 3.0e38]])
    for s in [float("inf"), float("-inf"), float("nan")]:
        a = torch.tensor([[s]])
        c = tcemu.matmul(a, b, name)
        ref = a @ b
        assert torch.equal(class_of(c), class_of(ref)), (name, s, c, ref)
    # Inf times the smallest subnormal stays Inf (a zero high piece would make it NaN)
    c = tcemu.matmul(torch.tensor([[float("inf")]]), torch.tensor([[2.0**-149]]), name)
    assert c.item() == float("inf")


@pytest.mark.parametrize("name", list(METHODS))
def test_finite_entries_near_special_ones_stay_accurate(name):
    a, b = matrices_with_specials(16, 40, 12, seed=11, values=NOT_HUGE)
    a[3, :] = torch.randn(40)  # rows and columns free of non-finite values ...
    b[:, 5] = torch.randn(40)
    a[3, 7] = 3.0e38  # ... one holding a huge value, whose partner is small enough not to overflow
    b[7, 5] = 1e-3
    c = tcemu.matmul(a, b, name)
    ok_rows = torch.isfinite(a).all(1)
    ok_cols = torch.isfinite(b).all(0)
    assert ok_rows.any() and ok_cols.any()
    sub = c[ok_rows][:, ok_cols]
    assert_within_elementwise_bound(sub, a[ok_rows], b[:, ok_cols], name)


@pytest.mark.parametrize("name", ["tf32x3", "bf16x3", "bf16x6", "bf16x9"])
def test_values_near_float_max_do_not_turn_into_nan(name):
    a = torch.tensor([[FMAX, -FMAX, 3.3e38, 3.4e38]])
    b = torch.tensor([[0.5], [0.25], [-0.5], [0.125]])
    c = tcemu.matmul(a, b, name)
    assert torch.isfinite(c).all()
    assert_within_elementwise_bound(c, a, b, name)
    # and the true overflow is an overflow, as in FP32
    c2 = tcemu.matmul(torch.tensor([[FMAX, FMAX]]), torch.tensor([[1.0], [1.0]]), name)
    assert c2.item() == float("inf")


@pytest.mark.parametrize("name", ["tf32x3", "bf16x6", "bf16x9"])
def test_subnormal_and_zero_inputs(name):
    a = torch.tensor([[2.0**-149, -(2.0**-140), 2.0**-127, 0.0, -0.0]])
    b = torch.tensor([[2.0**100], [2.0**120], [1.0], [5.0], [-7.0]])
    c = tcemu.matmul(a, b, name)
    assert_within_elementwise_bound(c, a, b, name)
    z = tcemu.matmul(torch.zeros(3, 4), torch.randn(4, 2), name)
    assert (z == 0).all()
