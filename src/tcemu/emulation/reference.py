"""REFERENCE emulated matrix product in plain PyTorch: the executable definition of each method.

It computes the same pieces and the same piece products as the GPU kernels, with FP32
matrix products standing in for the Tensor Core (piece products are exact in FP32: at most
11 + 11 significant bits), so on any device it shows each method's *algorithmic* error.
Accumulation order inside a level differs from a kernel's K-tiling; the error bounds do not.
Elements where a level is not finite are computed again with exact power-of-two scaling (:func:`mm_range_scaled`),
as the kernels' range fix-up does.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor

from .methods import MethodSpec, get_method
from .split import power_of_two, range_scale_exponents, scale_down, split

__all__ = ["mm_reference", "mm_range_scaled", "ieee_fp32_matmul", "no_autocast"]


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


def no_autocast(device_type: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` off for ``device_type`` if it is on: under autocast torch runs float32 products in
    bf16/fp16, which would make an emulated product's pieces (and its result) low precision. An emulated product
    is FP32-faithful and float32 whatever autocast says."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def ieee_fp32_matmul(a: Tensor, b: Tensor) -> Tensor:
    """``torch.matmul`` in true FP32 (TF32 disabled on CUDA, autocast off, whatever the global settings)."""
    with no_autocast(a.device.type):
        if a.is_cuda:
            with cuda_fp32_precision("ieee"):
                return torch.matmul(a, b)
        return torch.matmul(a, b)


def _finite_or_zero(x: Tensor) -> Tensor:
    return torch.where(torch.isfinite(x), x, torch.zeros((), dtype=x.dtype, device=x.device))


def _emulate(pa: tuple[Tensor, ...], pb: tuple[Tensor, ...], spec: MethodSpec) -> tuple[Tensor, Tensor]:
    """(C, bad): the method's levels from the pieces, combined as the spec says, and where (a bool tensor of C's
    shape) some level or the result is not finite: an Inf/NaN input or an overflow."""

    def level_sum(products: tuple[tuple[int, int], ...]) -> Tensor:
        acc = None
        for i, j in products:  # accumulation order of the spec: small first
            p = ieee_fp32_matmul(pa[i], pb[j])
            acc = p if acc is None else acc + p
        return acc

    levels = spec.levels
    high = level_sum(levels[0])
    bad = ~torch.isfinite(high)
    if len(levels) == 1:
        return high, bad
    down = 2.0**-spec.shift
    # Correction levels, smallest first, each scaled down by 2^-s into the next. Non-finite values there are
    # set to 0: they come from Inf/NaN inputs (whose NaN pieces are dropped; the high level carries those
    # exactly as an FP32 matmul would) or from an overflow; either way the row is flagged.
    total = level_sum(levels[-1])
    bad |= ~torch.isfinite(total)
    total = _finite_or_zero(total)
    for lvl in range(len(levels) - 2, 0, -1):
        total = total * down
        if levels[lvl]:
            corr = level_sum(levels[lvl])
            bad |= ~torch.isfinite(corr)
            total = total + _finite_or_zero(corr)
    out = total * down + high
    return out, bad | ~torch.isfinite(out)


def mm_range_scaled(a: Tensor, b: Tensor, method: str | MethodSpec) -> Tensor:
    """The method's product with exact power-of-two scaling: the spec's rule for the rows that
    :func:`mm_reference` flags (some level not finite).

    Row i of ``a`` is scaled by ``2^-k_i`` and column j of ``b`` by ``2^-l_j`` (:func:`~tcemu.emulation.split.
    range_scale_exponents` with :meth:`~tcemu.emulation.methods.MethodSpec.range_threshold`: no level can
    overflow), both are split and multiplied as the spec says, and ``C_ij = (C'_ij 2^k_i) 2^l_j`` (two exact
    multiplications; an overflow there is the result's own). Inf and NaN inputs pass unscaled.
    """
    spec = get_method(method)
    threshold = spec.range_threshold(a.shape[-1])
    ka = range_scale_exponents(a, -1, threshold)
    lb = range_scale_exponents(b, -2, threshold)
    scaled, _ = _emulate(split(scale_down(a, ka), spec), split(scale_down(b, lb), spec), spec)
    return scaled * power_of_two(ka) * power_of_two(lb)


def _fix(a: Tensor, b: Tensor, spec: MethodSpec, out: Tensor, bad: Tensor) -> Tensor:
    """``out`` with its ``bad`` elements computed again by :func:`mm_range_scaled`: the rows that hold them (or,
    where b is batched, the batch entries that do); every other element keeps its bits."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    if b.dim() == 2:  # one b for every row of a: recompute the flagged rows only
        flat, bad2 = out.reshape(-1, N).clone(), bad.reshape(-1, N)
        idx = bad2.any(-1).nonzero().squeeze(1)
        flat[idx] = torch.where(bad2[idx], mm_range_scaled(a.reshape(-1, K)[idx], b, spec), flat[idx])
        return flat.view(out.shape)
    batch = out.shape[:-2]
    a3 = a.expand(*batch, M, K).reshape(-1, M, K)
    b3 = b.expand(*batch, K, N).reshape(-1, K, N)
    out3, bad3 = out.reshape(-1, M, N).clone(), bad.reshape(-1, M, N)
    z = bad3.flatten(1).any(-1).nonzero().squeeze(1)
    out3[z] = torch.where(bad3[z], mm_range_scaled(a3[z], b3[z], spec), out3[z])
    return out3.view(out.shape)


def _in_graph(t: Tensor) -> bool:
    """Whether data-dependent control flow is unavailable (torch.compile tracing, CUDA graph capture)."""
    return torch.compiler.is_compiling() or (t.is_cuda and torch.cuda.is_current_stream_capturing())


def mm_reference(
    a: Tensor,
    b: Tensor,
    method: str | MethodSpec,
    *,
    b_pieces: tuple[Tensor, ...] | None = None,
) -> Tensor:
    """Emulated ``torch.matmul(a, b)`` for float32 ``a`` (..., M, K) and ``b`` (..., K, N).

    The method's levels, combined as the spec says; the elements where some level (or the result) is not
    finite are then computed again by :func:`mm_range_scaled` (on the rows that hold them), so that no false
    overflow and no lost correction level remains (docs/emulation.md, "The top of the range"). Where no host
    decision is possible (torch.compile tracing, CUDA graph capture) every row is also computed scaled and the
    flagged elements are selected: twice the work there.

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
    out, bad = _emulate(pa, pb, spec)
    if _in_graph(out):  # no host decision possible: both results, selected by element
        return torch.where(bad, mm_range_scaled(a, b, spec), out)
    if bad.any():
        out = _fix(a, b, spec, out, bad)
    return out
