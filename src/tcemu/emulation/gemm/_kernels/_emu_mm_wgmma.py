"""Private Gluon kernel (Hopper, sm_90): C = A @ B (+ bias) by TF32x3 / BF16x3 / BF16x6 from pre-split pieces.

Same products, order and levels as ``_emu_mm.py`` in its mode 1 with A split beforehand (``m1p``), so the
same bits: per K-tile the L0 tile a0 b0 is summed on the Tensor Core from zero and added to the FP32
register accumulator outside it; the correction levels L1 = a1 b0 + a0 b1 (and L2 = a1 b1 + a2 b0 + a0 b2)
run on their own Tensor Core accumulators over all of K and are combined once at the end.

Why Gluon: Triton's ``tl.dot`` waits for every MMA whose result feeds another op, so the chain
a1 b0 -> a0 b1 and the L0 tile wait on each other. Here the waits are explicit: per K-tile the L0 tile is
issued first, then the correction MMAs, and the wait is for the L0 tile only (``wgmma.wait_group`` with the
correction MMAs still outstanding), so that its FP32 add overlaps them; the running accumulators are never
waited for inside the loop. Operands arrive by TMA into a ring of ``STAGES`` shared-memory buffers
(out-of-range rows, columns and K are filled with zeros by the TMA unit).

RANGE_CHECK: the running levels are carried on into the result unzeroed, and the epilogue flags the rows of C
with a non-finite result and marks those elements, as the Triton kernel does (``_emu_mm.py``), for the range
fix-up.

SPLIT_A (opt-in): A arrives as FP32 and the kernel's warps split each tile into shared-memory piece buffers
before its MMAs, bit for bit as ``_split.split3``. Measured slower than splitting beforehand or the Triton
kernel's in-register split (docs/kernels.md, section 5).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

from ._emu_mm import ROW_COUNTS, _fz, _scale_running_level, grouped_tile, mark_unfinished
from ._split import split3

# Names that changed after Triton 3.6 (3.6's first): TMA load into and store from shared memory, CTA-wide barrier
_tma_load = tma.async_load if hasattr(tma, "async_load") else tma.async_copy_global_to_shared
_tma_store = tma.async_store if hasattr(tma, "async_store") else tma.async_copy_shared_to_global
_cta_barrier = getattr(gl, "thread_barrier", None) or gl.barrier


# Float32 operands run as TF32: the compile option default_dot_input_precision, "tf32" by default (Triton
# 3.6's warpgroup_mma does not accept an explicit precision string from Gluon code: it is not unwrapped).


@gluon.jit
def _mma(a, b, c):
    """Asynchronous c + a @ b on the Tensor Core."""
    return warpgroup_mma(a, b, c, is_async=True)


@gluon.jit
def _mma0(a, b, c):
    """Asynchronous a @ b from a zero accumulator (``c`` gives only the registers' type)."""
    return warpgroup_mma(a, b, c, use_acc=False, is_async=True)


@gluon.constexpr_function
def _piece_smem_layout(rows, cols, dtype):
    return gl.NVMMASharedLayout.get_default_for([rows, cols], dtype)


@gluon.constexpr_function
def _split_layout(bk, num_warps):
    """Registers of the in-kernel split: 4 consecutive K elements (16 bytes) per thread, rows across warps."""
    return gl.BlockedLayout([1, 4], [32 // (bk // 4), bk // 4], [num_warps, 1], [1, 0])


@gluon.constexpr_function
def _split_rows_per_pass(bk, num_warps):
    return 32 // (bk // 4) * num_warps


@gluon.jit
def _split_rows(src, d0, d1, d2, NP: gl.constexpr, SHIFT: gl.constexpr, BF16: gl.constexpr,
                layout: gl.constexpr):
    """Split the FP32 rows of shared-memory tile ``src`` into pieces written to ``d0..d2``, with the
    Triton kernels' own ``split3`` (bit for bit as :func:`~tcemu.emulation.split.split`)."""
    p0, p1, p2 = split3(src.load(layout), 1 if BF16 else 0, NP, SHIFT)
    d0.store(p0)
    d1.store(p1)
    if NP == 3:
        d2.store(p2)


@gluon.jit
def _issue_loads(i, n_k, row0, off_n,
                 a0_desc, a1_desc, a2_desc, b0_desc, b1_desc, b2_desc,
                 a0s, a1s, a2s, b0s, b1s, b2s, ready,
                 NP: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, SPLIT_A: gl.constexpr):
    """TMA loads of K-tile ``i`` (all pieces of A and B) into ring slot i % STAGES; none past the last tile."""
    pred = i < n_k
    s = i % STAGES
    bar = ready.index(s)
    k = i * BK
    if SPLIT_A:  # one FP32 tile of A (a0_desc), split in the kernel
        mbarrier.expect(bar, a0_desc.block_type.nbytes + NP * b0_desc.block_type.nbytes, pred=pred)
        _tma_load(a0_desc, [row0, k], bar, a0s.index(s), pred)
    else:
        mbarrier.expect(bar, NP * (a0_desc.block_type.nbytes + b0_desc.block_type.nbytes), pred=pred)
        _tma_load(a0_desc, [row0, k], bar, a0s.index(s), pred)
        _tma_load(a1_desc, [row0, k], bar, a1s.index(s), pred)
        if NP == 3:
            _tma_load(a2_desc, [row0, k], bar, a2s.index(s), pred)
    _tma_load(b0_desc, [off_n, k], bar, b0s.index(s), pred)
    _tma_load(b1_desc, [off_n, k], bar, b1s.index(s), pred)
    if NP == 3:
        _tma_load(b2_desc, [off_n, k], bar, b2s.index(s), pred)


@gluon.constexpr_function
def _mma_layout(num_warps, bn, dtype, bm=None):
    """Registers of the accumulators: the wgmma layout, warps stacked along M, one instruction spans BN; where
    the tile has fewer rows than the warpgroups span (``bm`` < 16 x num_warps), warpgroups side by side along N,
    each instruction spanning its share of BN."""
    k = 256 // dtype.primitive_bitwidth
    if bm is not None and bm < 16 * num_warps:
        wn = num_warps // 4
        return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, wn], instr_shape=[16, bn // wn, k])
    return gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, bn, k])


@gluon.jit
def _accumulators(BM: gl.constexpr, BN: gl.constexpr, NP: gl.constexpr, mma: gl.constexpr):
    """(acc, t, c1, c2): the FP32 register accumulator (round to nearest), the L0 tile of one K-tile, and the
    running correction levels L1 and L2 on the Tensor Core (c2 is c1 with two pieces)."""
    acc = gl.zeros([BM, BN], gl.float32, layout=mma)
    t = gl.zeros([BM, BN], gl.float32, layout=mma)
    c1 = warpgroup_mma_init(gl.zeros([BM, BN], gl.float32, layout=mma))
    if NP == 3:
        c2 = warpgroup_mma_init(gl.zeros([BM, BN], gl.float32, layout=mma))
    else:
        c2 = c1
    return acc, t, c1, c2


@gluon.jit
def _issue_k_tile_mmas(a0, a1, a2, b0, b1, b2, t, c1, c2, NP: gl.constexpr):
    """One K-tile's MMAs on (BM, BK) A pieces (shared memory or registers) and (BK, BN) B pieces in shared memory:
    the L0 tile first, from zero, then the correction levels on their running accumulators. Returns
    (the L0 tile's token, c1, c2); the caller waits."""
    t_tok = _mma0(a0, b0, t)   # L0 tile, from zero
    if NP == 3:
        c2 = _mma(a1, b1, c2)                  # L2, running
        c2 = _mma(a2, b0, c2)
        c2 = _mma(a0, b2, c2)
    c1 = _mma(a1, b0, c1)                      # L1, running
    c1 = _mma(a0, b1, c1)
    return t_tok, c1, c2


@gluon.jit
def _k_tile_mmas(a0, a1, a2, b0, b1, b2, t, c1, c2, NP: gl.constexpr):
    """:func:`_issue_k_tile_mmas`, then the wait for the L0 tile only (``wgmma.wait_group`` with the correction
    MMAs still outstanding). Returns (t, c1, c2)."""
    LATER: gl.constexpr = 5 if NP == 3 else 2  # MMAs issued after the L0 tile
    t_tok, c1, c2 = _issue_k_tile_mmas(a0, a1, a2, b0, b1, b2, t, c1, c2, NP)
    t = warpgroup_mma_wait(num_outstanding=LATER, deps=(t_tok,))
    return t, c1, c2


@gluon.jit
def _combine_levels(acc, c1, c2, NP: gl.constexpr, SHIFT: gl.constexpr, CHECK: gl.constexpr):
    """acc + the running correction levels, combined smallest first as the reference does. Non-finite levels
    are set to 0, or with CHECK carried on into the result, where the range check finds them: Inf and NaN stay
    non-finite through the scaling and the adds (``_emu_mm.py``, "Range check"); ``_scale_running_level``
    keeps the multiply and the add apart as ``_fz`` does, so a finite result has the same bits either way."""
    DOWN: gl.constexpr = 2.0 ** (-SHIFT)
    if NP == 3:
        c1, c2 = warpgroup_mma_wait(num_outstanding=0, deps=(c1, c2))
        if CHECK:
            corr = c1 + _scale_running_level(c2, DOWN, CHECK)
        else:
            corr = _fz(c1) + _fz(c2) * DOWN
        return acc + corr * DOWN
    else:
        c1 = warpgroup_mma_wait(num_outstanding=0, deps=(c1,))
        return acc + _scale_running_level(c1, DOWN, CHECK)


@gluon.jit
def _flag_tile_rows(out, flag_ptr, M, z, off_m, BM: gl.constexpr, mma: gl.constexpr):
    """Range check: flag (store 1 at ``flag_ptr[z M + row]``) the tile's rows where some result ``out`` (before
    the bias) is not finite."""
    row_ok = gl.min((gl.abs(out) < float("inf")).to(gl.int32), axis=1)
    offs_m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, mma))
    gl.store(flag_ptr + z.to(gl.int64) * M + offs_m, (row_ok * 0 + 1).to(gl.int8),
             mask=(offs_m < M) & (row_ok == 0))


