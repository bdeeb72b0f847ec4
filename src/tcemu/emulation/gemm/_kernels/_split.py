"""Private Triton code: FP32 -> TF32/BF16 pieces, bit for bit as :func:`tcemu.emulation.split.split`.

The rounding works on the int32 bit pattern (as the reference does), so it gives the same bits
on the GPU and under ``TRITON_INTERPRET=1``:

* TF32: round to nearest, ties away (``cvt.rna.tf32.f32``): add half an ulp to the magnitude, clear 13 bits;
* BF16: round to nearest, ties to even (``cvt.rn.bf16.f32``): add 0x7FFF plus the lowest kept bit, clear 16 bits;

both saturate to the largest finite piece, and ``keep_nonzero`` (the high piece only) maps a nonzero
value that rounds to zero to the smallest subnormal piece of its sign. Inf/NaN pass unchanged.
"""

from __future__ import annotations

import triton
import triton.language as tl

FMT_TF32 = 0
FMT_BF16 = 1


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
def split3(x, FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr):
    """Split FP32 ``x`` into NP (1-3) pieces: p0 = R(x), r1 = (x - p0) 2^s, p1 = R(r1), r2 = (r1 - p1) 2^s, p2 = R(r2).

    Rounds on the integer bits (exact everywhere, also in the interpreter). Returns three operands (unused
    ones are copies of p0, never read).
    """
    scale: tl.constexpr = 2.0**SHIFT
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


@triton.jit(do_not_specialize=("R", "C"))
def _split_t_kernel(
    # b: (R, C) FP32, any strides; pieces: (C, R) contiguous ("transposed"), dtype fp32 (TF32) or bf16
    b_ptr, p0_ptr, p1_ptr, p2_ptr,
    R, C, stride_br, stride_bc,
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr,
    BR: tl.constexpr, BC: tl.constexpr,
):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    offs_r = pid_r * BR + tl.arange(0, BR)
    offs_c = pid_c * BC + tl.arange(0, BC)
    mask = (offs_r[:, None] < R) & (offs_c[None, :] < C)
    x = tl.load(b_ptr + offs_r[:, None].to(tl.int64) * stride_br + offs_c[None, :].to(tl.int64) * stride_bc,
                mask=mask, other=0.0)
    p0, p1, p2 = split3(x, FMT, NP, SHIFT)
    # out[c, r] = piece[r, c]
    out_off = offs_c[None, :].to(tl.int64) * R + offs_r[:, None]
    tl.store(p0_ptr + out_off, p0, mask=mask)
    if NP >= 2:
        tl.store(p1_ptr + out_off, p1, mask=mask)
    if NP >= 3:
        tl.store(p2_ptr + out_off, p2, mask=mask)
