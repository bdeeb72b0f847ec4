"""Private Triton kernels: fused scaled-dot-product attention with the products emulated (TF32x3, BF16x3,
BF16x6), softmax in FP32. For short sequences (one tile of L and D per head), as in a transformer over each
atom's neighbours (PET: 8 heads of 32 over a few dozen tokens, for 10^4-10^5 atoms).

Forward, one program per (batch entry, ``HPP`` consecutive heads; the loads of the next head pipelined under
the current one's products, a mask shared by the heads loaded once):
    S = Q K^T * scale + mask, P = softmax(S) (FP32), O = P V, LSE = rowmax + log(rowsum);
    with ``ZERO_DEAD_ROWS`` (what the installed torch's attention does) a row of S that is all -inf (every key
    masked) gives P = 0, O = 0 and LSE = -inf, and the backward P = 0 there (no NaN from -inf - -inf);
backward, two kernels, one program per (batch entry, head):
    1. P = exp(S - LSE), dV = P^T dO, dP = dO V^T, delta = rowsum(dO o O), dS = P o (dP - delta),
       dMask = dS for a per-head mask, dS to a scratch tensor;
    2. dQ = dS K * scale, dK = dS^T Q * scale; for a mask shared by the heads, one program per batch entry
       loops over its heads and sums their dS into dMask (in head order, no atomics).

Each product covers its whole contraction (D or L) in one tile, by the method's kept products: the L0 tile
a0 b0 from zero, the correction levels from zero, combined smallest first (x 2^-s, non-finite -> 0) and added
to L0 in FP32, as the GEMM kernel's tile mode for one K-tile.

The top of the range: these kernels have no range check and no fix-up (docs/emulation.md, "The top of the
range"). Their products are within the method's bound where every |Q||K^T| and |P||V| entry is below about
2^126; beyond, a high piece that rounds up or an overflowing correction level can give Inf or NaN where FP32
attention is finite (the ``tcemu.matmul`` path, ``backend="torch"``, has the fix-up).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ._emu_mm import _fz, _mma, _mma0, _mma0_keep
from ._split import split3

#: Strides that scale with the sequence length L (a (B, 1, L, L) mask: L*L and L; LSE (B, H, L): H*L and L; the
#: mask gradient's): Triton would specialise them on divisibility by 16, which flips as L changes with the
#: neighbour count, and compile a new variant mid-run (seconds each, benchmarks/md_run.py's
#: ``triton_variants_timed``); their loads are masked per element anyway. The ``== 1`` specialisation stays.
MASK_STRIDES, LSE_STRIDES, MASK_GRAD_STRIDES = ("smb", "smh", "sml"), ("slb", "slh"), ("sdmb", "sdmh")
L_SCALED_STRIDES = MASK_STRIDES + LSE_STRIDES + MASK_GRAD_STRIDES


@triton.jit
def _dot_pieces(a0, a1, a2, b0, b1, b2, NP: tl.constexpr, SHIFT: tl.constexpr, DOT_FMT: tl.constexpr):
    """a @ b from the operands' pieces (``split3``), the contraction in one tile: the L0 tile from zero, the
    correction levels from zero, combined smallest first (x 2^-s, non-finite -> 0), added to L0 in FP32.
    The levels are formed smallest first, so that one correction accumulator is live at a time."""
    DOWN: tl.constexpr = 2.0 ** (-SHIFT)
    if NP == 3:
        corr = _fz(_mma(a0, b2, _mma(a2, b0, _mma0(a1, b1, DOT_FMT), DOT_FMT), DOT_FMT)) * DOWN
        corr += _fz(_mma(a0, b1, _mma0(a1, b0, DOT_FMT), DOT_FMT))
    else:
        corr = _fz(_mma(a0, b1, _mma0(a1, b0, DOT_FMT), DOT_FMT))
    return _mma0_keep(a0, b0, DOT_FMT) + corr * DOWN


@triton.jit
def _emu_dot(a, b, FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, DOT_FMT: tl.constexpr):
    """a @ b of FP32 tiles by the method's products, the contraction in one tile."""
    a0, a1, a2 = split3(a, FMT, NP, SHIFT)
    b0, b1, b2 = split3(b, FMT, NP, SHIFT)
    return _dot_pieces(a0, a1, a2, b0, b1, b2, NP, SHIFT, DOT_FMT)