@gluon.jit
def _epilogue_values(acc, bias_ptr, N, off_n, HAS_BIAS: gl.constexpr, BN: gl.constexpr, mma: gl.constexpr,
                     CHECK: gl.constexpr):
    """The (rows, BN) tile of C as stored: acc + bias; with CHECK the elements whose result (before the bias) is
    not finite become the range fix-up's mark."""
    if HAS_BIAS:
        offs_n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
        bias = gl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
        out = acc + gl.expand_dims(bias, 0)
    else:
        out = acc
    if CHECK:
        out = mark_unfinished(out, (gl.abs(acc) < float("inf")).to(gl.int32))
    return out


@gluon.jit
def _store_tile(acc, bias_ptr, c_ptr, M, N, stride_cz, stride_cm, stride_cn, z, off_m, off_n,
                HAS_BIAS: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr, mma: gl.constexpr,
                CHECK: gl.constexpr):
    """Epilogue: :func:`_epilogue_values`, masked store of the (BM, BN) tile of C from the registers."""
    out = _epilogue_values(acc, bias_ptr, N, off_n, HAS_BIAS, BN, mma, CHECK)
    offs_m = off_m + gl.arange(0, BM, layout=gl.SliceLayout(1, mma))
    offs_n = off_n + gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    c_ptrs = (c_ptr + z.to(gl.int64) * stride_cz + gl.expand_dims(offs_m.to(gl.int64) * stride_cm, 1)
              + gl.expand_dims(offs_n.to(gl.int64) * stride_cn, 0))
    mask = gl.expand_dims(offs_m < M, 1) & gl.expand_dims(offs_n < N, 0)
    gl.store(c_ptrs, out, mask=mask)


