"""FAST vectorised block-FMA model: bits in, bits out, integer NumPy only.

Entry points:

- :func:`block_fma_bits` ``(a_bits (S, K), b_bits (S, K), c_bits (S,), params) -> d_bits (S,)``:
  S independent dot products of length K (any K; a partial last block acts as zero padding),
  chained block by block (and instruction by instruction) in increasing k exactly as
  :class:`~tcemu.numerics.params.MMAParams` describes. a and b are container bits of
  ``params.input_format`` (uint16 fp16/bf16, uint32 tf32, uint8 e4m3/e5m2), c and d of
  ``params.c_format`` (uint32 fp32, uint16 fp16; e8m13 results sit in a uint32 fp32 container).
- :func:`add_round_bits`: one IEEE addition ``x + y`` rounded once (the c-add of emulated FP8).

The exact rational reference of the same steps is :mod:`tcemu.numerics.oracle`.

How one block is computed (docs/numerics.md, "The model"):

1. decode a and b through lookup tables into (sign, significand with hidden bit, exponent);
   zeros get a very small exponent and Inf/NaN a very large one, so the block maximum also flags
   blocks with special values, which are then resolved on the few rows concerned;
2. products ``M = sig_a * sig_b`` (exact, int64) with exponent ``E = e_a + e_b`` (significand in [0, 4));
3. ``E_max`` over the nonzero products and c (c's exponent is at least ``c_exp_floor``; a zero c
   drops out, but ``E_max >= czero_floor``);
4. each addend is shifted right to the grid ``2**(E_max - F)`` *as a magnitude* (truncation toward
   zero), then its sign is applied;
5. the exact int64 sum is rounded once to the output format (:func:`tcemu.numerics.formats.encode`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .formats import FINITE, INF, NAN, ZERO, decode, decode_table, encode, fp8_to_fp16_bits, get_format
from .params import MMAParams, widen_c
from .rounding import Rounding, bit_length

__all__ = ["block_fma_bits", "add_round_bits", "bfma_block_bits", "chain_kmajor_bits", "table_index"]

_ZERO_EXP = -(1 << 20)  # exponent given to zero inputs: their products never reach E_max
_SPECIAL_EXP = 1 << 24  # exponent given to Inf/NaN inputs: E_max > _SPECIAL_LIMIT flags the row
_SPECIAL_LIMIT = 1 << 22
_CHUNK = 1 << 13  # rows per chunk: the (K, chunk) int32 temporaries stay in cache (measured best)
#: the block-scaled path (:mod:`tcemu.numerics.model_blockscale` registers itself when the package imports it; it
#: builds on this module's kernel, so this module does not import it: no import circle)
BLOCK_SCALED: dict = {}


@lru_cache(maxsize=None)
def _kernel_table(fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sig, exp, negative) per bit pattern, with the zero / special exponent sentinels of this module."""
    negative, sig, e, cls = decode_table(fmt)
    exp = np.where(cls == ZERO, _ZERO_EXP, np.where(cls >= INF, _SPECIAL_EXP, e))
    out = (sig.astype(np.int64), exp.astype(np.int64), negative.astype(bool))
    for arr in out:
        arr.setflags(write=False)
    return out


@lru_cache(maxsize=None)
def _packed_table(fmt: str, lshift: int, zero_exp: int | None = None) -> np.ndarray:
    """int64 per bit pattern: low half the signed significand times 2**lshift, high half the exponent.

    One gather then yields both fields as int32 views (little-endian halves). ``zero_exp``: the exponent
    of a zero (``MMAParams.zero_factor_exp``), else the sentinel that keeps zero products out of E_max.
    """
    sig, exp, neg = _kernel_table(fmt)
    if zero_exp is not None:
        exp = np.where(sig == 0, np.where(exp == _SPECIAL_EXP, exp, zero_exp), exp)
    signed = np.where(neg, -(sig << lshift), sig << lshift)
    packed = (exp << 32) | (signed & 0xFFFFFFFF)
    packed.setflags(write=False)
    return packed


