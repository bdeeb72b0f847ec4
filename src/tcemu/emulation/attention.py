"""Scaled-dot-product attention with emulated FP32 products: ``tcemu.scaled_dot_product_attention``.

``torch.nn.functional.scaled_dot_product_attention`` on float32 runs its Q K^T and P V products in FP32
(cuBLAS/CUTLASS SIMT) or, with TF32 allowed, in single-pass TF32. Here the two products are emulated by a
split method (TF32x3, BF16x3, BF16x6, BF16x9) and the softmax stays in FP32:

* reference (any device, ``backend="torch"``): :func:`tcemu.matmul` for both products, with autograd, so
  double backward (training on forces) works;
* fused Triton kernels (``backend="triton"``, or ``"auto"`` with the configuration's ``fused_attention``; CUDA, and the CPU under
  ``TRITON_INTERPRET=1``): self-attention
  with L and D up to 128; the gradient of a mask shared by the heads
  (PET's cutoff weights, which need one for the forces) is summed over the heads in head order (deterministic). TF32x3,
  BF16x3, BF16x6. A backward with ``create_graph=True`` (double backward: training on forces) computes the
  gradients through the reference instead, so that they can be differentiated again.

Inside ``tcemu.emulation_mode(method, attention=True)`` every float32 ``F.scaled_dot_product_attention``
call without dropout or causal masking runs here.

On an H200, PET S's attention (17,280 atoms, 8 heads of 32 over 41 tokens) takes 11.75 ms forward+backward
fused in TF32x3 against torch's float32 19.1 ms (1.62x) and the reference's 51.8 ms; PET M's (8 heads of 48)
24.5 ms against 23.3 ms (0.95x) and 56.8 ms (docs/attention.md). So ``backend="auto"`` runs the fused kernels
where they apply (``TCEMU_FUSED_ATTENTION=0``: the reference).
"""

from __future__ import annotations

import collections
import functools
import logging
import math

import torch
from torch import Tensor

from .._hw import interpreting, shared_memory_per_block
from .configuration import backward_config, for_backward, setting
from .methods import MethodSpec, get_method
from .ops import matmul
from .reference import no_autocast
from .transforms import batched_or_dual

log = logging.getLogger("tcemu.emulation.attention")

__all__ = ["scaled_dot_product_attention", "sdpa_reference", "fused_smem_bytes", "FUSED_METHODS", "MAX_FUSED_LEN",
           "HEADS_PER_PROGRAM", "FUSED_MIN_HEADS", "fallback_stats"]

#: methods with a fused kernel; the others run the reference
FUSED_METHODS = ("tf32x3", "bf16x3", "bf16x6")
#: longest sequence and head dimension of the fused kernels (one tile per head)
MAX_FUSED_LEN = 128
#: heads per program of the fused forward kernel (the largest divisor of H up to this). Several heads per
#: program: the loads of the next head are pipelined under the current one's products, and a mask shared by the
#: heads is loaded once. None (default): all of H up to ``AUTO_HEADS_PER_PROGRAM`` for tiles of at most
#: ``AUTO_HPP_MAX_TILE`` elements and L at most 64 (4-warp launches), else 1. Measured on the H200 for PET S
#: (docs/attention.md): 8 heads per program 2.64-2.66 ms forward, 2 heads 3.01, 1 head 3.39-3.45
HEADS_PER_PROGRAM: int | None = None
AUTO_HEADS_PER_PROGRAM = 8
#: small batches: below ``FUSED_MIN_HEADS`` heads in all (B x H), ``backend="auto"`` on CUDA runs torch's own
#: FP32 attention instead of the fused kernels (FP32 accuracy kept): their programs are then too few to fill the
#: GPU. Measured on the H200 with PET S's heads (8 of 32 over 41 tokens), TF32x3 forward+backward against
#: torch's FP32: 1,536 heads (192 atoms) 0.32x, 6,144 0.97x, 12,288 1.60x, 49,152 1.61x, 138,240 1.62x
#: (benchmarks/results/h200/attention/batch_sweep.csv). Off: ``tcemu.config(attention_fallback=False)`` or
#: ``TCEMU_ATTENTION_FALLBACK=0``; :func:`fallback_stats` counts the calls.
FUSED_MIN_HEADS = 12288
_FALLBACKS: collections.Counter = collections.Counter()
#: largest L x D tile (padded) given several heads per program by default: the pipelined head loop multiplies
#: the forward's shared memory (64 KB at PET S's 64 x 32; at 64 x 64, 128 KB and a spill, untimed)
AUTO_HPP_MAX_TILE = 64 * 32


