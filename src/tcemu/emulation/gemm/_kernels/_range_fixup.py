"""Private Triton kernel: the range fix-up, launched after every emulated GEMM (every kernel family).

The GEMM kernels flag (one int8 per row of C, ``RANGE_CHECK``) the rows with an element whose result or level
is not finite (an Inf/NaN input, or an overflow near FLT_MAX: a high piece rounded up, a correction level that
sums up to three products) and store those elements as the NaN ``RANGE_MARK_BITS``. This kernel computes the
flagged rows again from the FP32 operands and stores the marked elements (the others keep the GEMM's bits), by
the rule of :func:`tcemu.emulation.reference.mm_range_scaled`:

* row i of A is scaled by 2^-k_i and column j of B by 2^-l_j, k_i = max(0, e(max finite |A_i.|) - T) (l_j
  likewise, T = ``MethodSpec.range_threshold(K)``), so that no level can overflow; a nonzero value stays
  nonzero (the smallest subnormal of its sign, so that Inf times it stays Inf); Inf and NaN pass;
* both are split (``split3``) and multiplied by the method's products: every correction level on its own
  running accumulator over all of K, the L0 tile per K-tile from zero and added in FP32 (the GEMM kernel's
  mode 1; here also for BF16x9's levels 3 and 4), the levels combined smallest first (non-finite -> 0);
* C_ij = (C'_ij 2^k_i) 2^l_j (exact; an overflow there is the result's own), + bias.

B arrives as FP32 (B^T, (Zb, N, K), any strides) or, with B_PIECES, as the pieces the GEMM read, from which
the value they represent is rebuilt as ``split.recombine`` does (exact for three BF16 pieces).

Grid: (chunks of SCAN rows, column groups, Z). A program reads its chunk's flags and exits where none is
set (ordinary data: one launch, Z*M bytes read). Else, for each flagged BM-row block of the chunk, it finds the
row scales (a pass over those rows of A) and, for every (column groups)-th BN-column tile, the column scales (a pass over
B's columns) and the product; it stores the marked elements only.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import cdiv
from ._emu_mm import RANGE_MARK, _fz, _mma, _mma0_keep
from ._split import split3, widen_bf16


@triton.jit
def _pow2(e):
    """2^e as FP32 for integer e in [-126, 127] (the exponent bits: exact)."""
    return ((e + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _scale_exponent(largest, T):
    """max(0, e - T), e the exponent of ``largest`` (finite, >= 0; 0 and subnormals have e <= -127)."""
    return tl.maximum((largest.to(tl.int32, bitcast=True) >> 23) - 127 - T, 0)


@triton.jit
def _finite_abs(x):
    """|x| where finite, else 0."""
    return tl.where(tl.abs(x) < float("inf"), tl.abs(x), 0.0)


@triton.jit
def _scale_down(x, s):
    """x * s (s a power of two <= 1), a nonzero never becoming zero: the smallest subnormal of its sign."""
    y = x * s
    tiny = ((x.to(tl.int32, bitcast=True) & -2147483648) | 1).to(tl.float32, bitcast=True)
    return tl.where((y == 0.0) & (x != 0.0), tiny, y)


@triton.jit
def _piece_value(p):
    """A loaded piece as FP32: itself (TF32 pieces are FP32), or a bf16 widened by its bits."""
    if p.dtype == tl.bfloat16:
        return widen_bf16(p)
    else:
        return p


@triton.jit
def _load_b(b_ptr, b1_ptr, b2_ptr, offs, mask, NP: tl.constexpr, SHIFT: tl.constexpr, B_PIECES: tl.constexpr):
    """FP32 values of B^T at ``offs``: loaded, or (B_PIECES) rebuilt from the pieces as ``split.recombine``
    (Inf, NaN and signed zeros: their high piece)."""
    if B_PIECES:
        DOWN: tl.constexpr = 2.0 ** (-SHIFT)
        x = _piece_value(tl.load(b_ptr + offs, mask=mask, other=0.0))
        if NP >= 2:
            low = _piece_value(tl.load(b1_ptr + offs, mask=mask, other=0.0))
            if NP == 3:
                low = _piece_value(tl.load(b2_ptr + offs, mask=mask, other=0.0)) * DOWN + low
            x = tl.where((tl.abs(x) < float("inf")) & (x != 0.0), low * DOWN + x, x)  # Inf, NaN, +-0: the high piece
    else:
        x = tl.load(b_ptr + offs, mask=mask, other=0.0)
    return x


@triton.jit
def _fix_tile(a_ptr, b_ptr, b1_ptr, b2_ptr, bias_ptr, c_ptr, rows, row_flags, sa, ua, n0, z, M, N, K, T,
              stride_az, stride_am, stride_ak, stride_bz, stride_bn, stride_bk, stride_cz, stride_cm, stride_cn,
              FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, LEVELS: tl.constexpr,
              DOT_FMT: tl.constexpr, HAS_BIAS: tl.constexpr, B_PIECES: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """Columns n0 .. n0 + BN of the rows ``rows`` (row scales 2^-k = ``sa``, 2^k = ``ua``), stored where the GEMM
    marked an element (its row flagged)."""
    DOWN: tl.constexpr = 2.0 ** (-SHIFT)
    F: tl.constexpr = DOT_FMT
    cols = n0 + tl.arange(0, BN)
    offs_k = tl.arange(0, BK)
    a_base = a_ptr + z * stride_az + rows[:, None].to(tl.int64) * stride_am
    b_base = z * stride_bz + cols[None, :].to(tl.int64) * stride_bn
    row_ok = rows[:, None] < M
    col_ok = cols[None, :] < N

    # column scales: one pass over B's columns
    bmax = tl.zeros((BN,), dtype=tl.float32)
    for k0 in range(0, K, BK):
        kk = k0 + offs_k[:, None]
        b = _load_b(b_ptr, b1_ptr, b2_ptr, b_base + kk.to(tl.int64) * stride_bk, col_ok & (kk < K), NP, SHIFT,
                    B_PIECES)
        bmax = tl.maximum(bmax, tl.max(_finite_abs(b), axis=0))
    lb = _scale_exponent(bmax, T)
    sb = _pow2(-lb)

    # the method's products on the scaled operands
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    c1 = tl.zeros((BM, BN), dtype=tl.float32)
    c2 = tl.zeros((BM, BN), dtype=tl.float32)
    c3 = tl.zeros((BM, BN), dtype=tl.float32)
    c4 = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        ka = k0 + offs_k[None, :]
        a = tl.load(a_base + ka.to(tl.int64) * stride_ak, mask=row_ok & (ka < K), other=0.0)
        a0, a1, a2 = split3(_scale_down(a, sa[:, None]), FMT, NP, SHIFT)
        kb = k0 + offs_k[:, None]
        b = _load_b(b_ptr, b1_ptr, b2_ptr, b_base + kb.to(tl.int64) * stride_bk, col_ok & (kb < K), NP, SHIFT,
                    B_PIECES)
        b0, b1, b2 = split3(_scale_down(b, sb[None, :]), FMT, NP, SHIFT)
        if LEVELS >= 5:
            c4 = _mma(a2, b2, c4, F)                                   # L4: (2, 2)
            c3 = _mma(a1, b2, _mma(a2, b1, c3, F), F)                  # L3: (2, 1), (1, 2)
        if LEVELS >= 3:
            c2 = _mma(a0, b2, _mma(a2, b0, _mma(a1, b1, c2, F), F), F)  # L2: (1, 1), (2, 0), (0, 2)
        if LEVELS >= 2:
            c1 = _mma(a0, b1, _mma(a1, b0, c1, F), F)                  # L1: (1, 0), (0, 1)
        acc += _mma0_keep(a0, b0, F)                                   # L0 tile from zero, added in FP32

    # levels smallest first (non-finite -> 0), as the reference; then back to the inputs' scale
    total = acc
    if LEVELS >= 2:
        corr = _fz(c1)
        if LEVELS >= 3:
            top = _fz(c2)
            if LEVELS >= 5:
                top = (_fz(c4) * DOWN + _fz(c3)) * DOWN + top
            corr = top * DOWN + corr
        total = corr * DOWN + acc
    out = (total * ua[:, None]) * _pow2(lb)[None, :]
    if HAS_BIAS:
        out += tl.load(bias_ptr + cols, mask=cols < N, other=0.0)[None, :]
    c_ptrs = c_ptr + z * stride_cz + rows[:, None].to(tl.int64) * stride_cm + cols[None, :].to(tl.int64) * stride_cn
    inside = row_ok & col_ok & (row_flags[:, None] != 0)
    marked = tl.load(c_ptrs, mask=inside, other=0.0).to(tl.int32, bitcast=True) == RANGE_MARK
    tl.store(c_ptrs, out, mask=inside & marked)


@triton.jit(do_not_specialize=("M", "T"))
def _range_fixup_kernel(
    a_ptr, b_ptr, b1_ptr, b2_ptr, bias_ptr, c_ptr, flag_ptr,
    M, N, K, T,
    stride_az, stride_am, stride_ak,
    stride_bz, stride_bn, stride_bk,
    stride_cz, stride_cm, stride_cn,
    FMT: tl.constexpr, NP: tl.constexpr, SHIFT: tl.constexpr, LEVELS: tl.constexpr, DOT_FMT: tl.constexpr,
    HAS_BIAS: tl.constexpr, B_PIECES: tl.constexpr,
    SCAN: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
):
    # (stride_bz is 0 for one B shared by the batch)
    z = tl.program_id(2).to(tl.int64)
    chunk = tl.program_id(0) * SCAN
    first_col = tl.program_id(1) * BN
    flags = z * M
    scan = chunk + tl.arange(0, SCAN)
    if tl.max(tl.load(flag_ptr + flags + scan, mask=scan < M, other=0).to(tl.int32), axis=0) > 0:
        for r0 in range(chunk, tl.minimum(chunk + SCAN, M), BM):
            rows = r0 + tl.arange(0, BM)
            row_flags = tl.load(flag_ptr + flags + rows, mask=rows < M, other=0)
            if tl.max(row_flags.to(tl.int32), axis=0) > 0:
                # row scales: one pass over the block's rows of A
                amax = tl.zeros((BM,), dtype=tl.float32)
                for k0 in range(0, K, BK):
                    ka = k0 + tl.arange(0, BK)[None, :]
                    a = tl.load(a_ptr + z * stride_az + rows[:, None].to(tl.int64) * stride_am
                                + ka.to(tl.int64) * stride_ak, mask=(rows[:, None] < M) & (ka < K), other=0.0)
                    amax = tl.maximum(amax, tl.max(_finite_abs(a), axis=1))
                ka_exp = _scale_exponent(amax, T)
                sa = _pow2(-ka_exp)
                ua = _pow2(ka_exp)
                for n0 in range(first_col, N, tl.num_programs(1) * BN):
                    _fix_tile(a_ptr, b_ptr, b1_ptr, b2_ptr, bias_ptr, c_ptr, rows, row_flags, sa, ua, n0, z,
                              M, N, K, T, stride_az, stride_am, stride_ak, stride_bz, stride_bn, stride_bk,
                              stride_cz, stride_cm, stride_cn, FMT, NP, SHIFT, LEVELS, DOT_FMT, HAS_BIAS, B_PIECES,
                              BM, BN, BK)


#: rows whose flags one program scans; the fix-up's tile (BM x BN, K-tile BK) and warps; column groups at most
SCAN_ROWS = 4096
FIX_BM, FIX_BN, FIX_BK = 32, 64, 32
FIX_WARPS = 4
MAX_COLUMN_GROUPS = 32


def grid(Z: int, M: int, N: int) -> tuple[int, int, int]:
    """The launch grid: (row chunks, column groups, batch)."""
    return cdiv(M, SCAN_ROWS), min(cdiv(N, FIX_BN), MAX_COLUMN_GROUPS), Z