@gluon.jit
def _stage_and_store(x, c_desc, c_smem, row, col):
    """``x`` into the shared-memory staging tile ``c_smem``, then an asynchronous TMA store of it to C at (row,
    col) (the unit clips rows and columns past C's edges), once the previous store has read the tile."""
    tma.store_wait(0)  # (in the threads that issued it) the previous store has read c_smem
    _cta_barrier()
    c_smem.store(x)
    fence_async_shared()  # written by the threads (generic proxy), read by TMA (async proxy)
    _cta_barrier()
    _tma_store(c_desc, [row, col], c_smem)


@gluon.jit
def _store_tile_tma(acc, bias_ptr, c_desc, c_smem, N, row, off_n, HAS_BIAS: gl.constexpr, ROWS: gl.constexpr,
                    BN: gl.constexpr, mma: gl.constexpr, CHECK: gl.constexpr):
    """Epilogue by TMA: :func:`_epilogue_values` of the (ROWS, BN) tile, stored to rows ``row ..`` of C through
    the staging tile ``c_smem`` (``c_desc``'s block: the whole tile, or half its columns, stored in two turns:
    the halves are register subsets of the wgmma layout, so the split moves no data). The warps go on to the
    next tile while the last store runs; after the last tile the caller waits with ``tma.store_wait(0)``."""
    out = _epilogue_values(acc, bias_ptr, N, off_n, HAS_BIAS, BN, mma, CHECK)
    HALF: gl.constexpr = c_desc.block_type.shape[1] < BN
    if HALF:
        lo, hi = out.reshape([ROWS, 2, BN // 2]).permute(0, 2, 1).split()
        _stage_and_store(lo, c_desc, c_smem, row, off_n)
        _stage_and_store(hi, c_desc, c_smem, row, off_n + BN // 2)
    else:
        _stage_and_store(out, c_desc, c_smem, row, off_n)


@gluon.jit(do_not_specialize=ROW_COUNTS)
def _emu_mm_wgmma_kernel(
    # TMA descriptors: A's pieces (Z*M, K) with (BM, BK) blocks, B's pieces (N, K) with (BN, BK) blocks;
    # with NP == 2 the third of each is a placeholder (any of the others)
    a0_desc, a1_desc, a2_desc, b0_desc, b1_desc, b2_desc,
    bias_ptr, c_ptr, flag_ptr,
    M, N, K,
    stride_cz, stride_cm, stride_cn,
    NP: gl.constexpr, SHIFT: gl.constexpr, HAS_BIAS: gl.constexpr, TF32: gl.constexpr,
    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    SPLIT_A: gl.constexpr, RANGE_CHECK: gl.constexpr, num_warps: gl.constexpr,
):
    dtype: gl.constexpr = b0_desc.dtype  # the pieces' dtype (A's descriptor is FP32 with SPLIT_A)

    # ---- tile of C (grouped order for L2 reuse of B), as _emu_mm ----
    z = gl.program_id(1)
    pid_m, pid_n = grouped_tile(gl.program_id(0), M, N, BM, BN, GROUP_M)
    off_m = pid_m * BM
    off_n = pid_n * BN
    row0 = z * M + off_m  # row of the flattened (Z*M, K) pieces of A

    # ---- shared-memory ring and its barriers ----
    # SPLIT_A: the ring holds A's FP32 tiles (a0s); the warps split each into A's pieces in two more buffers
    # (ap0..ap2, double-buffered: the MMAs of K-tile kt-2 are done when K-tile kt is split)
    a0s = gl.allocate_shared_memory(a0_desc.dtype, [STAGES, BM, BK], a0_desc.layout)
    b0s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    b1s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    if NP == 3:
        b2s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    else:
        b2s = b0s
    if SPLIT_A:
        pl: gl.constexpr = _piece_smem_layout(BM, BK, dtype)
        ap0 = gl.allocate_shared_memory(dtype, [2, BM, BK], pl)
        ap1 = gl.allocate_shared_memory(dtype, [2, BM, BK], pl)
        if NP == 3:
            ap2 = gl.allocate_shared_memory(dtype, [2, BM, BK], pl)
        else:
            ap2 = ap0
        a1s = a0s
        a2s = a0s
    else:
        a1s = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a0_desc.layout)
        if NP == 3:
            a2s = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a0_desc.layout)
        else:
            a2s = a0s
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)

    # ---- accumulators: all in the wgmma layout ----
    mma: gl.constexpr = _mma_layout(num_warps, BN, dtype, BM)
    acc, t, c1, c2 = _accumulators(BM, BN, NP, mma)

    n_k = gl.cdiv(K, BK)
    for i in gl.static_range(STAGES - 1):
        _issue_loads(i, n_k, row0, off_n, a0_desc, a1_desc, a2_desc, b0_desc, b1_desc, b2_desc,
                     a0s, a1s, a2s, b0s, b1s, b2s, ready, NP, BK, STAGES, SPLIT_A)

    for kt in range(n_k):
        s = kt % STAGES
        mbarrier.wait(ready.index(s), (kt // STAGES) & 1)
        if SPLIT_A:
            q = kt % 2
            SR: gl.constexpr = _split_rows_per_pass(BK, num_warps)
            for r in gl.static_range(BM // SR):
                _split_rows(a0s.index(s).slice(r * SR, SR), ap0.index(q).slice(r * SR, SR),
                            ap1.index(q).slice(r * SR, SR), ap2.index(q).slice(r * SR, SR),
                            NP, SHIFT, not TF32, _split_layout(BK, num_warps))
            fence_async_shared()  # the pieces, written by the threads, are read by wgmma (async proxy)
            _cta_barrier()
            a0 = ap0.index(q)
            a1 = ap1.index(q)
            a2 = ap2.index(q)
        else:
            a0 = a0s.index(s)
            a1 = a1s.index(s)
            a2 = a2s.index(s)
        # (BK, BN) views of the K-major (BN, BK) tiles of B
        t, c1, c2 = _k_tile_mmas(a0, a1, a2, b0s.index(s).permute((1, 0)), b1s.index(s).permute((1, 0)),
                                 b2s.index(s).permute((1, 0)), t, c1, c2, NP)
        acc += t  # outside the Tensor Core, round to nearest; overlaps the correction MMAs
        # Each warpgroup has finished K-tile kt-1's MMAs (they were issued before this L0 tile); once
        # both have, its ring slot may be refilled with K-tile kt + STAGES - 1.
        _cta_barrier()
        _issue_loads(kt + STAGES - 1, n_k, row0, off_n, a0_desc, a1_desc, a2_desc, b0_desc, b1_desc, b2_desc,
                     a0s, a1s, a2s, b0s, b1s, b2s, ready, NP, BK, STAGES, SPLIT_A)

    acc = _combine_levels(acc, c1, c2, NP, SHIFT, RANGE_CHECK)
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
    if RANGE_CHECK:
        _flag_tile_rows(acc, flag_ptr, M, z, off_m, BM, mma)
    _store_tile(acc, bias_ptr, c_ptr, M, N, stride_cz, stride_cm, stride_cn, z, off_m, off_n, HAS_BIAS, BM, BN, mma,
                RANGE_CHECK)
