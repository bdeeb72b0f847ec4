"""Private Triton code: FP32 -> TF32/BF16 pieces, bit for bit as :func:`tcemu.emulation.split.split`.

The rounding works on the int32 bit pattern (as the reference does), so it gives the same bits
on the GPU and under ``TRITON_INTERPRET=1``:

* TF32: round to nearest, ties away (``cvt.rna.tf32.f32``): add half an ulp to the magnitude, clear 13 bits;
* BF16: round to nearest, ties to even (``cvt.rn.bf16.f32``): add 0x7FFF plus the lowest kept bit, clear 16 bits;

both saturate to the largest finite piece, and ``keep_nonzero`` (the high piece only) maps a nonzero
value that rounds to zero to the smallest subnormal piece of its sign. Inf/NaN pass unchanged.
"""

from __future__ import annotations

import struct

import triton
import triton.language as tl

FMT_TF32 = 0
FMT_BF16 = 1


def _f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# For the hardware-conversion split (HW, BF16 pieces): the largest FP32 value that rounds (RNE) to the
# largest finite BF16 (0x7F7F7FFF -> 0x7F7F) and the smallest subnormal BF16 (2^-133): clamping into
# [TINY, MAX] before cvt.rn.bf16 gives the spec's saturation and keep-nonzero with the hardware's rounding.
_MAX_BF16 = tl.constexpr(_f32(0x7F7F7FFF))
_TINY_BF16 = tl.constexpr(2.0**-133)


@triton.jit
def round_piece_bits(bits, FMT: tl.constexpr, KEEP_NONZERO: tl.constexpr):
    """int32 bits of FP32 values -> int32 bits of the values rounded to the piece format.

    Written for few instructions (min/max instead of compare+select): for a finite input the
    magnitude plus the rounding increment cannot overflow int32; Inf/NaN take the last select.
    """
    mag = bits & 0x7FFFFFFF
    if FMT == 0:  # TF32, RNA: + half ulp, clear 13 bits; saturate at 0x7F7FE000
        r = tl.minimum((mag + 0x1000) & -8192, 0x7F7FE000)  # -8192 == ~0x1FFF
        if KEEP_NONZERO:  # 0 < mag < 0x1000 rounds to 0: take the smallest subnormal TF32 (0x2000)
            r = tl.maximum(r, tl.minimum(mag, 1) << 13)
    else:  # BF16, RNE: + 0x7FFF + lowest kept bit, clear 16 bits; saturate at 0x7F7F0000
        r = tl.minimum((mag + 0x7FFF + ((mag >> 16) & 1)) & -65536, 0x7F7F0000)  # -65536 == ~0xFFFF
        if KEEP_NONZERO:
            r = tl.maximum(r, tl.minimum(mag, 1) << 16)
    r = tl.where(mag < 0x7F800000, r, mag)  # Inf and NaN unchanged
    return (bits & -2147483648) | r  # sign | rounded magnitude


