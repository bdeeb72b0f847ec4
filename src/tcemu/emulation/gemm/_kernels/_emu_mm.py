"""Private Triton kernel: C = A @ B (+ bias) by TF32x3 / BF16x3 / BF16x6 / BF16x9 emulation.

Operands
    A (Z, M, K) FP32, any strides, split into pieces inside the kernel (``split3``);
    B given as pre-split pieces Bt_i (Z or broadcast, N, K), K contiguous: an nn.Linear weight
    (N, K) already has this layout, and it is the K-major B that TF32 ``wgmma`` needs;
    bias (N,) FP32 or absent; C (Z, M, N) FP32, any strides.

Products (``MethodSpec.products``; a_i b_j carries the scale 2^-s(i+j), level i+j)
    tf32x3, bf16x3: L1 = a1 b0 + a0 b1,                 L0 = a0 b0
    bf16x6:         L2 = a1 b1 + a2 b0 + a0 b2,         L1, L0
    bf16x9:         L4 = a2 b2, L3 = a2 b1 + a1 b2,     L2, L1, L0

Accumulation (MODE)
    0 "tile": per K-tile, the correction levels are summed on the Tensor Core from zero, smallest
      first; between levels the tile is scaled by 2^-s in registers with non-finite values set to
      0; it is then the C operand of the tile's a0 b0 product, and the tile result is added to
      the FP32 register accumulator ``acc`` outside the Tensor Core (round to nearest).
    2, 3: modes 0, 1 with the FP32 add of each K-tile's result deferred to the next iteration, after
      that iteration's MMAs are issued (one more register tile; same arithmetic, same result).
    1 "run": each correction level is accumulated on the Tensor Core over all of K (its own
      running accumulator: its truncation error is 2^-s smaller than the result's); only a0 b0 is
      summed per K-tile from zero and added to ``acc``; the levels are combined once at the end,
      as in the reference (NaN/Inf in a correction level -> 0). Fewer FP32 operations per tile,
      one more register tile per correction level.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._split import split3, split3_fast


# FMT: 0 TF32 pieces in fp32 registers, 1 BF16 pieces. FMT 2 = BF16 pieces under TRITON_INTERPRET=1, whose
# NumPy dot multiplies bf16 as raw uint16 (Triton 3.9): there the exact pieces are widened to fp32 first.


@triton.jit
def _mma0(a, b, FMT: tl.constexpr):
    """a @ b on the Tensor Core from a zero accumulator."""
    if FMT == 0:
        return tl.dot(a, b, input_precision="tf32")
    elif FMT == 1:
        return tl.dot(a, b)
    else:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")


@triton.jit
def _mma(a, b, c, FMT: tl.constexpr):
    """c + a @ b on the Tensor Core (c is the MMA's C operand)."""
    if FMT == 0:
        return tl.dot(a, b, c, input_precision="tf32")
    elif FMT == 1:
        return tl.dot(a, b, c)
    else:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), c, input_precision="ieee")


@triton.jit
def _down(c, DOWN: tl.constexpr):
    """c * 2^-s, with Inf/NaN set to 0 (correction levels only)."""
    c = c * DOWN
    return tl.where(tl.abs(c) < float("inf"), c, 0.0)


