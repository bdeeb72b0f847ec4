"""REFERENCE exact rational model of the Tensor Core block FMA, written from docs/numerics.md, "The model".

Slow (about 10^3-10^4 dot products per second) and deliberately independent of the fast model:
values are Python :class:`fractions.Fraction` obtained through ml_dtypes/NumPy float64 (exact for
every format here), exponents come from ``floor(log2 |v|)``, truncation is ``math.floor`` of a
rational, and rounding to the output format is done on rationals, then turned into bits through
NumPy's exact conversion of a representable value. Tests compare :mod:`tcemu.numerics.model`
against it bit for bit.

Entry points: :func:`oracle_dot` (one dot product of any length, bits in, bits out) and
:func:`oracle_bits` (rows of them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import ml_dtypes
import numpy as np

from .params import MMAParams, widen_c
from .rounding import Rounding

__all__ = ["oracle_dot", "oracle_bits", "value_of", "round_fraction", "Term", "OracleTrace"]

# (emin, precision p, emax, has_inf) of each format, restated here rather than imported
_SPEC = {
    "fp32": (-126, 24, 127, True),
    "fp16": (-14, 11, 15, True),
    "bf16": (-126, 8, 127, True),
    "tf32": (-126, 11, 127, True),
    "e4m3": (-6, 4, 8, False),
    "e5m2": (-14, 3, 15, True),
    "e8m13": (-126, 14, 127, True),
    "e2m1": (0, 2, 2, False),
    "e2m3": (0, 4, 2, False),
    "e3m2": (-2, 3, 4, False),
}
_CANON_NAN = {"fp32": 0x7FFFFFFF, "e8m13": 0x7FFFFFFF, "fp16": 0x7FFF}
_INF_BITS = {"fp32": 0x7F800000, "e8m13": 0x7F800000, "fp16": 0x7C00}
_SIGN_BIT = {"fp32": 1 << 31, "e8m13": 1 << 31, "fp16": 1 << 15}



def special_product(a: float, b: float) -> str | None:
    """The IEEE class of the product ``a * b`` when it is not finite: ``"nan"`` (a NaN factor, or 0 x Inf),
    ``"+inf"`` or ``"-inf"``; ``None`` for a finite product."""
    if math.isnan(a) or math.isnan(b):
        return "nan"
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return "nan"
        return "-inf" if (a < 0) != (b < 0) else "+inf"
    return None

def value_of(bits: int, fmt: str) -> float:
    """The value of a bit pattern as a Python float (exact: float64 holds every format here)."""
    bits = int(bits)
    if fmt in ("fp32", "e8m13"):
        return float(np.array([bits], np.uint32).view(np.float32)[0])
    if fmt == "tf32":  # the hardware reads the top 19 bits only
        return float(np.array([bits & ~0x1FFF], np.uint32).view(np.float32)[0])
    dtype = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn,
             "e5m2": ml_dtypes.float8_e5m2, "e2m1": ml_dtypes.float4_e2m1fn, "e2m3": ml_dtypes.float6_e2m3fn,
             "e3m2": ml_dtypes.float6_e3m2fn}[fmt]
    container = np.uint16 if fmt in ("fp16", "bf16") else np.uint8
    with np.errstate(invalid="ignore"):
        return float(np.array([bits], container).view(dtype)[0].astype(np.float64))


def _floor_log2(x: Fraction) -> int:
    """floor(log2(x)) for a positive rational."""
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    return e


def _exponent(v: float, fmt: str) -> int:
    """Unbiased exponent of a nonzero finite value as the format stores it (emin for subnormals)."""
    return max(_floor_log2(abs(Fraction(v))), _SPEC[fmt][0])


def round_fraction(x: Fraction, fmt: str, rnd: Rounding, overflow: str = "inf") -> int:
    """Bits of the exact rational ``x`` rounded once to ``fmt`` (fp32, fp16 or e8m13 in an fp32 container)."""
    emin, p, emax, _ = _SPEC[fmt]
    if x == 0:
        return 0
    neg = x < 0
    ax = abs(x)
    e = max(_floor_log2(ax), emin)
    quantum = Fraction(2) ** (e - p + 1)
    n = ax / quantum
    fl = math.floor(n)
    frac = n - fl
    if rnd is Rounding.RZ:
        k = fl
    elif rnd is Rounding.RNE:
        k = fl + (1 if frac > Fraction(1, 2) or (frac == Fraction(1, 2) and fl % 2 == 1) else 0)
    elif rnd is Rounding.RNA:
        k = fl + (1 if frac >= Fraction(1, 2) else 0)
    elif rnd is Rounding.RU:
        k = fl + (1 if frac and not neg else 0)
    elif rnd is Rounding.RD:
        k = fl + (1 if frac and neg else 0)
    else:  # RO
        k = fl | (1 if frac else 0)
    mag = k * quantum
    if mag == 0:  # a nonzero value rounded to zero keeps its sign (IEEE 754)
        return _SIGN_BIT[fmt] if neg else 0
    max_finite = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    if mag > max_finite:
        to_max = overflow == "ieee" and (rnd in (Rounding.RZ, Rounding.RO) or (rnd is Rounding.RU and neg)
                                         or (rnd is Rounding.RD and not neg))
        if not to_max:
            return _INF_BITS[fmt] | (_SIGN_BIT[fmt] if neg else 0)
        mag = max_finite
    val = float(-mag if neg else mag)  # exact: representable
    if fmt == "fp16":
        return int(np.array([val], np.float16).view(np.uint16)[0])
    return int(np.array([val], np.float32).view(np.uint32)[0])


@dataclass
class Term:
    """One addend of a block as the oracle saw it (also used by the explain view)."""

    kind: str  # "product k" or "c"
    value: Fraction  # exact value
    exponent: int | None  # alignment exponent (E_i or E_c)
    aligned: int = 0  # truncated integer on the grid 2**(E_max - F), sign applied
    lost: Fraction = Fraction(0)  # value - aligned * grid (what the truncation dropped)


@dataclass
class OracleTrace:
    """Everything one block did: the terms, E_max, the exact sum and the rounded result."""

    terms: list[Term]
    e_max: int | None
    frac_bits: int
    total: int  # sum of the aligned integers
    exact: Fraction  # the exact a.b + c of the block
    result_bits: int
    special: str = ""  # "nan"/"+inf"/"-inf" when decided by special values
    note: str = ""  # which block: "k 0..15", "instr 0, group (0, 1), k [0, 1, 4, ...]", "c added (RNE)"
    c_bits: int = 0  # the c this block received (bits of the c format)


def _block(avals, bvals, c_bits, in_fmt, c_fmt, out_fmt, prm: MMAParams, trace: list | None, note: str = "",
           ks=None, in_fmt_b: str | None = None) -> int:
    """One block FMA on values; returns output bits (of c_fmt's container). ``ks``: k of each entry (labels);
    ``in_fmt_b``: b's format if not ``in_fmt``."""
    res = _block_inner(avals, bvals, c_bits, in_fmt, c_fmt, out_fmt, prm, trace, ks, in_fmt_b or in_fmt)
    if trace is not None:
        trace[-1].note = note
        trace[-1].c_bits = int(c_bits)
    return res


def _block_inner(avals, bvals, c_bits, in_fmt, c_fmt, out_fmt, prm: MMAParams, trace: list | None, ks=None,
                 in_fmt_b: str = "") -> int:
    ks = list(range(len(avals))) if ks is None else list(ks)
    cval = value_of(c_bits, c_fmt)
    prods = []
    nan = math.isnan(cval)
    pos_inf = cval == math.inf
    neg_inf = cval == -math.inf
    for kk, a, b in zip(ks, avals, bvals):
        kind = special_product(a, b)
        if kind is None:
            prods.append((kk, a, b))
        else:
            nan |= kind == "nan"
            pos_inf |= kind == "+inf"
            neg_inf |= kind == "-inf"
    if nan or (pos_inf and neg_inf):
        res = _CANON_NAN[out_fmt]
        special = "nan"
    elif pos_inf or neg_inf:
        res = _INF_BITS[out_fmt] | (_SIGN_BIT[out_fmt] if neg_inf else 0)
        special = "-inf" if neg_inf else "+inf"
    else:
        special = ""
    if special:
        if trace is not None:
            trace.append(OracleTrace([], None, prm.frac_bits, 0, Fraction(0), res, special))
        return res
    terms = []
    z = prm.zero_factor_exp
    for k, a, b in prods:
        if (a == 0 or b == 0) and z is None:  # a zero product takes no part (or at zero_factor_exp, below)
            continue
        ea = z if a == 0 else _exponent(a, in_fmt)
        eb = z if b == 0 else _exponent(b, in_fmt_b)
        terms.append(Term(f"a*b k={k}", Fraction(a) * Fraction(b), ea + eb))
    exps = [t.exponent for t in terms]
    if cval != 0:
        e_c = _floor_log2(abs(Fraction(cval)))
        if prm.c_exp_floor is not None:
            e_c = max(e_c, prm.c_exp_floor)
        terms.append(Term("c", Fraction(cval), e_c))
        exps.append(e_c)
    elif prm.czero_floor is not None:
        exps.append(prm.czero_floor)
    exact = sum((t.value for t in terms), Fraction(0))
    if not terms:
        res = 0  # +0
        if trace is not None:
            trace.append(OracleTrace([], None, prm.frac_bits, 0, exact, res))
        return res
    e_max = max(exps)
    grid = Fraction(2) ** (e_max - prm.frac_bits)
    total = 0
    for t in terms:
        mag = math.floor(abs(t.value) / grid)  # truncation toward zero of the magnitude
        t.aligned = -mag if t.value < 0 else mag
        t.lost = t.value - t.aligned * grid
        total += t.aligned
    res = round_fraction(total * grid, out_fmt, prm.output_rounding, prm.overflow)
    if prm.underflow_sign == "positive" and res == _SIGN_BIT[out_fmt]:
        res = 0  # measured on H200: a zero result is +0, also when a negative sum rounds to zero
    if trace is not None:
        trace.append(OracleTrace(terms, e_max, prm.frac_bits, total, exact, res))
    return res


def _fp_add(x_bits: int, y_bits: int, fmt: str, rnd: Rounding, overflow: str, positive_zero: bool = False) -> int:
    """IEEE x + y rounded once, on bits of fmt (fp32 or fp16); with ``positive_zero`` a zero result is +0."""
    res = _fp_add_ieee(x_bits, y_bits, fmt, rnd, overflow)
    return 0 if positive_zero and res == _SIGN_BIT[fmt] else res


def _fp_add_ieee(x_bits: int, y_bits: int, fmt: str, rnd: Rounding, overflow: str) -> int:
    x, y = value_of(x_bits, fmt), value_of(y_bits, fmt)
    if math.isnan(x) or math.isnan(y) or (math.isinf(x) and math.isinf(y) and x != y):
        return _CANON_NAN[fmt]
    if math.isinf(x) or math.isinf(y):
        s = x if math.isinf(x) else y
        return _INF_BITS[fmt] | (_SIGN_BIT[fmt] if s < 0 else 0)
    total = Fraction(x) + Fraction(y)
    if total == 0:
        x_neg, y_neg = math.copysign(1, x) < 0, math.copysign(1, y) < 0
        # IEEE 754 §6.3: an exact zero sum is +0, except -0 + -0 = -0, and -0 under RD unless both are +0
        neg = (x_neg and y_neg) or (rnd is Rounding.RD and (x_neg or y_neg or x != 0))
        return _SIGN_BIT[fmt] if neg else 0
    return round_fraction(total, fmt, rnd, overflow)


def oracle_dot(
    a_bits: Sequence[int], b_bits: Sequence[int], c_bits: int, params: MMAParams, trace: list | None = None
) -> int:
    """One dot product of any length K, exactly per ``params``; bits in, bits out.

    Args:
        a_bits, b_bits: sequences of K container bit patterns of ``params.input_format``.
        c_bits: bit pattern of c in ``params.c_in_format``.
        params: the model.
        trace: if a list, one :class:`OracleTrace` per block is appended (for the explain view).

    Returns:
        Result bits (int) in ``params.c_format``'s container.
    """
    if params.c_input_format is not None:  # c in fp16 with fp32 d: converted exactly first
        c32, params = widen_c(np.array([c_bits]), params)
        c_bits = int(c32[0])
    if params.scheme is not None:  # FMA chains, AMD MFMA: oracle_schemes (no per-block trace)
        from .oracle_schemes import scheme_oracle_dot

        return scheme_oracle_dot(a_bits, b_bits, c_bits, params)
    prm = params
    fin = prm.input_format
    c_fmt = prm.c_format
    out_fmt = prm.output_format
    avals = [value_of(x, fin) for x in a_bits]
    bvals = [value_of(x, prm.b_format) for x in b_bits]
    k = len(avals)
    d = int(c_bits)
    if prm.interleave is None:
        for k0 in range(0, max(k, 1), prm.n_fma):
            note = f"k {k0}..{min(k0 + prm.n_fma, k) - 1}"
            d = _block(avals[k0 : k0 + prm.n_fma], bvals[k0 : k0 + prm.n_fma], d, fin, c_fmt, out_fmt, prm, trace, note,
                       range(k0, min(k0 + prm.n_fma, k)), prm.input_format_b)
        return d
    # emulated FP8 mma.sync: values are exact in fp16, exponents as fp16 stores them
    period = prm.period
    for i0 in range(0, k, prm.k_instr):
        acc = 0
        for group in prm.interleave:
            cols = [j for j in range(i0, min(i0 + prm.k_instr, k)) if (j - i0) % period in group]
            ga, gb = [avals[j] for j in cols], [bvals[j] for j in cols]
            for k0 in range(0, max(len(cols), 1), prm.n_fma):
                note = f"instruction at k {i0}, group {group} (k mod {period}), k {cols[k0 : k0 + prm.n_fma]}"
                acc = _block(ga[k0 : k0 + prm.n_fma], gb[k0 : k0 + prm.n_fma], acc, "fp16", c_fmt, out_fmt, prm,
                             trace, note, cols[k0 : k0 + prm.n_fma])
        new_d = _fp_add(acc, d, c_fmt, prm.c_add_rounding, prm.overflow, prm.underflow_sign == "positive")
        if trace is not None:
            exact = Fraction(0)
            x, y = value_of(acc, c_fmt), value_of(d, c_fmt)
            if math.isfinite(x) and math.isfinite(y):
                exact = Fraction(x) + Fraction(y)
            trace.append(OracleTrace([], None, prm.frac_bits, 0, exact, new_d, "",
                                     f"IEEE add of c, {prm.c_add_rounding.value.upper()}: groups {acc:#x} + c {d:#x}", d))
        d = new_d
    return d


def oracle_bits(a_bits: np.ndarray, b_bits: np.ndarray, c_bits: np.ndarray, params: MMAParams) -> np.ndarray:
    """:func:`oracle_dot` over rows: ``(S, K), (S, K), (S,) -> (S,)`` bits, same contract as the fast model."""
    out = [oracle_dot(a, b, c, params) for a, b, c in zip(np.asarray(a_bits).tolist(), np.asarray(b_bits).tolist(),
                                                          np.asarray(c_bits).tolist())]
    dtype = {"fp16": np.uint16, "fp64": np.uint64}.get(params.c_format, np.uint32)
    return np.array(out, dtype=np.uint64).astype(dtype)
