"""The explain view: why did the GPU give this number? One dot product, step by step.

:func:`explain` prints, for each block of the instruction chain, every addend (exact value, alignment
exponent, the integer it keeps on the grid ``2**(E_max - F)``, and what truncation dropped), the exact
integer sum, and the single rounding to the output format; then the result, the exact ``a.b + c`` and
the error. The steps come from the exact oracle (:mod:`tcemu.numerics.oracle`); the fast model's result
is shown beside it and must agree.

:func:`parse_values` reads the value syntax of the CLI: ``1.5``, ``-2^-24``, ``1.5*2^-3``, hex floats
(``0x1.8p-3``), ``inf``/``nan``, or raw bit patterns (``0x3C00``, ``bits:0x7E00``).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np

from .formats import get_format, to_bits
from .model import block_fma_bits
from .oracle import OracleTrace, oracle_dot, value_of
from .params import MMAParams, widen_c

__all__ = ["explain", "parse_values", "explain_values"]

_POW = re.compile(r"^\s*([+-]?)\s*(?:([0-9.eE+-]+)\s*\*\s*)?2\s*\^\s*([+-]?\d+)\s*$")
_HEX = re.compile(r"^([+-]?)0x([0-9a-f]*)\.?([0-9a-f]*)p([+-]?\d+)$")
_DEC_EXP = re.compile(r"e([+-]?\d+)$")
#: exponents (of 2 or of 10) beyond which no format's value can be written: refused before any big arithmetic
_MAX_EXP = 2000


def _exponent(text: str) -> int:
    e = int(text)
    if abs(e) > _MAX_EXP:
        raise ValueError(f"exponent {e} is beyond every format's range")
    return e


def _exact_value(t: str) -> Fraction | float:
    """The exact value of one lower-case token: a Fraction, or a float for inf and nan."""
    if t.lstrip("+-") in ("inf", "infinity", "nan"):
        return float(t)
    m = _POW.match(t)
    if m:
        sign, mant, exp = m.groups()
        v = (_exact_value(mant) if mant else Fraction(1)) * Fraction(2) ** _exponent(exp)
        return -v if sign == "-" else v
    m = _HEX.match(t)
    if m:
        sign, whole, frac, exp = m.groups()
        if not (whole or frac):
            raise ValueError("a hex float needs digits")
        v = Fraction(int(whole + frac or "0", 16), 16 ** len(frac)) * Fraction(2) ** _exponent(exp)
        return -v if sign == "-" else v
    m = _DEC_EXP.search(t)
    if m:
        _exponent(m.group(1))
    return Fraction(t)


def _parse_one(tok: str, fmt: str) -> int:
    """Bits (container of fmt) of one token; a value the format cannot hold exactly is refused, never rounded
    (``1e400``, ``2^-99999``), and raw bits must fit the container."""
    f = get_format(fmt)
    t = tok.strip().lower()
    if t.startswith("bits:") or (t.startswith("0x") and "p" not in t and "." not in t):
        bits = int(t.removeprefix("bits:"), 16)
        width = np.dtype(f.container_dtype).itemsize * 8
        if bits >= 1 << width:
            raise ValueError(f"bits {tok.strip()} do not fit {f.name}'s {width}-bit container")
        return bits
    try:
        exact = _exact_value(t)
    except (ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"cannot read {tok.strip()!r} as a value ({exc}); write e.g. 1.5, -2^-24, 1.5*2^-3, "
                         "0x1.8p-3, inf, nan or bits:0x3C00") from None
    v = exact if isinstance(exact, float) else _float_of(exact, tok, f.name)
    if v == 0 and t.startswith("-"):
        v = -0.0  # the exact value has no sign of zero; the token does
    if f.name in ("tf32",):
        if math.isfinite(v) and float(np.float32(v)) != v:
            raise ValueError(f"{tok.strip()} is not exactly representable in fp32 (tf32 operands are fp32 values)")
        return int(np.array([v], np.float32).view(np.uint32)[0])
    return int(to_bits(np.array([v], np.float64), f)[0])


def _float_of(x: Fraction, tok: str, fmt: str) -> float:
    """``x`` as a float64 when that is exact (every format's values are), else ValueError."""
    try:
        v = float(x)
    except OverflowError:
        v = math.inf
    if not math.isfinite(v) or Fraction(v) != x:
        raise ValueError(f"{tok.strip()} is not exactly representable in {fmt}")
    return v


def parse_values(text: str, fmt: str) -> list[int]:
    """Comma-separated values (see the module docstring) -> bit patterns of ``fmt``; refuses unrepresentable ones."""
    return [_parse_one(tok, fmt) for tok in text.split(",") if tok.strip()]


def _fmt_value(x: Fraction | float) -> str:
    """Exact binary form of a rational whose denominator is a power of two, plus a decimal approximation."""
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        x = Fraction(x)
    if x == 0:
        return "0"
    num, den = x.numerator, x.denominator
    e = -(den.bit_length() - 1)  # den is a power of two here
    while num % 2 == 0 and num:
        num //= 2
        e += 1
    approx = float(x) if abs(x) < 2**1000 else float("inf")
    return f"{num}*2^{e} (~{approx:.9g})"


def _hexbits(bits: int, fmt: str) -> str:
    width = np.dtype(get_format(fmt).container_dtype).itemsize * 2
    return f"0x{bits:0{width}X}"


def explain(a_bits, b_bits, c_bits: int, params: MMAParams) -> str:
    """The step-by-step account of one dot product ``a . b + c`` under ``params`` (bits in)."""
    p = params
    if p.scheme is not None:
        raise ValueError(f"tcemu: explain shows the block-FMA model; {p.label} is a {p.scheme.kind} scheme "
                         "(tcemu.numerics.oracle_schemes computes it exactly)")
    if p.scale_format is not None:
        raise ValueError("block-scaled kinds are not explained step by step; compute them with "
                         "tcemu.numerics.block_fma_bits(a, b, c, params, scale_a, scale_b)")
    a_bits = [int(x) for x in a_bits]
    b_bits = [int(x) for x in b_bits]
    c32, p = widen_c(np.array([c_bits]), p)  # c given in fp16 with fp32 d: shown converted (exact)
    c_bits = int(c32[0])
    trace: list[OracleTrace] = []
    res = oracle_dot(a_bits, b_bits, int(c_bits), p, trace)
    dt, dt_b = get_format(p.input_format).container_dtype, get_format(p.b_format).container_dtype
    fast = int(block_fma_bits(np.array([a_bits], dt), np.array([b_bits], dt_b),
                              np.array([c_bits], get_format(p.c_format).container_dtype), p)[0])
    cf = p.c_format
    lines = [p.describe(), ""]
    fb = p.b_format
    lines.append(f"inputs ({p.input_format}" + (f" x {fb}" if fb != p.input_format else "") + "):")
    for k, (x, y) in enumerate(zip(a_bits, b_bits)):
        if value_of(x, p.input_format) != 0 or value_of(y, fb) != 0:
            lines.append(f"  k={k:<3d} a={_hexbits(x, p.input_format)} ({value_of(x, p.input_format)!r})  "
                         f"b={_hexbits(y, fb)} ({value_of(y, fb)!r})")
    lines.append(f"  c={_hexbits(int(c_bits), cf)} ({value_of(int(c_bits), cf)!r})   (other k: a or b zero)")
    for i, t in enumerate(trace, 1):
        lines.append("")
        lines.append(f"step {i}: {t.note}; c in = {_hexbits(t.c_bits, cf)} ({value_of(t.c_bits, cf)!r})")
        if t.note.startswith("IEEE add"):
            lines.append(f"  exact sum {_fmt_value(t.exact)} -> rounded {_hexbits(t.result_bits, cf)} "
                         f"({value_of(t.result_bits, cf)!r})")
            continue
        if t.special:
            lines.append(f"  special values decide: {t.special} -> {_hexbits(t.result_bits, cf)}")
            continue
        if t.e_max is None:
            lines.append(f"  no nonzero addend -> +0 ({_hexbits(t.result_bits, cf)})")
            continue
        floor_note = ""
        exps = [x.exponent for x in t.terms]
        if t.e_max not in exps:
            floor_note = f" (raised by the c = 0 floor {p.czero_floor})"
        lines.append(f"  E_max = {t.e_max}{floor_note}; grid 2^(E_max - F) = 2^{t.e_max - t.frac_bits}")
        lines.append(f"  {'addend':<12s} {'exponent':>8s}  {'aligned integer':>18s}  {'truncated away':<28s} exact value")
        for term in t.terms:
            lost = "0" if term.lost == 0 else _fmt_value(term.lost)
            lines.append(f"  {term.kind:<12s} {term.exponent:>8d}  {term.aligned:>+18d}  {lost:<28s} {_fmt_value(term.value)}")
        lines.append(f"  sum S = {t.total:+d}  ->  S*2^{t.e_max - t.frac_bits} = {_fmt_value(Fraction(t.total) * Fraction(2) ** (t.e_max - t.frac_bits))}")
        lines.append(f"  exact block value {_fmt_value(t.exact)}")
        lines.append(f"  rounded {p.output_rounding.value.upper()} to {p.output_format}: {_hexbits(t.result_bits, cf)} "
                     f"({value_of(t.result_bits, cf)!r})")
    exact_all = Fraction(value_of(int(c_bits), cf)) if math.isfinite(value_of(int(c_bits), cf)) else None
    if exact_all is not None:
        for x, y in zip(a_bits, b_bits):
            vx, vy = value_of(x, p.input_format), value_of(y, fb)
            if not (math.isfinite(vx) and math.isfinite(vy)):
                exact_all = None
                break
            exact_all += Fraction(vx) * Fraction(vy)
    lines.append("")
    lines.append(f"result: {_hexbits(res, cf)} ({value_of(res, cf)!r})   fast model: {_hexbits(fast, cf)}"
                 + ("  (agrees)" if fast == res else "  (DISAGREES: please report)"))
    if exact_all is not None and math.isfinite(value_of(res, cf)):
        err = Fraction(value_of(res, cf)) - exact_all
        lines.append(f"exact a.b + c = {_fmt_value(exact_all)}; result - exact = {_fmt_value(err)}")
    return "\n".join(lines)


def explain_values(a: str, b: str, c: str, params: MMAParams) -> str:
    """:func:`explain` on the CLI's value syntax (comma-separated a and b, one c)."""
    a_bits = parse_values(a, params.input_format)
    b_bits = parse_values(b, params.b_format)
    if len(a_bits) != len(b_bits):
        raise ValueError(f"a has {len(a_bits)} values, b has {len(b_bits)}")
    c_bits = parse_values(c, params.c_in_format)
    if len(c_bits) != 1:
        raise ValueError("c takes one value")
    return explain(a_bits, b_bits, c_bits[0], params)
