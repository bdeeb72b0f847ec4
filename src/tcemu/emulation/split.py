"""REFERENCE splitting of FP32 values into TF32 / BF16 pieces, in pure PyTorch (any device).

All rounding is done on the integer bit patterns, so the result is the same on every device
and matches what the GPU conversion instructions produce:

* :func:`round_to_tf32` rounds to nearest with ties away from zero (``cvt.rna.tf32.f32``);
* :func:`round_to_bf16` rounds to nearest with ties to even (``cvt.rn.bf16.f32``);

both saturate to the largest finite value of the format instead of overflowing to Inf (an
Inf high piece would turn ``a - hi`` into NaN), and both leave Inf and NaN unchanged.

The range scaling of the fix-up (:func:`range_scale_exponents`, :func:`scale_down`, :func:`power_of_two`)
is here too: it prepares operands for the split (docs/emulation.md, "The top of the range").
"""

from __future__ import annotations

import torch
from torch import Tensor

from .methods import MethodSpec, get_method

__all__ = ["round_to_tf32", "round_to_bf16", "round_to_piece", "split", "recombine", "power_of_two",
           "range_scale_exponents", "scale_down"]

_MAG = 0x7FFFFFFF
_SIGN = -0x80000000  # 0x80000000 as int32
_INF_BITS = 0x7F800000

# (rounding increment added to the magnitude, mask of kept bits, largest finite, smallest subnormal)
_TF32 = dict(keep=~0x1FFF, max_bits=0x7F7FE000, min_sub_bits=0x2000)
_BF16 = dict(keep=~0xFFFF, max_bits=0x7F7F0000, min_sub_bits=0x10000)


def _finish(x: Tensor, bits: Tensor, mag: Tensor, rounded: Tensor, fmt: dict, keep_nonzero: bool) -> Tensor:
    finite = mag < _INF_BITS
    # saturate: a finite input never becomes Inf
    rounded = torch.where(rounded >= _INF_BITS, torch.full_like(rounded, fmt["max_bits"]), rounded)
    if keep_nonzero:  # a nonzero input keeps a nonzero high piece (so Inf * tiny stays Inf, not NaN)
        rounded = torch.where((rounded == 0) & (mag != 0), torch.full_like(rounded, fmt["min_sub_bits"]), rounded)
    out = (bits & _SIGN) | rounded
    return torch.where(finite, out.view(torch.float32), x)


def _check_fp32(x: Tensor) -> None:
    if x.dtype != torch.float32:
        raise TypeError(f"splitting needs a float32 tensor, got {x.dtype}")


def round_to_tf32(x: Tensor, *, keep_nonzero: bool = False) -> Tensor:
    """Round FP32 to TF32 (10 fraction bits), nearest with ties away from zero, saturating.

    Args:
        x: float32 tensor, any shape and strides.
        keep_nonzero: map nonzero values that would round to zero to the smallest TF32 subnormal
            of the same sign.

    Returns:
        float32 tensor of TF32-representable values; Inf and NaN are returned unchanged.
    """
    _check_fp32(x)
    xc = x.contiguous()
    bits = xc.view(torch.int32)
    mag = bits & _MAG
    rounded = (mag + 0x1000) & _TF32["keep"]
    return _finish(xc, bits, mag, rounded, _TF32, keep_nonzero).view(x.shape)


def round_to_bf16(x: Tensor, *, keep_nonzero: bool = False) -> Tensor:
    """Round FP32 to BF16 (7 fraction bits), nearest with ties to even, saturating.

    Same contract as :func:`round_to_tf32`; the result is returned as float32.
    """
    _check_fp32(x)
    xc = x.contiguous()
    bits = xc.view(torch.int32)
    mag = bits & _MAG
    rounded = (mag + 0x7FFF + ((mag >> 16) & 1)) & _BF16["keep"]
    return _finish(xc, bits, mag, rounded, _BF16, keep_nonzero).view(x.shape)


def round_to_piece(x: Tensor, piece_format: str, *, keep_nonzero: bool = False) -> Tensor:
    """Round to the piece format ``"tf32"`` or ``"bf16"`` (``"fp32"`` returns ``x``)."""
    if piece_format == "tf32":
        return round_to_tf32(x, keep_nonzero=keep_nonzero)
    if piece_format == "bf16":
        return round_to_bf16(x, keep_nonzero=keep_nonzero)
    if piece_format == "fp32":
        return x
    raise ValueError(f"unknown piece format {piece_format!r}")


def split(x: Tensor, method: str | MethodSpec) -> tuple[Tensor, ...]:
    """Split FP32 ``x`` into the method's pieces (float32 tensors holding piece-format values).

    ``x ~= p[0] + 2**-s * p[1] + 2**-2s * p[2]`` with ``s = method.shift``; see
    :mod:`tcemu.emulation.methods` for the rules and error bounds. For Inf/NaN elements,
    ``p[0]`` is the value itself and the lower pieces are NaN.
    """
    spec = get_method(method)
    _check_fp32(x)
    if spec.piece_format == "fp32":
        return (x,)
    scale = 2.0**spec.shift
    hi = round_to_piece(x, spec.piece_format, keep_nonzero=True)
    pieces = [hi]
    residual = x
    for _ in range(1, spec.n_pieces):
        residual = (residual - pieces[-1]) * scale  # exact: Sterbenz, then a power of two
        pieces.append(round_to_piece(residual, spec.piece_format))
    return tuple(pieces)


def recombine(pieces: tuple[Tensor, ...], method: str | MethodSpec) -> Tensor:
    """Inverse of :func:`split` up to the split residual: the value the pieces represent (exact for three
    BF16 pieces); Inf, NaN and signed zeros from their high piece."""
    spec = get_method(method)
    out = pieces[-1]
    for p in reversed(pieces[:-1]):
        out = out * 2.0**-spec.shift + p
    high = pieces[0]
    return torch.where(torch.isfinite(high) & (high != 0), out, high)


# ---------------------------------------------------------------------------------------- range scaling


def power_of_two(e: Tensor) -> Tensor:
    """``2^e`` as float32 for integer ``e`` in [-126, 127], built from the exponent bits (exact)."""
    return ((e.to(torch.int32) + 127) << 23).view(torch.float32)


def range_scale_exponents(x: Tensor, dim: int, threshold: int) -> Tensor:
    """``k = max(0, e - threshold)`` per slice along ``dim`` (kept as a size-1 dimension), ``e`` the exponent
    of the slice's largest finite magnitude (a slice of zeros, subnormals or non-finite values only: 0)."""
    _check_fp32(x)
    largest = torch.where(torch.isfinite(x), x.abs(), torch.zeros((), dtype=x.dtype, device=x.device))
    largest = largest.amax(dim=dim, keepdim=True).contiguous()
    exponent = ((largest.view(torch.int32) >> 23) & 0xFF) - 127
    return (exponent - threshold).clamp_min(0)


def scale_down(x: Tensor, k: Tensor) -> Tensor:
    """``x * 2^-k`` (``k`` broadcast, integers in [0, 126]): exact where the result is normal; a nonzero
    value never becomes zero (it keeps the smallest subnormal of its sign, so that Inf times it stays Inf);
    Inf and NaN unchanged."""
    y = x * power_of_two(-k)
    tiny = torch.where(torch.signbit(x), -(2.0**-149), 2.0**-149).to(x.dtype)
    return torch.where((y == 0) & (x != 0), tiny, y)
