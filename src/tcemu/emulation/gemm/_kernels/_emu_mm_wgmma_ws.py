"""Private Gluon kernel (Hopper, sm_90): the wgmma kernel of ``_emu_mm_wgmma.py`` with A split in the kernel
by warps of their own (warp specialisation), so that the split overlaps the MMAs.

Same products, order, waits and final combine as ``_emu_mm_wgmma_kernel`` on pre-split pieces, and A's
pieces bit for bit as ``_split.split3`` (the SPLIT_A code path ``_split_rows``): same bits as the ``pg``
configurations, without the separate memory-bound pass that splits A in global memory first.

Partitions (``gl.warp_specialize``):

* consumer (the default partition, ``num_warps`` = 8: two warpgroups, BM = 128): the MMA loop of
  ``_emu_mm_wgmma_kernel`` on A's and B's pieces in shared memory, then the combine and the epilogue.
  After the wait for K-tile kt's L0 tile (``wgmma.wait_group LATER``) every MMA of K-tile kt-1 is
  complete, so it releases K-tile kt-1's B slot and A-piece slot;
* loader (1 warp): TMA loads of A's FP32 tile and of B's pieces;
* splitter (``SPLIT_WARPS`` warps): A's FP32 tile from shared memory into registers, ``split3``, the pieces
  into shared memory, ``fence_async_shared``, then "pieces ready". For BF16 pieces a checked split: the
  hardware conversion first (two values an instruction), and ``split3`` only on K-tiles holding values outside
  its range; TF32 pieces by ``split3`` itself.

Three rings, each slot with a "ready" and an "empty" mbarrier (count 1; ``mbarrier.arrive`` is one
arrival per call whatever the partition's size: Triton synchronises the partition's warps and one thread
arrives; ``mbarrier.expect`` is the loader's arrival plus the TMA bytes):

* raw ring, ``A_STAGES`` slots: A's FP32 tile (BM, BK); loader -> splitter, which frees the slot once it has
  split the tile (it reads and splits the tile in chunks of rows, 16 values per thread at a time, so that
  few registers suffice), not waiting for the MMAs: the loader runs up to A_STAGES tiles ahead of the split;
* piece ring, ``P_STAGES`` slots: A's pieces (BM, BK) each; splitter -> consumer;
* B ring, ``STAGES`` slots: B's pieces (BN, BK) each; loader -> consumer (as the existing kernel's ring).

Use i of a slot (i = kt // slots) waits for "ready" with phase i & 1 and, for the producer, "empty" with
phase (i & 1) ^ 1 (a fresh mbarrier counts as having completed the phase before its first: the first
pass through the ring does not wait). The loader issues A's tile kt before B's tile kt; as it waits for B's
slot of tile kt (freed once the MMAs of tile kt - STAGES are done) before it issues A's tile kt + 1, A's loads
run at most STAGES tiles ahead of the MMAs, and the split up to P_STAGES - 1 tiles ahead (``emu_mm._ws_stages``
gives three piece slots where shared memory allows: with two, the split of tile kt + 1 can start only once the
MMAs of tile kt - 1 are done, and TF32x3 ran 1.11-1.20x slower).

Deadlock-free for STAGES >= 2, P_STAGES >= 2, A_STAGES >= 1: each wait is for a release by a partition that
is at an earlier K-tile.

Range check (RANGE_CHECK): the consumer's epilogue flags the rows with a non-finite result (a non-finite running
level makes it so) and marks those elements, as ``_emu_mm_wgmma_kernel`` does, for the range fix-up.

TMA_STORE (config suffix ``e``, opt-in): the consumer's epilogue writes each tile into a shared-memory staging tile
(half its columns at a time, ``_store_tile_tma``) and stores it by an asynchronous TMA store, so that the MMA warps
start the next tile while it is written; same bits. Measured no faster (docs/kernels.md, section 5).

Tile loop: each program loops over tiles of C (``program_id(0)``, then every ``num_programs(0)``-th), the
three partitions in the same order, with the ring positions counted over all of the program's K-tiles. With
one program per tile (``gw``) each loops once; with about one program per SM (``tgw``, persistent) the loader
and the splitter run on into the next tile (its first K-tiles) while the consumer combines and stores this
one: the consumer releases a tile's last slots once its final wait has returned, before its epilogue.
"""

from __future__ import annotations