def _check(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None) -> None:
    for name, t in (("query", q), ("key", k), ("value", v)):
        if not isinstance(t, Tensor) or t.dtype != torch.float32:
            raise TypeError(f"tcemu.scaled_dot_product_attention: {name} must be a float32 tensor, got "
                            f"{getattr(t, 'dtype', type(t))}; convert it, or call torch's own for other dtypes")
        if t.dim() < 2:
            raise ValueError(f"tcemu.scaled_dot_product_attention: {name} needs at least 2 dimensions (..., L, D)")
    if q.shape[-1] != k.shape[-1] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"tcemu.scaled_dot_product_attention: shapes query {tuple(q.shape)}, key "
                         f"{tuple(k.shape)}, value {tuple(v.shape)} do not form an attention")
    if attn_mask is not None and attn_mask.dtype not in (torch.float32, torch.bool):
        raise TypeError(f"tcemu.scaled_dot_product_attention: attn_mask must be float32 (added to the scores) or "
                        f"bool (True = keep), got {attn_mask.dtype}")
    if len({t.device for t in (q, k, v)} | ({attn_mask.device} if attn_mask is not None else set())) != 1:
        raise ValueError("tcemu.scaled_dot_product_attention: all tensors must be on one device")


def _default_scale(q: Tensor) -> float:
    """1 / sqrt(D), as torch; for D = 0 the scores are empty sums, 0 whatever the scale (torch's too): 1."""
    return 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0


def _additive(attn_mask: Tensor | None) -> Tensor | None:
    if attn_mask is None or attn_mask.dtype != torch.bool:
        return attn_mask
    return torch.zeros(attn_mask.shape, dtype=torch.float32, device=attn_mask.device).masked_fill(
        ~attn_mask, float("-inf"))


@functools.cache
def _torch_zeroes_dead_rows() -> bool:
    """Whether torch's own SDPA gives 0 (not NaN) for a query row whose scores are all -inf (every key masked
    out). Read from the installed torch once, on the CPU (torch 2.5+ zeroes such rows, older versions give NaN),
    so that the reference and the fused kernels follow it."""
    with torch._C.DisableTorchFunction(), torch.no_grad():  # not through an active emulation_mode
        one = torch.ones(1, 1, 1)
        out = torch.nn.functional.scaled_dot_product_attention(one, one, one,
                                                               attn_mask=torch.zeros(1, 1, dtype=torch.bool))
    return bool(out.item() == 0)


@torch.compiler.assume_constant_result
def zeroes_dead_rows() -> bool:
    """:func:`_torch_zeroes_dead_rows`, a constant of the graph under torch.compile."""
    return _torch_zeroes_dead_rows()


def _softmax(s: Tensor) -> Tensor:
    """softmax over the keys; a row of scores that are all -inf gives what torch's SDPA gives (0, with zero
    gradients, where torch zeroes it; else softmax's NaN)."""
    if not zeroes_dead_rows():
        return torch.softmax(s, dim=-1)
    dead = (s == float("-inf")).all(-1, keepdim=True)
    return torch.softmax(s.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)


