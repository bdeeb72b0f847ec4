"""The reference split: rounding rules, exactness, range, specials."""

import numpy as np
import pytest
import torch

from tcemu.emulation.methods import METHODS, get_method
from tcemu.emulation.split import round_to_bf16, round_to_tf32, split

import ml_dtypes


def all_float32_samples(n=200_000, seed=0):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    extra = np.array([0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF,
                      0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0xFFC00001, 0x3F800000,
                      0x3F808000, 0x3F818000, 0x3F801000, 0x3F803000, 0x7F7F8000, 0x7F7FF000], dtype=np.uint32)
    return torch.from_numpy(np.concatenate([bits, extra]).view(np.float32).copy())


def test_bf16_rounding_matches_ml_dtypes_rne_for_finite_values():
    x = all_float32_samples()
    finite = torch.isfinite(x)
    ours = round_to_bf16(x)[finite].numpy()
    theirs = x[finite].numpy().astype(ml_dtypes.bfloat16).astype(np.float32)
    # ml_dtypes overflows to Inf where we saturate: compare only where it stays finite
    keep = np.isfinite(theirs)
    np.testing.assert_array_equal(ours[keep].view(np.uint32), theirs[keep].view(np.uint32))
    assert (ours[~keep] == np.sign(ours[~keep]) * float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)).all()


def test_tf32_rounding_is_nearest_ties_away():
    x = all_float32_samples()
    x = x[torch.isfinite(x)]
    r = round_to_tf32(x).double()
    xd = x.double()
    assert (r.view(torch.int64) & 0).eq(0).all()
    bits = round_to_tf32(x).view(torch.int32)
    assert ((bits & 0x1FFF) == 0).all(), "a TF32 value has its low 13 bits clear"
    # distance to the TF32 neighbours: rounding error at most half an ulp of the TF32 grid
    ulp = torch.where(x == 0, torch.ones_like(xd), 2.0 ** (torch.floor(torch.log2(xd.abs().clamp_min(2.0**-126))) - 10))
    sat = r.abs() == float.fromhex("0x1.ffcp127")
    assert ((r - xd).abs()[~sat] <= ulp[~sat] / 2).all()
    ties = torch.tensor([1 + 2.0**-11, -(1 + 2.0**-11), 1 + 3 * 2.0**-11], dtype=torch.float32)
    assert round_to_tf32(ties).tolist() == [1 + 2.0**-10, -(1 + 2.0**-10), 1 + 2 * 2.0**-10]


@pytest.mark.parametrize("fn, top", [(round_to_tf32, "0x1.ffcp127"), (round_to_bf16, "0x1.fep127")])
def test_rounding_saturates_and_keeps_specials(fn, top):
    fmax = torch.finfo(torch.float32).max
    x = torch.tensor([fmax, -fmax, float("inf"), float("-inf"), float("nan"), 0.0, -0.0])
    r = fn(x)
    assert r[0].item() == float.fromhex(top) and r[1].item() == -float.fromhex(top)
    assert r[2].item() == float("inf") and r[3].item() == float("-inf") and torch.isnan(r[4])
    assert r[5].item() == 0 and torch.signbit(r[6])


@pytest.mark.parametrize("name", ["tf32x3", "bf16x3", "bf16x6", "bf16x9"])
def test_split_is_exact_to_the_split_residual_over_the_whole_range(name):
    spec = get_method(name)
    x = all_float32_samples()
    x = x[torch.isfinite(x)]
    pieces = split(x, spec)
    recon = torch.zeros_like(x, dtype=torch.float64)
    for i, p in enumerate(pieces):
        assert torch.isfinite(p).all()
        recon += p.double() * 2.0 ** (-spec.shift * i)
    err = (recon - x.double()).abs()
    # per value: residual below 2^-(bits kept) relative for normal x; subnormal x: the spec's absolute error
    bits_kept = {"tf32": 11, "bf16": 8}[spec.piece_format] * spec.n_pieces
    normal = x.abs() >= 2.0**-126
    assert (err[normal] <= x.double().abs()[normal] * 2.0**-bits_kept).all()
    assert (err[~normal] <= spec.subnormal_abs_error).all()
    if spec.subnormal_abs_error == 0:
        assert (err[~normal] == 0).all()


@pytest.mark.parametrize("name", ["tf32", "tf32x3", "bf16x3", "bf16x6"])
def test_high_piece_is_never_zero_for_nonzero_input(name):
    x = torch.tensor([2.0**-149, -(2.0**-149), 2.0**-140, 0.0])
    hi = split(x, name)[0]
    assert (hi[:3] != 0).all() and hi[3] == 0
    assert torch.equal(torch.sign(hi[:3]), torch.sign(x[:3]))


def test_pieces_are_in_their_format():
    x = all_float32_samples(20_000)
    x = x[torch.isfinite(x)]
    for name in ("tf32x3", "bf16x9"):
        spec = METHODS[name]
        mask = 0x1FFF if spec.piece_format == "tf32" else 0xFFFF
        for p in split(x, spec):
            assert ((p.view(torch.int32) & mask) == 0).all()


def test_split_of_infinity_gives_the_value_then_nan():
    p = split(torch.tensor([float("inf"), float("nan")]), "bf16x6")
    assert p[0][0] == float("inf") and torch.isnan(p[0][1])
    assert torch.isnan(p[1]).all() and torch.isnan(p[2]).all()