import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from ._emu_mm import ROW_COUNTS, grouped_tile
from ._emu_mm_wgmma import (
    _accumulators,
    _combine_levels,
    _flag_tile_rows,
    _k_tile_mmas,
    _mma_layout,
    _piece_smem_layout,
    _split_layout,
    _split_rows,
    _store_tile,
    _store_tile_tma,
    _tma_load,
)

#: registers (per thread) asked for the loader warp: setmaxnreg's minimum
LOAD_REGS = gl.constexpr(24)
#: FP32 bit patterns (as int32) bounding the BF16 checked split's fast path (round to nearest even): 0x7F7F8000
#: is the first magnitude that rounds past the largest finite BF16 (a tie, to the even Inf), and 0x8001 (just
#: above 2^-134) the smallest that rounds to a nonzero BF16; outside, the exact split's saturation, keep-nonzero
#: or special-value handling is needed
FAST_MAX_BITS_BF16 = gl.constexpr(0x7F7F8000)
FAST_TINY_BF16 = gl.constexpr(0x8001)


@gluon.jit
def _split_rows_bf16_fast(src, d0, d1, d2, NP: gl.constexpr, SHIFT: gl.constexpr, layout: gl.constexpr):
    """BF16x3's or BF16x6's pieces of the FP32 rows of ``src`` by the hardware conversion (``cvt.rn.bf16x2``,
    round to nearest even: two values an instruction), valid where every value is finite with a magnitude 0
    or in [FAST_TINY_BF16, FAST_MAX_BITS_BF16): there ``split3``'s integer rounding needs no saturation or
    keep-nonzero and gives the same bits. The residuals ``(x - hi) 2^SHIFT`` are exact, as in ``split3``.

    Returns (|x|, 2 * bits - 2 as uint32): their maximum (NaN propagated) and unsigned minimum tell the caller
    whether a value is outside the fast range."""
    x = src.load(layout)
    h0 = x.to(gl.bfloat16)
    r1 = (x - h0.to(gl.float32)) * (2.0**SHIFT)
    h1 = r1.to(gl.bfloat16)
    d0.store(h0)
    d1.store(h1)
    if NP == 3:
        d2.store(((r1 - h1.to(gl.float32)) * (2.0**SHIFT)).to(gl.bfloat16))
    return gl.abs(x), (x.to(gl.int32, bitcast=True) * 2 - 2).to(gl.uint32, bitcast=True)


