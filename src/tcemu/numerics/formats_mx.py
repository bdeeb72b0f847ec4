"""Block scaling (OCP MX and NVIDIA NVFP4): the scale formats ue8m0 and ue4m3, and block-scaled operands.

A block-scaled operand is a vector of low-precision elements (e2m1, e2m3, e3m2, e4m3, e5m2) in which each
block of ``block`` consecutive elements along K (32 for MX, 16 for NVFP4) shares one scale factor; the value
of element k is ``element[k] * scale[k // block]`` (PTX ISA: ``tcgen05.mma`` block scaling and
``mma.sync ... .block_scale``; OCP Microscaling Formats (MX) Specification v1.0).

================ ====== ======== ======================================================================
scale format     bits   bias     values
================ ====== ======== ======================================================================
``ue8m0``        8      127      ``2**(bits - 127)``: 2^-127 .. 2^127, no zero; 0xFF is NaN (OCP E8M0)
``ue4m3``        8      7        unsigned e4m3: ``|e4m3|`` (the sign bit is ignored), zero, subnormals
                                 2^-9 .., largest 448; 0x7F and 0xFF are NaN (NVFP4's scale)
================ ====== ======== ======================================================================

A scale decodes exactly to ``(sig, exp, is_nan)`` meaning ``sig * 2**exp`` with ``sig`` an integer of
``scale_sig_bits`` fraction bits (1 for ue8m0, so ``sig = 1``; ue4m3: ``sig`` 0..15 in units of 2^-3) and
``exp`` the exponent the block is aligned with (the scale's own exponent; emin -6 for ue4m3 subnormals).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import ml_dtypes
import numpy as np

from .formats import INF, NAN, decode_table, get_format

__all__ = ["ScaleFormat", "SCALE_FORMATS", "get_scale_format", "decode_scale", "scale_values", "mx_quantize",
           "dequantize"]


@dataclass(frozen=True)
class ScaleFormat:
    """A block scale format: unsigned, 8 bits.

    Attributes:
        name: ``ue8m0`` or ``ue4m3``.
        exp_bits, frac_bits, bias: the fields (ue8m0: 8, 0, 127; ue4m3: 4, 3, 7).
        numpy_dtype: the ml_dtypes type of the same bits (float8_e8m0fnu; float8_e4m3fn, read as |x|).
    """

    name: str
    exp_bits: int
    frac_bits: int
    bias: int
    numpy_dtype: object

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal scale (ue8m0 has no subnormals: -127)."""
        return -self.bias if self.frac_bits == 0 else 1 - self.bias


SCALE_FORMATS: dict[str, ScaleFormat] = {
    "ue8m0": ScaleFormat("ue8m0", 8, 0, 127, ml_dtypes.float8_e8m0fnu),
    "ue4m3": ScaleFormat("ue4m3", 4, 3, 7, ml_dtypes.float8_e4m3fn),
}
_SCALE_ALIASES = {"e8m0": "ue8m0", "float8_e8m0fnu": "ue8m0", "e8m0fnu": "ue8m0"}


def get_scale_format(name: str | ScaleFormat) -> ScaleFormat:
    """Look a scale format up by name (``ue8m0``, ``ue4m3``; ``e8m0``/``float8_e8m0fnu`` accepted)."""
    if isinstance(name, ScaleFormat):
        return name
    key = _SCALE_ALIASES.get(str(name).lower(), str(name).lower())
    if key not in SCALE_FORMATS:
        raise ValueError(f"tcemu: unknown scale format {name!r}; valid: {sorted(SCALE_FORMATS)}")
    return SCALE_FORMATS[key]


