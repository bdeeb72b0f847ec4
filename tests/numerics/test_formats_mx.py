"""OCP MX element formats (e2m1, e2m3, e3m2), the scale formats (ue8m0, ue4m3) and block-scaled operands,
exhaustively against ml_dtypes (0.5+: float4_e2m1fn, float6_e2m3fn, float6_e3m2fn, float8_e8m0fnu)."""

import ml_dtypes
import numpy as np
import pytest

from tcemu.numerics.formats import FINITE, INF, NAN, ZERO, decode, encode, get_format, to_bits
from tcemu.numerics.formats_mx import decode_scale, dequantize, get_scale_format, mx_quantize, scale_values
from tcemu.numerics.rounding import Rounding

MX = {"e2m1": ml_dtypes.float4_e2m1fn, "e2m3": ml_dtypes.float6_e2m3fn, "e3m2": ml_dtypes.float6_e3m2fn}
# (largest finite, smallest normal, smallest subnormal): OCP MX v1.0
LIMITS = {"e2m1": (6.0, 1.0, 0.5), "e2m3": (7.5, 1.0, 0.125), "e3m2": (28.0, 0.25, 0.0625)}


def _every(fmt):
    f = get_format(fmt)
    return np.arange(1 << f.width, dtype=np.uint8)


@pytest.mark.parametrize("fmt", sorted(MX))
def test_decode_every_encoding(fmt):
    """Every bit pattern decodes to ml_dtypes' value, with its sign; no Inf, no NaN; -0 is a negative zero."""
    f = get_format(fmt)
    bits = _every(fmt)
    ref = bits.view(MX[fmt]).astype(np.float64)
    neg, sig, e, cls = decode(bits, f)
    assert not np.any((cls == INF) | (cls == NAN)) and not np.any(np.isnan(ref) | np.isinf(ref))
    assert np.array_equal(cls == ZERO, ref == 0)
    val = np.ldexp(sig.astype(np.float64), (e - f.frac_bits).astype(np.int32))
    assert np.array_equal(np.where(neg, -val, val), ref)
    assert np.array_equal(np.signbit(ref), neg)
    top, normal, sub = LIMITS[fmt]
    assert (ref.max(), ref[ref > 0].min(), 2.0**f.emin) == (top, sub, normal)


@pytest.mark.parametrize("fmt", sorted(MX))
@pytest.mark.parametrize("rnd", list(Rounding))
def test_encode_roundtrips_every_encoding(fmt, rnd):
    f = get_format(fmt)
    bits = _every(fmt)
    neg, sig, e, cls = decode(bits, f)
    assert np.array_equal(encode(neg, sig, e - f.frac_bits, f, rnd), bits)