@gluon.constexpr_function
def _split_chunk_rows(bm, bk, warps, vecs):
    """Rows split per step: ``vecs`` vectors of 4 FP32 per thread (4 vectors: 16 values in flight, ILP for
    the integer split at few registers), at most the tile."""
    return min(bm, vecs * (32 // (bk // 4)) * warps)


@gluon.jit
def _tiles(M, N, BM: gl.constexpr, BN: gl.constexpr):
    """Tiles of C per batch entry (the batch is the grid's second axis)."""
    return gl.cdiv(M, BM) * gl.cdiv(N, BN)


@gluon.jit
def _tile_origin(tile, M, N, BM: gl.constexpr, BN: gl.constexpr, GROUP_M: gl.constexpr):
    """(batch entry, first row, first column) of linear tile ``tile`` of C, in grouped order (L2 reuse of B)
    as ``_emu_mm``."""
    pid_m, pid_n = grouped_tile(tile, M, N, BM, BN, GROUP_M)
    return gl.program_id(1), pid_m * BM, pid_n * BN


@gluon.jit
def _ws_loader(a_desc, b0_desc, b1_desc, b2_desc, araw, ap0, ap1, ap2, b0s, b1s, b2s,
               raw_ready, raw_empty, a_ready, a_empty, b_ready, b_empty, M, N, K,
               NP: gl.constexpr, SHIFT: gl.constexpr, TF32: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
               BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, A_STAGES: gl.constexpr,
               P_STAGES: gl.constexpr, SPLIT_WARPS: gl.constexpr):
    """1 warp: TMA loads of A's FP32 tile (raw ring) and of B's pieces (B ring), K-tile after K-tile of each
    of the program's tiles of C."""
    n_k = gl.cdiv(K, BK)
    it = 0  # K-tiles loaded so far, over all of this program's tiles: the rings' position
    for tile in range(gl.program_id(0), _tiles(M, N, BM, BN), gl.num_programs(0)):
        z, off_m, off_n = _tile_origin(tile, M, N, BM, BN, GROUP_M)
        row0 = z * M + off_m  # row of the flattened (Z*M, K) A
        for kt in range(n_k):
            k = kt * BK
            r = it % A_STAGES
            mbarrier.wait(raw_empty.index(r), ((it // A_STAGES) & 1) ^ 1)
            mbarrier.expect(raw_ready.index(r), a_desc.block_type.nbytes)
            _tma_load(a_desc, [row0, k], raw_ready.index(r), araw.index(r))
            s = it % STAGES
            bar = b_ready.index(s)
            mbarrier.wait(b_empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(bar, NP * b0_desc.block_type.nbytes)
            _tma_load(b0_desc, [off_n, k], bar, b0s.index(s))
            _tma_load(b1_desc, [off_n, k], bar, b1s.index(s))
            if NP == 3:
                _tma_load(b2_desc, [off_n, k], bar, b2s.index(s))
            it += 1


@gluon.jit
def _ws_splitter(a_desc, b0_desc, b1_desc, b2_desc, araw, ap0, ap1, ap2, b0s, b1s, b2s,
                 raw_ready, raw_empty, a_ready, a_empty, b_ready, b_empty, M, N, K,
                 NP: gl.constexpr, SHIFT: gl.constexpr, TF32: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                 BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, A_STAGES: gl.constexpr,
                 P_STAGES: gl.constexpr, SPLIT_WARPS: gl.constexpr, SPLIT_VECS: gl.constexpr):
    """SPLIT_WARPS warps: A's FP32 tiles -> their pieces, K-tile ``it`` (counted over all of the program's
    tiles of C) into piece slot it % P_STAGES (as ``_split_rows``), SPLIT_VECS vectors per thread a step.

    BF16 pieces: the fast split of ``_split_rows_bf16_fast`` first, then, only where the tile holds a value
    outside its range (one flag reduced over the partition), the exact split over it."""
    layout: gl.constexpr = _split_layout(BK, SPLIT_WARPS)
    CH: gl.constexpr = _split_chunk_rows(BM, BK, SPLIT_WARPS, SPLIT_VECS)
    n_k = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), _tiles(M, N, BM, BN), gl.num_programs(0)):
        for kt in range(n_k):
            r = it % A_STAGES
            q = it % P_STAGES
            src = araw.index(r)
            mbarrier.wait(raw_ready.index(r), (it // A_STAGES) & 1)
            mbarrier.wait(a_empty.index(q), ((it // P_STAGES) & 1) ^ 1)
            exact = True
            if not TF32:
                big, tiny = _split_rows_bf16_fast(src.slice(0, CH), ap0.index(q).slice(0, CH),
                                                  ap1.index(q).slice(0, CH), ap2.index(q).slice(0, CH), NP, SHIFT,
                                                  layout)
                for c in gl.static_range(1, BM // CH):
                    big_c, tiny_c = _split_rows_bf16_fast(src.slice(c * CH, CH), ap0.index(q).slice(c * CH, CH),
                                                          ap1.index(q).slice(c * CH, CH),
                                                          ap2.index(q).slice(c * CH, CH), NP, SHIFT, layout)
                    big = gl.maximum(big, big_c, propagate_nan=tl.PropagateNan.ALL)
                    tiny = gl.minimum(tiny, tiny_c)
                # |x| as int32 (NaN, positive, above Inf); 2 * bits - 2 below 2 * tiny - 2 only for a nonzero
                # magnitude below tiny (zero wraps to the top)
                row_big = gl.max(big.to(gl.int32, bitcast=True), axis=1)
                row_tiny = gl.min(tiny, axis=1)
                exact = gl.max(((row_big >= FAST_MAX_BITS_BF16) | (row_tiny < 2 * FAST_TINY_BF16 - 2)).to(gl.int32),
                               axis=0) != 0
            if exact:  # rare for BF16 pieces: rows holding Inf, NaN, |x| >= 3.4e38, or |x| < 2^-134
                for c in gl.static_range(BM // CH):
                    _split_rows(src.slice(c * CH, CH), ap0.index(q).slice(c * CH, CH),
                                ap1.index(q).slice(c * CH, CH), ap2.index(q).slice(c * CH, CH), NP,
                                SHIFT, not TF32, layout)
            # the raw tile was read by the threads (generic proxy) and is next written by TMA (async proxy);
            # the pieces written by the threads are next read by wgmma (async proxy)
            fence_async_shared()
            mbarrier.arrive(raw_empty.index(r))
            mbarrier.arrive(a_ready.index(q))
            it += 1


@gluon.jit
def _ws_consumer(ap0, ap1, ap2, b0s, b1s, b2s, a_ready, a_empty, b_ready, b_empty,
                 bias_ptr, c_ptr, flag_ptr, c_desc, c_smem, M, N, K, stride_cz, stride_cm, stride_cn,
                 NP: gl.constexpr, SHIFT: gl.constexpr, HAS_BIAS: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                 BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr, P_STAGES: gl.constexpr,
                 ROW0: gl.constexpr, ROWS: gl.constexpr, RANGE_CHECK: gl.constexpr, TMA_STORE: gl.constexpr,
                 num_warps: gl.constexpr):
    """``_emu_mm_wgmma_kernel``'s MMA loop, combine and epilogue, tile after tile, for rows ROW0 .. ROW0 + ROWS
    of each (BM, BN) tile of C (the default partition, two warpgroups: all of them). TMA_STORE: C's tiles go
    out through ``c_smem`` by asynchronous TMA stores (``c_desc``: C as (Z*M, N) rows), so that the MMA warps
    start the next tile while a tile's store runs; else straight from the registers."""
    mma: gl.constexpr = _mma_layout(num_warps, BN, b0s.dtype, ROWS)
    n_k = gl.cdiv(K, BK)
    it = 0
    for tile in range(gl.program_id(0), _tiles(M, N, BM, BN), gl.num_programs(0)):
        z, off_m, off_n = _tile_origin(tile, M, N, BM, BN, GROUP_M)
        acc, t, c1, c2 = _accumulators(ROWS, BN, NP, mma)
        for kt in range(n_k):
            s = it % STAGES
            q = it % P_STAGES
            mbarrier.wait(b_ready.index(s), (it // STAGES) & 1)
            mbarrier.wait(a_ready.index(q), (it // P_STAGES) & 1)
            # (BK, BN) views of the K-major (BN, BK) tiles of B
            t, c1, c2 = _k_tile_mmas(ap0.index(q).slice(ROW0, ROWS), ap1.index(q).slice(ROW0, ROWS),
                                     ap2.index(q).slice(ROW0, ROWS), b0s.index(s).permute((1, 0)),
                                     b1s.index(s).permute((1, 0)), b2s.index(s).permute((1, 0)), t, c1, c2, NP)
            # K-tile it-1's MMAs were issued before this L0 tile: in each warpgroup they are complete. The
            # arrive synchronises the partition's warps (both warpgroups) first, then one thread arrives.
            mbarrier.arrive(b_empty.index((it + STAGES - 1) % STAGES), pred=kt > 0)
            mbarrier.arrive(a_empty.index((it + P_STAGES - 1) % P_STAGES), pred=kt > 0)
            acc += t  # outside the Tensor Core, round to nearest; overlaps the correction MMAs
            it += 1

        acc = _combine_levels(acc, c1, c2, NP, SHIFT, RANGE_CHECK)  # waits for every MMA of the tile
        # the tile's last K-tile is done: release its slots, so that the loader and the splitter run on into
        # the next tile while this one's epilogue stores C
        mbarrier.arrive(b_empty.index((it + STAGES - 1) % STAGES))
        mbarrier.arrive(a_empty.index((it + P_STAGES - 1) % P_STAGES))
        if RANGE_CHECK:
            _flag_tile_rows(acc, flag_ptr, M, z, off_m + ROW0, ROWS, mma)
        if TMA_STORE:
            _store_tile_tma(acc, bias_ptr, c_desc, c_smem, N, z * M + off_m + ROW0, off_n, HAS_BIAS, ROWS, BN, mma,
                            RANGE_CHECK)
        else:
            _store_tile(acc, bias_ptr, c_ptr, M, N, stride_cz, stride_cm, stride_cn, z, off_m + ROW0, off_n,
                        HAS_BIAS, ROWS, BN, mma, RANGE_CHECK)
    if TMA_STORE:
        tma.store_wait(0)  # the last tile's store is complete before the program ends


@gluon.jit
def _c_staging(c_desc, placeholder, TMA_STORE: gl.constexpr):
    """The shared-memory tile of C that a TMA-store epilogue stages (``c_desc``'s block); without TMA_STORE no
    buffer (``placeholder``, never touched)."""
    if TMA_STORE:
        return gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    else:
        return placeholder


@gluon.jit(do_not_specialize=ROW_COUNTS)
def _emu_mm_wgmma_ws_kernel(
    # TMA descriptors: FP32 A (Z*M, K) with (BM, BK) blocks; B's pieces (N, K) with (BN, BK) blocks (with
    # NP == 2, b2_desc is a placeholder: any of the others)
    a_desc, b0_desc, b1_desc, b2_desc,
    bias_ptr, c_ptr, flag_ptr, c_desc,
    M, N, K,
    stride_cz, stride_cm, stride_cn,
    NP: gl.constexpr, SHIFT: gl.constexpr, HAS_BIAS: gl.constexpr, TF32: gl.constexpr,
    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr,
    STAGES: gl.constexpr, A_STAGES: gl.constexpr, P_STAGES: gl.constexpr,
    SPLIT_WARPS: gl.constexpr, SPLIT_REGS: gl.constexpr, SPLIT_VECS: gl.constexpr,
    RANGE_CHECK: gl.constexpr, TMA_STORE: gl.constexpr, num_warps: gl.constexpr,
):
    dtype: gl.constexpr = b0_desc.dtype  # the pieces' dtype

    # ---- shared memory: the three rings and their barriers ----
    araw = gl.allocate_shared_memory(a_desc.dtype, [A_STAGES, BM, BK], a_desc.layout)
    pl: gl.constexpr = _piece_smem_layout(BM, BK, dtype)
    ap0 = gl.allocate_shared_memory(dtype, [P_STAGES, BM, BK], pl)
    ap1 = gl.allocate_shared_memory(dtype, [P_STAGES, BM, BK], pl)
    if NP == 3:
        ap2 = gl.allocate_shared_memory(dtype, [P_STAGES, BM, BK], pl)
    else:
        ap2 = ap0
    b0s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    b1s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    if NP == 3:
        b2s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    else:
        b2s = b0s
    c_smem = _c_staging(c_desc, b0s, TMA_STORE)
    raw_ready = gl.allocate_shared_memory(gl.int64, [A_STAGES, 1], mbarrier.MBarrierLayout())
    raw_empty = gl.allocate_shared_memory(gl.int64, [A_STAGES, 1], mbarrier.MBarrierLayout())
    a_ready = gl.allocate_shared_memory(gl.int64, [P_STAGES, 1], mbarrier.MBarrierLayout())
    a_empty = gl.allocate_shared_memory(gl.int64, [P_STAGES, 1], mbarrier.MBarrierLayout())
    b_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    b_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(A_STAGES):
        mbarrier.init(raw_ready.index(i), count=1)
        mbarrier.init(raw_empty.index(i), count=1)
    for i in gl.static_range(P_STAGES):
        mbarrier.init(a_ready.index(i), count=1)
        mbarrier.init(a_empty.index(i), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(b_ready.index(i), count=1)
        mbarrier.init(b_empty.index(i), count=1)

    # (the argument tuples are written out: a tuple assigned to a variable first turns its constexprs into
    # tensors under Triton 3.6)
    gl.warp_specialize([
        (_ws_consumer, (ap0, ap1, ap2, b0s, b1s, b2s, a_ready, a_empty, b_ready, b_empty,
                        bias_ptr, c_ptr, flag_ptr, c_desc, c_smem, M, N, K, stride_cz, stride_cm, stride_cn,
                        NP, SHIFT, HAS_BIAS, BM, BN, BK, GROUP_M, STAGES, P_STAGES, 0, BM, RANGE_CHECK,
                        TMA_STORE, num_warps)),
        (_ws_loader, (a_desc, b0_desc, b1_desc, b2_desc, araw, ap0, ap1, ap2, b0s, b1s, b2s,
                      raw_ready, raw_empty, a_ready, a_empty, b_ready, b_empty, M, N, K,
                      NP, SHIFT, TF32, BM, BN, BK, GROUP_M, STAGES, A_STAGES, P_STAGES, SPLIT_WARPS)),
        (_ws_splitter, (a_desc, b0_desc, b1_desc, b2_desc, araw, ap0, ap1, ap2, b0s, b1s, b2s,
                        raw_ready, raw_empty, a_ready, a_empty, b_ready, b_empty, M, N, K,
                        NP, SHIFT, TF32, BM, BN, BK, GROUP_M, STAGES, A_STAGES, P_STAGES, SPLIT_WARPS,
                        SPLIT_VECS)),
    ], [1, SPLIT_WARPS], [LOAD_REGS, SPLIT_REGS])

    for i in gl.static_range(A_STAGES):
        mbarrier.invalidate(raw_ready.index(i))
        mbarrier.invalidate(raw_empty.index(i))
    for i in gl.static_range(P_STAGES):
        mbarrier.invalidate(a_ready.index(i))
        mbarrier.invalidate(a_empty.index(i))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(b_ready.index(i))
        mbarrier.invalidate(b_empty.index(i))


# ---------------------------------------------------------------------------------------------------------
# A split beforehand ("pgw", "ptgw"): no splitter; the loader warp brings A's and B's pieces by TMA into one
# ring, and the MMA warps (``_ws_consumer``) run on them. With the persistent tile loop the loader runs on into
# the next tile's first K-tiles while the MMA warps combine and store this one.
# ---------------------------------------------------------------------------------------------------------


@gluon.jit
def _ws_piece_loader(a0_desc, a1_desc, a2_desc, b0_desc, b1_desc, b2_desc, a0s, a1s, a2s, b0s, b1s, b2s,
                     ready, empty, M, N, K, NP: gl.constexpr, BM: gl.constexpr, BN: gl.constexpr,
                     BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """1 warp: TMA loads of A's and B's pieces of K-tile ``it`` (counted over all of the program's tiles of C)
    into ring slot it % STAGES, once the MMA warps have freed it."""
    n_k = gl.cdiv(K, BK)
    nbytes: gl.constexpr = NP * (a0_desc.block_type.nbytes + b0_desc.block_type.nbytes)
    it = 0
    for tile in range(gl.program_id(0), _tiles(M, N, BM, BN), gl.num_programs(0)):
        z, off_m, off_n = _tile_origin(tile, M, N, BM, BN, GROUP_M)
        row0 = z * M + off_m  # row of the flattened (Z*M, K) pieces of A
        for kt in range(n_k):
            k = kt * BK
            s = it % STAGES
            bar = ready.index(s)
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(bar, nbytes)
            _tma_load(a0_desc, [row0, k], bar, a0s.index(s))
            _tma_load(a1_desc, [row0, k], bar, a1s.index(s))
            _tma_load(b0_desc, [off_n, k], bar, b0s.index(s))
            _tma_load(b1_desc, [off_n, k], bar, b1s.index(s))
            if NP == 3:
                _tma_load(a2_desc, [row0, k], bar, a2s.index(s))
                _tma_load(b2_desc, [off_n, k], bar, b2s.index(s))
            it += 1


@gluon.jit(do_not_specialize=ROW_COUNTS)
def _emu_mm_wgmma_pieces_ws_kernel(
    # TMA descriptors: A's pieces (Z*M, K) with (BM, BK) blocks, B's pieces (N, K) with (BN, BK) blocks (with
    # NP == 2 the third of each is a placeholder)
    a0_desc, a1_desc, a2_desc, b0_desc, b1_desc, b2_desc,
    bias_ptr, c_ptr, flag_ptr, c_desc,
    M, N, K,
    stride_cz, stride_cm, stride_cn,
    NP: gl.constexpr, SHIFT: gl.constexpr, HAS_BIAS: gl.constexpr,
    BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
    RANGE_CHECK: gl.constexpr, TMA_STORE: gl.constexpr, num_warps: gl.constexpr,
):
    dtype: gl.constexpr = b0_desc.dtype
    a0s = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a0_desc.layout)
    a1s = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a0_desc.layout)
    b0s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    b1s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    if NP == 3:
        a2s = gl.allocate_shared_memory(dtype, [STAGES, BM, BK], a0_desc.layout)
        b2s = gl.allocate_shared_memory(dtype, [STAGES, BN, BK], b0_desc.layout)
    else:
        a2s = a0s
        b2s = b0s
    c_smem = _c_staging(c_desc, b0s, TMA_STORE)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        # the MMA warps release a slot twice, as its A and as its B slot (``_ws_consumer`` keeps two rings)
        mbarrier.init(empty.index(i), count=2)
    gl.warp_specialize([
        (_ws_consumer, (a0s, a1s, a2s, b0s, b1s, b2s, ready, empty, ready, empty,
                        bias_ptr, c_ptr, flag_ptr, c_desc, c_smem, M, N, K, stride_cz, stride_cm, stride_cn,
                        NP, SHIFT, HAS_BIAS, BM, BN, BK, GROUP_M, STAGES, STAGES, 0, BM, RANGE_CHECK, TMA_STORE,
                        num_warps)),
        (_ws_piece_loader, (a0_desc, a1_desc, a2_desc, b0_desc, b1_desc, b2_desc, a0s, a1s, a2s, b0s, b1s, b2s,
                            ready, empty, M, N, K, NP, BM, BN, BK, GROUP_M, STAGES)),
    ], [1], [LOAD_REGS])
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))
