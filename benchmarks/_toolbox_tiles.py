"""Operand tiles and bit conversions for the toolbox check (helper of benchmarks/toolbox_diff.py).

:func:`gen_tile` draws one tile (a (M, K), b (K, N), c (M, N) container bits) of a family of :data:`FAMILIES`;
:func:`values` turns container bits into float64 values (what the Octave models take) and :func:`out_bits`
a model's float64 result into output bits, flagging values the output format cannot hold.
"""

from __future__ import annotations

import numpy as np

from tcemu.numerics.formats import get_format

__all__ = ["FAMILIES", "gen_tile", "out_bits", "tcemu_tile", "values"]

#: normal: N(0, 1) operands, c ~ U(0, 1) (as the public hardware data); wide: exponents within 12 binades;
#: cancel: pairs of products that cancel (some off by one bit); finite: any finite value; subnormal: subnormal
#: operands, tiny or zero c; zeros: signed zeros beside the largest binade, tiny or zero c; random: uniform bits;
#: special: wide with Inf/NaN injected
FAMILIES = ("normal", "wide", "cancel", "finite", "subnormal", "zeros", "random", "special")


def _compose(fmt: str, neg, efield, frac) -> np.ndarray:
    f = get_format(fmt)
    u = (np.asarray(neg, np.int64) << (f.exp_bits + f.frac_bits)) | (np.asarray(efield, np.int64) << f.frac_bits) \
        | np.asarray(frac, np.int64)
    if f.fnuz:  # 0x80 is NaN in FNUZ: a zero is +0
        u = np.where(u == 1 << (f.exp_bits + f.frac_bits), 0, u)
    return u << f.container_shift


def _finite(fmt: str, rng, shape, lo: int | None = None, hi: int | None = None) -> np.ndarray:
    """Random finite bits with exponent fields in [lo, hi] (clipped to the finite range)."""
    f = get_format(fmt)
    top = (1 << f.exp_bits) - 1
    hi_ok = top - 1 if f.ieee_specials else top
    lo = 0 if lo is None else max(0, lo)
    hi = hi_ok if hi is None else min(hi, hi_ok)
    ef = rng.integers(lo, hi + 1, shape)
    frac = rng.integers(0, 1 << f.frac_bits, shape)
    if not f.ieee_specials and not f.fnuz:  # e4m3: S.1111.111 is NaN
        frac = np.where((ef == top) & (frac == (1 << f.frac_bits) - 1), frac - 1, frac)
    return _compose(fmt, rng.integers(0, 2, shape), ef, frac)


def _special(fmt: str, rng, shape) -> np.ndarray:
    f = get_format(fmt)
    if f.fnuz:
        return np.full(shape, 0x80, np.int64)
    top = (1 << f.exp_bits) - 1
    if not f.ieee_specials:  # e4m3: NaN only
        return _compose(fmt, rng.integers(0, 2, shape), top, (1 << f.frac_bits) - 1)
    frac = np.where(rng.random(shape) < 0.5, 0, 1 << (f.frac_bits - 1))  # Inf or qNaN
    return _compose(fmt, rng.integers(0, 2, shape), top, frac)


def _normal(fmt: str, rng, shape, uniform: bool = False) -> np.ndarray:
    """N(0, 1) (or U(0, 1)) rounded to ``fmt`` (tf32: fp32 truncated to 10 fraction bits)."""
    x = rng.random(shape) if uniform else rng.standard_normal(shape)
    f = get_format(fmt)
    if f.numpy_dtype is None:
        return (x.astype(np.float32).view(np.uint32) & ~np.uint32((1 << f.container_shift) - 1)).astype(np.int64)
    return x.astype(f.numpy_dtype).view(f.container_dtype).astype(np.int64)