@triton.jit
def to_operand(bits, FMT: tl.constexpr):
    """Piece bits (int32) -> the Tensor Core operand: fp32 holding a TF32 value, or bf16 (exact)."""
    if FMT == 0:
        return bits.to(tl.float32, bitcast=True)
    else:
        return (bits >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def widen_bf16(x):
    """bf16 -> its FP32 value, by the bits (exact also for subnormals, which Triton 3.9's interpreter flushes to
    zero in ``.to(tl.float32)``)."""
    return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _hw_piece_bf16(x, KEEP_NONZERO: tl.constexpr):
    """One BF16 piece by the hardware conversion: (operand, its FP32 value). The same bits as
    round_piece_bits (NaN payloads aside) if cvt.rn.bf16.f32 rounds as documented; hw_split_exact()
    checks that once per device before the kernels use it."""
    if KEEP_NONZERO:  # high piece: clamp |x| into [TINY, MAX]; 0, Inf and NaN pass unchanged
        m = tl.abs(x)
        c = tl.minimum(tl.maximum(m, _TINY_BF16), _MAX_BF16)
        c = (c.to(tl.int32, bitcast=True) | (x.to(tl.int32, bitcast=True) & -2147483648)).to(tl.float32,
                                                                                          bitcast=True)
        src = tl.where((m > 0.0) & (m < float("inf")), c, x)
    else:  # residual pieces are never Inf: clamp to +-MAX, NaN propagates
        src = tl.minimum(tl.maximum(x, -_MAX_BF16, propagate_nan=tl.PropagateNan.ALL), _MAX_BF16,
                         propagate_nan=tl.PropagateNan.ALL)
    h = src.to(tl.bfloat16)  # cvt.rn.bf16(x2).f32: round to nearest even
    return h, h.to(tl.float32)


@triton.jit
def split3(x, FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, HW: tl.constexpr = False):
    """Split FP32 ``x`` into NP (1-3) pieces: p0 = R(x), r1 = (x - p0) 2^s, p1 = R(r1), r2 = (r1 - p1) 2^s, p2 = R(r2).

    HW=False rounds on the integer bits (exact everywhere, also in the interpreter); HW=True rounds BF16
    pieces with the GPU's conversion instruction and clamps (fewer instructions; GPU only; TF32 pieces
    always take the integer path, which compiled to fewer instructions than cvt.rna plus clamps). Returns three operands
    (unused ones are copies of p0, never read).
    """
    scale: tl.constexpr = 2.0**SHIFT
    if HW and FMT == 1:
        p0, f0 = _hw_piece_bf16(x, True)
        p1 = p0
        p2 = p0
        if NP >= 2:
            r1 = (x - f0) * scale
            p1, f1 = _hw_piece_bf16(r1, False)
            if NP >= 3:
                p2, f2 = _hw_piece_bf16((r1 - f1) * scale, False)
        return p0, p1, p2
    b0 = round_piece_bits(x.to(tl.int32, bitcast=True), FMT, True)
    f0 = b0.to(tl.float32, bitcast=True)
    p0 = to_operand(b0, FMT)
    p1 = p0
    p2 = p0
    if NP >= 2:
        r1 = (x - f0) * scale  # exact: Sterbenz, then a power of two
        b1 = round_piece_bits(r1.to(tl.int32, bitcast=True), FMT, False)
        p1 = to_operand(b1, FMT)
        if NP >= 3:
            r2 = (r1 - b1.to(tl.float32, bitcast=True)) * scale
            b2 = round_piece_bits(r2.to(tl.int32, bitcast=True), FMT, False)
            p2 = to_operand(b2, FMT)
    return p0, p1, p2


@triton.jit
def split3_fast(x, FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr):
    """DIAGNOSTIC ONLY (benchmark sweep): a cheap split that is NOT the spec.

    TF32 high piece by truncation (one AND), low piece fed unrounded; BF16 pieces by the hardware
    conversion (RNE, no saturation, no keep-nonzero). It measures what the exact split costs.
    """
    scale: tl.constexpr = 2.0**SHIFT
    if FMT == 0:
        f0 = (x.to(tl.int32, bitcast=True) & -8192).to(tl.float32, bitcast=True)
        p0 = f0
        r1 = (x - f0) * scale
        p1 = r1
        p2 = r1
    else:
        p0 = x.to(tl.bfloat16)
        r1 = (x - p0.to(tl.float32)) * scale
        p1 = r1.to(tl.bfloat16)
        p2 = p1
        if NP >= 3:
            r2 = (r1 - p1.to(tl.float32)) * scale
            p2 = r2.to(tl.bfloat16)
    return p0, p1, p2


@triton.jit
def _split_t_kernel(
    # b: (R, C) FP32, any strides; pieces: (C, R) contiguous ("transposed"), dtype fp32 (TF32) or bf16
    b_ptr, p0_ptr, p1_ptr, p2_ptr,
    R, C, stride_br, stride_bc,
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr, HW: tl.constexpr,
):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    offs_r = pid_r * BR + tl.arange(0, BR)
    offs_c = pid_c * BC + tl.arange(0, BC)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    x = tl.load(b_ptr + offs_r[:, None].to(tl.int64) * stride_br + offs_c[None, :].to(tl.int64) * stride_bc,
                mask=mask, other=0.0)
    p0, p1, p2 = split3(x, FMT, NP, SHIFT, HW)
    # out[c, r] = piece[r, c]
    out_off = offs_c[None, :].to(tl.int64) * R + offs_r[:, None]
    tl.store(p0_ptr + out_off, p0, mask=mask)
    if NP >= 2:
        tl.store(p1_ptr + out_off, p1, mask=mask)
    if NP >= 3:
        tl.store(p2_ptr + out_off, p2, mask=mask)
