"""FAST block-scaled MMA (``kind::mxf8f6f4``, ``kind::mxf4nvf4``): bits and scale bits in, bits out.

:func:`block_fma_scaled_bits` is :func:`tcemu.numerics.model.block_fma_bits` for a model with block
scaling (``params.scale_format``); the exact rational reference is :mod:`tcemu.numerics.oracle_blockscale`.
Two ways a scale enters, after MMA-Sim (docs/numerics.md, "Block scaling"):

- ``scale_chunk = 0`` (``kind::mxf8f6f4``, ue8m0): each product's exponent gets the two scales' exponents
  before the block's alignment; everything else is the ordinary block FMA (:mod:`tcemu.numerics.model`).
- ``scale_chunk > 0`` (``kind::mxf4nvf4``, e2m1 elements): the products of each chunk of ``scale_chunk`` k
  are summed exactly; the chunk sum times the two scale significands is one addend whose alignment exponent
  is the sum of the two scales' exponents (not the sum's own leading bit); the chunks and c are aligned to
  their largest exponent, truncated on the grid ``2**(E_max - F)``, summed exactly and rounded once.

A NaN scale anywhere in a row makes its result the canonical NaN (MMA-Sim: the scale multiplies every
product of its block, and 0 x NaN is NaN).
"""

from __future__ import annotations

import numpy as np

from .formats import FINITE, INF, decode_table, encode, get_format
from .formats_mx import decode_scale, get_scale_format
from .model import BLOCK_SCALED, _bfma_kernel, _c_fields, _chain_blocks, _CHUNK, _index, _positive_zero, _special_rows
from .params import MMAParams

__all__ = ["block_fma_scaled_bits"]

_NO_TERM = -(1 << 30)  # E_max of a block with no term (only with czero_floor None)