@triton.jit
def _emu_mm_kernel(
    # pointers
    a_ptr, b0_ptr, b1_ptr, b2_ptr, bias_ptr, c_ptr,
    # sizes
    M, N, K,
    # strides: A (z, m, k), Bt pieces (z, n, k), C (z, m, n)
    stride_az, stride_am, stride_ak,
    stride_bz, stride_bn, stride_bk,
    stride_cz, stride_cm, stride_cn,
    # CONCAT layout: b1_ptr is the level-1 operand (z, n, 2K) and b2_ptr the level-2 one (z, n, 4K), K-interleaved
    stride_b1z, stride_b1n, stride_b2z, stride_b2n,
    # method
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, METHOD: tl.constexpr, MODE: tl.constexpr,
    DOT_FMT: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
    # tiling
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
    # variants: one MMA per level (see CONCAT below); a cheap non-spec split (diagnostic)
    CONCAT: tl.constexpr, FAST_SPLIT: tl.constexpr,
):
    DOWN: tl.constexpr = 2.0 ** (-SHIFT)
    F: tl.constexpr = DOT_FMT  # operand handling of _mma (see above)
    # ---- tile of C owned by this program (grouped order for L2 reuse of B) ----
    pid = tl.program_id(0)
    z = tl.program_id(1).to(tl.int64)
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    group_size = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % width) % group_size)
    pid_n = (pid % width) // group_size

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    # rows/cols past the edge read a valid row (modulo) and are masked at the store
    rows = (offs_m % M).to(tl.int64)
    cols = (offs_n % N).to(tl.int64)
    a_ptrs = a_ptr + z * stride_az + rows[:, None] * stride_am + offs_k[None, :] * stride_ak  # (BM, BK)
    b_off = z * stride_bz + cols[None, :] * stride_bn + offs_k[:, None] * stride_bk  # (BK, BN), K-major
    b0_ptrs = b0_ptr + b_off
    if CONCAT:
        # one MMA per level: A' = pieces interleaved along K (in registers), B' pre-interleaved in memory
        offs_k2 = tl.arange(0, 2 * BK)
        b1_ptrs = b1_ptr + z * stride_b1z + cols[None, :] * stride_b1n + offs_k2[:, None]  # (2BK, BN)
        if NP == 3:
            offs_k4 = tl.arange(0, 4 * BK)
            b2_ptrs = b2_ptr + z * stride_b2z + cols[None, :] * stride_b2n + offs_k4[:, None]  # (4BK, BN)
        else:
            b2_ptrs = b1_ptrs
    else:
        b1_ptrs = b1_ptr + b_off
        b2_ptrs = b2_ptr + b_off

    RUN: tl.constexpr = (MODE % 2) == 1  # modes 1, 3: running correction accumulators
    DEFER: tl.constexpr = MODE >= 2  # modes 2, 3: add the previous K-tile's result while this one's MMAs run
    acc = tl.zeros((BM, BN), dtype=tl.float32)  # FP32 register accumulator, round to nearest
    if RUN:
        c1 = tl.zeros((BM, BN), dtype=tl.float32)  # running level-1 accumulator on the Tensor Core
        if NP == 3:
            c2 = tl.zeros((BM, BN), dtype=tl.float32)  # running level >= 2 accumulator
    if DEFER:
        t_prev = tl.zeros((BM, BN), dtype=tl.float32)

    # ---- main loop over K-tiles ----
    for kt in range(0, tl.cdiv(K, BK)):
        if CONCAT:
            if EVEN_K:
                a = tl.load(a_ptrs)
                b0 = tl.load(b0_ptrs)
                b1 = tl.load(b1_ptrs)
                if NP >= 3:
                    b2 = tl.load(b2_ptrs)
            else:
                k_left = K - kt * BK
                a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
                b0 = tl.load(b0_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
                b1 = tl.load(b1_ptrs, mask=offs_k2[:, None] < 2 * k_left, other=0.0)
                if NP >= 3:
                    b2 = tl.load(b2_ptrs, mask=offs_k4[:, None] < 4 * k_left, other=0.0)
        elif EVEN_K:
            a = tl.load(a_ptrs)
            b0 = tl.load(b0_ptrs)
            if NP >= 2:
                b1 = tl.load(b1_ptrs)
            if NP >= 3:
                b2 = tl.load(b2_ptrs)
        else:
            k_left = K - kt * BK
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b0 = tl.load(b0_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            if NP >= 2:
                b1 = tl.load(b1_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            if NP >= 3:
                b2 = tl.load(b2_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        # split A in registers (bit for bit as split())
        if FAST_SPLIT:
            a0, a1, a2 = split3_fast(a, FMT, NP, SHIFT)
        else:
            a0, a1, a2 = split3(a, FMT, NP, SHIFT)

        if CONCAT:
            # -- tile mode, one MMA per level. Column 2k+j of A1 is (a1, a0)[j] at k; row 2k+j of B1
            #    is (b0, b1)[j]: level 1 = a1 b0 + a0 b1. Column 4k+j of A2 is (a1, a0, a2, 0)[j], B2 rows
            #    (b1, b2, b0, 0)[j]: level 2 = a1 b1 + a0 b2 + a2 b0 (a zero quarter, 7/6 of the MMA work).
            tl.static_assert(METHOD != 3, "CONCAT is implemented for tf32x3, bf16x3 and bf16x6")
            A1 = tl.reshape(tl.join(a1, a0), (BM, 2 * BK))
            if NP == 3:
                A2 = tl.reshape(tl.join(tl.join(a1, a2), tl.join(a0, tl.zeros_like(a0))), (BM, 4 * BK))
                t = _down(_mma0(A2, b2, F), DOWN)                                 # L2
                t = _down(_mma(A1, b1, t, F), DOWN)                                # L1
            else:
                t = _down(_mma0(A1, b1, F), DOWN)                                  # L1
            t = _mma(a0, b0, t, F)                                                 # L0
        elif not RUN:
            # -- tile mode: corrections from zero, scaled into the C operand of a0 b0 --
            if METHOD == 3:  # bf16x9
                t = _down(_mma0(a2, b2, F), DOWN)                           # L4
                t = _down(_mma(a1, b2, _mma(a2, b1, t, F), F), DOWN)       # L3
                t = _mma(a2, b0, _mma(a1, b1, t, F), F)                    # L2
                t = _down(_mma(a0, b2, t, F), DOWN)
                t = _down(_mma(a0, b1, _mma(a1, b0, t, F), F), DOWN)       # L1
            elif METHOD == 2:  # bf16x6
                t = _mma(a2, b0, _mma0(a1, b1, F), F)                      # L2
                t = _down(_mma(a0, b2, t, F), DOWN)
                t = _down(_mma(a0, b1, _mma(a1, b0, t, F), F), DOWN)       # L1
            else:  # tf32x3, bf16x3
                t = _down(_mma(a0, b1, _mma0(a1, b0, F), F), DOWN)         # L1
            t = _mma(a0, b0, t, F)                                           # L0 last
        else:
            # -- run mode: corrections on running TC accumulators, a0 b0 per tile --
            tl.static_assert(METHOD != 3, "run mode is not implemented for bf16x9 (levels 3 and 4)")
            if NP == 3:
                c2 = _mma(a1, b1, c2, F)
                c2 = _mma(a2, b0, c2, F)
                c2 = _mma(a0, b2, c2, F)
            c1 = _mma(a1, b0, c1, F)
            c1 = _mma(a0, b1, c1, F)
            t = _mma0(a0, b0, F)
        if DEFER:
            acc += t_prev
            t_prev = t
        else:
            acc += t

        a_ptrs += BK * stride_ak
        b0_ptrs += BK * stride_bk
        if CONCAT:
            b1_ptrs += 2 * BK
            b2_ptrs += 4 * BK
        else:
            b1_ptrs += BK * stride_bk
            b2_ptrs += BK * stride_bk

    if DEFER:
        acc += t_prev
    if RUN:
        if NP == 3:
            c1 = tl.where(tl.abs(c1) < float("inf"), c1, 0.0) + _down(c2, DOWN)
        acc += _down(c1, DOWN)

    # ---- epilogue: bias, store ----
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols)
        acc += bias[None, :]
    c_ptrs = c_ptr + z * stride_cz + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