@triton.jit
def _offsets(rows, cols, s0, s1, WIDE: tl.constexpr):
    """In-tile element offsets rows*s0 + cols*s1: int32 (fewer registers: one 32-bit offset per element) unless
    ``WIDE`` (the host found an offset that needs 64 bits)."""
    r = rows[:, None]
    if WIDE:
        r = r.to(tl.int64)
    return r * s0 + cols[None, :] * s1


@triton.jit
def _tile(ptr, s0, s1, rows, cols, n_rows, n_cols, WIDE: tl.constexpr = True):
    """(len(rows), len(cols)) FP32 tile at ptr + rows*s0 + cols*s1; zeros outside (n_rows, n_cols)."""
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    return tl.load(ptr + _offsets(rows, cols, s0, s1, WIDE), mask=mask, other=0.0)


@triton.jit
def _store_tile(ptr, s0, s1, rows, cols, n_rows, n_cols, x, WIDE: tl.constexpr = True):
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    tl.store(ptr + _offsets(rows, cols, s0, s1, WIDE), x, mask=mask)


@triton.jit(do_not_specialize=("L",), do_not_specialize_on_alignment=MASK_STRIDES + LSE_STRIDES)
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, m_ptr, o_ptr, lse_ptr,
    L, D, scale,
    sqb, sqh, sql, sqd, skb, skh, skl, skd, svb, svh, svl, svd,
    smb, smh, sml, smn, sob, soh, sol, sod, slb, slh,
    HAS_MASK: tl.constexpr, MASK_PER_HEAD: tl.constexpr, HPP: tl.constexpr, ZERO_DEAD_ROWS: tl.constexpr,
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, DOT_FMT: tl.constexpr,
    LP: tl.constexpr, DP: tl.constexpr,
):
    # one program per (batch entry, HPP consecutive heads); a mask shared by the heads is loaded once
    b = tl.program_id(0).to(tl.int64)
    h0 = tl.program_id(1).to(tl.int64) * HPP
    rows = tl.arange(0, LP)
    cols = tl.arange(0, DP)
    if HAS_MASK and not MASK_PER_HEAD:
        shared_mask = _tile(m_ptr + b * smb, sml, smn, rows, rows, L, L)
    for i in range(HPP):
        h = h0 + i
        q = _tile(q_ptr + b * sqb + h * sqh, sql, sqd, rows, cols, L, D)
        k = _tile(k_ptr + b * skb + h * skh, skl, skd, rows, cols, L, D)
        v = _tile(v_ptr + b * svb + h * svh, svl, svd, rows, cols, L, D)
        s = _emu_dot(q, tl.trans(k), FMT, NP, SHIFT, DOT_FMT) * scale
        if HAS_MASK:
            if MASK_PER_HEAD:
                s += _tile(m_ptr + b * smb + h * smh, sml, smn, rows, rows, L, L)
            else:
                s += shared_mask
        s = tl.where(rows[None, :] < L, s, float("-inf"))  # key columns past L
        m = tl.max(s, 1)
        if ZERO_DEAD_ROWS:  # a row of -inf scores (every key masked): P = 0 and O = 0, as torch's SDPA
            m = tl.where(m == float("-inf"), 0.0, m)
        p = tl.exp(s - m[:, None])
        den = tl.sum(p, 1)
        o = _emu_dot(p, v, FMT, NP, SHIFT, DOT_FMT) / den[:, None]
        if ZERO_DEAD_ROWS:  # den is 0 only there (elsewhere the row's maximum contributes exp(0) = 1)
            o = tl.where(den[:, None] == 0.0, 0.0, o)
        _store_tile(o_ptr + b * sob + h * soh, sol, sod, rows, cols, L, D, o)
        tl.store(lse_ptr + b * slb + h * slh + rows, m + tl.log(den), mask=rows < L)