@lru_cache(maxsize=None)
def _scale_table(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sig, exp, is_nan) for all 256 bit patterns: value = sig * 2**(exp - frac_bits)."""
    f = SCALE_FORMATS[name]
    codes = np.arange(256, dtype=np.int64)
    if f.frac_bits == 0:  # ue8m0: a bare exponent
        sig = np.ones(256, np.int64)
        exp = codes - f.bias
        nan = codes == 0xFF
    else:  # ue4m3: e4m3fn without its sign
        _, s, e, cls = decode_table("e4m3")
        sig, exp = s[codes & 0x7F].astype(np.int64), e[codes & 0x7F].astype(np.int64)
        nan = cls[codes & 0x7F] == NAN
    sig = np.where(nan, 0, sig)
    exp = np.where(nan, 0, exp)
    out = (sig, exp, nan)
    for arr in out:
        arr.setflags(write=False)
    return out


def decode_scale(bits: np.ndarray, fmt: str | ScaleFormat) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact fields of scale bits: ``(sig, exp, is_nan)`` with value ``sig * 2**(exp - frac_bits)``.

    ``exp`` is the exponent the hardware aligns a scaled block with (emin for a subnormal ue4m3); a zero
    ue4m3 scale has ``sig = 0``. NaN scales have ``sig = 0``, ``exp = 0`` and ``is_nan`` set.
    """
    f = get_scale_format(fmt)
    sig, exp, nan = _scale_table(f.name)
    idx = np.asarray(bits).astype(np.intp)
    if idx.size and (idx.min() < 0 or idx.max() > 255):
        raise ValueError(f"tcemu: {f.name} scale bits must be 0..255")
    return sig[idx], exp[idx], nan[idx]


def scale_values(bits: np.ndarray, fmt: str | ScaleFormat) -> np.ndarray:
    """The scales as float64 (exact: 2^-127 .. 2^127 and ue4m3 fit; NaN for NaN scales)."""
    sig, exp, nan = decode_scale(bits, fmt)
    f = get_scale_format(fmt)
    v = np.ldexp(sig.astype(np.float64), (exp - f.frac_bits).astype(np.int32))
    return np.where(nan, np.nan, v)


def dequantize(elem_bits: np.ndarray, scale_bits: np.ndarray, elem_format: str, scale_format: str,
               block: int) -> np.ndarray:
    """Values of a block-scaled operand ``(..., K)`` with scales ``(..., K / block)``, as float64 (exact
    except where the product leaves float64's range, which these formats cannot reach)."""
    f = get_format(elem_format)
    elem_bits = np.asarray(elem_bits)
    if elem_bits.shape[-1] != np.shape(scale_bits)[-1] * block:
        raise ValueError(f"tcemu: need K = {block} x the number of scales, got {elem_bits.shape[-1]} elements "
                         f"and {np.shape(scale_bits)[-1]} scales")
    neg, sig, e, cls = decode_table(f.name)
    idx = elem_bits.astype(np.intp) >> f.container_shift
    with np.errstate(invalid="ignore"):
        v = np.ldexp(sig[idx].astype(np.float64), (e[idx] - f.frac_bits).astype(np.int32))
        v = np.where(cls[idx] == INF, np.inf, v)
        v = np.where(neg[idx], -v, v)
        v = np.where(cls[idx] == NAN, np.nan, v)
        return v * np.repeat(scale_values(scale_bits, scale_format), block, axis=-1)


def mx_quantize(x: np.ndarray, elem_format: str, scale_format: str = "ue8m0",
                block: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Quantise float values ``(..., K)`` to a block-scaled operand: ``(element bits, scale bits)``.

    The OCP MX recipe (MX v1.0's conversion from a wider format): per block, the scale is ``2**(floor(log2(amax)) - emax_elem)``
    (ue8m0, clamped to 2^-127 .. 2^127) or ``amax / max_elem`` rounded to ue4m3 (NVFP4), then each element
    is ``x / scale`` rounded to nearest even in the element format and saturated. A block of zeros gets
    scale 1 (ue8m0) or 0 (ue4m3). A helper to build inputs; the Tensor Core only consumes them.
    """
    f = get_format(elem_format)
    sf = get_scale_format(scale_format)
    x = np.asarray(x, dtype=np.float64)
    k = x.shape[-1]
    if k % block:
        raise ValueError(f"tcemu: K = {k} is not a multiple of the block size {block}")
    xb = x.reshape(x.shape[:-1] + (k // block, block))
    amax = np.max(np.abs(xb), axis=-1)
    max_elem = float(np.asarray(f.max_finite_field, np.uint8).view(f.numpy_dtype).astype(np.float64))
    if sf.name == "ue8m0":
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - f.emax
        sbits = (np.clip(e, -127, 127) + 127).astype(np.uint8)
    else:
        sbits = (amax / max_elem).astype(ml_dtypes.float8_e4m3fn).view(np.uint8) & np.uint8(0x7F)
    scale = scale_values(sbits, sf)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.where(scale[..., None] > 0, xb / scale[..., None], 0.0), -max_elem, max_elem)
    ebits = q.reshape(x.shape).astype(f.numpy_dtype).view(np.uint8)
    return ebits, sbits