def sdpa_reference(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, *, scale: float | None = None,
                   method: str | MethodSpec = "tf32x3", backend: str = "torch") -> Tensor:
    """softmax(Q K^T * scale + mask) V with both products by :func:`tcemu.matmul` (autograd through both)."""
    spec = get_method(method)
    scale = _default_scale(q) if scale is None else scale
    s = matmul(q, k.transpose(-2, -1), spec, backend=backend) * scale
    mask = _additive(attn_mask)
    if mask is not None:
        s = s + mask
    return matmul(_softmax(s), v, spec, backend=backend)


def fused_smem_bytes(method: str, lp: int, dp: int, heads_per_program: int = 1) -> int:
    """Upper bound of the fused kernels' shared memory for (L, D) tiles (lp, dp), any of ``FUSED_METHODS``:
    8 bytes per L x D tile element (4x that when several heads per program pipeline the forward's loads) or 6
    per L x L element (the backward's dS), whichever is larger. A bound on Triton 3.6's sm_90 compiles of the
    three kernels for tiles of 16-128 (docs/attention.md), equal to them at 128 x 128 (TF32x3: 128 KB)."""
    if method not in FUSED_METHODS:
        raise ValueError(f"no fused kernel for {method!r} (methods {', '.join(FUSED_METHODS)})")
    return max(8 * lp * dp * (4 if heads_per_program > 1 else 1), 6 * lp * lp)


def _smem_limit(device: torch.device) -> int | None:
    """Shared memory a block may use on ``device`` (None off CUDA: the interpreter has no limit)."""
    if device.type != "cuda":
        return None
    return shared_memory_per_block(device)


def _fused_unsupported(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, spec: MethodSpec) -> str | None:
    """Why the fused kernels cannot run this attention (None: they can)."""
    if spec.name not in FUSED_METHODS:
        return f"no fused kernel for {spec.name} (methods {', '.join(FUSED_METHODS)})"
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        return "the fused kernels take self-attention with 4-D (B, H, L, D) query, key and value of one shape"
    if q.device.type != "cuda" and not interpreting():
        return f"the fused kernels run on CUDA (got {q.device})"
    B, H, L, D = q.shape
    if L > MAX_FUSED_LEN or D > MAX_FUSED_LEN or min(B, H, L, D) == 0:
        return f"L and D must be 1..{MAX_FUSED_LEN}"
    if mask is not None and (mask.dim() != 4 or mask.shape[2:] != (L, L) or mask.shape[0] not in (1, B)
                             or mask.shape[1] not in (1, H)):
        return "the mask must broadcast as (1 or B, 1 or H, L, L)"
    try:
        import triton  # noqa: PLC0415

        from .gemm._kernels import _attention  # noqa: F401, PLC0415 - Triton importable
    except ImportError:
        return "Triton is not installed (the 'triton' extra)"
    lp, dp = max(16, triton.next_power_of_2(L)), max(16, triton.next_power_of_2(D))
    need = fused_smem_bytes(spec.name, lp, dp, _heads_per_program(H, lp, dp))
    limit = _smem_limit(q.device)
    if limit is not None and need > limit:
        return f"its tiles need about {need // 1024} KB of shared memory, the device allows {limit // 1024} KB"
    return None


def fallback_stats() -> dict[tuple[int, ...], int]:
    """How often each (B, H, L, D) attention ran torch's FP32 attention as a small batch, in eager code."""
    return dict(_FALLBACKS)


