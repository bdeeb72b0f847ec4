"""Floating-point formats of Tensor Core operands: exact decoding to integers and encoding with rounding.

A value is held as integers ``(negative, sig, q)`` meaning ``(-1)**negative * sig * 2**q``, where
``sig`` is the significand with its hidden bit (``0 <= sig < 2**p``) and ``q = e - (p - 1)`` is the
exponent of the last significand bit (``e`` is the unbiased exponent; ``emin`` for subnormals and
zero). Special values carry a class code (:data:`ZERO`, :data:`FINITE`, :data:`INF`, :data:`NAN`).

Formats (names as in the dataset and PTX; ml_dtypes names are accepted as aliases):

================ ============ ========== ====== ======================================
name             exponent     fraction   bias   notes
================ ============ ========== ====== ======================================
``fp32``         8            23         127    IEEE binary32
``fp16``         5            10         15     IEEE binary16
``bf16``         8            7          127    bfloat16 (upper half of binary32)
``tf32``         8            10         127    held in a binary32 container; low 13 bits ignored
``e4m3``         4            3          7      OCP float8_e4m3fn: no Inf, S.1111.111 is NaN
``e5m2``         5            2          15     OCP float8_e5m2 (IEEE-like)
``e8m13``        8            13         127    internal FP8 accumulator; binary32 container, low 10 bits 0
``e2m1``         2            1          1      OCP MX FP4 (float4_e2m1fn): no Inf, no NaN; uint8 container
``e2m3``         2            3          1      OCP MX FP6 (float6_e2m3fn): no Inf, no NaN; uint8 container
``e3m2``         3            2          3      OCP MX FP6 (float6_e3m2fn): no Inf, no NaN; uint8 container
================ ============ ========== ====== ======================================

The MX scale formats (ue8m0, ue4m3) and block-scaled operands are in :mod:`tcemu.numerics.formats_mx`.

Wider and AMD formats (FP64 DMMA, AMD CDNA Matrix Cores): ``fp64`` (IEEE binary64, uint64 container; decoded,
not encoded here), ``e4m3fnuz`` and ``e5m2fnuz`` (AMD CDNA3 FP8/BF8, bias 8 and 16: no Inf, no -0, the pattern
0x80 is the only NaN; decoded, not encoded here).

Encoding (:func:`encode`) rounds an exact integer value ``(negative, mag, q)`` once, with any
:class:`~tcemu.numerics.rounding.Rounding`, including gradual underflow and overflow to Inf (or
to the largest finite value, for IEEE round-toward-zero semantics).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import ml_dtypes
import numpy as np

from .rounding import Rounding, bit_length, shift_round

__all__ = [
    "FloatFormat",
    "FORMATS",
    "get_format",
    "ZERO",
    "FINITE",
    "INF",
    "NAN",
    "decode",
    "encode",
    "decode_table",
    "to_bits",
    "from_bits",
    "fp8_to_fp16_bits",
]

# class codes
ZERO, FINITE, INF, NAN = 0, 1, 2, 3

# an exponent larger than any finite one; decode tables put it on Inf/NaN so that one max() finds them
SPECIAL_EXP = 1 << 12


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format: exponent bits, fraction bits, bias, special-value rules.

    Attributes:
        name: short name (``fp16``, ``bf16``, ``tf32``, ``e4m3``, ``e5m2``, ``fp32``, ``e8m13``).
        exp_bits: width of the exponent field.
        frac_bits: width of the fraction field (precision ``p = frac_bits + 1``).
        bias: exponent bias.
        ieee_specials: True for IEEE rules (exponent all ones = Inf/NaN); False for OCP ``fn``
            formats (no Inf; only S.1111.111 is NaN, or no NaN either with ``finite_only``).
        finite_only: no Inf and no NaN: every bit pattern is a number (OCP MX FP4/FP6, e2m1, e2m3, e3m2).
        container_bits: width of the integer that holds the bits (32 for tf32 and e8m13).
        container_shift: the format's bits sit this far left in the container (13 tf32, 10 e8m13).
        numpy_dtype: the NumPy dtype of the format, or None (tf32, e8m13).
    """

    name: str
    exp_bits: int
    frac_bits: int
    bias: int
    ieee_specials: bool = True
    finite_only: bool = False
    container_bits: int = 0
    container_shift: int = 0
    numpy_dtype: object = None
    fnuz: bool = False  # AMD FNUZ fp8: no Inf, no -0; 0x80 (sign bit alone) is the only NaN

    @property
    def precision(self) -> int:
        """Significand bits including the hidden bit."""
        return self.frac_bits + 1

    @property
    def emin(self) -> int:
        """Smallest normal exponent (also the exponent of subnormals)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Largest finite exponent."""
        top = (1 << self.exp_bits) - 1
        return (top - 1 if self.ieee_specials else top) - self.bias

    @property
    def width(self) -> int:
        """Bits of the format itself (sign + exponent + fraction)."""
        return 1 + self.exp_bits + self.frac_bits

    @property
    def container_dtype(self) -> type:
        return {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[self.container_bits or self.width]

    @property
    def max_finite_field(self) -> int:
        """Bits (without sign, format layout) of the largest finite value."""
        if self.ieee_specials:
            return (((1 << self.exp_bits) - 1) << self.frac_bits) - 1
        if self.finite_only:
            return (1 << (self.width - 1)) - 1
        return (((1 << self.exp_bits) - 1) << self.frac_bits) | ((1 << self.frac_bits) - 2)

    @property
    def inf_field(self) -> int | None:
        """Bits (without sign, format layout) of +Inf; None if the format has no Inf."""
        return ((1 << self.exp_bits) - 1) << self.frac_bits if self.ieee_specials else None

    @property
    def canonical_nan(self) -> int:
        """The NaN the Tensor Core returns, in container bits: 0x7FFFFFFF (fp32), 0x7FFF (fp16)."""
        ones = (1 << (self.width - 1)) - 1  # all bits but the sign
        return ones << self.container_shift | ((1 << self.container_shift) - 1)


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("fp32", 8, 23, 127, numpy_dtype=np.float32),
        FloatFormat("fp16", 5, 10, 15, numpy_dtype=np.float16),
        FloatFormat("bf16", 8, 7, 127, numpy_dtype=ml_dtypes.bfloat16),
        FloatFormat("fp64", 11, 52, 1023, numpy_dtype=np.float64),
        FloatFormat("e4m3fnuz", 4, 3, 8, ieee_specials=False, numpy_dtype=ml_dtypes.float8_e4m3fnuz, fnuz=True),
        FloatFormat("e5m2fnuz", 5, 2, 16, ieee_specials=False, numpy_dtype=ml_dtypes.float8_e5m2fnuz, fnuz=True),
        FloatFormat("tf32", 8, 10, 127, container_bits=32, container_shift=13),
        FloatFormat("e4m3", 4, 3, 7, ieee_specials=False, numpy_dtype=ml_dtypes.float8_e4m3fn),
        FloatFormat("e5m2", 5, 2, 15, numpy_dtype=ml_dtypes.float8_e5m2),
        FloatFormat("e8m13", 8, 13, 127, container_bits=32, container_shift=10),
        FloatFormat("e2m1", 2, 1, 1, ieee_specials=False, finite_only=True, container_bits=8,
                    numpy_dtype=ml_dtypes.float4_e2m1fn),
        FloatFormat("e2m3", 2, 3, 1, ieee_specials=False, finite_only=True, container_bits=8,
                    numpy_dtype=ml_dtypes.float6_e2m3fn),
        FloatFormat("e3m2", 3, 2, 3, ieee_specials=False, finite_only=True, container_bits=8,
                    numpy_dtype=ml_dtypes.float6_e3m2fn),
    )
}

