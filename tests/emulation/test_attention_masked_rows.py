"""Fully masked query rows (every key masked out): tcemu's attention gives what the installed torch gives.

torch 2.5+ returns 0 for such rows (and zero gradients); older versions gave NaN. tcemu reads the behaviour
from torch (``attention._torch_zeroes_dead_rows``) instead of assuming a version's, in the reference and in the
fused kernels, forward and backward. Elsewhere the results must stay FP32-accurate (compared to torch's FP32
attention with a tolerance far below the O(1) difference a wrong row makes).
"""

import math
import os

import pytest
import torch
import torch.nn.functional as F

from tcemu.emulation import attention
from tcemu.emulation.attention import scaled_dot_product_attention

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
interpret = pytest.mark.skipif(not INTERPRET, reason="runs only under TRITON_INTERPRET=1 (make test's second pass)")
B, H, L, D = 2, 3, 7, 8
DEAD = [(0, 2), (1, 5)]  # (batch entry, query row) with every key masked out, for every head
TOL = {"rtol": 1e-5, "atol": 1e-5}  # FP32-accurate methods vs torch's FP32 attention on O(1) values


def _masks():
    gen = torch.Generator().manual_seed(0)
    keep = torch.rand(B, 1, L, L, generator=gen) > 0.3
    keep |= torch.eye(L, dtype=torch.bool)
    for b, row in DEAD:
        keep[b, :, row] = False
    additive = torch.randn(B, 1, L, L, generator=gen).masked_fill(~keep, float("-inf"))
    return {"bool": keep, "float": additive}


def _run(fn, mask):
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(B, H, L, D, generator=gen).requires_grad_(True) for _ in range(3))
    m = mask.clone().requires_grad_(mask.dtype == torch.float32)
    o = fn(q, k, v, m)
    o.backward(torch.randn(o.shape, generator=gen))
    return [o.detach(), q.grad, k.grad, v.grad] + ([m.grad] if m.requires_grad else [])


def _torch_sdpa(q, k, v, m):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m)


def _check_against_torch(backend, method, kind):
    mask = _masks()[kind]
    want = _run(_torch_sdpa, mask)
    got = _run(lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m, method=method, backend=backend), mask)
    for name, g, w in zip(("output", "dq", "dk", "dv", "dmask"), got, want):
        assert torch.equal(torch.isnan(g), torch.isnan(w)), (name, torch.isnan(g).sum(), torch.isnan(w).sum())
        torch.testing.assert_close(g, w, **TOL, equal_nan=True, msg=lambda m, n=name: f"{n}: {m}")
    for b, row in DEAD:
        assert torch.equal(got[0][b, :, row], want[0][b, :, row])  # exactly torch's value for the dead rows
        assert torch.equal(got[1][b, :, row], want[1][b, :, row])


def test_the_rule_is_read_from_torch():
    one = torch.ones(1, 1, 1)
    out = F.scaled_dot_product_attention(one, one, one, attn_mask=torch.zeros(1, 1, dtype=torch.bool))
    assert attention.zeroes_dead_rows() == bool(out.item() == 0)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("method", ["tf32x3", "bf16x9"])
def test_reference_matches_torch_on_fully_masked_rows(method, kind):
    _check_against_torch("torch", method, kind)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_reference_follows_a_torch_that_gives_nan(monkeypatch, kind):
    """Where torch gives NaN for such rows, so does tcemu: only those rows (and what depends on them)."""
    monkeypatch.setattr(attention, "_torch_zeroes_dead_rows", lambda: False)
    got = _run(lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m, backend="torch"), _masks()[kind])
    for b, row in DEAD:
        assert got[0][b, :, row].isnan().all()
    live = torch.ones(B, L, dtype=torch.bool)
    for b, row in DEAD:
        live[b, row] = False
    assert not got[0].permute(0, 2, 1, 3)[live].isnan().any()


def test_double_backward_through_fully_masked_rows_has_no_nan():
    mask = _masks()["bool"]
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, H, L, D, generator=gen, requires_grad=True) for _ in range(3))
    o = scaled_dot_product_attention(q, k, v, mask, backend="torch")
    (gq,) = torch.autograd.grad(o.square().sum(), q, create_graph=True)
    gq.square().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


@pytest.mark.interpret
@interpret
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("method", ["tf32x3", "bf16x6"])
def test_fused_kernels_match_torch_on_fully_masked_rows_interpret(method, kind):
    _check_against_torch("triton", method, kind)


@pytest.mark.interpret
@interpret
def test_fused_kernels_follow_a_torch_that_gives_nan_interpret(monkeypatch):
    monkeypatch.setattr(attention, "_torch_zeroes_dead_rows", lambda: False)
    got = _run(lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m, backend="triton"), _masks()["bool"])
    for b, row in DEAD:
        assert got[0][b, :, row].isnan().all()
    assert math.isfinite(got[0][0, :, 0].sum().item())


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["bool", "float"])
def test_fused_kernels_match_torch_on_fully_masked_rows_gpu(kind):
    """On CUDA, against torch's own CUDA attention (its memory-efficient kernel for a float32 mask): the rule
    read from torch's CPU attention must hold there too, and the compiled kernels must follow it."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("needs sm80+ (TF32/BF16 Tensor Cores)")
    mask = _masks()[kind].cuda()

    def run(fn):
        gen = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(B, H, L, D, generator=gen).cuda().requires_grad_(True) for _ in range(3))
        m = mask.clone().requires_grad_(mask.dtype == torch.float32)
        o = fn(q, k, v, m)
        o.backward(torch.randn(o.shape, generator=gen).cuda())
        return [o.detach(), q.grad, k.grad, v.grad] + ([m.grad] if m.requires_grad else [])

    want = run(_torch_sdpa)
    got = run(lambda q, k, v, m: scaled_dot_product_attention(q, k, v, m, method="tf32x3", backend="triton"))
    for g, w in zip(got, want):
        assert torch.equal(torch.isnan(g), torch.isnan(w))
        torch.testing.assert_close(g, w, **TOL, equal_nan=True)
