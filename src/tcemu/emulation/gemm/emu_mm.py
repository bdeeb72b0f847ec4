"""FAST emulated GEMM launchers (Triton) and their REFERENCE twins, side by side.

* :func:`split_t` / :func:`split_t_reference`: FP32 ``b`` (R, C) -> pieces (C, R), contiguous (the
  K-major layout the GEMM kernel reads for its B operand); bit for bit :func:`~tcemu.emulation.split.split`.
* :func:`emu_mm` / :func:`emu_mm_reference`: ``a @ b + bias`` from ``a`` (Z, M, K) and the pieces of ``b``
  given transposed (``bt`` pieces (Zb, N, K), Zb in {1, Z}).

The launchers check, allocate, pick a configuration and launch; the kernels are in ``_kernels/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
from torch import Tensor

from ..methods import MethodSpec, get_method
from ..reference import mm_reference
from ..split import split
from ._kernels._emu_mm import _emu_mm_kernel
from ._kernels._split import FMT_BF16, FMT_TF32, _split_t_kernel

__all__ = [
    "KERNEL_METHODS", "KernelConfig", "pick_config", "piece_dtype",
    "split_t", "split_t_reference", "concat_pieces", "emu_mm", "emu_mm_compile", "emu_mm_reference",
]

#: methods with a Triton kernel, and their kernel id
KERNEL_METHODS: dict[str, int] = {"tf32x3": 0, "bf16x3": 1, "bf16x6": 2, "bf16x9": 3}


def _fmt(spec: MethodSpec) -> int:
    return FMT_TF32 if spec.piece_format == "tf32" else FMT_BF16


def piece_dtype(spec: MethodSpec) -> torch.dtype:
    """Storage dtype of a piece: float32 holding a TF32 value, or bfloat16."""
    return torch.float32 if spec.piece_format == "tf32" else torch.bfloat16


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _check_kernel_method(spec: MethodSpec) -> None:
    if spec.name not in KERNEL_METHODS:
        raise ValueError(f"method {spec.name} has no Triton kernel (have: {', '.join(KERNEL_METHODS)})")


# =====================================================================================================
# split: FAST
# =====================================================================================================


def split_t(b: Tensor, method: str | MethodSpec) -> tuple[Tensor, ...]:
    """Pieces of FP32 ``b`` (R, C), each returned transposed and contiguous, (C, R).

    ``split_t(w.T, m)`` gives an nn.Linear weight's pieces in its own (N, K) layout, and
    ``split_t(w, m)`` the pieces of ``w.T`` (K, N) for the input gradient ``dy @ w``.
    Pieces are float32 (TF32 values) or bfloat16 (:func:`piece_dtype`).
    """
    spec = get_method(method)
    _check_kernel_method(spec)
    if b.dtype != torch.float32 or b.dim() != 2:
        raise TypeError(f"split_t needs a 2-D float32 tensor, got {b.dtype} of shape {tuple(b.shape)}")
    R, C = b.shape
    pieces = tuple(torch.empty((C, R), dtype=piece_dtype(spec), device=b.device) for _ in range(spec.n_pieces))
    if b.numel() == 0:
        return pieces
    p = pieces + (pieces[0],) * (3 - len(pieces))
    BR, BC = 64, 64
    grid = (triton.cdiv(R, BR), triton.cdiv(C, BC))
    _split_t_kernel[grid](
        b, p[0], p[1], p[2], R, C, b.stride(0), b.stride(1),
        FMT=_fmt(spec), NP=spec.n_pieces, SHIFT=spec.shift, BR=BR, BC=BC, num_warps=4,
    )
    return pieces


# =====================================================================================================
# split: REFERENCE
# =====================================================================================================


def split_t_reference(b: Tensor, method: str | MethodSpec) -> tuple[Tensor, ...]:
    """Same contract as :func:`split_t`, from :func:`~tcemu.emulation.split.split`."""
    spec = get_method(method)
    pieces = tuple(p.mT.contiguous() for p in split(b, spec))
    if spec.piece_format == "bf16":  # the high 16 bits (split() values are BF16-exact; NaN payloads kept)
        pieces = tuple((p.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16) for p in pieces)
    return pieces


def concat_pieces(bt: tuple[Tensor, ...], method: str | MethodSpec) -> tuple[Tensor, Tensor | None]:
    """B operands of the ``concat`` kernel from transposed pieces (..., N, K): one per correction level.

    ``B1`` (..., N, 2K): column 2k + j is (b0, b1)[j] at k; ``B2`` (..., N, 4K, three-piece methods):
    column 4k + j is (b1, b2, b0, 0)[j]. The kernel interleaves A's pieces to match.
    """
    spec = get_method(method)
    b0, b1 = bt[0], bt[1]
    B1 = torch.stack([b0, b1], -1).flatten(-2)
    B2 = None
    if spec.n_pieces == 3:
        B2 = torch.stack([b1, bt[2], b0, torch.zeros_like(b0)], -1).flatten(-2)
    return B1, B2


# =====================================================================================================
# GEMM: configurations
# =====================================================================================================


@dataclass(frozen=True)
class KernelConfig:
    """Tiling of the GEMM kernel (one per shape bucket; no autotuning at run time).

    Attributes:
        bm, bn, bk: tile of C and K-tile.
        num_warps, num_stages: Triton launch settings (warps per program, software-pipeline depth).
        mode: 0 "tile" (per-K-tile corrections fed as C of a0 b0), 1 "run" (running correction accumulators),
            2 and 3: 0 and 1 with each K-tile's FP32 add deferred past the next tile's MMAs.
        group_m: programs grouped along M so that neighbouring programs share B tiles in L2.
        concat: one MMA per correction level (pieces interleaved along K; B from :func:`concat_pieces`).
        fast_split: DIAGNOSTIC, not the spec: a cheap truncating/hardware split, to measure the split's cost.
    """

    bm: int
    bn: int
    bk: int
    num_warps: int
    num_stages: int
    mode: int = 0
    group_m: int = 8
    concat: bool = False
    fast_split: bool = False

    def __str__(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk}w{self.num_warps}s{self.num_stages}m{self.mode}"
                + ("c" if self.concat else "") + ("f" if self.fast_split else ""))

    @classmethod
    def parse(cls, text: str) -> KernelConfig:
        """Inverse of ``str()``: ``"128x128x32w8s3m0"``; suffix ``c`` = concat, ``f`` = fast (diagnostic) split."""
        import re  # noqa: PLC0415

        m = re.fullmatch(r"(\d+)x(\d+)x(\d+)w(\d+)s(\d+)m(\d+)(c?)(f?)", text.strip())
        if not m:
            raise ValueError(f"bad kernel config {text!r}; expected like 128x128x32w8s3m0")
        g = m.groups()
        return cls(*map(int, g[:6]), concat=g[6] == "c", fast_split=g[7] == "f")


# Shape buckets -> configuration, per method. Chosen from the sweep in docs/kernels.md (H200).
# Keys: "large" (M >= 1024), "small" (M < 1024: the node layers of small systems).
_CONFIGS: dict[str, dict[str, KernelConfig]] = {
    "tf32x3": {"large": KernelConfig(128, 128, 32, 8, 3, 0), "small": KernelConfig(64, 128, 32, 4, 3, 0)},
    "bf16x3": {"large": KernelConfig(128, 128, 64, 8, 3, 0), "small": KernelConfig(64, 128, 64, 4, 3, 0)},
    "bf16x6": {"large": KernelConfig(128, 128, 64, 8, 3, 0), "small": KernelConfig(64, 128, 64, 4, 3, 0)},
    "bf16x9": {"large": KernelConfig(128, 128, 64, 8, 3, 0), "small": KernelConfig(64, 128, 64, 4, 3, 0)},
}
# Small tiles for the CPU interpreter (TRITON_INTERPRET=1), where tile size is only run time.
_INTERPRET_CONFIG = KernelConfig(32, 32, 16, 4, 1, 0, 4)


def pick_config(spec: MethodSpec, M: int, N: int, K: int) -> KernelConfig:
    """The configuration for a shape; ``TCEMU_GEMM_CONFIG=128x128x32w8s3m0`` overrides it (experiments)."""
    override = os.environ.get("TCEMU_GEMM_CONFIG")
    if override:
        return KernelConfig.parse(override)
    if _interpreting():
        return _INTERPRET_CONFIG
    return _CONFIGS[spec.name]["large" if M >= 1024 else "small"]


# =====================================================================================================
# GEMM: FAST
# =====================================================================================================


def emu_mm(
    a: Tensor,
    bt: tuple[Tensor, ...],
    method: str | MethodSpec,
    bias: Tensor | None = None,
    *,
    out: Tensor | None = None,
    config: KernelConfig | None = None,
    concat: tuple[Tensor, Tensor | None] | None = None,
) -> Tensor:
    """``a @ b + bias`` by emulation, with ``b`` given as transposed pieces.

    Args:
        a: float32 (M, K) or (Z, M, K), any strides; split inside the kernel.
        bt: the method's pieces of ``b`` transposed, each (N, K) or (Zb, N, K) with Zb in {1, Z},
            K contiguous (as returned by :func:`split_t`).
        method: tf32x3, bf16x3, bf16x6 or bf16x9.
        bias: float32 (N,) or None, added in FP32 after the product.
        out: optional float32 output of the result's shape (any strides).
        config: tiling; default :func:`pick_config`.
        concat: for a ``concat`` configuration, :func:`concat_pieces` of ``bt`` (built here if not given).

    Returns:
        float32 (M, N) or (Z, M, N).
    """
    spec = get_method(method)
    _check_kernel_method(spec)
    if len(bt) != spec.n_pieces:
        raise ValueError(f"{spec.name} needs {spec.n_pieces} pieces of b, got {len(bt)}")
    if a.dtype != torch.float32:
        raise TypeError(f"a must be float32, got {a.dtype}")
    squeeze = a.dim() == 2
    a3 = a.unsqueeze(0) if squeeze else a
    bt3 = tuple(p.unsqueeze(0) if p.dim() == 2 else p for p in bt)
    if a3.dim() != 3 or any(p.dim() != 3 for p in bt3):
        raise ValueError("a must be (M, K) or (Z, M, K) and the pieces (N, K) or (Zb, N, K)")
    Z, M, K = a3.shape
    Zb, N, Kb = bt3[0].shape
    if Kb != K or Zb not in (1, Z):
        raise ValueError(f"shape mismatch: a {tuple(a.shape)} and pieces {tuple(bt[0].shape)}")
    want = piece_dtype(spec)
    for p in bt3:
        if p.shape != bt3[0].shape or p.dtype != want or p.stride() != bt3[0].stride():
            raise ValueError(f"pieces must share shape and strides and be {want}")
    if bias is not None and (bias.shape != (N,) or bias.dtype != torch.float32):
        raise ValueError(f"bias must be float32 of shape ({N},), got {bias.dtype} {tuple(bias.shape)}")
    if out is None:
        out3 = torch.empty((Z, M, N), dtype=torch.float32, device=a.device)
    else:
        out3 = out.unsqueeze(0) if out.dim() == 2 else out
        if out3.shape != (Z, M, N) or out3.dtype != torch.float32:
            raise ValueError(f"out must be float32 {(Z, M, N)}")
    if M == 0 or N == 0 or Z == 0:
        return out3[0] if squeeze else out3
    if K == 0:
        out3.zero_()
        if bias is not None:
            out3 += bias
        return out3[0] if squeeze else out3

    cfg = config or pick_config(spec, M, N, K)
    p = bt3 + (bt3[0],) * (3 - len(bt3))
    sbz = 0 if Zb == 1 else p[0].stride(0)
    cstrides = (0, 0, 0, 0)
    if cfg.concat:
        if spec.n_pieces == 3 and spec.name == "bf16x9":
            raise ValueError("concat kernels exist for tf32x3, bf16x3 and bf16x6")
        c1, c2 = concat if concat is not None else concat_pieces(bt3, spec)
        c1 = c1.unsqueeze(0) if c1.dim() == 2 else c1
        c2 = c1 if c2 is None else (c2.unsqueeze(0) if c2.dim() == 2 else c2)
        if c1.stride(-1) != 1 or c2.stride(-1) != 1:
            raise ValueError("concat operands must be K-contiguous")
        p = (p[0], c1, c2)
        cstrides = (0 if Zb == 1 else c1.stride(0), c1.stride(1), 0 if Zb == 1 else c2.stride(0), c2.stride(1))
    grid = (triton.cdiv(M, cfg.bm) * triton.cdiv(N, cfg.bn), Z)
    _emu_mm_kernel[grid](
        a3, p[0], p[1], p[2], bias if bias is not None else a3, out3, M, N, K,
        *a3.stride(), sbz, p[0].stride(1), p[0].stride(2), *out3.stride(), *cstrides,
        **_constexprs(spec, cfg, K, bias is not None),
    )
    return out3[0] if squeeze else out3


def _constexprs(spec: MethodSpec, cfg: KernelConfig, K: int, has_bias: bool) -> dict:
    return dict(
        FMT=_fmt(spec), NP=spec.n_pieces, SHIFT=spec.shift, METHOD=KERNEL_METHODS[spec.name], MODE=cfg.mode,
        DOT_FMT=2 if (_fmt(spec) == FMT_BF16 and _interpreting()) else _fmt(spec),
        HAS_BIAS=has_bias, EVEN_K=K % cfg.bk == 0,
        BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, CONCAT=cfg.concat, FAST_SPLIT=cfg.fast_split,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )


def emu_mm_compile(
    method: str | MethodSpec, M: int, N: int, K: int, *, has_bias: bool = False,
    config: KernelConfig | None = None, a_strides: tuple[int, int] | None = None,
):
    """Compile (without running) the kernel :func:`emu_mm` launches for a 2-D contiguous-output product.

    ``a_strides`` defaults to a contiguous (M, K) ``a``; the pieces are contiguous (N, K). Returns
    Triton's compiled kernel (``.asm["ptx"]``, ``.n_regs``, ``.n_spills``); the on-disk cache then serves
    the real launch, so a pool of processes can compile a benchmark's kernels in parallel.
    """
    spec = get_method(method)
    cfg = config or pick_config(spec, M, N, K)
    sa = a_strides or (K, 1)
    f32, pd = torch.float32, piece_dtype(spec)
    return _emu_mm_kernel.warmup(
        f32, pd, pd, pd, f32, f32, M, N, K,
        M * K, sa[0], sa[1], 0, K, 1, M * N, N, 1,
        *((0, 2 * K, 0, 4 * K if spec.n_pieces == 3 else 2 * K) if cfg.concat else (0, 0, 0, 0)),
        grid=(1, 1), **_constexprs(spec, cfg, K, has_bias),
    )


# =====================================================================================================
# GEMM: REFERENCE
# =====================================================================================================


def emu_mm_reference(a: Tensor, b: Tensor, method: str | MethodSpec, bias: Tensor | None = None) -> Tensor:
    """``a @ b + bias`` by the executable spec (:func:`~tcemu.emulation.reference.mm_reference`)."""
    out = mm_reference(a, b, method)
    return out if bias is None else out + bias
