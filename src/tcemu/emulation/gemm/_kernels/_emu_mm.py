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

The high level L0 = a0 b0 is always summed per K-tile on the Tensor Core from zero and added to
the FP32 register accumulator ``acc`` outside it (round to nearest): the Tensor Core truncates its
accumulator input, so a running L0 accumulator inside it loses accuracy linearly in K
(docs/numerics.md, "What Tensor Cores do", items 3 and 8). Triton rewrites ``acc + dot(a, b, 0)``
into ``dot(a, b, acc)`` (CombineDotAddFPattern); a nonzero ``max_num_imprecise_acc``, which only fp8 dots
read, blocks that.

Correction levels (MODE)
    0 "tile": per K-tile, the correction levels are summed on the Tensor Core from zero, smallest
      first; between levels the tile is scaled by 2^-s in registers with non-finite values set to
      0, and it is the C operand of the tile's a0 b0 product. Two register tiles; per output
      element and K-tile 3 FP32 operations per correction level plus the add.
    1 "run": each correction level has its own running accumulator on the Tensor Core over all
      of K, from zero, as in the spec (its truncation error is 2^-s below the result's); the levels
      are combined once at the end (non-finite -> 0, scale 2^-s, smallest first). One FP32 add per
      element and K-tile; one register tile more per correction level.
    4 "hybrid" (three-piece methods): level 2 running as in mode 1, level 1 per tile as in mode 0.

Range check (RANGE_CHECK): the epilogue flags, in ``flag_ptr`` (one int8 per row of C, zeroed by the
launcher), every row with an element whose result or level is not finite: an Inf/NaN input or an overflow.
With the check, non-finite correction levels are not set to 0 but carried on: Inf and NaN stay non-finite
through power-of-two scaling, the MMA's C operand and FP32 addition, so a non-finite result marks exactly the
elements with a non-finite level or result, and one test of the result replaces a test of every level. Only
1 is ever stored, masked, so tiles of one row do not race. Those elements themselves are stored as the NaN
``RANGE_MARK_BITS`` (a payload no arithmetic produces); the range fix-up (``_range_fixup.py``) computes them
again. Every element with a finite result has the bits it has without the check (its levels were finite, so
the zeroing had nothing to do).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._split import split3, split3_fast, widen_bf16

#: Arguments not specialised by Triton: the row count M of A and C changes with the data (an MD step's edge
#: count changes every step), and Triton would otherwise compile one variant per M's divisibility by 16, some in
#: the middle of a run (``benchmarks/md_run.py``, ``triton_variants_timed``). M only bounds masks and stores.
ROW_COUNTS = ("M",)

# DOT_FMT: 0 TF32 pieces in fp32 registers, 1 BF16 pieces. 2 = BF16 pieces under TRITON_INTERPRET=1, whose
# NumPy dot multiplies bf16 as raw uint16 (Triton 3.9): there the exact pieces are widened to fp32 first (by
# their bits: the interpreter's own conversion flushes subnormals).


@triton.jit
def _mma0(a, b, FMT: tl.constexpr):
    """a @ b on the Tensor Core from a zero accumulator."""
    if FMT == 0:
        return tl.dot(a, b, input_precision="tf32")
    elif FMT == 1:
        return tl.dot(a, b)
    else:
        return tl.dot(widen_bf16(a), widen_bf16(b), input_precision="ieee")


@triton.jit
def _mma0_keep(a, b, FMT: tl.constexpr):
    """a @ b from zero, never merged into a following FP32 add (see the module docstring)."""
    if FMT == 0:
        return tl.dot(a, b, input_precision="tf32", max_num_imprecise_acc=1)
    elif FMT == 1:
        return tl.dot(a, b, max_num_imprecise_acc=1)
    else:
        return tl.dot(widen_bf16(a), widen_bf16(b), input_precision="ieee", max_num_imprecise_acc=1)


@triton.jit
def _mma(a, b, c, FMT: tl.constexpr):
    """c + a @ b on the Tensor Core (c is the MMA's C operand)."""
    if FMT == 0:
        return tl.dot(a, b, c, input_precision="tf32")
    elif FMT == 1:
        return tl.dot(a, b, c)
    else:
        return tl.dot(widen_bf16(a), widen_bf16(b), c, input_precision="ieee")


@triton.jit
def _fz(c):
    """Non-finite values (Inf, NaN) -> 0 (correction levels only)."""
    return tl.where(tl.abs(c) < float("inf"), c, 0.0)


@triton.jit
def _scale_tile_level(c, DOWN: tl.constexpr, CHECK: tl.constexpr):
    """A level tile scaled by 2^-s: Inf/NaN set to 0, or with CHECK carried on into the result, where the range
    check finds them (module docstring)."""
    if CHECK:
        return c * DOWN
    else:
        return _fz(c * DOWN)


@triton.jit
def _scale_running_level(c, SCALE: tl.constexpr, CHECK: tl.constexpr):
    """A running level times SCALE (a power of two) as it joins the result: Inf/NaN set to 0, or with CHECK
    carried on. A select stays between the multiply and the add either way, so ptxas contracts neither into an
    FFMA: a finite level gives the same bits with and without the check. Also called by the Gluon kernels."""
    if CHECK:
        return tl.where(tl.abs(c) < float("inf"), c * SCALE, c)
    else:
        return _fz(c) * SCALE


@triton.jit
def _finite(x):
    """1 where x is finite, else 0 (int32)."""
    return tl.where(tl.abs(x) < float("inf"), 1, 0)


#: the bits of the NaN the GEMM kernels store where the range check found a non-finite level or result: a quiet
#: NaN whose payload arithmetic never produces (GPUs return the canonical 0x7FFFFFFF), read by the fix-up
RANGE_MARK_BITS = 0x7FF0DEAD
RANGE_MARK = tl.constexpr(RANGE_MARK_BITS)


@triton.jit
def mark_unfinished(x, ok):
    """x where ``ok`` (int32) is 1, else the NaN ``RANGE_MARK_BITS``. Also called by the Gluon kernels."""
    return tl.where(ok != 0, x, (x.to(tl.int32, bitcast=True) * 0 + RANGE_MARK).to(tl.float32, bitcast=True))


@triton.jit
def flag_rows(row_ok, flag_ptr, row0, offs, M):
    """Store 1 at ``flag_ptr[row0 + offs]`` for the rows (``offs < M``) whose ``row_ok`` is 0 (the Gluon kernels'
    ``_flag_tile_rows`` does the same)."""
    tl.store(flag_ptr + row0 + offs, (row_ok * 0 + 1).to(tl.int8), mask=(offs < M) & (row_ok == 0))


@triton.jit
def grouped_tile(pid, M, N, BM: tl.constexpr, BN: tl.constexpr, GROUP_M: tl.constexpr):
    """(row, column) tile of C for linear tile index ``pid``: GROUP_M row tiles per column sweep, so that
    neighbouring programs share B's tiles in L2. Also called by the Gluon kernel."""
    num_m = tl.cdiv(M, BM)
    num_n = tl.cdiv(N, BN)
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    group_size = tl.minimum(num_m - first_m, GROUP_M)
    return first_m + ((pid % width) % group_size), (pid % width) // group_size


@triton.jit(do_not_specialize=ROW_COUNTS)
def _emu_mm_kernel(
    # pointers (a1_ptr, a2_ptr: A's pieces 1 and 2 when A_PRESPLIT, then a_ptr holds piece 0); flag_ptr: one
    # int8 per row of C (Z*M), zeroed, for the range check
    a_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, bias_ptr, c_ptr, flag_ptr,
    # sizes
    M, N, K,
    # strides: A (z, m, k), Bt pieces (z, n, k), C (z, m, n)
    stride_az, stride_am, stride_ak,
    stride_bz, stride_bn, stride_bk,
    stride_cz, stride_cm, stride_cn,
    # method
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, METHOD: tl.constexpr, MODE: tl.constexpr,
    DOT_FMT: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
    # tiling
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
    # a cheap split that is NOT the spec (FAST_SPLIT, diagnostic: measures the exact split's cost)
    FAST_SPLIT: tl.constexpr,
    # A given as pieces split beforehand (same strides each): the MMAs then read both operands from
    # shared memory and the loop holds no split work; L0_FIRST issues the L0 tile's MMA before the
    # running correction levels' (mode 1), so that its wait can overlap them
    A_PRESPLIT: tl.constexpr = False, L0_FIRST: tl.constexpr = False,
    # PERSISTENT: a fixed grid (about one program per SM, per batch entry) loops over the tiles of C;
    # the tile loop and the K loop are flattened into one, so that the next tile's loads are issued
    # during this tile's epilogue (short K: few K-tiles per output tile)
    PERSISTENT: tl.constexpr = False,
    # RANGE_CHECK: flag the rows with a non-finite level or result (False: DIAGNOSTIC, to time the check)
    RANGE_CHECK: tl.constexpr = True,
):
    num_tiles = tl.cdiv(M, BM) * tl.cdiv(N, BN)
    if PERSISTENT:
        for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), flatten=True):
            _emu_mm_tile(
                a_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, bias_ptr, c_ptr, flag_ptr, M, N, K,
                stride_az, stride_am, stride_ak, stride_bz, stride_bn, stride_bk, stride_cz, stride_cm, stride_cn,
                tile, tl.program_id(1).to(tl.int64),
                FMT, NP, SHIFT, METHOD, MODE, DOT_FMT, HAS_BIAS, EVEN_K, BM, BN, BK, GROUP_M,
                FAST_SPLIT, A_PRESPLIT, L0_FIRST, RANGE_CHECK,
            )
    else:
        _emu_mm_tile(
            a_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, bias_ptr, c_ptr, flag_ptr, M, N, K,
            stride_az, stride_am, stride_ak, stride_bz, stride_bn, stride_bk, stride_cz, stride_cm, stride_cn,
            tl.program_id(0), tl.program_id(1).to(tl.int64),
            FMT, NP, SHIFT, METHOD, MODE, DOT_FMT, HAS_BIAS, EVEN_K, BM, BN, BK, GROUP_M,
            FAST_SPLIT, A_PRESPLIT, L0_FIRST, RANGE_CHECK,
        )


