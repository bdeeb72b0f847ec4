"""REFERENCE exact rational models of the non-block accumulation schemes (FMA chains, AMD MFMA).

Written from the docstrings of :mod:`tcemu.numerics.model_fma` and :mod:`tcemu.numerics.model_amd`, and
independent of them: values are :class:`fractions.Fraction` read through NumPy/ml_dtypes, every rounding is
done here on rationals (:func:`round_ieee`), exponents come from ``floor(log2 |v|)``. Slow (10^3-10^4 dot
products per second); tests compare the fast schemes with it bit for bit.

Entry point: :func:`scheme_oracle_dot` (one dot product, bits in, bits out), reached through
:func:`tcemu.numerics.oracle.oracle_dot` for any :class:`MMAParams` with a ``scheme``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np

from .formats import get_format

__all__ = ["scheme_oracle_dot", "round_ieee", "value"]

# (emin, precision, emax) of the result formats; (emin) of the input formats, restated here
_HOST_NAN32 = 0xFFC00000  # x86's default NaN: MMA-Sim's invalid operations on its host
_OUT = {"fp32": (-126, 24, 127), "fp64": (-1022, 53, 1023)}
_EMIN = {"fp64": -1022, "fp32": -126, "tf32": -126, "bf16": -126, "fp16": -14, "e4m3fnuz": -7, "e5m2fnuz": -15}
_DTYPES = {"fp64": (np.uint64, np.float64), "fp32": (np.uint32, np.float32), "fp16": (np.uint16, np.float16),
           "bf16": (np.uint16, ml_dtypes.bfloat16), "e4m3fnuz": (np.uint8, ml_dtypes.float8_e4m3fnuz),
           "e5m2fnuz": (np.uint8, ml_dtypes.float8_e5m2fnuz)}


def value(bits: int, fmt: str) -> float:
    """The value of a bit pattern as a Python float (exact); tf32 reads the top 19 bits of fp32."""
    if fmt == "tf32":
        bits, fmt = int(bits) & ~0x1FFF, "fp32"
    container, dtype = _DTYPES[fmt]
    with np.errstate(invalid="ignore"):
        return float(np.array([int(bits)], container).view(dtype)[0].astype(np.float64))


def _bits(v: float, fmt: str) -> int:
    container, dtype = _DTYPES[fmt]
    return int(np.array([v], dtype).view(container)[0])


def _floor_log2(x: Fraction) -> int:
    e = x.numerator.bit_length() - x.denominator.bit_length()
    return e - 1 if Fraction(2) ** e > x else e


def round_ieee(x: Fraction, fmt: str) -> float:
    """``x`` rounded once to nearest even in ``fmt`` (fp32/fp64), as a float; beyond the range: +-Inf; a nonzero
    value that rounds to zero keeps its sign."""
    emin, p, emax = _OUT[fmt]
    if x == 0:
        return 0.0
    neg, ax = x < 0, abs(x)
    quantum = Fraction(2) ** (max(_floor_log2(ax), emin) - p + 1)
    n = ax / quantum
    k = math.floor(n)
    rest = n - k
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and k % 2):
        k += 1
    mag = k * quantum
    if mag > (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax:
        return -math.inf if neg else math.inf
    return -float(mag) if neg else float(mag)


def _add(x: float, y: float, fmt: str) -> float:
    """IEEE ``x + y`` rounded once in ``fmt`` (nearest even)."""
    if not (math.isfinite(x) and math.isfinite(y)):
        return x + y
    s = Fraction(x) + Fraction(y)
    if s == 0:
        return -0.0 if math.copysign(1, x) < 0 and math.copysign(1, y) < 0 else 0.0
    return round_ieee(s, fmt)


def _fma(a: float, b: float, c: float, fmt: str) -> float:
    """IEEE FMA ``a b + c`` rounded once (nearest even)."""
    if math.isnan(a) or math.isnan(b) or math.isnan(c):
        return math.nan
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return math.nan
        p = math.inf if (a < 0) == (b < 0) else -math.inf
        return math.nan if math.isinf(c) and c != p else p
    if math.isinf(c):
        return c
    p = Fraction(a) * Fraction(b)
    if p == 0:
        neg_p = (math.copysign(1, a) < 0) != (math.copysign(1, b) < 0)
        return _add(-0.0 if neg_p else 0.0, c, fmt)
    s = p + Fraction(c)
    return 0.0 if s == 0 else round_ieee(s, fmt)


def _fma_chain(av, bv, c, p) -> float:
    d = c
    for a, b in zip(av, bv):
        d = _fma(a, b, d, p.output_format)
    return d


def _pairwise(av, bv, c, p, nan_of=None, c_nan: int = 0) -> tuple[float, int]:
    """The pairwise scheme's value and, where it is NaN and ``nan_of`` (k -> (a's NaN, b's NaN)) is given, its NaN
    by MMA-Sim's host order: b's before a's in a product, the left half's in the tree, the group sum's before the
    accumulator's; an invalid step x86's 0xFFC00000."""
    s = p.scheme
    tiny = 2.0 ** _EMIN[p.input_format]

    def flush(x: float) -> float:
        return math.copysign(0.0, x) if s.flush_subnormals and abs(x) < 2.0**-126 else x

    def pick(x: float, xb: int, y: float, yb: int, y_first: bool) -> int:
        if math.isnan(y) and (y_first or not math.isnan(x)):
            return yb
        return xb if math.isnan(x) else _HOST_NAN32

    if s.flush_subnormals:
        av = [0.0 if abs(x) < tiny else x for x in av]
        bv = [0.0 if abs(x) < tiny else x for x in bv]
        c = 0.0 if abs(c) < 2.0**-126 else c

    def tree(items: list[tuple[float, int]]) -> tuple[float, int]:
        if len(items) == 1:
            return items[0]
        m = len(items) // 2
        (x, xb), (y, yb) = tree(items[:m]), tree(items[m:])
        return flush(_add(x, y, "fp32")), pick(x, xb, y, yb, y_first=False)

    d, d_nan = c, c_nan
    for k0 in range(0, len(av), p.n_fma):
        leaves = []
        for k in range(k0, min(k0 + p.n_fma, len(av))):
            na, nb = nan_of(k) if nan_of else (0, 0)
            a, b = av[k], bv[k]
            nan = nb if math.isnan(b) else na if math.isnan(a) else _HOST_NAN32
            leaves.append((flush(_fma(a, b, 0.0, "fp32")), nan))
        g, g_nan = tree(leaves)
        d, d_nan = flush(_add(d, g, "fp32")), pick(d, d_nan, g, g_nan, y_first=True)
    return d, d_nan


def _nan32(bits: int, fmt: str) -> int:
    """An fp16/bf16/fp32 NaN as fp32 bits, quieted (sign and payload kept: the host's conversions)."""
    frac = {"fp16": 10, "bf16": 7, "fp32": 23}[fmt]
    width = {"fp16": 16, "bf16": 16, "fp32": 32}[fmt]
    return ((bits >> (width - 1)) & 1) << 31 | 0x7FC00000 | (bits & ((1 << frac) - 1)) << (23 - frac)


def _exp(v: float, fmt: str, zero_exp) -> int | None:
    if v == 0:
        return zero_exp
    return max(_floor_log2(abs(Fraction(v))), _EMIN[fmt])


def _trunc_sum(terms, frac_bits: int):
    """[(value, exponent)] -> (sum of the values truncated toward zero on 2**(e - frac_bits), e = max exponent)."""
    e = max(t[1] for t in terms)
    grid = Fraction(2) ** (e - frac_bits)
    return sum((math.trunc(v / grid) * grid for v, _ in terms), Fraction(0)), e


def _fused_group(av, bv, c: float, p) -> float:
    s = p.scheme
    fa, fb = p.input_format, p.b_format
    prods = [a * b for a, b in zip(av, bv)]  # exact in float64 for these formats (or Inf/NaN)
    with np.errstate(all="ignore"):
        ieee = math.fsum(prods) if all(math.isfinite(x) for x in prods) else sum(prods)
        ieee = ieee + c
    if math.isnan(ieee) or math.isinf(ieee):
        return ieee
    big = [x for x in prods if abs(x) >= 2.0**128]
    if big:
        pos, neg = any(x > 0 for x in big), any(x < 0 for x in big)
        return math.nan if pos and neg else (math.inf if pos else -math.inf)
    terms = []  # per k: (exact product, exponent), None for a product with a zero factor that is left out
    for a, b in zip(av, bv):
        ea, eb = _exp(a, fa, s.zero_exp), _exp(b, fb, s.zero_exp)
        terms.append(None if ea is None or eb is None else (Fraction(a) * Fraction(b), ea + eb))
    if s.fp8_pairs:
        halves = [[t for t in h if t] for h in (terms[0::2], terms[1::2])]
        halves = [_trunc_sum(h, p.frac_bits) for h in halves if h]
        if not halves:
            halves = [(Fraction(0), -(1 << 30))]
        e = max(h[1] for h in halves)
        grid = Fraction(2) ** (e - p.frac_bits)
        total = sum((math.floor(h[0] / grid) * grid for h in halves), Fraction(0))
    elif any(terms):
        total, e = _trunc_sum([t for t in terms if t], p.frac_bits)
    else:
        total, e = Fraction(0), -(1 << 30)
    e_c = max(_floor_log2(abs(Fraction(c))), -126) if c != 0 else -126
    e_max = max(e, e_c)
    g_s, g_c = Fraction(2) ** (e_max - s.sum_frac_bits), Fraction(2) ** (e_max - s.c_frac_bits)
    total = math.floor(total / g_s) * g_s
    c_al = math.floor(Fraction(c) / g_c) * g_c
    if s.c_drop_gap is not None and e_c < e_max - s.c_drop_gap:
        c_al = Fraction(0)
    return round_ieee(total + c_al, "fp32")


def _exact_group(av, bv, c: float) -> float:
    """The products and c summed exactly, rounded once to fp32 (RNE); Inf/NaN by the IEEE sum."""
    prods = [a * b for a, b in zip(av, bv)]  # exact in float64, or Inf/NaN
    if not all(math.isfinite(x) for x in prods + [c]):
        return sum(prods) + c
    s = sum((Fraction(a) * Fraction(b) for a, b in zip(av, bv)), Fraction(c))
    return 0.0 if s == 0 else round_ieee(s, "fp32")


def scheme_oracle_dot(a_bits, b_bits, c_bits: int, params) -> int:
    """One dot product through ``params.scheme``, exactly; bits in (container bits), bits out."""
    s = params.scheme
    av = [value(x, params.input_format) for x in a_bits]
    bv = [value(x, params.b_format) for x in b_bits]
    out = params.output_format
    c = value(c_bits, out)
    if s.kind == "fma_chain":
        d = _fma_chain(av, bv, c, params)
        nan = s.nan_of(out)
        if s.nan_rule == "propagate" and math.isnan(d):
            from .model_fma import propagated_nan_bits

            nan = propagated_nan_bits([int(x) for x in a_bits], [int(x) for x in b_bits], int(c_bits), s.nan_bits,
                                      s.nan_order, out)
    elif s.kind == "pairwise":
        host = s.nan_rule == "mmasim_host"
        nan_of = (lambda k: (_nan32(int(a_bits[k]), params.input_format), _nan32(int(b_bits[k]), params.b_format))
                  ) if host else None
        d, nan = _pairwise(av, bv, c, params, nan_of, _nan32(int(c_bits), "fp32"))
        nan = nan if host else s.nan_bits
    elif s.kind == "exact_group":
        d = c
        for k0 in range(0, len(av), params.n_fma):
            d = _exact_group(av[k0 : k0 + params.n_fma], bv[k0 : k0 + params.n_fma], d)
        nan = s.nan_bits
    elif s.kind == "fused_rd":
        from .model_amd_nan import fused_group_nan_scalar

        d, nan = c, int(c_bits)
        for k0 in range(0, len(av), params.n_fma):
            d_in_bits = nan if math.isnan(d) else _bits(d, "fp32")
            d = _fused_group(av[k0 : k0 + params.n_fma], bv[k0 : k0 + params.n_fma], d, params)
            if s.nan_rule == "mmasim_host" and math.isnan(d):
                nan = fused_group_nan_scalar([int(x) >> get_format(params.input_format).container_shift
                                              for x in a_bits[k0 : k0 + params.n_fma]],
                                             [int(x) >> get_format(params.b_format).container_shift
                                              for x in b_bits[k0 : k0 + params.n_fma]],
                                             d_in_bits, params.input_format, params.b_format)
        nan = nan if s.nan_rule == "mmasim_host" else s.nan_bits
    else:
        raise ValueError(f"tcemu: no oracle for scheme {s.kind!r}")
    return nan if math.isnan(d) else _bits(d, out)