@triton.jit(do_not_specialize=("L",), do_not_specialize_on_alignment=L_SCALED_STRIDES)
def _attn_bwd_ds_kernel(
    q_ptr, k_ptr, v_ptr, m_ptr, o_ptr, lse_ptr, do_ptr, dv_ptr, dm_ptr, ds_ptr,
    H, L, D, scale,
    sqb, sqh, sql, sqd, skb, skh, skl, skd, svb, svh, svl, svd,
    smb, smh, sml, smn, sob, soh, sol, sod, slb, slh, sdob, sdoh, sdol, sdod,
    sdmb, sdmh,
    HAS_MASK: tl.constexpr, MASK_GRAD: tl.constexpr, WIDE: tl.constexpr, ZERO_DEAD_ROWS: tl.constexpr,
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, DOT_FMT: tl.constexpr,
    LP: tl.constexpr, DP: tl.constexpr,
):
    # backward, first kernel, one program per (batch entry, head): P, dV = P^T dO, dP = dO V^T, dS; dS to the
    # gradient of a per-head mask (MASK_GRAD; a mask shared by the heads gets their sum from the second kernel)
    # and to the scratch ds (B, H, L, LP) for the second kernel. In phases, with dO
    # loaded again where used, so that few tiles are live at once (PET S's tiles: 183 registers, no spill).
    # dv: contiguous (B, H, L, D); dm: (B, H or 1, L, L), the last two dimensions contiguous
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1).to(tl.int64)
    rows = tl.arange(0, LP)
    cols = tl.arange(0, DP)
    valid = (rows[:, None] < L) & (rows[None, :] < L)
    bh = b * H + h
    q = _tile(q_ptr + b * sqb + h * sqh, sql, sqd, rows, cols, L, D, WIDE)
    k = _tile(k_ptr + b * skb + h * skh, skl, skd, rows, cols, L, D, WIDE)
    s = _emu_dot(q, tl.trans(k), FMT, NP, SHIFT, DOT_FMT) * scale
    if HAS_MASK:
        s += _tile(m_ptr + b * smb + h * smh, sml, smn, rows, rows, L, L, WIDE)
    lse = tl.load(lse_ptr + b * slb + h * slh + rows, mask=rows < L, other=0.0)
    if ZERO_DEAD_ROWS:  # the forward's all-masked rows (LSE = -inf): P = 0, so their dS and dV terms are 0
        p = tl.where(valid & (lse[:, None] > float("-inf")), tl.exp(s - lse[:, None]), 0.0)
    else:
        p = tl.where(valid, tl.exp(s - lse[:, None]), 0.0)
    # dV = P^T dO
    do = _tile(do_ptr + b * sdob + h * sdoh, sdol, sdod, rows, cols, L, D, WIDE)
    do0, do1, do2 = split3(do, FMT, NP, SHIFT)
    pt0, pt1, pt2 = split3(tl.trans(p), FMT, NP, SHIFT)
    _store_tile(dv_ptr + bh * L * D, D, 1, rows, cols, L, D,
                _dot_pieces(pt0, pt1, pt2, do0, do1, do2, NP, SHIFT, DOT_FMT), WIDE)
    # dP = dO V^T, delta = rowsum(dO o O), dS = P o (dP - delta)
    do = _tile(do_ptr + b * sdob + h * sdoh, sdol, sdod, rows, cols, L, D, WIDE)
    delta = tl.sum(do * _tile(o_ptr + b * sob + h * soh, sol, sod, rows, cols, L, D, WIDE), 1)
    do0, do1, do2 = split3(do, FMT, NP, SHIFT)
    v = _tile(v_ptr + b * svb + h * svh, svl, svd, rows, cols, L, D, WIDE)
    v0, v1, v2 = split3(tl.trans(v), FMT, NP, SHIFT)
    ds = p * (_dot_pieces(do0, do1, do2, v0, v1, v2, NP, SHIFT, DOT_FMT) - delta[:, None])
    if MASK_GRAD:  # a per-head mask's gradient
        tl.store(dm_ptr + b * sdmb + h * sdmh + _offsets(rows, rows, L, 1, WIDE), ds, mask=valid)
    _store_tile(ds_ptr + bh * L * LP, LP, 1, rows, rows, L, LP, ds, WIDE)