_ALIASES = {
    "float32": "fp32",
    "f32": "fp32",
    "float16": "fp16",
    "float64": "fp64",
    "f64": "fp64",
    "float8_e4m3fnuz": "e4m3fnuz",
    "float8_e5m2fnuz": "e5m2fnuz",
    "f16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "e4m3",
    "e4m3fn": "e4m3",
    "float8_e5m2": "e5m2",
    "f32_e8m13": "e8m13",
    "xf32": "tf32",
    "float4_e2m1fn": "e2m1",
    "fp4": "e2m1",
    "float6_e2m3fn": "e2m3",
    "float6_e3m2fn": "e3m2",
}


def get_format(name: str | FloatFormat) -> FloatFormat:
    """Look a format up by name (``fp16``, ``bfloat16``, ``float8_e4m3fn``, ...)."""
    if isinstance(name, FloatFormat):
        return name
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    if key not in FORMATS:
        raise ValueError(f"unknown format {name!r}; valid: {sorted(FORMATS)} (aliases: {sorted(_ALIASES)})")
    return FORMATS[key]


# ---------------------------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------------------------


def decode(bits: np.ndarray, fmt: str | FloatFormat) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode container bits exactly into integer fields.

    For ``tf32`` the low 13 container bits are ignored (the Tensor Core reads only the top 19),
    which is the hardware's truncation of an fp32 operand to tf32.

    Returns:
        ``(negative, sig, e, cls)``: bool sign, int64 significand with hidden bit, int64 unbiased
        exponent (``emin`` for zeros and subnormals), uint8 class. The value of a finite number is
        ``(-1)**negative * sig * 2**(e - frac_bits)``. For Inf/NaN ``sig`` is 0 and ``e`` is
        ``SPECIAL_EXP``.
    """
    f = get_format(fmt)
    u = np.asarray(bits).astype(np.uint64).astype(np.int64) >> f.container_shift  # fp64: sign bit -> negative
    if f.fnuz:
        return _decode_fnuz(u, f)
    frac_mask = (1 << f.frac_bits) - 1
    exp_mask = (1 << f.exp_bits) - 1
    negative = ((u >> (f.width - 1)) & 1).astype(bool)
    efield = (u >> f.frac_bits) & exp_mask
    frac = u & frac_mask
    if f.ieee_specials:
        special = efield == exp_mask
        is_nan = special & (frac != 0)
        is_inf = special & (frac == 0)
    elif f.finite_only:
        special = is_nan = is_inf = np.zeros(np.shape(u), dtype=bool)
    else:
        is_nan = (efield == exp_mask) & (frac == frac_mask)
        is_inf = np.zeros_like(is_nan)
        special = is_nan
    normal = (efield != 0) & ~special
    sig = np.where(normal, frac | (1 << f.frac_bits), frac)
    e = np.where(normal, efield - f.bias, f.emin)
    cls = np.where(sig == 0, ZERO, FINITE).astype(np.uint8)
    cls[is_inf] = INF
    cls[is_nan] = NAN
    sig = np.where(special, 0, sig)
    e = np.where(special, SPECIAL_EXP, e)
    return negative, sig.astype(np.int64), e.astype(np.int64), cls


def _decode_fnuz(u: np.ndarray, f: FloatFormat) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`decode` of an AMD FNUZ fp8 format: every exponent field is finite, 0x80 is NaN, no -0, no Inf."""
    nan = u == 1 << (f.width - 1)
    efield = (u >> f.frac_bits) & ((1 << f.exp_bits) - 1)
    frac = u & ((1 << f.frac_bits) - 1)
    normal = efield != 0
    sig = np.where(nan, 0, np.where(normal, frac | (1 << f.frac_bits), frac)).astype(np.int64)
    e = np.where(nan, SPECIAL_EXP, np.where(normal, efield - f.bias, f.emin)).astype(np.int64)
    cls = np.where(nan, NAN, np.where(sig == 0, ZERO, FINITE)).astype(np.uint8)
    return ((u >> (f.width - 1)) & 1).astype(bool) & ~nan, sig, e, cls


