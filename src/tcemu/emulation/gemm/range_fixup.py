"""The range fix-up after every emulated GEMM: FAST launcher (Triton) and its REFERENCE twin, side by side.

Every GEMM kernel flags (``flags``: one int8 per row of C, Z*M, zeroed before the GEMM) the rows with an
element whose level or result is not finite (an Inf/NaN input or an overflow near FLT_MAX), and stores those
elements as the NaN :data:`RANGE_MARK_BITS`. :func:`range_fixup` computes the flagged rows again with exact
power-of-two scaling (``_kernels/_range_fixup.py``) and stores the marked elements;
:func:`range_fixup_reference` does the same with :func:`~tcemu.emulation.reference.mm_range_scaled`, the
executable spec (docs/emulation.md, "The top of the range"). On ordinary data no row is flagged and the
launch only reads the flags.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..._hw import interpreting
from ..methods import MethodSpec, get_method
from ..reference import mm_range_scaled
from ..split import recombine
from ._kernels import _range_fixup as _fix
from ._kernels._emu_mm import RANGE_MARK_BITS
from ._kernels._split import FMT_BF16, FMT_TF32
from ._offline import launch_compile
from .direct import DirectKernel, constexprs

__all__ = ["RANGE_MARK_BITS", "range_fixup", "range_fixup_reference", "range_fixup_compile"]


def _check(a3: Tensor, bt3: tuple[Tensor, ...], b_t: Tensor | None, out3: Tensor, flags: Tensor) -> None:
    Z, M, _ = a3.shape
    if flags.dtype != torch.int8 or flags.shape != (Z * M,):
        raise ValueError(f"flags must be int8 of shape ({Z * M},), got {flags.dtype} {tuple(flags.shape)}")
    if b_t is not None and (b_t.dtype != torch.float32 or b_t.shape[-2:] != bt3[0].shape[-2:]):
        raise ValueError(f"b must be float32 of the pieces' shape {tuple(bt3[0].shape)}, got {b_t.dtype} "
                         f"{tuple(b_t.shape)}")


def range_fixup(a3: Tensor, bt3: tuple[Tensor, ...], b_t: Tensor | None, bias: Tensor | None, out3: Tensor,
                flags: Tensor, spec: MethodSpec) -> None:
    """Compute the marked elements of ``out3`` (Z, M, N) (in its flagged rows) again, in place, from FP32 ``a3``
    (Z, M, K) and B.

    Args:
        a3: FP32 A, any strides.
        bt3: B's pieces as the GEMM read them, each (Zb, N, K), Zb in {1, Z}.
        b_t: FP32 B transposed, (Zb, N, K), any strides (``b.mT``); None: the value the pieces represent
            (:func:`~tcemu.emulation.split.recombine`: exact for three BF16 pieces; for two, the part of B the
            method reads, within its bound).
        bias: FP32 (N,) or None, added after the product.
        out3: the GEMM's output (Z, M, N), any strides; the elements to compute again hold the NaN
            :data:`RANGE_MARK_BITS`.
        flags: int8 (Z*M,): 1 for the rows that hold such elements.
        spec: the method.
    """
    _check(a3, bt3, b_t, out3, flags)
    _range_fixup(a3, bt3, b_t, bias, out3, flags, spec)


def _range_fixup(a3: Tensor, bt3: tuple[Tensor, ...], b_t: Tensor | None, bias: Tensor | None, out3: Tensor,
                 flags: Tensor, spec: MethodSpec) -> None:
    """:func:`range_fixup` without the checks: the launch after every emulated GEMM, whose operands and flags
    ``emu_mm`` checked or made itself (the host time of a small product counts)."""
    Z, M, K = a3.shape
    N = out3.shape[-1]
    if M == 0 or N == 0 or K == 0 or Z == 0:
        return
    pieces = b_t is None
    src = tuple(bt3) + (bt3[0],) * (3 - len(bt3)) if pieces else (b_t, b_t, b_t)
    values = _launch_values(spec, a3, src, bias if bias is not None else out3, out3, flags)
    _FIXUP(_fix.grid(Z, M, N), values, _constexprs(spec, bias is not None, pieces, interpreting()))


def _launch_values(spec: MethodSpec, a3, b3: tuple, bias, out3, flags) -> list:
    """The fix-up kernel's positional arguments: tensors (or, for an offline compile, their dtypes) of A
    (Z, M, K), B's three operands (Zb, N, K), the bias, C and the flags, then sizes, T and strides."""
    Z, M, K = a3.shape
    N = out3.shape[-1]
    sb = b3[0].stride()
    return [a3, *b3, bias, out3, flags, M, N, K, spec.range_threshold(K), *a3.stride(),
            0 if b3[0].shape[0] == 1 else sb[0], sb[1], sb[2], *out3.stride()]