def _fields(idx: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gather packed entries for an index array; return (signed significand, exponent) int32 views."""
    pair = np.take(table, idx).view(np.int32).reshape(idx.shape + (2,))
    if np.little_endian:
        return pair[..., 0], pair[..., 1]
    return pair[..., 1], pair[..., 0]  # pragma: no cover


def _index(bits: np.ndarray, fmt: str, tf32_truncate: bool) -> np.ndarray:
    """Table index of each container bit pattern (tf32: the top 19 bits)."""
    f = get_format(fmt)
    u = np.asarray(bits)
    if f.container_bits and not f.container_shift and np.any(u >= 1 << f.width):  # fp4/fp6, one per byte
        raise ValueError(f"tcemu: {fmt} operand bits must be below 2**{f.width} (one element per byte, high bits 0)")
    if f.container_shift:
        if not tf32_truncate and np.any(u.astype(np.uint32) & ((1 << f.container_shift) - 1)):
            raise ValueError(f"{fmt} operand has nonzero low {f.container_shift} bits and tf32_truncate=False")
        return u.astype(np.uint32) >> f.container_shift
    return u


def _c_fields(c_bits: np.ndarray, c_fmt: str, c_exp_floor: int | None):
    """c decoded: (negative, sig, q, alignment exponent E_c, cls); value = sig * 2**q.

    Same fields as :func:`tcemu.numerics.formats.decode` (fp32/fp16 containers only), written for speed:
    the bit length (true exponent) is only computed where c is subnormal.
    """
    f = get_format(c_fmt)
    u = np.asarray(c_bits).astype(np.int64)
    fb = f.frac_bits
    top = (1 << f.exp_bits) - 1
    neg = (u >> (f.width - 1)).astype(bool)
    ef = (u >> fb) & top
    frac = u & ((1 << fb) - 1)
    normal = (ef != 0) & (ef != top)
    sig = np.where(normal, frac | (1 << fb), np.where(ef == top, 0, frac))
    e = np.maximum(ef, 1) - f.bias
    q = e - fb
    cls = np.where(ef == top, np.where(frac != 0, NAN, INF), np.where(sig != 0, FINITE, ZERO)).astype(np.uint8)
    lead = e
    sub = (ef == 0) & (frac != 0)
    if np.any(sub):
        lead = np.where(sub, bit_length(frac) - 1 + q, e)  # the true exponent of c's leading bit
    e_c = lead if c_exp_floor is None else np.maximum(lead, c_exp_floor)
    return neg, sig, q, e_c, cls


def _bfma_kernel(
    a_idx: np.ndarray,
    b_idx: np.ndarray,
    c_bits: np.ndarray,
    *,
    product_format: str,
    c_format: str,
    output_format: str,
    frac_bits: int,
    rounding: Rounding,
    czero_floor: int | None,
    c_exp_floor: int | None,
    overflow: str = "inf",
    underflow_sign: str = "positive",
    product_format_b: str | None = None,
    e_off: np.ndarray | None = None,
    zero_exp: int | None = None,
) -> np.ndarray:
    """One block FMA on table indices laid out (n, S) (k-major: reductions run over contiguous rows).

    ``product_format_b``: b's format if not a's; ``e_off``: (n, S) int32 added to each product's exponent
    (block scale exponents); ``zero_exp``: the exponent of a zero factor (None: zeros take no part).
    """
    fmt_b = product_format_b or product_format
    frac_ab = get_format(product_format).frac_bits + get_format(fmt_b).frac_bits
    n, s = a_idx.shape
    lshift = max(0, frac_bits - frac_ab)  # pre-shift so that every alignment is a right shift
    base = frac_ab - frac_bits + lshift  # >= 0
    c_neg, c_sig, c_q, c_e, c_cls = _c_fields(c_bits, c_format, c_exp_floor)
    if n:
        sa, ea = _fields(a_idx, _packed_table(product_format, lshift, zero_exp))
        sb, eb = _fields(b_idx, _packed_table(fmt_b, 0, zero_exp))
        m = sa * sb  # signed exact products, |m| < 2**27
        e = ea + eb
        if e_off is not None:
            e += e_off
        e_max_p = np.maximum.reduce(e, axis=0).astype(np.int64)
    else:
        e_max_p = np.full(s, 2 * _ZERO_EXP, dtype=np.int64)
    c_nonzero = c_cls == FINITE
    floor = np.where(c_nonzero, c_e, -(1 << 30) if czero_floor is None else czero_floor)
    e_max = np.maximum(e_max_p, floor)
    if n:
        # magnitudes >> (E_max - E + base), then the sign re-applied: truncation toward zero
        sh = (e_max + base).astype(np.int32) - e
        t = np.abs(m) >> sh
        sgn = m >> 31  # 0 or -1
        t ^= sgn
        t -= sgn
        wide = n * (1 << (frac_bits + 2)) >= 1 << 31
        total = np.add.reduce(t, axis=0, dtype=np.int64 if wide else np.int32).astype(np.int64)
    else:
        total = np.zeros(s, dtype=np.int64)
    # c: the same truncation on the grid 2**(E_max - F). Pre-shifted left by F, the shift is never negative
    # (c's significand has at most E_c - q_c + 1 <= E_max - q_c + 1 bits); zero, Inf and NaN have sig 0
    c_sh = e_max - c_q
    np.maximum(c_sh, 0, out=c_sh)  # only a zero c (sig 0) with an empty block can go below 0
    np.minimum(c_sh, 62, out=c_sh)
    c_t = (c_sig << frac_bits) >> c_sh
    total += np.where(c_neg, -c_t, c_t)
    negative = total < 0
    out = encode(negative, np.abs(total), e_max - frac_bits, output_format, rounding, overflow)
    if underflow_sign == "positive":  # the hardware gives +0 for every zero result, also a negative sum rounded to 0
        out = _positive_zero(out, output_format)
    # rows with Inf/NaN anywhere: decided on exact classes
    special = (e_max_p > _SPECIAL_LIMIT) | (c_cls >= INF)
    if np.any(special):
        rows = np.nonzero(special)[0]
        out[rows] = _special_rows(
            np.asarray(a_idx)[:, rows].T, np.asarray(b_idx)[:, rows].T, c_bits[rows], product_format, c_format,
            output_format, fmt_b,
        )
    return out


def bfma_block_bits(
    a_idx: np.ndarray,
    b_idx: np.ndarray,
    c_bits: np.ndarray,
    *,
    product_format: str,
    c_format: str,
    output_format: str,
    frac_bits: int,
    rounding: Rounding,
    czero_floor: int | None,
    c_exp_floor: int | None,
    overflow: str = "inf",
    underflow_sign: str = "positive",
) -> np.ndarray:
    """One block FMA on table indices of a and b ``(S, n)`` and c bits ``(S,)``; returns output bits ``(S,)``.

    Table indices are the format's own bits (for tf32 the container bits ``>> 13``).
    """
    return _bfma_kernel(
        np.ascontiguousarray(np.asarray(a_idx).T), np.ascontiguousarray(np.asarray(b_idx).T), np.asarray(c_bits),
        product_format=product_format, c_format=c_format, output_format=output_format, frac_bits=frac_bits,
        rounding=rounding, czero_floor=czero_floor, c_exp_floor=c_exp_floor, overflow=overflow, underflow_sign=underflow_sign,
    )


def _special_rows(
    a_idx: np.ndarray, b_idx: np.ndarray, c_bits: np.ndarray, product_format: str, c_format: str, output_format: str,
    product_format_b: str | None = None,
) -> np.ndarray:
    """NaN / Inf results of rows that hold an Inf or NaN (docs/numerics.md, "The model", step 1)."""
    neg_a, _, _, cls_a = decode_table(product_format)
    neg_b, _, _, cls_b = decode_table(product_format_b or product_format)
    ca, cb = cls_a[a_idx], cls_b[b_idx]
    c_neg, _, _, c_cls = decode(c_bits, c_format)
    nan = (ca == NAN).any(1) | (cb == NAN).any(1) | (c_cls == NAN)
    nan |= ((ca == INF) & (cb == ZERO)).any(1) | ((ca == ZERO) & (cb == INF)).any(1)
    inf_p = (ca == INF) | (cb == INF)
    negp = neg_a[a_idx] ^ neg_b[b_idx]
    pos_inf = (inf_p & ~negp).any(1) | ((c_cls == INF) & ~c_neg)
    neg_inf = (inf_p & negp).any(1) | ((c_cls == INF) & c_neg)
    nan |= pos_inf & neg_inf
    f = get_format(output_format)
    inf_bits = f.inf_field << f.container_shift
    sign_bit = 1 << (f.container_bits or f.width) - 1
    out = np.where(neg_inf, inf_bits | sign_bit, inf_bits)
    out = np.where(nan, f.canonical_nan, out)
    return out.astype(f.container_dtype)


def add_round_bits(
    x_bits: np.ndarray, y_bits: np.ndarray, fmt: str, rounding: Rounding, overflow: str = "inf",
    *, positive_zero: bool = False,
) -> np.ndarray:
    """``x + y`` for two arrays of ``fmt`` bits, computed exactly and rounded once (IEEE addition).

    A zero result is +0 except for RD (-0), or when both operands are -0 (IEEE 754 §6.3); with
    ``positive_zero`` every zero result is +0 (the H200's final add of emulated FP8 ``mma.sync``).
    NaN results are canonical.
    """
    f = get_format(fmt)
    xn, xs, xe, xc = decode(x_bits, f)
    yn, ys, ye, yc = decode(y_bits, f)
    xq, yq = xe - f.frac_bits, ye - f.frac_bits
    # exact sum on the finer grid. An operand whose last bit lies more than p + 4 bits below the other's
    # is below a quarter-ulp of any possible result: it only decides on which side of the larger operand
    # the sum falls, so it is replaced by a sticky unit at qmax - (p + 4) (same sign), keeping magnitudes
    # below 2**(2p + 5) (exact in int64, and below 2**53 for the bit-length query)
    gap = f.precision + 4
    qlo = np.maximum(np.minimum(xq, yq), np.maximum(xq, yq) - gap)

    def aligned(neg, sig, q):
        d = q - qlo
        mag = np.where(d >= 0, sig << np.clip(d, 0, 62), (sig != 0).astype(np.int64))
        return np.where(neg, -mag, mag)

    total = aligned(xn, xs, xq) + aligned(yn, ys, yq)
    negative = total < 0
    out = encode(negative, np.abs(total), qlo, f, rounding, overflow)
    zero = total == 0
    if np.any(zero):
        neg_zero = (xn & yn) if rounding is not Rounding.RD else (xn | yn | (xc != ZERO) | (yc != ZERO))
        out = np.where(zero & neg_zero, out | np.asarray(1 << (f.container_bits or f.width) - 1, out.dtype), out)
    special = (xc >= INF) | (yc >= INF)
    if np.any(special):
        inf_bits = f.inf_field << f.container_shift
        sign_bit = 1 << (f.container_bits or f.width) - 1
        pos_inf = ((xc == INF) & ~xn) | ((yc == INF) & ~yn)
        neg_inf = ((xc == INF) & xn) | ((yc == INF) & yn)
        nan = (xc == NAN) | (yc == NAN) | (pos_inf & neg_inf)
        sp = np.where(neg_inf, inf_bits | sign_bit, inf_bits)
        sp = np.where(nan, f.canonical_nan, sp).astype(out.dtype)
        out = np.where(special, sp, out)
    if positive_zero:
        out = _positive_zero(out, fmt)
    return out.astype(f.container_dtype)


def _positive_zero(out: np.ndarray, fmt: str) -> np.ndarray:
    """Clear the sign bit of zero results (bits of ``fmt``'s container)."""
    f = get_format(fmt)
    sign_bit = out.dtype.type(1 << (f.container_bits or f.width) - 1)
    return np.where((out & ~sign_bit) == 0, out.dtype.type(0), out)


def _chain_blocks(a_idx, b_idx, d, params: MMAParams, product_format: str, c_format: str,
                  product_format_b: str | None = None, e_off: np.ndarray | None = None) -> np.ndarray:
    """Blocks of n_fma consecutive k (rows of the (K, S) index arrays), in order, each result the next c.

    ``e_off``: (K, S) exponent offsets of the products (block scales), or None."""
    n = params.n_fma
    k = a_idx.shape[0]
    for k0 in range(0, max(k, 1), n):
        d = _bfma_kernel(
            a_idx[k0 : k0 + n],
            b_idx[k0 : k0 + n],
            d,
            product_format=product_format,
            c_format=c_format,
            output_format=params.output_format,
            frac_bits=params.frac_bits,
            rounding=params.output_rounding,
            czero_floor=params.czero_floor,
            c_exp_floor=params.c_exp_floor,
            overflow=params.overflow,
            underflow_sign=params.underflow_sign,
            product_format_b=product_format_b,
            e_off=None if e_off is None else e_off[k0 : k0 + n],
            zero_exp=params.zero_factor_exp,
        )
    return d


def table_index(bits: np.ndarray, fmt: str) -> np.ndarray:
    """The model's table index of container bits of ``fmt`` (the bits; tf32: the top 19 of the fp32 container)."""
    return _index(bits, fmt, True)


def chain_kmajor_bits(a_idx: np.ndarray, b_idx: np.ndarray, c_bits: np.ndarray, params: MMAParams) -> np.ndarray:
    """:func:`block_fma_bits` on k-major table indices: a_idx, b_idx (K, S) (:func:`table_index`), c (S,).

    The blocks of ``params.n_fma`` consecutive k are chained in increasing k from c, each result rounded to the
    output format; K need not be a multiple of the instruction's K (a partial block acts as zero padding). For
    callers that keep operands k-major (the emulated-GEMM twin): no transposes, no chunking. Not for the
    emulated FP8 path (``params.interleave``).
    """
    if params.interleave is not None:
        raise ValueError("chain_kmajor_bits does not run the emulated FP8 path; use block_fma_bits")
    c = np.asarray(c_bits).astype(get_format(params.c_format).container_dtype)
    if _fast_chain_applies(params):
        out = _fast_chain(a_idx, b_idx, c, params)
        if out is not None:
            return out
    return _chain_blocks(a_idx, b_idx, c, params, params.input_format, params.c_format, params.input_format_b)


def _fast_chain_applies(p: MMAParams) -> bool:
    return (p.output_format == "fp32" and p.output_rounding is Rounding.RZ and p.overflow == "inf"
            and p.input_format_b is None and p.scale_format is None and p.zero_factor_exp is None
            and p.underflow_sign == "positive" and p.c_exp_floor == -126 and p.czero_floor is not None)


def _fast_chain(a_idx, b_idx, c_bits, p: MMAParams):
    """:func:`_chain_blocks` for fp32 output rounded toward zero, with c kept as (signed significand, exponent)
    between the blocks instead of encoded and decoded. The same steps as :func:`_bfma_kernel` (c aligned at
    its exponent floored at ``c_exp_floor`` = -126, i.e. its exponent with subnormals at -126, and its last bit
    23 below). Returns None where a block holds Inf or NaN or overflows: the caller then runs the general path.
    """
    fmt = get_format(p.input_format)
    fb = p.frac_bits
    lshift = max(0, fb - 2 * fmt.frac_bits)
    base = 2 * fmt.frac_bits - fb + lshift
    ta, tb = _packed_table(p.input_format, lshift), _packed_table(p.input_format, 0)
    u = np.asarray(c_bits).astype(np.int64)
    ef = (u >> 23) & 0xFF
    if np.any(ef == 0xFF):
        return None
    sig = (u & 0x7FFFFF) | np.where(ef != 0, 1 << 23, 0)
    e_c = np.maximum(ef, 1) - 127  # the alignment exponent: subnormals at emin = -126 (= the floor)
    cv = np.where(u >> 31 != 0, -sig, sig)
    wide = np.int64 if p.n_fma * (1 << (p.frac_bits + 2)) >= 1 << 31 else np.int32
    k = a_idx.shape[0]
    for k0 in range(0, max(k, 1), p.n_fma):
        nz = cv != 0
        e_max = np.where(nz, e_c, p.czero_floor)
        if k0 < k:
            sa, ea = _fields(a_idx[k0:k0 + p.n_fma], ta)
            sb, eb = _fields(b_idx[k0:k0 + p.n_fma], tb)
            m = sa * sb
            e = ea + eb
            e_max_p = np.maximum.reduce(e, axis=0)
            if e_max_p.max() > _SPECIAL_LIMIT:
                return None
            e_max = np.maximum(e_max_p, e_max)
            sh = (e_max + base).astype(np.int32) - e
            t = np.abs(m) >> sh
            sgn = m >> 31
            t ^= sgn
            t -= sgn
            total = np.add.reduce(t, axis=0, dtype=wide).astype(np.int64)
        else:
            total = np.zeros(cv.shape, np.int64)
        # c on the grid 2^(E_max - F), truncated toward zero as a magnitude (q_c = e_c - 23 for a nonzero c)
        c_sh = np.clip(e_max - (e_c - 23), 0, 62)
        c_t = (np.abs(cv) << fb) >> c_sh
        total += np.where(cv < 0, -c_t, c_t)
        mag = np.abs(total)
        q = e_max - fb
        e_out = np.maximum(bit_length(mag) - 1 + q, -126)
        if e_out.max() > 127:
            return None
        shift = e_out - 23 - q
        kept = np.where(shift >= 0, mag >> np.clip(shift, 0, 62), mag << np.clip(-shift, 0, 62))
        # a sum rounded to 0 is +0 (the H200's zero sign); a subnormal result has e_out = -126, its last bit -149
        cv = np.where(total < 0, -kept, kept)
        e_c = e_out
    kept = np.abs(cv)
    field = np.where(kept == 0, 0, ((e_c + 126) << 23) + kept)
    return ((field | np.where(cv < 0, 1 << 31, 0)).astype(np.int64)).astype(np.uint32)


def _emulated_fp8(a_kt, b_kt, c_bits, params: MMAParams) -> np.ndarray:
    """FP8 mma.sync on the fp16 path: per instruction, interleaved groups from +0, then an IEEE add of c.

    ``a_kt``, ``b_kt``: (K, S) fp8 bits.
    """
    a_idx = fp8_to_fp16_bits(a_kt, params.input_format)
    b_idx = fp8_to_fp16_bits(b_kt, params.b_format)
    k, s = a_idx.shape
    c_fmt = params.c_format
    period = params.period
    d = np.asarray(c_bits)
    for i0 in range(0, k, params.k_instr):
        cols = np.arange(i0, min(i0 + params.k_instr, k))
        acc = np.zeros(s, dtype=get_format(c_fmt).container_dtype)  # each group chain starts from +0
        for group in params.interleave:
            sel = cols[np.isin((cols - i0) % period, group)]
            acc = _chain_blocks(a_idx[sel], b_idx[sel], acc, params, "fp16", c_fmt)
        d = add_round_bits(acc, d, c_fmt, params.c_add_rounding, params.overflow,
                           positive_zero=params.underflow_sign == "positive")
    return d


def block_fma_bits(a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, params: MMAParams,
                   scale_a: np.ndarray | None = None, scale_b: np.ndarray | None = None) -> np.ndarray:
    """S dot products of length K on raw bits, exactly as the Tensor Core (per ``params``) computes them.

    Args:
        a_bits: (S, K) container bits of ``params.input_format`` (uint8/uint16/uint32).
        b_bits: (S, K) container bits of ``params.b_format`` (a's format unless ``input_format_b``).
        c_bits: (S,) bits of c in ``params.c_in_format`` (uint32 fp32, or uint16 fp16 for fp16 output or
            ``c_input_format="fp16"``).
        params: the model (:func:`tcemu.numerics.presets.get_preset` or a what-if :class:`MMAParams`).
        scale_a, scale_b: with block scaling (``params.scale_format``), (S, K / scale_block) scale bits
            (uint8) of a's and b's blocks (:mod:`tcemu.numerics.formats_mx`).

    Returns:
        (S,) result bits in ``params.c_format``'s container (uint32 or uint16).
    """
    c_bits, params = widen_c(c_bits, params)  # c given in fp16 with fp32 d: converted exactly first
    if params.scale_format is not None or scale_a is not None or scale_b is not None:
        return BLOCK_SCALED["block_fma_scaled_bits"](a_bits, b_bits, c_bits, params, scale_a, scale_b)
    a_bits = np.asarray(a_bits)
    b_bits = np.asarray(b_bits)
    c_bits = np.asarray(c_bits)
    if a_bits.ndim != 2 or a_bits.shape != b_bits.shape or c_bits.shape != a_bits.shape[:1]:
        raise ValueError(f"need a_bits, b_bits (S, K) and c_bits (S,), got {a_bits.shape}, {b_bits.shape}, "
                         f"{c_bits.shape}")
    if params.scheme is not None:  # FMA chains and AMD MFMA (model_fma, model_amd)
        return params.scheme.bits(a_bits, b_bits, c_bits, params)
    c_dtype = get_format(params.c_format).container_dtype
    c_bits = c_bits.astype(c_dtype)
    s = a_bits.shape[0]
    out = np.empty(s, dtype=c_dtype)
    for r0 in range(0, s, _CHUNK):
        rs = slice(r0, r0 + _CHUNK)
        a_kt = np.ascontiguousarray(a_bits[rs].T)  # (K, chunk): k-major, so block reductions are row ops
        b_kt = np.ascontiguousarray(b_bits[rs].T)
        if params.interleave is not None:
            out[rs] = _emulated_fp8(a_kt, b_kt, c_bits[rs], params)
        else:
            a_idx = _index(a_kt, params.input_format, params.tf32_truncate)
            b_idx = _index(b_kt, params.b_format, params.tf32_truncate)
            out[rs] = _chain_blocks(a_idx, b_idx, c_bits[rs], params, params.input_format, params.c_format,
                                    params.input_format_b)
    return out
