"""Inputs of benchmarks/mmasim_diff.py: random and adversarial tiles (A, B, C and block scales, as integer bits) for
the element formats MMA-Sim takes, one family at a time (:data:`FAMILIES`)."""

from __future__ import annotations

import numpy as np

#: (exponent bits, fraction bits, finite_only, e4m3-style NaN only at all ones) of the generated element formats
ENC = {"fp64": (11, 52, False, False), "fp32": (8, 23, False, False), "tf32": (8, 23, False, False),
       "xf32": (8, 23, False, False), "fp16": (5, 10, False, False), "bf16": (8, 7, False, False),
       "e4m3": (4, 3, False, True), "e5m2": (5, 2, False, False), "e2m1": (2, 1, True, False),
       "e2m3": (2, 3, True, False), "e3m2": (3, 2, True, False), "fp8": (4, 3, True, False),
       "bf8": (5, 2, True, False)}
FAMILIES = ("random", "finite", "cancel", "zeros", "subnormal", "special", "scales")


def width(fmt: str) -> int:
    """Bits of one element of ``fmt``."""
    e, f, *_ = ENC[fmt]
    return 1 + e + f


def _rand_bits(rng, nbits: int, shape):
    """Uniform bit patterns of ``nbits`` bits (fp64's as int64 with the sign in bit 63)."""
    if nbits == 64:
        return rng.integers(0, 1 << 63, shape) ^ (rng.integers(0, 2, shape) << 63)
    return rng.integers(0, 1 << nbits, shape)


def _finite_mask(bits, fmt):
    e, f, finite_only, nan_all_ones = ENC[fmt]
    if fmt in ("fp8", "bf8"):
        return bits != 0x80
    if finite_only:
        return np.ones(bits.shape, bool)
    mag = bits & ((1 << (e + f)) - 1)
    if nan_all_ones:
        return mag != (1 << (e + f)) - 1
    return (mag >> f) != (1 << e) - 1


def _rand_finite(rng, fmt, shape, exp_lo=None, exp_hi=None):
    """Random finite bits of ``fmt``, exponent fields in [exp_lo, exp_hi] if given."""
    e, f, *_ = ENC[fmt]
    top = (1 << e) - 1
    lo = 0 if exp_lo is None else exp_lo
    hi = (top - 1 if not ENC[fmt][2] else top) if exp_hi is None else exp_hi
    ef = rng.integers(lo, hi + 1, shape, dtype=np.int64)
    frac = rng.integers(0, 1 << f, shape, dtype=np.int64)
    sign = rng.integers(0, 2, shape, dtype=np.int64)
    bits = (sign << (e + f)) | (ef << f) | frac
    bad = ~_finite_mask(bits, fmt)
    bits[bad] &= ~np.int64(1)  # e4m3's 0x7F / 0xFF: the largest finite instead
    if fmt in ("fp8", "bf8"):
        bits[bits == 0x80] = 0  # fnuz's NaN (sign bit alone): +0 instead
    return bits


def _special(fmt, rng, shape):
    e, f, finite_only, nan_all_ones = ENC[fmt]
    if finite_only:
        return np.where(rng.random(shape) < 0.5, 0, 1 << (e + f)) if fmt in ("fp8", "bf8") else \
            _rand_finite(rng, fmt, shape, (1 << e) - 1, (1 << e) - 1)
    if nan_all_ones:
        return (rng.integers(0, 2, shape) << (e + f)) | ((1 << (e + f)) - 1)
    inf = ((1 << e) - 1) << f
    return (rng.integers(0, 2, shape) << (e + f)) | inf | np.where(rng.random(shape) < 0.5, 0, 1 << (f - 1))


