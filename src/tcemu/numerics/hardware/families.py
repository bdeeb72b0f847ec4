"""Random input families for validation: whole tiles of raw bits, every output element one sample.

``generate(case, family, ntiles, rng) -> (a, b, c)`` with a (T, M, K), b (T, K, N), c (T, M, N) in the
formats' bit containers. Families (the issue's list):

- ``normal``: a, b, c ~ N(0, 1).
- ``uniform``: a, b ~ U(-1, 1); c ~ U(0, 1) (the toolbox's choice).
- ``bits``: random bit patterns: mostly exponents within ±6 binades of 1, plus subnormals, zeros of both signs,
  and fully random patterns (Inf, NaN with any payload); c likewise in fp32/fp16, with Inf and NaN payloads.
- ``cancel``: exact cancellations: random k pairs of each row/column cancel exactly, and c = -round(a_i . b_j)
  so the result is the residual of a near-total cancellation.
- ``spread``: wide exponent spread within a block (exponents uniform over most of the input range).
- ``dominant_c``: |c| between 2^10 and 2^30 times the products (2^4..2^12 for fp16 output).
- ``tiny_c0``: c = ±0 and products near the bottom of the output range (subnormal results, the c = 0 floor).

tf32 operands are full fp32 bit patterns (the low 13 bits random): the hardware's own conversion is part of what
is validated.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from .cases import Case

__all__ = ["FAMILIES", "generate"]

FAMILIES = ("normal", "uniform", "bits", "cancel", "spread", "dominant_c", "tiny_c0")

_NP = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2,
       "tf32": np.float32, "fp32": np.float32}
_UINT = {"fp16": np.uint16, "bf16": np.uint16, "e4m3": np.uint8, "e5m2": np.uint8, "tf32": np.uint32, "fp32": np.uint32}
# (exp_bits, frac_bits, bias, max finite)
_SPEC = {"fp16": (5, 10, 15, 65504.0), "bf16": (8, 7, 127, 3.3895313892515355e38), "e4m3": (4, 3, 7, 448.0),
         "e5m2": (5, 2, 15, 57344.0), "tf32": (8, 23, 127, 3.4028234663852886e38),
         "fp32": (8, 23, 127, 3.4028234663852886e38)}


def _to_bits(x: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values -> bits (RNE; clipped to the finite range)."""
    mx = _SPEC[fmt][3]
    x = np.clip(x, -mx, mx)
    return x.astype(_NP[fmt]).view(_UINT[fmt])


def _pow2(e: np.ndarray) -> np.ndarray:
    return np.ldexp(1.0, e.astype(np.int64))


def _random_bits(shape, fmt: str, rng: np.random.Generator, window: int = 6) -> np.ndarray:
    """Bit patterns: 75 % exponent within ±window of 0, 8 % subnormal, 7 % zero (±), 10 % fully random."""
    eb, fb, bias, _ = _SPEC[fmt]
    width = 1 + eb + fb
    u = rng.random(shape)
    sign = rng.integers(0, 2, shape, dtype=np.uint64) << np.uint64(eb + fb)
    mant = rng.integers(0, 1 << fb, shape, dtype=np.uint64)
    expo = rng.integers(max(1, bias - window), min((1 << eb) - 2, bias + window) + 1, shape).astype(np.uint64)
    bits = sign | (expo << np.uint64(fb)) | mant
    sub = sign | mant
    full = rng.integers(0, 1 << width, shape, dtype=np.uint64)
    bits = np.where(u < 0.08, sub, bits)
    bits = np.where((u >= 0.08) & (u < 0.15), sign, bits)
    bits = np.where(u >= 0.90, full, bits)
    return bits.astype(_UINT[fmt])


def _c_fmt(case: Case) -> str:
    return case.output_format


