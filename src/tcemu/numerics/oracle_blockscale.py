"""REFERENCE exact rational model of block-scaled MMA, written from docs/numerics.md, "Block scaling".

The same steps as :mod:`tcemu.numerics.oracle` (values through ml_dtypes/float64, exponents from
``floor(log2 |v|)``, truncation by ``math.floor`` of a rational, one rational rounding per block), with the
scales applied as docs/numerics.md states: ``scale_chunk = 0``: every product is ``a b s_a s_b`` at exponent
``e_a + e_b + E(s_a) + E(s_b)``; ``scale_chunk > 0``: every chunk is ``(sum of its a b) s_a s_b`` at exponent
``E(s_a) + E(s_b)``. ``E(s)`` is the scale's exponent (at least -6 for ue4m3, whose subnormals share emin);
a zero element or scale takes part at ``zero_factor_exp``, or not at all when it is None. Tests compare
:mod:`tcemu.numerics.model_blockscale` against it bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import ml_dtypes
import numpy as np

from .oracle import _CANON_NAN, _INF_BITS, _SIGN_BIT, _exponent, _floor_log2, round_fraction, special_product, value_of
from .params import MMAParams

__all__ = ["oracle_scaled_dot", "oracle_scaled_bits", "scale_value"]


def scale_value(bits: int, fmt: str) -> float:
    """A scale's value (ue8m0: 2^(bits-127), 0xFF NaN; ue4m3: |e4m3| of the bits), through ml_dtypes."""
    dtype = ml_dtypes.float8_e8m0fnu if fmt == "ue8m0" else ml_dtypes.float8_e4m3fn
    with np.errstate(invalid="ignore"):
        v = float(np.array([int(bits)], np.uint8).view(dtype)[0].astype(np.float64))
    return abs(v)


def _scale_exp(v: float, fmt: str, zero: int | None) -> int | None:
    if v == 0:
        return zero
    e = _floor_log2(Fraction(v))
    return max(e, -6) if fmt == "ue4m3" else e


def _rows(avals, bvals, sa, sb, prm: MMAParams, k0: int, n: int):
    """(value, exponent or None, label) of each addend of the block at k0..k0+n, and special flags."""
    z = prm.zero_factor_exp
    terms, nan, pos_inf, neg_inf = [], False, False, False
    blk = prm.scale_block
    if prm.scale_chunk:
        ch = prm.scale_chunk
        for j in range(k0, min(k0 + n, len(avals)), ch):
            s_a, s_b = sa[j // blk], sb[j // blk]
            p = sum((Fraction(a) * Fraction(b) for a, b in zip(avals[j:j + ch], bvals[j:j + ch])), Fraction(0))
            v = p * Fraction(s_a) * Fraction(s_b)
            ea, eb = _scale_exp(s_a, prm.scale_format, z), _scale_exp(s_b, prm.scale_format, z)
            if v != 0 or z is not None:
                terms.append((v, ea + eb, f"chunk k={j}..{j + ch - 1}"))
        return terms, nan, pos_inf, neg_inf
    for k in range(k0, min(k0 + n, len(avals))):
        a, b = avals[k], bvals[k]
        s_a, s_b = sa[k // blk], sb[k // blk]
        kind = special_product(a, b)
        if kind is not None:
            nan |= kind == "nan"
            pos_inf |= kind == "+inf"
            neg_inf |= kind == "-inf"
        elif a != 0 and b != 0 or z is not None:
            ea = z if a == 0 else _exponent(a, prm.input_format)
            eb = z if b == 0 else _exponent(b, prm.b_format)
            scale_e = _floor_log2(Fraction(s_a)) + _floor_log2(Fraction(s_b))  # ue8m0: powers of two
            terms.append((Fraction(a) * Fraction(b) * Fraction(s_a) * Fraction(s_b), ea + eb + scale_e, f"k={k}"))
    return terms, nan, pos_inf, neg_inf


def _block(avals, bvals, sa, sb, c_bits: int, prm: MMAParams, k0: int) -> int:
    c_fmt, out_fmt = prm.c_format, prm.output_format
    terms, nan, pos_inf, neg_inf = _rows(avals, bvals, sa, sb, prm, k0, prm.n_fma)
    cval = value_of(c_bits, c_fmt)
    nan |= math.isnan(cval)
    pos_inf |= cval == math.inf
    neg_inf |= cval == -math.inf
    if nan or (pos_inf and neg_inf):
        return _CANON_NAN[out_fmt]
    if pos_inf or neg_inf:
        return _INF_BITS[out_fmt] | (_SIGN_BIT[out_fmt] if neg_inf else 0)
    exps = [e for _, e, _ in terms]
    if cval != 0:
        e_c = _floor_log2(abs(Fraction(cval)))
        if prm.c_exp_floor is not None:
            e_c = max(e_c, prm.c_exp_floor)
        terms.append((Fraction(cval), e_c, "c"))
        exps.append(e_c)
    elif prm.czero_floor is not None:
        exps.append(prm.czero_floor)
    if not exps:
        return 0
    grid = Fraction(2) ** (max(exps) - prm.frac_bits)
    total = 0
    for v, _, _ in terms:
        mag = math.floor(abs(v) / grid)  # truncation toward zero of the magnitude
        total += -mag if v < 0 else mag
    res = round_fraction(total * grid, out_fmt, prm.output_rounding, prm.overflow)
    if prm.underflow_sign == "positive" and res == _SIGN_BIT[out_fmt]:
        res = 0
    return res


def oracle_scaled_dot(a_bits: Sequence[int], b_bits: Sequence[int], c_bits: int, params: MMAParams,
                      scale_a: Sequence[int], scale_b: Sequence[int]) -> int:
    """One block-scaled dot product of length K (blocks of n_fma chained from c); bits in, bits out."""
    prm = params
    avals = [value_of(x, prm.input_format) for x in a_bits]
    bvals = [value_of(x, prm.b_format) for x in b_bits]
    sa = [scale_value(x, prm.scale_format) for x in scale_a]
    sb = [scale_value(x, prm.scale_format) for x in scale_b]
    if any(math.isnan(x) for x in sa + sb):
        return _CANON_NAN[prm.output_format]
    d = int(c_bits)
    for k0 in range(0, max(len(avals), 1), prm.n_fma):
        d = _block(avals, bvals, sa, sb, d, prm, k0)
    return d


def oracle_scaled_bits(a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, params: MMAParams,
                       scale_a: np.ndarray, scale_b: np.ndarray) -> np.ndarray:
    """:func:`oracle_scaled_dot` over rows, the contract of :func:`tcemu.numerics.block_fma_bits` with scales."""
    out = [oracle_scaled_dot(a, b, c, params, x, y) for a, b, c, x, y in
           zip(*(np.asarray(v).tolist() for v in (a_bits, b_bits, c_bits, scale_a, scale_b)))]
    dtype = np.uint16 if params.c_format == "fp16" else np.uint32
    return np.array(out, dtype=np.int64).astype(dtype)
