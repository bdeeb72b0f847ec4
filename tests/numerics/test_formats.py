"""Exact decoding and encoding of every format, checked against ml_dtypes/NumPy and the rational oracle."""

from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from tcemu.numerics.formats import FINITE, INF, NAN, ZERO, decode, encode, fp8_to_fp16_bits, get_format, to_bits
from tcemu.numerics.oracle import round_fraction
from tcemu.numerics.rounding import Rounding, bit_length

SMALL = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


@pytest.mark.parametrize("fmt", sorted(SMALL))
def test_decode_every_encoding(fmt):
    """(sign, sig, e) of every bit pattern gives the value ml_dtypes gives; classes match."""
    f = get_format(fmt)
    bits = np.arange(1 << f.width).astype(f.container_dtype)
    with np.errstate(invalid="ignore"):
        ref = bits.view(SMALL[fmt]).astype(np.float64)
    neg, sig, e, cls = decode(bits, f)
    assert np.array_equal(cls == NAN, np.isnan(ref))
    assert np.array_equal(cls == INF, np.isinf(ref))
    assert np.array_equal(cls == ZERO, ref == 0)
    fin = cls <= FINITE
    val = np.ldexp(sig[fin].astype(np.float64), (e[fin] - f.frac_bits).astype(np.int32))  # exact: < 2**24
    val = np.where(neg[fin], -val, val)
    assert np.array_equal(val, ref[fin])
    assert np.array_equal(np.signbit(ref[fin]), neg[fin])


@pytest.mark.parametrize("fmt", sorted(SMALL))
@pytest.mark.parametrize("rnd", [Rounding.RNE, Rounding.RZ, Rounding.RU])
def test_encode_roundtrips_every_finite_encoding(fmt, rnd):
    f = get_format(fmt)
    bits = np.arange(1 << f.width).astype(f.container_dtype)
    neg, sig, e, cls = decode(bits, f)
    fin = cls <= FINITE
    back = encode(neg[fin], sig[fin], e[fin] - f.frac_bits, f, rnd)
    assert np.array_equal(back, bits[fin])


def test_fp32_roundtrip_random_bits():
    rng = np.random.default_rng(11)
    bits = rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32)
    neg, sig, e, cls = decode(bits, "fp32")
    fin = cls <= FINITE
    back = encode(neg[fin], sig[fin], e[fin] - 23, "fp32", Rounding.RZ)
    assert np.array_equal(back, bits[fin])


def _random_exact_values(rng, n, fmt):
    """Random (negative, mag, q) around the format's range, with ties and near-ties forced in."""
    f = get_format(fmt)
    mag = rng.integers(1, 1 << 40, n, dtype=np.int64) >> rng.integers(0, 40, n)
    mag = np.maximum(mag, 1)
    q = rng.integers(f.emin - f.frac_bits - 45, f.emax - 5, n)
    # ties: a kept part, a single 1 right below the rounding point, optionally +-1
    tie_rows = rng.random(n) < 0.3
    kept = rng.integers(1 << f.frac_bits, 1 << (f.frac_bits + 1), n)
    extra = rng.integers(1, 12, n)
    tie = ((kept << 1) | 1) << extra
    tie += rng.integers(-1, 2, n) * (rng.random(n) < 0.5)
    mag = np.where(tie_rows, tie, mag)
    return rng.random(n) < 0.5, mag, q


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "e8m13"])
@pytest.mark.parametrize("rnd", list(Rounding))
@pytest.mark.parametrize("overflow", ["inf", "ieee"])
def test_encode_matches_rational_rounding(fmt, rnd, overflow):
    """Integer rounding (all modes, subnormals, overflow) equals rounding the exact rational (seed 5)."""
    rng = np.random.default_rng(5)
    neg, mag, q = _random_exact_values(rng, 1500, fmt)
    got = encode(neg, mag, q, fmt, rnd, overflow)
    for i in range(len(mag)):
        x = Fraction(int(mag[i])) * Fraction(2) ** int(q[i])
        want = round_fraction(-x if neg[i] else x, fmt, rnd, overflow)
        assert int(got[i]) == want, (fmt, rnd, int(mag[i]), int(q[i]), bool(neg[i]), hex(int(got[i])), hex(want))


@pytest.mark.parametrize("fmt,dtype", [("fp32", np.float32), ("fp16", np.float16)])
def test_rne_matches_numpy_cast_from_float64(fmt, dtype):
    """NumPy's float64 -> float32/float16 casts round once, to nearest even: the same bits as encode."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(100_000) * np.exp2(rng.integers(-160 if fmt == "fp32" else -30, 30, 100_000))
    m, ex = np.frexp(x)
    mag = (np.abs(m) * 2.0**53).astype(np.int64)  # exact: float64 significand as an integer
    got = encode(x < 0, mag, ex.astype(np.int64) - 53, fmt, Rounding.RNE)
    with np.errstate(over="ignore"):
        want = x.astype(dtype).view(get_format(fmt).container_dtype)
    assert np.array_equal(got, want)


def test_bit_length():
    vals = np.array([0, 1, 2, 3, 4, 255, 256, (1 << 40) + 5, (1 << 52) + 1], dtype=np.int64)
    assert bit_length(vals).tolist() == [int(v).bit_length() for v in vals]


def test_fp8_to_fp16_exact():
    for fmt, dt in (("e4m3", ml_dtypes.float8_e4m3fn), ("e5m2", ml_dtypes.float8_e5m2)):
        bits = np.arange(256, dtype=np.uint8)
        h = fp8_to_fp16_bits(bits, fmt).view(np.float16).astype(np.float64)
        with np.errstate(invalid="ignore"):
            ref = bits.view(dt).astype(np.float64)
        assert np.array_equal(h, ref, equal_nan=True)


def test_to_bits_refuses_unrepresentable():
    with pytest.raises(ValueError, match="not exactly representable in fp16"):
        to_bits(np.array([1 + 2.0**-12], np.float32), "fp16")
    with pytest.raises(ValueError, match="e4m3"):
        to_bits(np.array([17.0]), "e4m3")
    assert to_bits(np.array([1 + 2.0**-10], np.float32), "fp16").tolist() == [0x3C01]
    assert to_bits(np.array([1.5], np.float32), "bf16").tolist() == [0x3FC0]


def test_canonical_nan_and_inf_constants():
    assert get_format("fp32").canonical_nan == 0x7FFFFFFF
    assert get_format("fp16").canonical_nan == 0x7FFF
    assert get_format("e8m13").canonical_nan == 0x7FFFFFFF
    assert get_format("e4m3").inf_field is None and get_format("e4m3").max_finite_field == 0x7E
