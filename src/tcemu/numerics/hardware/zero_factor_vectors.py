"""The vectors of the zero-factor probe (:mod:`.zero_factor`): which cases run which family, and the vectors.

Every vector is one block (one instruction's K): ``a[0] x b[0]`` is a zero against a large partner (``2^e``, or
the format's largest finite value), the zero in a or in b, +0 or -0; the other products are ``0 x 1``.

- ``c0``: ``a[1] x b[1]`` a real product at ``2^level`` with low bits that an alignment to a higher ``E_max``
  cuts, c = +0.
- ``tiny_c``: no real product; c a tiny value with low bits (fp32: subnormals, all-ones significands at
  exponents -126 to -100; fp16 out: subnormals and all-ones at -12 to 0), so that a zero product counted above c's
  exponent cuts c at the alignment.
"""

from __future__ import annotations

from dataclasses import dataclass

from .cases import Case
from .hypothesis import FMTS, encode_value
from .probe_vectors import Vector

__all__ = ["ZERO_FACTOR_CASES", "TINY_C_CASES", "FAMILY_CASES", "MMASIM_ZERO_EXP", "ZeroVector",
           "build_zero_vectors", "build_tiny_c_vectors", "build_family"]

#: the c = 0 family's cases: 8-bit-exponent inputs (where it decides) and fp16 as a control
ZERO_FACTOR_CASES = ("mma.k8.tf32.fp32", "mma.k4.tf32.fp32", "mma.k16.bf16.fp32", "mma.k8.bf16.fp32",
                     "wgmma.k8.tf32.fp32", "wgmma.k16.bf16.fp32", "mma.k16.fp16.fp32", "wgmma.k16.fp16.fp32")
#: the tiny-c family's cases: every sm_90a instruction that MMA-Sim models (FP8 only through wgmma: FP8 mma.sync is
#: emulated on the fp16 path and adds c last, tcemu's variant="mmasim" leaves it as measured), fp32 and fp16 output
TINY_C_CASES = ("mma.k8.tf32.fp32", "mma.k16.bf16.fp32", "wgmma.k8.tf32.fp32", "wgmma.k16.bf16.fp32",
                "mma.k16.fp16.fp32", "mma.k8.fp16.fp32", "wgmma.k16.fp16.fp32",
                "wgmma.k32.e4m3.fp32", "wgmma.k32.e5m2.fp32",
                "mma.k16.fp16.fp16", "mma.k8.fp16.fp16", "wgmma.k16.fp16.fp16",
                "wgmma.k32.e4m3.fp16", "wgmma.k32.e5m2.fp16")
FAMILY_CASES = {"c0": ZERO_FACTOR_CASES, "tiny_c": TINY_C_CASES}
#: the exponent MMA-Sim gives a zero input whatever its format (``extract_significand_exponent``:
#: ``if significand == 0.0: exponent = -126``)
MMASIM_ZERO_EXP = -126
_REAL_LEVELS = (-100, -20)  # c0: exponent of the real product beside the zero one


def _tiny_c(fmt: str) -> tuple[int, ...]:
    """c bits of the tiny-c family: low bits set, exponents at and just above the format's smallest."""
    f = FMTS[fmt]
    top = (1 << f.frac_bits) - 1
    sign = 1 << (f.exp_bits + f.frac_bits)
    sub = (1, top >> 1 | 1, top)  # smallest subnormal, one with a high and a low bit, largest subnormal
    levels = (-126, -122, -118, -114, -110, -100) if fmt == "fp32" else (-14, -12, -8, 0)
    normal = tuple(((e + f.bias) << f.frac_bits) | top for e in levels)  # all-ones significands
    one_ulp = ((f.emin + f.bias) << f.frac_bits) | 1  # 2^emin (1 + ulp)
    return sub + (one_ulp,) + normal + (sign | 1, sign | normal[0])


