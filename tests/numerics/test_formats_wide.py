"""The AMD FNUZ fp8 formats (every one of the 256 codes) and fp64 (targeted encodings and random bits): exact
decoding against ml_dtypes/NumPy, round trips through to_bits/from_bits, the special values and the limits."""

import ml_dtypes
import numpy as np
import pytest

from tcemu.numerics.formats import (FINITE, NAN, SPECIAL_EXP, ZERO, decode, decode_table, encode, from_bits,
                                    get_format, to_bits)
from tcemu.numerics.rounding import Rounding

FNUZ = {"e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "e5m2fnuz": ml_dtypes.float8_e5m2fnuz}


def _values(neg, sig, e, frac_bits: int) -> np.ndarray:
    """float64 of decoded fields (exact: significands below 2**53, exponents in float64's range)."""
    v = np.ldexp(sig.astype(np.float64), (e - frac_bits).astype(np.int32))
    return np.where(neg, -v, v)


@pytest.mark.parametrize("fmt", sorted(FNUZ))
def test_fnuz_decode_every_code(fmt):
    """All 256 codes: the value ml_dtypes gives, 0x80 the only NaN, 0x00 the only zero (no -0, no Inf)."""
    f = get_format(fmt)
    bits = np.arange(256, dtype=np.uint8)
    with np.errstate(invalid="ignore"):
        ref = bits.view(FNUZ[fmt]).astype(np.float64)
    neg, sig, e, cls = decode(bits, fmt)
    assert np.array_equal(np.nonzero(cls == NAN)[0], [0x80])
    assert np.array_equal(np.nonzero(np.isnan(ref))[0], [0x80])
    assert np.array_equal(np.nonzero(cls == ZERO)[0], [0x00]) and not np.isinf(ref).any()
    fin = cls <= FINITE
    assert np.array_equal(_values(neg[fin], sig[fin], e[fin], f.frac_bits), ref[fin])
    assert np.array_equal(neg[fin], np.signbit(ref[fin])) and not neg[0x00] and not neg[0x80]
    assert sig[0x80] == 0 and e[0x80] == SPECIAL_EXP
    for table, direct in zip(decode_table(fmt), (neg, sig, e, cls)):  # the gather tables the models use
        assert np.array_equal(table, direct)


@pytest.mark.parametrize("fmt", sorted(FNUZ))
def test_fnuz_limits(fmt):
    """Bias, emin, emax and the extreme values, against ml_dtypes.finfo; 0x7F / 0xFF are +-max (no Inf)."""
    f = get_format(fmt)
    fi = ml_dtypes.finfo(FNUZ[fmt])
    assert (f.bias, f.emin, f.emax) == {"e4m3fnuz": (8, -7, 7), "e5m2fnuz": (16, -15, 15)}[fmt]
    neg, sig, e, cls = decode(np.array([0x7F, 0xFF, 0x01, 1 << f.frac_bits], np.uint8), fmt)
    vals = _values(neg, sig, e, f.frac_bits)
    assert list(vals) == [float(fi.max), -float(fi.max), float(fi.smallest_subnormal), float(fi.tiny)]
    assert list(cls) == [FINITE] * 4 and f.inf_field is None


@pytest.mark.parametrize("fmt", sorted(FNUZ))
def test_fnuz_round_trips(fmt):
    """Every code through from_bits/to_bits and through its float64 value back to the same code; -0.0 becomes
    the one zero, NaN the one NaN; a value between two codes or beyond the range is refused."""
    bits = np.arange(256, dtype=np.uint8)
    assert np.array_equal(to_bits(from_bits(bits, fmt), fmt), bits)
    with np.errstate(invalid="ignore"):
        vals = bits.view(FNUZ[fmt]).astype(np.float64)
    finite = ~np.isnan(vals)
    assert np.array_equal(to_bits(vals[finite], fmt), bits[finite])
    assert to_bits(np.array([-0.0]), fmt)[0] == 0x00 and to_bits(np.array([np.nan]), fmt)[0] == 0x80
    top = float(ml_dtypes.finfo(FNUZ[fmt]).max)
    for bad in (1 + 2.0**-10, 2 * top, np.inf):
        with pytest.raises(ValueError, match="not exactly representable"):
            to_bits(np.array([bad]), fmt)
    with pytest.raises(ValueError, match="input format only"):
        encode(np.array([False]), np.array([1]), np.array([0]), fmt, Rounding.RNE)


FP64_CODES = {
    0x0000000000000000: 0.0, 0x8000000000000000: -0.0, 0x0000000000000001: 2.0**-1074,
    0x000FFFFFFFFFFFFF: 2.0**-1022 - 2.0**-1074, 0x0010000000000000: 2.0**-1022, 0x3FF0000000000000: 1.0,
    0x3FF0000000000001: 1 + 2.0**-52, 0xBFF8000000000000: -1.5, 0x7FEFFFFFFFFFFFFF: np.finfo(np.float64).max,
    0x7FF0000000000000: np.inf, 0xFFF0000000000000: -np.inf,
}
FP64_NANS = (0x7FF8000000000000, 0xFFF8000000000000, 0x7FF0000000000001, 0x7FF4000000000000,
             0xFFFFFFFFFFFFFFFF)


def test_fp64_targeted_encodings():
    """Zeros, the subnormal and normal edges, one ulp above 1, the largest finite value, Inf and NaNs of every
    kind (quiet, signalling, negative, with payloads): fields, classes and signs."""
    f = get_format("fp64")
    assert (f.emin, f.emax, f.precision, f.container_dtype) == (-1022, 1023, 53, np.uint64)
    bits = np.array(list(FP64_CODES), np.uint64)
    neg, sig, e, cls = decode(bits, "fp64")
    want = np.array(list(FP64_CODES.values()))
    fin = cls <= FINITE
    assert np.array_equal(_values(neg[fin], sig[fin], e[fin], 52), want[fin])
    assert np.array_equal(neg, np.signbit(want)) and list(cls == ZERO).count(True) == 2
    assert (sig[4], e[4], sig[3], e[3]) == (1 << 52, -1022, (1 << 52) - 1, -1022)  # normal / subnormal edge
    assert list(np.isinf(want)) == list((cls > FINITE) & (cls != NAN))
    neg, sig, e, cls = decode(np.array(FP64_NANS, np.uint64), "fp64")
    assert (cls == NAN).all() and (sig == 0).all() and (e == SPECIAL_EXP).all()
    assert list(neg) == [False, True, False, False, True]


def test_fp64_random_bits_and_round_trips():
    """200,000 random bit patterns: finite values equal NumPy's, NaN exactly where NumPy sees NaN; to_bits and
    from_bits keep every pattern (NaN payloads included); encoding to fp64 is refused (input format only)."""
    rng = np.random.default_rng(64)
    sign = rng.integers(0, 2, 200_000, dtype=np.uint64) << np.uint64(63)
    bits = rng.integers(0, 1 << 63, 200_000, dtype=np.uint64) | sign
    bits[:1000] &= np.uint64(0x800FFFFFFFFFFFFF)  # subnormals and zeros
    bits[1000:2000] |= np.uint64(0x7FF0000000000000)  # Inf and NaN
    ref = bits.view(np.float64)
    neg, sig, e, cls = decode(bits, "fp64")
    assert np.array_equal(cls == NAN, np.isnan(ref)) and np.array_equal(cls == ZERO, ref == 0)
    fin = cls <= FINITE
    assert np.array_equal(_values(neg[fin], sig[fin], e[fin], 52), ref[fin])
    assert np.array_equal(neg[fin], np.signbit(ref[fin]))
    assert np.array_equal(to_bits(from_bits(bits, "fp64"), "fp64"), bits)
    assert np.array_equal(to_bits(ref, "fp64").view(np.uint64), bits)
    with pytest.raises(ValueError, match="input format only"):
        encode(np.array([False]), np.array([1]), np.array([0]), "fp64", Rounding.RNE)