@triton.jit
def _emu_mm_tile(
    a_ptr, a1_ptr, a2_ptr, b0_ptr, b1_ptr, b2_ptr, bias_ptr, c_ptr, flag_ptr,
    M, N, K,
    stride_az, stride_am, stride_ak,
    stride_bz, stride_bn, stride_bk,
    stride_cz, stride_cm, stride_cn,
    pid, z,
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, METHOD: tl.constexpr, MODE: tl.constexpr,
    DOT_FMT: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
    FAST_SPLIT: tl.constexpr,
    A_PRESPLIT: tl.constexpr, L0_FIRST: tl.constexpr, RANGE_CHECK: tl.constexpr,
):
    """One BM x BN tile of C (linear tile index ``pid``, batch ``z``): the K loop and the epilogue."""
    DOWN: tl.constexpr = 2.0 ** (-SHIFT)
    F: tl.constexpr = DOT_FMT  # operand handling of _mma (see above)
    RUN1: tl.constexpr = MODE == 1  # level 1 on a running accumulator
    RUN2: tl.constexpr = (MODE == 1 or MODE == 4) and NP == 3  # level 2 on a running accumulator
    tl.static_assert(METHOD != 3 or MODE == 0, "bf16x9 has the tile mode only")
    tl.static_assert(MODE == 0 or MODE == 1 or MODE == 4, "MODE is 0, 1 or 4")

    # ---- tile of C owned by this program (grouped order for L2 reuse of B) ----
    pid_m, pid_n = grouped_tile(pid, M, N, BM, BN, GROUP_M)

    offs_m = pid_m * BM + tl.arange(0, BM)
    offs_n = pid_n * BN + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    # rows/cols past the edge read a valid row (modulo) and are masked at the store
    rows = (offs_m % M).to(tl.int64)
    cols = (offs_n % N).to(tl.int64)
    a_off = z * stride_az + rows[:, None] * stride_am + offs_k[None, :] * stride_ak  # (BM, BK)
    a_ptrs = a_ptr + a_off
    a1_ptrs = a1_ptr + a_off
    a2_ptrs = a2_ptr + a_off
    b_off = z * stride_bz + cols[None, :] * stride_bn + offs_k[:, None] * stride_bk  # (BK, BN), K-major
    b0_ptrs = b0_ptr + b_off
    b1_ptrs = b1_ptr + b_off
    b2_ptrs = b2_ptr + b_off

    acc = tl.zeros((BM, BN), dtype=tl.float32)  # FP32 register accumulator, round to nearest
    if RUN1:
        c1 = tl.zeros((BM, BN), dtype=tl.float32)  # running level-1 accumulator on the Tensor Core
    if RUN2:
        c2 = tl.zeros((BM, BN), dtype=tl.float32)  # running level-2 accumulator on the Tensor Core

    # ---- main loop over K-tiles ----
    for kt in range(0, tl.cdiv(K, BK)):
        if A_PRESPLIT:
            if EVEN_K:
                a0 = tl.load(a_ptrs)
                a1 = a0
                a2 = a0
                if NP >= 2:
                    a1 = tl.load(a1_ptrs)
                if NP >= 3:
                    a2 = tl.load(a2_ptrs)
            else:
                a_mask = offs_k[None, :] < K - kt * BK
                a0 = tl.load(a_ptrs, mask=a_mask, other=0.0)
                a1 = a0
                a2 = a0
                if NP >= 2:
                    a1 = tl.load(a1_ptrs, mask=a_mask, other=0.0)
                if NP >= 3:
                    a2 = tl.load(a2_ptrs, mask=a_mask, other=0.0)
        if EVEN_K:
            if not A_PRESPLIT:
                a = tl.load(a_ptrs)
            b0 = tl.load(b0_ptrs)
            if NP >= 2:
                b1 = tl.load(b1_ptrs)
            if NP >= 3:
                b2 = tl.load(b2_ptrs)
        else:
            k_left = K - kt * BK
            if not A_PRESPLIT:
                a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b0 = tl.load(b0_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            if NP >= 2:
                b1 = tl.load(b1_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
            if NP >= 3:
                b2 = tl.load(b2_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        # split A in registers (bit for bit as split())
        if not A_PRESPLIT:
            if FAST_SPLIT:
                a0, a1, a2 = split3_fast(a, FMT, NP, SHIFT)
            else:
                a0, a1, a2 = split3(a, FMT, NP, SHIFT)
        if L0_FIRST and RUN1:
            t = _mma0_keep(a0, b0, F)                                      # L0 tile from zero, issued first

        if METHOD == 3:  # bf16x9, tile mode: L4, L3, L2, L1 from zero, each scaled into the next
            t = _scale_tile_level(_mma0(a2, b2, F), DOWN, RANGE_CHECK)                        # L4
            t = _scale_tile_level(_mma(a1, b2, _mma(a2, b1, t, F), F), DOWN, RANGE_CHECK)    # L3
            t = _mma(a2, b0, _mma(a1, b1, t, F), F)                                         # L2
            t = _scale_tile_level(_mma(a0, b2, t, F), DOWN, RANGE_CHECK)
            t = _scale_tile_level(_mma(a0, b1, _mma(a1, b0, t, F), F), DOWN, RANGE_CHECK)    # L1
            t = _mma(a0, b0, t, F)                                                          # L0 last
        else:
            if NP == 3:
                if RUN2:
                    c2 = _mma(a0, b2, _mma(a2, b0, _mma(a1, b1, c2, F), F), F)   # L2, running
                else:
                    t = _scale_tile_level(_mma(a0, b2, _mma(a2, b0, _mma0(a1, b1, F), F), F), DOWN,
                                          RANGE_CHECK)                                 # L2 tile
            if RUN1:
                c1 = _mma(a0, b1, _mma(a1, b0, c1, F), F)                 # L1, running
                if not L0_FIRST:
                    t = _mma0_keep(a0, b0, F)                              # L0 tile from zero
            else:
                if NP == 3 and not RUN2:
                    t = _scale_tile_level(_mma(a0, b1, _mma(a1, b0, t, F), F), DOWN, RANGE_CHECK)  # L1 onto L2
                else:
                    t = _scale_tile_level(_mma(a0, b1, _mma0(a1, b0, F), F), DOWN, RANGE_CHECK)    # L1 tile
                t = _mma(a0, b0, t, F)                                     # L0 last
        acc += t  # outside the Tensor Core, round to nearest

        a_ptrs += BK * stride_ak
        a1_ptrs += BK * stride_ak
        a2_ptrs += BK * stride_ak
        b0_ptrs += BK * stride_bk
        b1_ptrs += BK * stride_bk
        b2_ptrs += BK * stride_bk

    # ---- combine the running levels (smallest first), as the reference ----
    if RUN1:
        if RUN2:
            corr = (c1 if RANGE_CHECK else _fz(c1)) + _scale_running_level(c2, DOWN, RANGE_CHECK)
            acc += corr * DOWN  # an FADD result times 2^-s plus acc: one FFMA
        else:
            acc += _scale_running_level(c1, DOWN, RANGE_CHECK)
    elif RUN2:
        acc += _scale_running_level(c2, DOWN * DOWN, RANGE_CHECK)

    # ---- range check: flag the rows with a non-finite result (a non-finite level made it so) ----
    if RANGE_CHECK:
        ok = _finite(acc)
        flag_rows(tl.min(ok, axis=1), flag_ptr, z * M, offs_m, M)

    # ---- epilogue: bias, store (the elements the range check found, marked for the fix-up) ----
    if HAS_BIAS:
        bias = tl.load(bias_ptr + cols)
        acc += bias[None, :]
    if RANGE_CHECK:
        acc = mark_unfinished(acc, ok)
    c_ptrs = c_ptr + z * stride_cz + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