def _small_batch(q: Tensor) -> bool:
    """Whether ``backend="auto"`` runs torch's FP32 attention for this (B, H, L, D) query (CUDA only)."""
    if not setting("attention_fallback") or q.device.type != "cuda" or q.shape[0] * q.shape[1] >= FUSED_MIN_HEADS:
        return False
    if not torch.compiler.is_compiling():  # decided at trace time under torch.compile; counted in eager code
        key = tuple(q.shape)
        if key not in _FALLBACKS:
            log.info("tcemu: attention %s has fewer than %d heads in all: torch's FP32 attention instead",
                     key, FUSED_MIN_HEADS)
        _FALLBACKS[key] += 1
    return True


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask: Tensor | None = None, *,
                                 scale: float | None = None, method: str | MethodSpec = "tf32x3",
                                 backend: str = "auto") -> Tensor:
    """Emulated-FP32 ``F.scaled_dot_product_attention(q, k, v, attn_mask, scale=scale)`` (no dropout, not causal).

    Args:
        q, k, v: float32 (..., L, D), (..., S, D), (..., S, Dv).
        attn_mask: float32 added to the scores, or bool (True = attend), broadcastable to (..., L, S).
        scale: score scale; default 1 / sqrt(D), as torch.
        method: emulation method of the two products.
        backend: ``"auto"`` (the fused kernels where they apply if the configuration's ``fused_attention``, else the reference;
            on CUDA, batches of fewer than ``FUSED_MIN_HEADS`` heads in all run torch's FP32 attention),
            ``"torch"`` (reference) or ``"triton"`` (the fused kernels; ValueError where they do not apply).

    Returns:
        float32 (..., L, Dv).
    """
    _check(q, k, v, attn_mask)
    spec = get_method(method)
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"unknown backend {backend!r}; choose auto, torch or triton")
    scale = _default_scale(q) if scale is None else float(scale)
    mask = _additive(attn_mask)
    if mask is not None and q.dim() == 4 and mask.dim() < 4:  # as torch broadcasts it (a view: gradients flow back)
        mask = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    fused = backend == "triton" or (backend == "auto" and setting("fused_attention"))
    reason = _fused_unsupported(q, k, v, mask, spec) if fused else None
    if fused and reason is None and not batched_or_dual(q, k, v, mask):
        if backend == "auto" and _small_batch(q):
            with no_autocast(q.device.type):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, scale=scale)
        return torch.ops.tcemu.attention_fwd(q, k, v, mask, scale, spec.name)[0]
    if backend == "triton" and reason is not None:
        raise ValueError(f"tcemu.scaled_dot_product_attention: no fused kernel for {spec.name} on shapes "
                         f"{tuple(q.shape)} / {tuple(k.shape)} on {q.device}: {reason}; use backend='auto' "
                         "(the reference)")
    # here too under a function transform (vmap, jvp, is_grads_batched), for which the fused ops have no rules:
    # the reference's products are emulated under them
    return sdpa_reference(q, k, v, mask, scale=scale, method=spec, backend="torch" if backend == "torch" else "auto")


# ------------------------------------------------------------------------------------------- fused kernels

_LIB = torch.library.Library("tcemu", "FRAGMENT")  # noqa: TOR901 - kept alive for the process
_LIB.define("attention_fwd(Tensor q, Tensor k, Tensor v, Tensor? mask, float scale, str method) -> (Tensor, Tensor)")
_LIB.define("attention_bwd(Tensor q, Tensor k, Tensor v, Tensor? mask, Tensor o, Tensor lse, Tensor do, float scale, "
            "str method, bool mask_grad) -> (Tensor, Tensor, Tensor, Tensor)")


def _heads_per_program(H: int, lp: int, dp: int) -> int:
    """Heads per program for H heads on (lp, dp) tiles: ``HEADS_PER_PROGRAM`` or the automatic choice, rounded
    down to a divisor of H."""
    want = HEADS_PER_PROGRAM
    if want is None:
        want = AUTO_HEADS_PER_PROGRAM if lp <= 64 and lp * dp <= AUTO_HPP_MAX_TILE else 1
    return max(d for d in range(1, min(H, max(1, want)) + 1) if H % d == 0)