@lru_cache(maxsize=None)
def decode_table(fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Decode tables indexed by the format's own bits (container bits ``>> container_shift``).

    Same fields as :func:`decode`, for every bit pattern of formats up to 19 bits wide (tf32).
    """
    f = get_format(fmt)
    codes = np.arange(1 << f.width, dtype=np.int64) << f.container_shift
    negative, sig, e, cls = decode(codes, f)
    for arr in (negative, sig, e, cls):
        arr.setflags(write=False)
    return negative, sig, e, cls


# ---------------------------------------------------------------------------------------------------------------
# encoding
# ---------------------------------------------------------------------------------------------------------------


def encode(
    negative: np.ndarray,
    mag: np.ndarray,
    q: np.ndarray,
    fmt: str | FloatFormat,
    rounding: Rounding,
    overflow: str = "inf",
) -> np.ndarray:
    """Round the exact value ``(-1)**negative * mag * 2**q`` once to ``fmt``; return container bits.

    Args:
        negative: bool sign of each value (the sign of a zero result is kept as given).
        mag: int64 magnitudes, ``0 <= mag < 2**61``.
        q: int64 exponent of the last bit of ``mag``.
        fmt: output format.
        rounding: rounding mode.
        overflow: ``"inf"``: a result beyond the largest finite value becomes Inf whatever the rounding
            (what both public models do); ``"ieee"``: IEEE 754 rules (RZ, and RD/RU away from the
            infinity, stop at the largest finite value).

    Returns:
        Bits in the format's container dtype.
    """
    f = get_format(fmt)
    if f.fnuz or f.width > 32:
        raise ValueError(f"tcemu: encoding to {f.name} is not modelled (it is an input format only)")
    negative = np.asarray(negative, dtype=bool)
    mag = np.asarray(mag, dtype=np.int64)
    q = np.asarray(q, dtype=np.int64)
    p = f.precision
    e_lead = bit_length(mag) - 1 + q  # exponent of the leading bit
    e_out = np.maximum(e_lead, f.emin)  # subnormals share emin
    shift = e_out - (p - 1) - q  # > 0: bits discarded; <= 0: exact, shift left
    left = np.maximum(-shift, 0)
    kept = shift_round(mag << left, np.maximum(shift, 0), negative, rounding)
    field = ((e_out - f.emin) << f.frac_bits) + kept  # a carry out of the significand bumps the exponent
    field = np.where(kept == 0, 0, field)
    too_big = field > f.max_finite_field
    if np.any(too_big):
        if f.finite_only:  # nothing beyond the largest finite value: saturate (the OCP MX conversion rule)
            big = np.full(field.shape, f.max_finite_field, dtype=np.int64)
        elif f.inf_field is None:  # no Inf in the format: NaN (OCP e4m3fn without saturation)
            big = np.full(field.shape, (1 << (f.width - 1)) - 1, dtype=np.int64)
        else:
            big = np.full(field.shape, f.inf_field, dtype=np.int64)
        if overflow == "ieee":
            to_max = {
                Rounding.RZ: np.ones(field.shape, dtype=bool),
                Rounding.RU: negative,
                Rounding.RD: ~negative,
                Rounding.RO: np.ones(field.shape, dtype=bool),
            }.get(rounding, np.zeros(field.shape, dtype=bool))
            big = np.where(to_max, f.max_finite_field, big)
        elif overflow != "inf":
            raise ValueError(f"overflow must be 'inf' or 'ieee', got {overflow!r}")
        field = np.where(too_big, big, field)
    bits = (field | (negative.astype(np.int64) << (f.width - 1))) << f.container_shift
    return bits.astype(f.container_dtype)


# ---------------------------------------------------------------------------------------------------------------
# conversions between NumPy arrays and bits
# ---------------------------------------------------------------------------------------------------------------


def from_bits(bits: np.ndarray, fmt: str | FloatFormat) -> np.ndarray:
    """View container bits as the format's NumPy dtype (float32 for tf32 and e8m13)."""
    f = get_format(fmt)
    bits = np.asarray(bits).astype(f.container_dtype)
    if f.numpy_dtype is None:
        return bits.view(np.float32)
    return bits.view(f.numpy_dtype)


def to_bits(x: np.ndarray, fmt: str | FloatFormat, *, check: bool = True) -> np.ndarray:
    """Bits of ``x`` in ``fmt``: from the format's own dtype, or from float32/float64 values.

    Values given in a wider float dtype must be exactly representable in ``fmt`` (checked when
    ``check``; NaN passes as canonical NaN). For ``tf32`` any float32 is accepted: its bits are
    passed through unchanged and the model ignores the low 13 bits, as the hardware does.

    Raises:
        ValueError: a value is not representable in ``fmt``.
    """
    f = get_format(fmt)
    x = np.asarray(x)
    if f.numpy_dtype is not None and x.dtype == np.dtype(f.numpy_dtype):
        return x.view(f.container_dtype)
    if f.name in ("tf32", "e8m13"):
        x32 = x.astype(np.float32)
        if check and x.dtype not in (np.float32,) and np.any(x32.astype(x.dtype) != x, where=~np.isnan(x)):
            raise ValueError(f"values not representable in float32 (container of {f.name})")
        bits = x32.view(np.uint32)
        if check and f.name == "e8m13" and np.any(bits & ((1 << 10) - 1), where=~np.isnan(x32)):
            raise ValueError("values not representable in e8m13 (13 fraction bits)")
        return bits
    if x.dtype.kind != "f" and not type(x.dtype).__module__.startswith("ml_dtypes") \
            and not x.dtype.type.__module__.startswith("ml_dtypes"):
        raise ValueError(f"expected float values for format {f.name}, got dtype {x.dtype} "
                         "(raw bit patterns go to block_fma_bits)")
    y = x.astype(f.numpy_dtype)
    if check:
        back = y.astype(np.float64)
        orig = x.astype(np.float64)
        bad = (back != orig) & ~(np.isnan(back) & np.isnan(orig))
        if np.any(bad):
            first = orig[bad].flat[0]
            raise ValueError(
                f"{int(bad.sum())} value(s) not exactly representable in {f.name} (first: {first!r}); "
                f"round them first or pass the {f.numpy_dtype.__name__} dtype"
            )
    return y.view(f.container_dtype)


@lru_cache(maxsize=None)
def _fp8_to_fp16_table(fmt: str) -> np.ndarray:
    negative, sig, e, cls = decode_table(fmt)
    bits = encode(negative, sig, e - get_format(fmt).frac_bits, "fp16", Rounding.RNE)  # exact: fp16 holds fp8
    bits = np.where(cls == INF, 0x7C00 | (negative.astype(np.uint16) << 15), bits)
    bits = np.where(cls == NAN, 0x7FFF, bits).astype(np.uint16)
    bits.setflags(write=False)
    return bits


def fp8_to_fp16_bits(bits: np.ndarray, fmt: str) -> np.ndarray:
    """Exact conversion of fp8 bits to fp16 bits (the F2FP unpacking of emulated FP8 ``mma.sync``)."""
    f = get_format(fmt)
    if f.name not in ("e4m3", "e5m2"):
        raise ValueError(f"fp8_to_fp16_bits needs e4m3 or e5m2, got {f.name}")
    return _fp8_to_fp16_table(f.name)[np.asarray(bits).astype(np.intp)]