def gen_tile(case, fa: str, fb: str, fc: str, family: str, rng):
    """(A (m, k), B (k, n), C (m, n), scale_A, scale_B) bits (int64) for one tile of ``family``."""
    m, n, k = case.m, case.n, case.k
    ea, eb = ENC[fa][0], ENC[fb][0]
    if family == "random":
        a = _rand_bits(rng, width(fa), (m, k))
        b = _rand_bits(rng, width(fb), (k, n))
    elif family == "subnormal":
        a = _rand_finite(rng, fa, (m, k), 0, 1)
        b = _rand_finite(rng, fb, (k, n), 0, 1)
    else:
        a = _rand_finite(rng, fa, (m, k))
        b = _rand_finite(rng, fb, (k, n))
    if family == "cancel":  # pairs of products that cancel, some perturbed in the last bit
        a[:, 1::2] = a[:, 0::2]
        sign_bit = np.array(1 << (width(fb) - 1), dtype=np.uint64).astype(b.dtype)  # fp64: bit 63 of an int64
        b[1::2, :] = b[0::2, :] ^ sign_bit ^ (rng.random(b[0::2].shape) < 0.25).astype(b.dtype)
    if family == "zeros":  # zero x huge beside ordinary products
        za = rng.random((m, k)) < 0.3
        zb = rng.random((k, n)) < 0.3
        a = np.where(za, rng.integers(0, 2, (m, k)) << (width(fa) - 1), a)
        b = np.where(zb, rng.integers(0, 2, (k, n)) << (width(fb) - 1), b)
        top_a = (1 << ea) - (1 if ENC[fa][2] else 2)
        top_b = (1 << eb) - (1 if ENC[fb][2] else 2)
        a = np.where(~za & (rng.random((m, k)) < 0.5), _rand_finite(rng, fa, (m, k), top_a, top_a), a)
        b = np.where(~zb & (rng.random((k, n)) < 0.5), _rand_finite(rng, fb, (k, n), top_b, top_b), b)
        if fa in ("fp8", "bf8"):
            a = np.where(a == 0x80, 0, a)
            b = np.where(b == 0x80, 0, b)
    if family == "special":
        a = np.where(rng.random((m, k)) < 0.03, _special(fa, rng, (m, k)), a)
        b = np.where(rng.random((k, n)) < 0.03, _special(fb, rng, (k, n)), b)
    c = _gen_c(fc, family, rng, (m, n))
    sa = sb = None
    if case.scale:
        nb = k // case.block
        sa, sb = _gen_scales(case.scale, family, rng, (m, nb)), _gen_scales(case.scale, family, rng, (nb, n))
    return a, b, c, sa, sb


def _gen_c(fc, family, rng, shape):
    e, f, *_ = ENC[fc]
    bias = (1 << (e - 1)) - 1
    if family == "random":
        return _rand_bits(rng, width(fc), shape)
    if family in ("subnormal", "zeros"):  # tiny or zero c: the alignment floors and zero factors show
        tiny = _rand_finite(rng, fc, shape, 0, 2)
        return np.where(rng.random(shape) < 0.3, rng.integers(0, 2, shape) << (width(fc) - 1), tiny)
    lo, hi = max(1, bias - 40), min((1 << e) - 2, bias + 20)
    c = _rand_finite(rng, fc, shape, lo, hi)
    if family == "special":
        c = np.where(rng.random(shape) < 0.05, _special(fc, rng, shape), c)
    return c


def _gen_scales(sf, family, rng, shape):
    if sf == "ue8m0":
        if family in ("scales", "zeros", "special"):
            pick = np.array([0, 1, 2, 100, 126, 127, 128, 200, 252, 253, 254] + ([255] if family == "special" else []))
            return pick[rng.integers(0, len(pick), shape)]
        return rng.integers(110, 145, shape)
    if family in ("scales", "zeros", "special"):  # ue4m3: unsigned e4m3 (0x7F NaN)
        pick = np.array([0, 1, 2, 7, 8, 0x38, 0x3F, 0x70, 0x7D, 0x7E] + ([0x7F] if family == "special" else []))
        return pick[rng.integers(0, len(pick), shape)]
    return rng.integers(0x30, 0x48, shape)