def _constexprs(spec: MethodSpec, has_bias: bool, b_pieces: bool, interpreting: bool) -> dict:
    """The fix-up kernel's constexprs (made once per combination, every product's launch reads them; not to be
    modified)."""
    bf16 = spec.piece_format == "bf16"
    fmt = FMT_BF16 if bf16 else FMT_TF32
    key = ("range_fixup", spec.name, spec.piece_format, spec.n_pieces, spec.shift, has_bias, b_pieces, interpreting)
    return constexprs(key, lambda: dict(
        FMT=fmt, NP=spec.n_pieces, SHIFT=spec.shift, LEVELS=len(spec.levels),
        DOT_FMT=2 if (bf16 and interpreting) else fmt, HAS_BIAS=has_bias, B_PIECES=b_pieces,
        SCAN=_fix.SCAN_ROWS, BM=_fix.FIX_BM, BN=_fix.FIX_BN, BK=_fix.FIX_BK, num_warps=_fix.FIX_WARPS))


_FIXUP = DirectKernel(_fix._range_fixup_kernel)


def range_fixup_compile(method: str | MethodSpec, *, b_pieces: bool = False, has_bias: bool = False, arch: int = 90,
                        M: int = 4096, N: int = 4096, K: int = 4096):
    """Compile (without a GPU) the fix-up kernel :func:`range_fixup` launches after a 2-D product of this shape,
    for ``sm_<arch>``, as that launch specialises it: contiguous A (M, K), C and B^T (N, K), B as FP32 or
    (``b_pieces``) as the method's pieces. Returns Triton's compiled kernel."""
    spec = get_method(method)
    f32 = torch.float32

    def like(*shape, dtype=f32):  # shape, strides and dtype without memory
        return torch.empty(shape, dtype=dtype, device="meta")

    b = like(1, N, K, dtype=torch.bfloat16 if b_pieces and spec.piece_format == "bf16" else f32)
    values = _launch_values(spec, like(1, M, K), (b, b, b), like(N), like(1, M, N), like(M, dtype=torch.int8))
    values = [v.dtype if isinstance(v, torch.Tensor) else v for v in values]
    constexprs = dict(_constexprs(spec, has_bias, b_pieces, False))
    warps = constexprs.pop("num_warps")
    return launch_compile(_fix._range_fixup_kernel, values, constexprs, arch, num_warps=warps)


def range_fixup_reference(a3: Tensor, bt3: tuple[Tensor, ...], b_t: Tensor | None, bias: Tensor | None,
                          out3: Tensor, flags: Tensor, spec: MethodSpec) -> None:
    """Same contract as :func:`range_fixup`, by :func:`~tcemu.emulation.reference.mm_range_scaled`."""
    _check(a3, bt3, b_t, out3, flags)
    Z, M, K = a3.shape
    rows = flags.view(Z, M) != 0
    if not bool(rows.any()):
        return
    bt = b_t if b_t is not None else recombine(tuple(p.float() for p in bt3), spec)
    fixed = mm_range_scaled(a3, bt.mT, spec)
    if bias is not None:
        fixed = fixed + bias
    marked = rows.unsqueeze(-1) & (out3.view(torch.int32) == RANGE_MARK_BITS)
    out3.copy_(torch.where(marked, fixed, out3))