def _check(a_bits, b_bits, c_bits, params: MMAParams, scale_a, scale_b):
    if params.scale_format is None:
        raise ValueError("tcemu: scale_a/scale_b given but the model has no block scaling (params.scale_format)")
    if scale_a is None or scale_b is None:
        raise ValueError(f"tcemu: {params.label or 'this model'} is block-scaled: pass scale_a and scale_b "
                         f"((S, K / {params.scale_block}) {params.scale_format} bits)")
    a_bits, b_bits, c_bits = np.asarray(a_bits), np.asarray(b_bits), np.asarray(c_bits)
    scale_a, scale_b = np.asarray(scale_a), np.asarray(scale_b)
    if a_bits.ndim != 2 or a_bits.shape != b_bits.shape or c_bits.shape != a_bits.shape[:1]:
        raise ValueError(f"need a_bits, b_bits (S, K) and c_bits (S,), got {a_bits.shape}, {b_bits.shape}, "
                         f"{c_bits.shape}")
    s, k = a_bits.shape
    want = (s, k // params.scale_block)
    if k % params.scale_block or scale_a.shape != want or scale_b.shape != want:
        raise ValueError(f"tcemu: K = {k} must be a multiple of scale_block {params.scale_block} and scale_a, scale_b "
                         f"of shape {want}; got {scale_a.shape}, {scale_b.shape}")
    return a_bits, b_bits, c_bits, scale_a, scale_b


def block_fma_scaled_bits(a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, params: MMAParams,
                          scale_a: np.ndarray | None, scale_b: np.ndarray | None) -> np.ndarray:
    """S block-scaled dot products: a, b (S, K) element bits, c (S,), scale_a, scale_b (S, K / scale_block)."""
    a_bits, b_bits, c_bits, scale_a, scale_b = _check(a_bits, b_bits, c_bits, params, scale_a, scale_b)
    c_fmt = get_format(params.c_format)
    c_bits = c_bits.astype(c_fmt.container_dtype)
    sig_a, exp_a, nan_a = decode_scale(scale_a, params.scale_format)
    sig_b, exp_b, nan_b = decode_scale(scale_b, params.scale_format)
    s = a_bits.shape[0]
    out = np.empty(s, dtype=c_fmt.container_dtype)
    for r0 in range(0, s, _CHUNK):
        rs = slice(r0, r0 + _CHUNK)
        a_idx = _index(a_bits[rs], params.input_format, True)
        b_idx = _index(b_bits[rs], params.b_format, True)
        if params.scale_chunk:
            out[rs] = _chunked(a_idx, b_idx, c_bits[rs], params, sig_a[rs], exp_a[rs], sig_b[rs], exp_b[rs])
        else:
            out[rs] = _product_scaled(np.ascontiguousarray(a_idx.T), np.ascontiguousarray(b_idx.T), c_bits[rs],
                                      params, (exp_a[rs] + exp_b[rs]).astype(np.int32))
    nan_rows = nan_a.any(axis=1) | nan_b.any(axis=1)
    if np.any(nan_rows):
        out[nan_rows] = c_fmt.canonical_nan
    return out


def _product_scaled(a_kt, b_kt, c_bits, p: MMAParams, scale_exp) -> np.ndarray:
    """``scale_chunk = 0``: the blocks of n_fma k (k-major (K, S) indices), each product's exponent raised by its
    block's two scale exponents (``scale_exp`` (S, K / scale_block)); blocks chained from c."""
    if p.scale_block % p.n_fma:  # a block of products spans several scales: one offset per k
        e_off = np.ascontiguousarray(np.repeat(scale_exp, p.scale_block, axis=1).T)
        return _chain_blocks(a_kt, b_kt, c_bits, p, p.input_format, p.c_format, p.input_format_b, e_off)
    per_scale = np.ascontiguousarray(scale_exp.T)  # (K / scale_block, S): one row broadcast over a block's k
    d = c_bits
    for k0 in range(0, max(a_kt.shape[0], 1), p.n_fma):
        d = _bfma_kernel(a_kt[k0:k0 + p.n_fma], b_kt[k0:k0 + p.n_fma], d, product_format=p.input_format,
                         c_format=p.c_format, output_format=p.output_format, frac_bits=p.frac_bits,
                         rounding=p.output_rounding, czero_floor=p.czero_floor, c_exp_floor=p.c_exp_floor,
                         overflow=p.overflow, underflow_sign=p.underflow_sign, product_format_b=p.input_format_b,
                         e_off=per_scale[k0 // p.scale_block][None] if per_scale.shape[0] else None,
                         zero_exp=p.zero_factor_exp)
    return d


def _chunked(a_idx, b_idx, c_bits, p: MMAParams, sig_a, exp_a, sig_b, exp_b) -> np.ndarray:
    """``scale_chunk > 0``: exact chunk sums, scaled, aligned at the scales' exponents; blocks of n_fma chained."""
    neg_t, sig_t, e_t, _ = decode_table("e2m1")
    mag_t = (sig_t << (e_t - get_format("e2m1").emin)).astype(np.int32)  # |value| in units of 2^-1
    val_t = np.where(neg_t, -mag_t, mag_t)
    s, k = a_idx.shape
    ch = p.scale_chunk
    prod = val_t[a_idx] * val_t[b_idx]  # units of 2^-2
    csum = prod.reshape(s, k // ch, ch).sum(axis=2, dtype=np.int64)  # exact chunk sums, |.| <= 2304 for 16
    per = p.scale_block // ch  # chunks per scale
    sfrac = get_scale_format(p.scale_format).frac_bits
    ma, mb = np.repeat(sig_a, per, axis=1), np.repeat(sig_b, per, axis=1)
    ea, eb = np.repeat(exp_a, per, axis=1), np.repeat(exp_b, per, axis=1)
    value = csum * ma * mb  # the chunk's value is value * 2**(ea + eb - 2 - 2 sfrac)
    if p.zero_factor_exp is None:
        e_term = np.where(value != 0, ea + eb, _NO_TERM)  # a zero chunk takes no part in E_max
    else:  # every chunk takes part; a zero scale at zero_factor_exp
        e_term = np.where(ma == 0, p.zero_factor_exp, ea) + np.where(mb == 0, p.zero_factor_exp, eb)
    unit = 2 + 2 * sfrac
    d = c_bits
    per_block = p.n_fma // ch
    for j0 in range(0, max(k // ch, 1), per_block):
        d = _chunk_block(value[:, j0:j0 + per_block], e_term[:, j0:j0 + per_block], d, p, unit)
    return d


def _chunk_block(value, e_term, c_bits, p: MMAParams, unit: int) -> np.ndarray:
    """One block: chunk addends ``value * 2**(e_term - unit)`` (S, n) and c; E_max, truncation, one rounding."""
    c_neg, c_sig, c_q, c_e, c_cls = _c_fields(c_bits, p.c_format, p.c_exp_floor)
    floor = np.where(c_cls == FINITE, c_e, _NO_TERM if p.czero_floor is None else p.czero_floor)
    e_max = np.maximum(e_term.max(axis=1, initial=_NO_TERM), floor)
    grid = e_max - p.frac_bits  # exponent of the grid 2**(E_max - F)
    sh = grid[:, None] - (e_term - unit)  # > 0: bits dropped (truncation of the magnitude); <= 0: exact
    mag = np.abs(value)
    t = np.where(sh > 0, mag >> np.clip(sh, 0, 62), mag << np.clip(-sh, 0, 62))
    total = np.where(value < 0, -t, t).sum(axis=1)
    c_sh = grid - c_q
    c_t = np.where(c_sh > 0, c_sig >> np.clip(c_sh, 0, 62), c_sig << np.clip(-c_sh, 0, 62))
    total = total + np.where(c_neg, -c_t, c_t)
    out = encode(total < 0, np.abs(total), grid, p.output_format, p.output_rounding, p.overflow)
    if p.underflow_sign == "positive":
        out = _positive_zero(out, p.output_format)
    special = c_cls >= INF  # e2m1 has no Inf or NaN: only c can be special
    if np.any(special):
        rows = np.nonzero(special)[0]
        zeros = np.zeros((rows.size, 0), np.intp)
        out[rows] = _special_rows(zeros, zeros, c_bits[rows], "e2m1", p.c_format, p.output_format)
    return out


BLOCK_SCALED["block_fma_scaled_bits"] = block_fma_scaled_bits  # block_fma_bits's entry for block-scaled models