def gen_tile(fa: str, fc: str, m: int, k: int, n: int, family: str, rng) -> tuple[np.ndarray, ...]:
    """(a (m, k), b (k, n), c (m, n)) container bits (int64) of one tile: a and b in ``fa``, c in ``fc``."""
    f = get_format(fa)
    bias = (1 << (f.exp_bits - 1)) - 1
    fcc = get_format(fc)
    cbias = (1 << (fcc.exp_bits - 1)) - 1
    if family == "normal":
        return _normal(fa, rng, (m, k)), _normal(fa, rng, (k, n)), _normal(fc, rng, (m, n), uniform=True)
    if family == "random":
        w = 1 + f.exp_bits + f.frac_bits
        a = rng.integers(0, 1 << w, (m, k)) << f.container_shift
        b = rng.integers(0, 1 << w, (k, n)) << f.container_shift
        c = rng.integers(0, 1 << (1 + fcc.exp_bits + fcc.frac_bits), (m, n)) << fcc.container_shift
        return a, b, c
    if family == "subnormal":
        a, b = _finite(fa, rng, (m, k), 0, 1), _finite(fa, rng, (k, n), 0, 1)
    elif family == "finite":
        a, b = _finite(fa, rng, (m, k)), _finite(fa, rng, (k, n))
    else:
        span = min(6, bias)
        a, b = _finite(fa, rng, (m, k), bias - span, bias + span), _finite(fa, rng, (k, n), bias - span, bias + span)
    if family == "cancel":
        a[:, 1::2] = a[:, 0::2]
        sign = 1 << (f.exp_bits + f.frac_bits + f.container_shift)
        flip = (rng.random(b[0::2].shape) < 0.25).astype(np.int64) << f.container_shift
        b[1::2, :] = (b[0::2, :] ^ sign) ^ flip
        if f.fnuz:
            b = np.where(b == 0x80, 0, b)
    if family == "zeros":
        top = (1 << f.exp_bits) - (2 if f.ieee_specials else 1)
        for x in (a, b):
            big = _finite(fa, rng, x.shape, top, top)
            x[...] = np.where(rng.random(x.shape) < 0.5, big, x)
            zero = rng.integers(0, 1 if f.fnuz else 2, x.shape) << (f.exp_bits + f.frac_bits + f.container_shift)
            x[...] = np.where(rng.random(x.shape) < 0.3, zero, x)
    if family == "special":
        a = np.where(rng.random(a.shape) < 0.03, _special(fa, rng, a.shape), a)
        b = np.where(rng.random(b.shape) < 0.03, _special(fa, rng, b.shape), b)
    if family in ("subnormal", "zeros"):
        c = _finite(fc, rng, (m, n), 0, 2)
        c = np.where(rng.random((m, n)) < 0.3, rng.integers(0, 2, (m, n)) << (fcc.exp_bits + fcc.frac_bits
                                                                                + fcc.container_shift), c)
    elif family == "finite":
        c = _finite(fc, rng, (m, n))
    else:
        c = _finite(fc, rng, (m, n), max(1, cbias - 12), cbias + 8)
        c = np.where(rng.random((m, n)) < 0.25, 0, c)
        if family == "special":
            c = np.where(rng.random((m, n)) < 0.05, _special(fc, rng, (m, n)), c)
    return a, b, c


def values(bits: np.ndarray, fmt: str) -> np.ndarray:
    """float64 values of container bits (tf32 in its fp32 container)."""
    f = get_format(fmt)
    u = np.asarray(bits).astype(np.int64).astype(f.container_dtype)
    if f.numpy_dtype is None:
        return u.view(np.float32).astype(np.float64)
    return u.view(f.numpy_dtype).astype(np.float64)


def out_bits(d: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(bits in ``fmt``'s container (fp32 for e8m13), representable) of float64 results; NaN maps to the
    format's canonical NaN, a value the format cannot hold to its nearest (flagged False)."""
    dt = np.float16 if fmt == "fp16" else np.float32
    with np.errstate(over="ignore", invalid="ignore"):
        y = d.astype(dt)
    ok = (y.astype(np.float64) == d) | np.isnan(d)
    if fmt == "e8m13":
        ok &= (y.view(np.uint32) & 0x3FF) == 0
    y = np.where(np.isnan(d), dt("nan"), y)
    return y.view(np.uint16 if dt is np.float16 else np.uint32), ok


def tcemu_tile(p, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """tcemu's output bits (T, M, N) for tiles a (T, M, K), b (T, K, N), c (T, M, N) of container bits."""
    from tcemu.numerics import block_fma_bits

    t, m, k = a.shape
    n = b.shape[2]
    fa, fb, fc = (get_format(x) for x in (p.input_format, p.b_format, p.c_format))
    rows = np.repeat(a, n, axis=1).reshape(-1, k).astype(fa.container_dtype)
    cols = np.tile(b.transpose(0, 2, 1), (1, m, 1)).reshape(-1, k).astype(fb.container_dtype)
    return np.asarray(block_fma_bits(rows, cols, c.reshape(-1).astype(fc.container_dtype), p)).reshape(t, m, n)
