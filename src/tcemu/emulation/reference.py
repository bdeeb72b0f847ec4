"""REFERENCE emulated matrix product in plain PyTorch: the executable definition of each method.

It computes the same pieces and the same piece products as the GPU kernels, with FP32
matrix products standing in for the Tensor Core (piece products are exact in FP32: at most
11 + 11 significant bits), so on any device it shows each method's *algorithmic* error.
Accumulation order inside a level differs from a kernel's K-tiling; the error bounds do not.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from .methods import MethodSpec, get_method
from .split import split

__all__ = ["mm_reference", "ieee_fp32_matmul"]


@contextlib.contextmanager
def cuda_fp32_precision(mode: str):
    """Set CUDA's FP32 matmul precision (``"ieee"`` or ``"tf32"``) for the duration, then restore it.

    Uses the ``fp32_precision`` API where torch has it (2.9+): reading the legacy ``allow_tf32``
    after a user set the new API raises, so the legacy flag is only a fallback.
    """
    cuda = torch.backends.cuda.matmul
    if hasattr(cuda, "fp32_precision"):
        old = cuda.fp32_precision
        cuda.fp32_precision = mode
        try:
            yield
        finally:
            cuda.fp32_precision = old
    else:  # pragma: no cover - torch < 2.9
        old = cuda.allow_tf32
        cuda.allow_tf32 = mode == "tf32"
        try:
            yield
        finally:
            cuda.allow_tf32 = old


def ieee_fp32_matmul(a: Tensor, b: Tensor) -> Tensor:
    """``torch.matmul`` in true FP32 (TF32 disabled on CUDA, whatever the global setting)."""
    if a.is_cuda:
        with cuda_fp32_precision("ieee"):
            return torch.matmul(a, b)
    return torch.matmul(a, b)


def _finite_or_zero(x: Tensor) -> Tensor:
    return torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))


def mm_reference(
    a: Tensor,
    b: Tensor,
    method: str | MethodSpec,
    *,
    b_pieces: tuple[Tensor, ...] | None = None,
) -> Tensor:
    """Emulated ``torch.matmul(a, b)`` for float32 ``a`` (..., M, K) and ``b`` (..., K, N).

    Args:
        a, b: float32 tensors with ``torch.matmul`` shapes (at least 2-D here; batch dims broadcast).
        method: a method name or :class:`~tcemu.emulation.methods.MethodSpec`.
        b_pieces: pieces of ``b`` from :func:`~tcemu.emulation.split.split` (e.g. cached weight pieces);
            must equal ``split(b, method)``.

    Returns:
        float32 tensor (..., M, N).
    """
    spec = get_method(method)
    if spec.piece_format == "fp32":
        return ieee_fp32_matmul(a, b)
    pa = split(a, spec)
    pb = b_pieces if b_pieces is not None else split(b, spec)
    if len(pb) < spec.n_pieces:
        raise ValueError(f"b_pieces has {len(pb)} pieces, {spec.name} needs {spec.n_pieces}")

    def level_sum(products: tuple[tuple[int, int], ...]) -> Tensor:
        acc = None
        for i, j in products:  # accumulation order of the spec: small first
            p = ieee_fp32_matmul(pa[i], pb[j])
            acc = p if acc is None else acc + p
        return acc

    levels = spec.levels
    high = level_sum(levels[0])
    if len(levels) == 1:
        return high
    down = 2.0**-spec.shift
    # Correction levels, smallest first, each scaled down by 2^-s into the next; non-finite
    # values there come only from Inf/NaN inputs (whose NaN pieces are dropped), and the
    # high level already carries those exactly as an FP32 matmul would.
    total = _finite_or_zero(level_sum(levels[-1]))
    for lvl in range(len(levels) - 2, 0, -1):
        total = total * down
        if levels[lvl]:
            total = total + _finite_or_zero(level_sum(levels[lvl]))
    return total * down + high