@pytest.mark.parametrize("fmt", sorted(MX))
def test_encode_rne_saturating_matches_ml_dtypes(fmt):
    """Rounding float64 values once to nearest even, beyond the largest value saturating (OCP MX conversion):
    the same bits as ml_dtypes' cast, over the whole range and far outside it."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal(50_000) * np.exp2(rng.integers(-12, 10, 50_000))
    x = np.concatenate([x, _every(fmt).view(MX[fmt]).astype(np.float64) * 1.0000001, [1e30, -1e30]])
    m, ex = np.frexp(x)
    mag = (np.abs(m) * 2.0**53).astype(np.int64)
    got = encode(x < 0, mag, ex.astype(np.int64) - 53, fmt, Rounding.RNE)
    want = x.astype(MX[fmt]).view(np.uint8)
    nz = x != 0
    assert np.array_equal(got[nz], want[nz])


@pytest.mark.parametrize("fmt", sorted(MX))
def test_format_constants_and_to_bits(fmt):
    f = get_format(fmt)
    assert f.finite_only and f.inf_field is None and f.container_dtype is np.uint8
    assert get_format(np.dtype(MX[fmt]).name).name == fmt  # ml_dtypes names are aliases
    assert np.array_equal(to_bits(_every(fmt).view(MX[fmt]), fmt), _every(fmt))
    with pytest.raises(ValueError, match=fmt):
        to_bits(np.array([LIMITS[fmt][0] * 2]), fmt)
    with pytest.raises(ValueError, match="not exactly representable"):
        to_bits(np.array([np.nan]), fmt)


def test_ue8m0_every_encoding():
    """ue8m0: 2^(bits - 127) for 0..254 (2^-127 .. 2^127, no zero), 0xFF NaN; equal to float8_e8m0fnu."""
    bits = np.arange(256)
    sig, exp, nan = decode_scale(bits, "ue8m0")
    ref = bits.astype(np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    assert nan.tolist() == [False] * 255 + [True] and np.isnan(ref[255])
    assert np.array_equal(np.ldexp(sig[:255].astype(np.float64), exp[:255].astype(np.int32)), ref[:255])
    assert (exp[0], exp[254], scale_values(np.array([0, 127, 254]), "ue8m0").tolist()) == (
        -127, 127, [2.0**-127, 1.0, 2.0**127])


def test_ue4m3_every_encoding():
    """ue4m3: |e4m3| of the bits (the sign bit ignored), zero, subnormals at emin -6, 0x7F/0xFF NaN."""
    bits = np.arange(256)
    sig, exp, nan = decode_scale(bits, "ue4m3")
    with np.errstate(invalid="ignore"):
        ref = np.abs(bits.astype(np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float64))
    assert np.array_equal(nan, np.isnan(ref)) and nan.sum() == 2
    val = np.ldexp(sig.astype(np.float64), (exp - 3).astype(np.int32))
    assert np.array_equal(val[~nan], ref[~nan])
    assert exp.min() == -6 and scale_values(np.array([0x7E]), "ue4m3")[0] == 448.0
    assert get_scale_format("e8m0").name == "ue8m0"
    with pytest.raises(ValueError, match="tcemu: unknown scale format"):
        get_scale_format("ue5m2")
    with pytest.raises(ValueError, match="0..255"):
        decode_scale(np.array([256]), "ue8m0")


@pytest.mark.parametrize("fmt", ["e2m1", "e2m3", "e3m2", "e4m3", "e5m2"])
@pytest.mark.parametrize("scale,block", [("ue8m0", 32), ("ue4m3", 16)])
def test_block_scaled_operands(fmt, scale, block):
    """dequantize = element value x its block's scale; mx_quantize keeps every block within the element range,
    rounds each element to nearest (half an element ulp at the block's scale), and (ue8m0, whose scale depends
    only on the block's largest binade) reproduces exactly the operands it produced."""
    rng = np.random.default_rng(len(fmt) + block)
    x = rng.standard_normal((6, 4 * block)) * np.exp2(rng.integers(-20, 20, (6, 4 * block)) // 8)
    e, s = mx_quantize(x, fmt, scale, block)
    assert e.shape == x.shape and s.shape == (6, 4) and s.dtype == np.uint8
    v = dequantize(e, s, fmt, scale, block)
    elem = e.view(get_format(fmt).numpy_dtype).astype(np.float64)
    assert np.array_equal(v, elem * np.repeat(scale_values(s, scale), block, axis=1))
    f = get_format(fmt)
    sv = np.repeat(scale_values(s, scale), block, axis=1)
    top = float(np.asarray(f.max_finite_field, np.uint8).view(f.numpy_dtype).astype(np.float64))
    inside = np.abs(x) <= top * sv
    with np.errstate(divide="ignore", invalid="ignore"):  # a ue4m3 scale that underflowed to 0: not "inside"
        ulp = np.exp2(np.maximum(np.floor(np.log2(np.abs(x / sv) + 1e-300)), f.emin) - f.frac_bits) * sv
    assert np.all(np.abs(v - x)[inside] <= ulp[inside] / 2)
    if scale == "ue8m0":
        e2, s2 = mx_quantize(v, fmt, scale, block)
        assert np.array_equal(dequantize(e2, s2, fmt, scale, block), v)


def test_mx_quantize_ue8m0_rule():
    """OCP MX: the scale is 2^(floor(log2 amax) - emax_elem), clamped to ue8m0's range."""
    x = np.zeros((1, 96))
    x[0, 0], x[0, 32], x[0, 64] = 5.0, 2.0**-140, 2.0**140
    _, s = mx_quantize(x, "e2m1", "ue8m0", 32)
    assert s.tolist() == [[127 + 2 - 2, 0, 254]]  # 5 = 1.25 * 2^2, e2m1 emax 2; 2^-142 and 2^138 clamp
    with pytest.raises(ValueError, match="multiple of the block"):
        mx_quantize(np.zeros((1, 20)), "e2m1", "ue8m0", 32)
    with pytest.raises(ValueError, match="K = 16 x"):
        dequantize(np.zeros((1, 20), np.uint8), np.zeros((1, 2), np.uint8), "e2m1", "ue4m3", 16)


def test_decode_classes_of_existing_formats_unchanged():
    """The new finite_only rule leaves the fn and IEEE formats as they were (e4m3: S.1111.111 NaN)."""
    _, _, _, cls = decode(np.arange(256), "e4m3")
    assert (cls == NAN).sum() == 2 and (cls == INF).sum() == 0 and (cls == FINITE).sum() == 252