def _launch_args(spec: MethodSpec, L: int, D: int, backward: bool = False) -> dict:
    """Constexprs, warps and register cap of the forward or backward kernels (4 warps up to 64-long tiles,
    measured on the H200: docs/attention.md); a sweep (benchmarks/attention.py) may override them."""
    import triton  # noqa: PLC0415

    from .gemm._kernels._split import FMT_BF16  # noqa: PLC0415
    from .gemm.launch import _fmt  # noqa: PLC0415

    fmt = _fmt(spec)
    lp, dp = max(16, triton.next_power_of_2(L)), max(16, triton.next_power_of_2(D))
    args = dict(FMT=fmt, NP=spec.n_pieces, SHIFT=spec.shift, DOT_FMT=2 if (fmt == FMT_BF16 and interpreting()) else fmt,
                LP=lp, DP=dp, num_warps=4 if lp <= 64 else 8)
    if backward and not interpreting() and (lp, dp) == (64, 32):
        # both backward kernels at 168 registers: 3 blocks per SM instead of 2 (PET S on the H200: 7.6 ms for
        # the two, against 8.6 uncapped; 8 B of spill in the offline compile of TF32x3's first kernel, 24 B BF16x6)
        args["maxnreg"] = 168
    return args


def _needs_wide_offsets(lp: int, dp: int, *tensors: Tensor) -> bool:
    """Whether an in-tile offset (LP or DP rows and columns of a (..., L, D)-like tensor) can exceed int32."""
    reach = max((lp - 1) * abs(t.stride(-2)) + (max(lp, dp) - 1) * abs(t.stride(-1)) for t in tensors)
    return reach >= 2**31


def _mask4(mask: Tensor | None, B: int, H: int, L: int) -> Tensor | None:
    return None if mask is None else mask.expand(B, H, L, L)