@dataclass(frozen=True)
class ZeroVector:
    """One probe vector and what it varies: the zero's partner exponent, side and sign, and the level (c0: the
    real product's exponent; tiny_c: c's exponent field, unbiased)."""

    vector: Vector
    partner_exp: int  # e of the partner beside the zero (2^e, or the largest finite value at emax)
    zero_in: str  # "a" or "b"
    zero_sign: int  # +1 or -1
    level: int


def _input_format(case: Case):
    return FMTS["fp32"] if case.input_format == "tf32" else FMTS[case.input_format]


def _partners(case: Case) -> list[tuple[str, int, int]]:
    """(tag, exponent, bits) of 2^e for e = 0..emax and of the largest finite value."""
    fin, fmt = FMTS[case.input_format], _input_format(case)
    out = [(str(e), e, encode_value(2.0**e, fmt)) for e in range(0, fin.emax + 1)]
    largest = fin.max_sig * 2.0 ** (fin.emax - fin.frac_bits)
    return out + [("max", fin.emax, encode_value(largest, fmt))]


def _zero_first(case: Case, partner: int, zero_in: str, sign: int) -> tuple[list[int], list[int]]:
    fmt = _input_format(case)
    zero = encode_value(0.0 if sign > 0 else -0.0, fmt)
    a, b = [zero] * case.K, [encode_value(1.0, fmt)] * case.K
    a[0], b[0] = (zero, partner) if zero_in == "a" else (partner, zero)
    return a, b


def build_zero_vectors(case: Case) -> list[ZeroVector]:
    """The c0 family: ``[0 x 2^e, x y, 0 x 1, ...]`` (or the zero in b), c = +0, for every e the format holds."""
    fmt, m = _input_format(case), FMTS[case.input_format].frac_bits
    out = []
    for level in _REAL_LEVELS:
        half = level // 2
        try:  # x y = (2 - 2^-m)(1 + 2^-m) 2^level: low bits down to 2^(level - 2m)
            x = encode_value((2.0 - 2.0**-m) * 2.0**half, fmt)
            y = encode_value((1.0 + 2.0**-m) * 2.0 ** (level - half), fmt)
        except (ValueError, OverflowError):
            continue
        for e in range(0, FMTS[case.input_format].emax + 1):
            for zero_in in ("a", "b"):
                for sign in (1, -1):
                    a, b = _zero_first(case, encode_value(2.0**e, fmt), zero_in, sign)
                    a[1], b[1] = x, y
                    vec = Vector("zerofactor", f"e={e},zero_in={zero_in},sign={sign},level={level}", a, b, 0)
                    out.append(ZeroVector(vec, e, zero_in, sign, level))
    return out


def build_tiny_c_vectors(case: Case) -> list[ZeroVector]:
    """The tiny-c family: ``[0 x p, 0 x 1, ...]`` (or the zero in b) with p = 2^e or the largest finite value,
    beside a tiny c (:func:`_tiny_c`)."""
    fout = FMTS[case.output_format]
    out = []
    for c in _tiny_c(case.output_format):
        level = ((c >> fout.frac_bits) & ((1 << fout.exp_bits) - 1)) - fout.bias
        for tag, e, partner in _partners(case):
            for zero_in in ("a", "b"):
                for sign in (1, -1):
                    a, b = _zero_first(case, partner, zero_in, sign)
                    vec = Vector("zerofactor-tiny-c", f"e={tag},zero_in={zero_in},sign={sign},c=0x{c:08x}", a, b, c)
                    out.append(ZeroVector(vec, e, zero_in, sign, level))
    return out


def build_family(case: Case, family: str) -> list[ZeroVector]:
    """The vectors of ``family`` (``c0`` or ``tiny_c``) for ``case``."""
    if family == "c0":
        return build_zero_vectors(case)
    if family == "tiny_c":
        return build_tiny_c_vectors(case)
    raise ValueError(f"tcemu: zero-factor family must be 'c0' or 'tiny_c', got {family!r}")
