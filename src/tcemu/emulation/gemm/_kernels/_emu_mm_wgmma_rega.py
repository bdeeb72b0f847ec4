"""Private Gluon kernel (Hopper, sm_90): C = A @ B (+ bias) with A's pieces formed in registers and fed to
``wgmma`` from registers ("register-A"), B's pieces split beforehand and loaded by TMA.

The products, their order and the levels are those of ``_emu_mm_wgmma.py`` (mode 1), so the bits are the
same: per K-tile the L0 tile a0 b0 is summed on the Tensor Core from zero and added to the FP32 register
accumulator, the correction levels run on their own Tensor Core accumulators over all of K and are combined
once at the end. What differs is where A's pieces live: A's FP32 tile arrives by TMA in shared memory, each
thread loads its share straight into the ``wgmma`` A-operand layout, splits it there (``_split.split3``, bit
for bit as :func:`~tcemu.emulation.split.split`) and the MMAs read the pieces from registers: no piece of A in
global or shared memory, no split pass, no splitter warps.

``wgmma`` reads register operands asynchronously: the registers of a K-tile's pieces must not be reused before
the MMAs that read them are done. The correction MMAs of K-tile kt are still in flight when K-tile kt+1 is
split, so kt's pieces are kept alive up to the wait of kt+1 (they are the ``deps`` of that wait), and ptxas
cannot give their registers to kt+1's pieces.
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, warpgroup_mma_wait

from ._emu_mm import ROW_COUNTS, grouped_tile
from ._emu_mm_wgmma import (
    _accumulators,
    _combine_levels,
    _cta_barrier,
    _flag_tile_rows,
    _issue_k_tile_mmas,
    _issue_loads,
    _mma_layout,
    _store_tile,
)
from ._split import split3


@gluon.constexpr_function
def _a_operand_layout(mma, dtype):
    """Registers of A's pieces: the ``wgmma`` A operand of accumulator layout ``mma`` (32-bit elements one per
    register, 16-bit ones two)."""
    return gl.DotOperandLayout(operand_index=0, parent=mma, k_width=32 // dtype.primitive_bitwidth)


@gluon.jit
def _k_tile(kt, n_k, row0, off_n, a_desc, b0_desc, b1_desc, b2_desc, a_s, b0s, b1s, b2s, ready,
            t, c1, c2, acc, q0, q1, q2,
            NP: gl.constexpr, SHIFT: gl.constexpr, TF32: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
            aop: gl.constexpr):
    """K-tile ``kt``: A's FP32 tile from shared memory into the A-operand registers, split there, the L0 tile's
    MMA from zero and the correction MMAs on their running accumulators; then the wait for all but this
    K-tile's correction MMAs, with the previous K-tile's pieces ``q0..q2`` as its ``deps`` (alive until their
    MMAs are done), and the L0 tile added in FP32; then slot (kt - 1) % STAGES refilled with K-tile
    kt + STAGES - 1. Returns (t, c1, c2, acc, this K-tile's pieces)."""
    LATER: gl.constexpr = 5 if NP == 3 else 2  # MMAs issued after the L0 tile
    s = kt % STAGES
    mbarrier.wait(ready.index(s), (kt // STAGES) & 1)
    p0, p1, p2 = split3(a_s.index(s).load(aop), 0 if TF32 else 1, NP, SHIFT)
    t_tok, c1, c2 = _issue_k_tile_mmas(p0, p1, p2, b0s.index(s).permute((1, 0)), b1s.index(s).permute((1, 0)),
                                       b2s.index(s).permute((1, 0)), t, c1, c2, NP)
    t, q0, q1, q2 = warpgroup_mma_wait(num_outstanding=LATER, deps=(t_tok, q0, q1, q2))
    acc += t
    # every warp has read its share of slot (kt - 1) % STAGES and K-tile kt-1's MMAs are done
    _cta_barrier()
    _issue_loads(kt + STAGES - 1, n_k, row0, off_n, a_desc, a_desc, a_desc, b0_desc, b1_desc, b2_desc, a_s, a_s,
                 a_s, b0s, b1s, b2s, ready, NP, BK, STAGES, True)  # the "g" kernel's loads on FP32 A
    return t, c1, c2, acc, p0, p1, p2


@gluon.jit(do_not_specialize=ROW_COUNTS)
def _emu_mm_wgmma_rega_kernel(
    # A: FP32 (Z*M, K) with (BM, BK) blocks; B's pieces (N, K) with (BN, BK) blocks (the third a placeholder
    # with NP == 2)
    a_desc, b0_desc, b1_desc, b2_desc,
    bias_ptr, c_ptr, flag_ptr,
    M, N, K,
    stride_cz, stride_cm, stride_cn,
    NP: gl.constexpr, SHIFT: gl.constexpr, HAS_BIAS: gl.constexpr, TF32: gl.constexpr,
    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    RANGE_CHECK: gl.constexpr, num_warps: gl.constexpr,
):
    dtype: gl.constexpr = b0_desc.dtype
    z = gl.program_id(1)
    pid_m, pid_n = grouped_tile(gl.program_id(0), M, N, BM, BN, GROUP_M)
    off_m = pid_m * BM
    off_n = pid_n * BN
    row0 = z * M + off_m

    a_s = gl.allocate_shared_memory(gl.float32, [STAGES, BM, BK], a_desc.layout)
    b0s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    b1s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    if NP == 3:
        b2s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    else:
        b2s = b0s
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)

    mma: gl.constexpr = _mma_layout(num_warps, BN, dtype, BM)
    aop: gl.constexpr = _a_operand_layout(mma, dtype)
    acc, t, c1, c2 = _accumulators(BM, BN, NP, mma)
    # the previous K-tile's pieces (kept alive while its correction MMAs run); zeros before the first
    q0 = gl.zeros([BM, BK], dtype, layout=aop)
    q1 = q0
    q2 = q0

    n_k = gl.cdiv(K, BK)
    for i in gl.static_range(STAGES - 1):
        _issue_loads(i, n_k, row0, off_n, a_desc, a_desc, a_desc, b0_desc, b1_desc, b2_desc, a_s, a_s, a_s,
                     b0s, b1s, b2s, ready, NP, BK, STAGES, True)

    # K-tiles in pairs: the pieces of an even and of an odd K-tile are distinct values, each kept alive up to
    # the next K-tile's wait, so their registers differ and neither is overwritten while MMAs read it
    for kt in range(0, n_k - 1, 2):
        t, c1, c2, acc, e0, e1, e2 = _k_tile(kt, n_k, row0, off_n, a_desc, b0_desc, b1_desc, b2_desc, a_s, b0s,
                                             b1s, b2s, ready, t, c1, c2, acc, q0, q1, q2,
                                             NP, SHIFT, TF32, BK, STAGES, aop)
        t, c1, c2, acc, q0, q1, q2 = _k_tile(kt + 1, n_k, row0, off_n, a_desc, b0_desc, b1_desc, b2_desc, a_s,
                                             b0s, b1s, b2s, ready, t, c1, c2, acc, e0, e1, e2,
                                             NP, SHIFT, TF32, BK, STAGES, aop)
    if n_k % 2 == 1:
        t, c1, c2, acc, q0, q1, q2 = _k_tile(n_k - 1, n_k, row0, off_n, a_desc, b0_desc, b1_desc, b2_desc, a_s,
                                             b0s, b1s, b2s, ready, t, c1, c2, acc, q0, q1, q2,
                                             NP, SHIFT, TF32, BK, STAGES, aop)

    q0, q1, q2 = warpgroup_mma_wait(num_outstanding=0, deps=(q0, q1, q2))
    acc = _combine_levels(acc, c1, c2, NP, SHIFT, RANGE_CHECK)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
    if RANGE_CHECK:
        _flag_tile_rows(acc, flag_ptr, M, z, off_m, BM, mma)
    _store_tile(acc, bias_ptr, c_ptr, M, N, stride_cz, stride_cm, stride_cn, z, off_m, off_n, HAS_BIAS, BM, BN, mma,
                RANGE_CHECK)