def _fwd_impl(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, method: str) -> tuple[Tensor, Tensor]:
    from .gemm._kernels._attention import _attn_fwd_kernel  # noqa: PLC0415

    spec = get_method(method)
    B, H, L, D = q.shape
    # O in (B, L, H, D) memory: O.transpose(1, 2).reshape(B, L, H * D), the usual next step, is then a view
    o = torch.empty((B, L, H, D), dtype=torch.float32, device=q.device).transpose(1, 2)
    lse = torch.empty((B, H, L), dtype=torch.float32, device=q.device)
    m4 = _mask4(mask, B, H, L)
    ms = m4.stride() if m4 is not None else (0, 0, 0, 0)
    args = _launch_args(spec, L, D)
    hpp = _heads_per_program(H, args["LP"], args["DP"])
    _attn_fwd_kernel[(B, H // hpp)](
        q, k, v, m4 if m4 is not None else q, o, lse, L, D, scale,
        *q.stride(), *k.stride(), *v.stride(), *ms, *o.stride(), *lse.stride()[:2],
        HAS_MASK=m4 is not None, MASK_PER_HEAD=mask is not None and mask.shape[1] == H, HPP=hpp,
        ZERO_DEAD_ROWS=zeroes_dead_rows(), **args)
    return o, lse


def _bwd_impl(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, o: Tensor, lse: Tensor, do: Tensor,
              scale: float, method: str, mask_grad: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    from .gemm._kernels._attention import _attn_bwd_dqdk_kernel, _attn_bwd_ds_kernel  # noqa: PLC0415

    spec = get_method(method)
    B, H, L, D = q.shape
    dq, dk, dv = (torch.empty((B, H, L, D), dtype=torch.float32, device=q.device) for _ in range(3))
    m4 = _mask4(mask, B, H, L)
    ms = m4.stride() if m4 is not None else (0, 0, 0, 0)
    per_head = mask is not None and mask.shape[1] == H
    mask_grad = bool(mask_grad and mask is not None)
    dm_shape = (B, H if per_head else 1, L, L) if mask_grad else (0,)
    dm = torch.empty(dm_shape, dtype=torch.float32, device=q.device)
    sum_heads = mask_grad and not per_head  # a mask shared by the heads: the second kernel sums their dS
    args = _launch_args(spec, L, D, True)
    ds = torch.empty((B, H, L, args["LP"]), dtype=torch.float32, device=q.device)  # dS, rows padded to LP
    wide = _needs_wide_offsets(args["LP"], args["DP"], q, k, v, o, do, ds, *((m4,) if m4 is not None else ()))
    dms = (dm.stride(0), dm.stride(1)) if mask_grad else (0, 0)
    _attn_bwd_ds_kernel[(B, H)](
        q, k, v, m4 if m4 is not None else q, o, lse, do, dv, dm, ds, H, L, D, scale,
        *q.stride(), *k.stride(), *v.stride(), *ms, *o.stride(), *lse.stride()[:2], *do.stride(), *dms,
        HAS_MASK=m4 is not None, MASK_GRAD=mask_grad and per_head, WIDE=wide, ZERO_DEAD_ROWS=zeroes_dead_rows(),
        **args)
    _attn_bwd_dqdk_kernel[(B, 1 if sum_heads else H)](
        q, k, ds, dq, dk, dm, H, L, D, scale, *q.stride(), *k.stride(), dms[0],
        SUM_HEADS=sum_heads, WIDE=wide, **args)
    if mask_grad and mask.shape[0] == 1 and B > 1:
        dm = dm.sum(0, keepdim=True)
    return dq, dk, dv, dm


for _name, _fn in (("attention_fwd", _fwd_impl), ("attention_bwd", _bwd_impl)):
    _LIB.impl(_name, _fn, "CUDA")
    _LIB.impl(_name, _fn, "CPU")  # CPU tensors: the kernels under TRITON_INTERPRET=1 (tests)


@torch.library.register_fake("tcemu::attention_fwd", lib=_LIB)
def _fwd_fake(q, k, v, mask, scale, method):
    B, H, L, D = q.shape
    return q.new_empty((B, L, H, D)).transpose(1, 2), q.new_empty((B, H, L))


@torch.library.register_fake("tcemu::attention_bwd", lib=_LIB)
def _bwd_fake(q, k, v, mask, o, lse, do, scale, method, mask_grad):
    B, H, L, D = q.shape
    dm_shape = (mask.shape[0], mask.shape[1], L, L) if (mask_grad and mask is not None) else (0,)
    return q.new_empty(q.shape), q.new_empty(q.shape), q.new_empty(q.shape), q.new_empty(dm_shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, mask, scale, method = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, mask, o, lse)
    ctx.scale, ctx.method = scale, method
    ctx.mask_grad = mask is not None and mask.requires_grad
    ctx.settings = for_backward()  # the double backward's reference reads them (its small-shape fallback)


def _backward(ctx, do, _dlse):
    q, k, v, mask, o, lse = ctx.saved_tensors
    if torch.is_grad_enabled() or batched_or_dual(do, q, k, v, mask):
        # create_graph (double backward, e.g. training on forces), or a batched or dual gradient
        # (is_grads_batched, forward-over-reverse): the gradients through the reference, whose own graph can be
        # differentiated again and whose products have the transforms' rules
        create_graph = torch.is_grad_enabled()
        needs = (*ctx.needs_input_grad[:3], ctx.mask_grad)
        wrt = [t for t, need in zip((q, k, v, mask), needs) if need]  # (the others may not require grad)
        with torch.enable_grad(), backward_config(ctx):
            out = sdpa_reference(q, k, v, mask, scale=ctx.scale, method=ctx.method, backend="auto")
            found = iter(torch.autograd.grad(out, wrt, do, create_graph=create_graph, allow_unused=True))
        grads = [next(found) if need else None for need in needs]
        return *grads, None, None
    dq, dk, dv, dm = torch.ops.tcemu.attention_bwd(q, k, v, mask, o, lse, do, ctx.scale, ctx.method, ctx.mask_grad)
    return dq, dk, dv, (dm if ctx.mask_grad else None), None, None


torch.library.register_autograd("tcemu::attention_fwd", _backward, setup_context=_setup_context, lib=_LIB)
