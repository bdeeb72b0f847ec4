"""Every method against FP64: rigorous elementwise bounds and the random-input error model, K = 16 .. 16384."""

import pytest
import torch

import tcemu
from tcemu.emulation.methods import METHODS
from tcemu.testing import assert_within_elementwise_bound, make_inputs, normwise_bound, relative_errors

KS = [16, 100, 1024, 16384]
DISTS = ["normal", "uniform", "wide", "tiny", "huge"]


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("name", list(METHODS))
def test_elementwise_bound_holds(name, dist, k):
    a, b = make_inputs(24, k, 20, dist, seed=k)
    c = tcemu.matmul(a, b, name)
    assert c.dtype == torch.float32 and c.shape == (24, 20)
    assert_within_elementwise_bound(c, a, b, name)


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize("name", list(METHODS))
def test_normwise_error_model_on_random_normal_inputs(name, k):
    a, b = make_inputs(48, k, 40, "normal", seed=1 + k)
    err, _ = relative_errors(tcemu.matmul(a, b, name), a.double() @ b.double())
    assert err <= normwise_bound(name, k), f"{name} K={k}: {err:.3e} > {normwise_bound(name, k):.3e}"


@pytest.mark.parametrize("k", [256, 4096])
@pytest.mark.parametrize("name", ["tf32x3", "bf16x6", "bf16x9"])
def test_fp32_accurate_methods_are_as_accurate_as_fp32(name, k):
    for dist in ("normal", "wide", "tiny"):
        a, b = make_inputs(64, k, 64, dist, seed=7)
        c64 = a.double() @ b.double()
        err, _ = relative_errors(tcemu.matmul(a, b, name), c64)
        err_fp32, _ = relative_errors(a @ b, c64)
        assert err <= 1.5 * err_fp32, f"{name} {dist} K={k}: {err:.2e} vs fp32 {err_fp32:.2e}"


def test_bounds_discriminate_methods():
    """The tolerance is tight enough to fail a method that is less accurate than it claims."""
    a, b = make_inputs(48, 4096, 40, "normal", seed=3)
    c64 = a.double() @ b.double()
    err_tf32, _ = relative_errors(tcemu.matmul(a, b, "tf32"), c64)
    err_bf16x3, _ = relative_errors(tcemu.matmul(a, b, "bf16x3"), c64)
    assert err_tf32 > normwise_bound("tf32x3", 4096) * 10
    assert err_bf16x3 > normwise_bound("bf16x6", 4096)
    a, b = make_inputs(48, 16, 40, "normal", seed=3)  # small K: the rigorous bound is tight there
    with pytest.raises(AssertionError, match="exceeds elementwise_bound"):
        assert_within_elementwise_bound(tcemu.matmul(a, b, "tf32"), a, b, "tf32x3")
    with pytest.raises(AssertionError, match="exceeds elementwise_bound"):
        assert_within_elementwise_bound(tcemu.matmul(a, b, "bf16x3"), a, b, "bf16x9")


def test_tiny_inputs_keep_full_accuracy_thanks_to_scaled_pieces():
    """Without scaling, the low TF32 piece of a value near 2^-120 would be subnormal and lose bits."""
    a, b = make_inputs(32, 512, 32, "tiny", seed=5)
    c64 = a.double() @ b.double()
    for name in ("tf32x3", "bf16x6"):
        err, _ = relative_errors(tcemu.matmul(a, b, name), c64)
        assert err <= normwise_bound(name, 512)


def test_batched_and_broadcast_shapes_match_torch_matmul():
    g = torch.Generator().manual_seed(0)
    cases = [((5,), (5,)), ((3, 5), (5,)), ((5,), (5, 4)), ((2, 3, 5), (5, 4)), ((2, 1, 3, 5), (4, 5, 6)),
             ((7, 3, 5), (7, 5, 2)), ((0, 5), (5, 3)), ((3, 0), (0, 4))]
    for sa, sb in cases:
        a, b = torch.randn(sa, generator=g), torch.randn(sb, generator=g)
        ref = torch.matmul(a.double(), b.double())
        out = tcemu.matmul(a, b, "bf16x6")
        assert out.shape == ref.shape, (sa, sb)
        assert torch.allclose(out.double(), ref, rtol=1e-5, atol=1e-5)


def test_linear_matches_functional_linear_shapes():
    g = torch.Generator().manual_seed(1)
    w, bias = torch.randn(6, 5, generator=g), torch.randn(6, generator=g)
    for shape in [(5,), (4, 5), (2, 3, 5)]:
        x = torch.randn(shape, generator=g)
        ref = torch.nn.functional.linear(x.double(), w.double(), bias.double())
        out = tcemu.linear(x, w, bias, method="tf32x3")
        assert out.shape == ref.shape
        assert torch.allclose(out.double(), ref, rtol=1e-5, atol=1e-6)