@triton.jit(do_not_specialize=("L",), do_not_specialize_on_alignment=MASK_GRAD_STRIDES[:1])
def _attn_bwd_dqdk_kernel(
    q_ptr, k_ptr, ds_ptr, dq_ptr, dk_ptr, dm_ptr,
    H, L, D, scale,
    sqb, sqh, sql, sqd, skb, skh, skl, skd, sdmb,
    SUM_HEADS: tl.constexpr, WIDE: tl.constexpr,
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, DOT_FMT: tl.constexpr,
    LP: tl.constexpr, DP: tl.constexpr,
):
    # backward, second kernel: dQ = dS K scale, dK = dS^T Q scale from the first kernel's dS, one program per
    # (batch entry, head); with SUM_HEADS one program per batch entry loops over its heads and also sums their
    # dS into the gradient of a mask shared by the heads (in head order: no atomics, the same bits every run).
    # Apart, the two kernels' splits cannot be scheduled together (one fused kernel needed 255 registers and
    # spilled: docs/attention.md). dq, dk: contiguous (B, H, L, D); dm: (B, 1, L, L), last two contiguous
    b = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, LP)
    cols = tl.arange(0, DP)
    if SUM_HEADS:
        h_first = 0
        h_end = H
    else:
        h_first = tl.program_id(1)
        h_end = h_first + 1
    for h32 in tl.range(h_first, h_end, num_stages=1):
        h = b * 0 + h32  # int64 (h32 is a Python int under the interpreter)
        bh = b * H + h
        ds = _tile(ds_ptr + bh * L * LP, LP, 1, rows, rows, L, LP, WIDE)
        ds0, ds1, ds2 = split3(ds, FMT, NP, SHIFT)
        k = _tile(k_ptr + b * skb + h * skh, skl, skd, rows, cols, L, D, WIDE)
        k0, k1, k2 = split3(k, FMT, NP, SHIFT)
        _store_tile(dq_ptr + bh * L * D, D, 1, rows, cols, L, D,
                    _dot_pieces(ds0, ds1, ds2, k0, k1, k2, NP, SHIFT, DOT_FMT) * scale, WIDE)
        q = _tile(q_ptr + b * sqb + h * sqh, sql, sqd, rows, cols, L, D, WIDE)
        q0, q1, q2 = split3(q, FMT, NP, SHIFT)
        dt0, dt1, dt2 = split3(tl.trans(ds), FMT, NP, SHIFT)
        _store_tile(dk_ptr + bh * L * D, D, 1, rows, cols, L, D,
                    _dot_pieces(dt0, dt1, dt2, q0, q1, q2, NP, SHIFT, DOT_FMT) * scale, WIDE)
    if SUM_HEADS:  # in a loop of its own (the dS tiles again, from L2): a sum held over the loop above spilled
        dm = tl.zeros((LP, LP), tl.float32)
        for h in tl.range(0, H, num_stages=1):
            dm += _tile(ds_ptr + (b * H + h) * L * LP, LP, 1, rows, rows, L, LP, WIDE)
        _store_tile(dm_ptr + b * sdmb, L, 1, rows, rows, L, L, dm, WIDE)