def generate(case: Case, family: str, ntiles: int, rng: np.random.Generator):
    M, N, K = case.M, case.N, case.K
    fin, fc = case.input_format, _c_fmt(case)
    sa, sb, sc = (ntiles, M, K), (ntiles, K, N), (ntiles, M, N)
    if family == "normal":
        return _to_bits(rng.standard_normal(sa), fin), _to_bits(rng.standard_normal(sb), fin), \
            _to_bits(rng.standard_normal(sc), fc)
    if family == "uniform":
        return _to_bits(rng.uniform(-1, 1, sa), fin), _to_bits(rng.uniform(-1, 1, sb), fin), \
            _to_bits(rng.uniform(0, 1, sc), fc)
    if family == "bits":
        a, b = _random_bits(sa, fin, rng), _random_bits(sb, fin, rng)
        c = _random_bits(sc, fc, rng, window=12)
        if fin == "tf32":  # tf32 operands: the low 13 bits random too
            pass
        return a, b, c
    if family == "cancel":
        a = rng.standard_normal(sa)
        b = rng.standard_normal(sb)
        # pair k = 2j, 2j+1 cancels exactly in half of the pairs (per tile): a[2j+1] = -a[2j], b[2j+1] = b[2j]
        mask = rng.random((ntiles, 1, K // 2)) < 0.5
        a_even = a[:, :, 0::2]
        a[:, :, 1::2] = np.where(mask, -a_even, a[:, :, 1::2])
        maskb = np.swapaxes(mask, 1, 2)
        b[:, 1::2, :] = np.where(maskb, b[:, 0::2, :], b[:, 1::2, :])
        ab, bb = _to_bits(a, fin), _to_bits(b, fin)
        av = _values(ab, fin)
        bv = _values(bb, fin)
        dot = np.einsum("tmk,tkn->tmn", av, bv)
        c = -dot * (1 + rng.choice([0.0, 2.0**-30, -(2.0**-30)], sc))
        return ab, bb, _to_bits(c, fc)
    if family == "spread":
        eb, fb, bias, _ = _SPEC[fin]
        lo, hi = (1 - bias - fb, bias) if fin != "tf32" else (-60, 60)
        if fin == "bf16":
            lo, hi = -60, 60
        ea = rng.integers(lo, hi + 1, sa)
        ebb = rng.integers(lo, hi + 1, sb)
        a = rng.choice([-1.0, 1.0], sa) * rng.uniform(1, 2, sa) * _pow2(ea)
        b = rng.choice([-1.0, 1.0], sb) * rng.uniform(1, 2, sb) * _pow2(ebb)
        ec = rng.integers(-30, 31, sc) if fc == "fp32" else rng.integers(-24, 15, sc)
        c = rng.choice([-1.0, 1.0], sc) * rng.uniform(1, 2, sc) * _pow2(ec) * (rng.random(sc) < 0.8)
        return _to_bits(a, fin), _to_bits(b, fin), _to_bits(c, fc)
    if family == "dominant_c":
        lo, hi = (10, 31) if fc == "fp32" else (4, 13)
        c = rng.standard_normal(sc) * _pow2(rng.integers(lo, hi, sc))
        return _to_bits(rng.standard_normal(sa), fin), _to_bits(rng.standard_normal(sb), fin), _to_bits(c, fc)
    if family == "tiny_c0":
        eb, fb, bias, _ = _SPEC[fin]
        if fc == "fp32" and fin in ("bf16", "tf32"):
            lo, hi = -80, -52  # products 2^-160 .. 2^-104
        else:
            lo, hi = 1 - bias - fb, (1 - bias) // 2 + 3  # subnormal inputs up to half the normal range
            if fc == "fp16":
                lo, hi = max(lo, -16), -5  # products around 2^-24
        a = rng.choice([-1.0, 1.0], sa) * rng.uniform(1, 2, sa) * _pow2(rng.integers(lo, hi + 1, sa))
        b = rng.choice([-1.0, 1.0], sb) * rng.uniform(1, 2, sb) * _pow2(rng.integers(lo, hi + 1, sb))
        a = a * (rng.random(sa) < 0.7)
        c = np.where(rng.random(sc) < 0.5, 0.0, -0.0)
        return _to_bits(a, fin), _to_bits(b, fin), _to_bits(c, fc)
    raise ValueError(f"unknown family {family!r}; known: {FAMILIES}")


def _values(bits: np.ndarray, fmt: str) -> np.ndarray:
    v = bits.view(_NP[fmt]).astype(np.float64)
    if fmt == "tf32":
        v = (bits & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    return v
