"""What the emulated products need under torch's function transforms: forward-mode AD, ``torch.func`` and
the batched gradients of ``torch.autograd.grad(..., is_grads_batched=True)``.

* Forward-mode AD (``torch.func.jvp``, ``jacfwd``, ``torch.autograd.forward_ad`` dual tensors) and the
  ``torch.func`` transforms (``vmap``, ``grad``, ``jacrev``, ``hessian``) see a product only through its
  autograd Function (its ``jvp`` and ``vmap`` rules), so a product whose inputs carry a tangent or a transform
  goes through the Function even where no input requires grad: :func:`needs_function`.
* ``is_grads_batched=True`` runs the backward under torch's legacy vmap, which knows no Function rules: the
  products there take their operands' batch dimension off, run once batched, and put it back
  (:func:`legacy_batched`).

Batched operands carry their batch dimension first; :func:`batched_matmul_operands` aligns them with the
unbatched ones for one emulated product (the Functions' ``vmap`` rules in :mod:`tcemu.emulation.ops` use it too),
so a product under a transform stays emulated. The forward-mode gap under ``torch.compile`` and the
refusal of ``make_fx`` tracing are in docs/emulation.md ("Function transforms").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor
from torch.autograd import forward_ad

__all__ = ["needs_function", "compiled_under_transform", "with_fp32_derivative", "has_tangent", "batched_or_dual", "legacy_level", "legacy_batched",
           "batched_matmul_operands", "refuse_proxy_tracing"]

_functorch = torch._C._functorch
_is_legacy = _functorch.is_legacy_batchedtensor


def has_tangent(*tensors: Tensor | None) -> bool:
    """Whether a forward-AD level is open and some tensor carries a tangent at it (a legacy-batched tensor is
    a batch of tangents itself, as ``torch.autograd.functional.jacobian(strategy="forward-mode")`` makes)."""
    if forward_ad._current_level < 0:
        return False
    return any(t is not None and not _is_legacy(t) and forward_ad.unpack_dual(t).tangent is not None
               for t in tensors)


def needs_function(*tensors: Tensor | None) -> bool:
    """Whether a product of these operands must run through its autograd Function although no operand
    requires grad (eager code): a ``torch.func`` transform is active, or an operand is a forward-AD dual."""
    if torch.compiler.is_compiling():
        return False
    return torch._C._are_functorch_transforms_active() or has_tangent(*tensors)


def compiled_under_transform() -> bool:
    """Whether torch.compile traces a product inside a ``torch.func`` transform (``grad``, ``jacrev``, ``jvp``,
    ``hessian``, ``vmap``): Dynamo traces the function without the transform's tensors, so neither the
    Functions' rules nor ``requires_grad`` are seen, and the traced bit-level split has zero derivative."""
    return torch.compiler.is_compiling() and torch._C._are_functorch_transforms_active()


def _finite(t: Tensor) -> Tensor:
    return torch.where(torch.isfinite(t), t, torch.zeros((), dtype=t.dtype, device=t.device))


def with_fp32_derivative(value: Tensor, a: Tensor, b: Tensor, bias: Tensor | None,
                         product: Callable[[Tensor, Tensor], Tensor]) -> Tensor:
    """``value`` (the emulated ``a @ b + bias``, computed from detached operands), carrying the derivatives of
    the FP32 product ``product(a, b) + bias`` to every order, for :func:`compiled_under_transform`.

    The added term ``product(a - a', b) + product(a', b - b') + (bias - bias')`` (``'``: detached, non-finite
    entries of the multiplied operand as 0) is zero in value and has the product's derivatives, cross terms of
    second order included; it is added as a negative zero so that no signed zero of ``value`` changes.
    """
    term = product(a - a.detach(), _finite(b)) + product(_finite(a.detach()), b - b.detach())
    if bias is not None:
        term = term + (bias - bias.detach())
    return value + -((-term) + 0.0)


def refuse_proxy_tracing(op: str) -> None:
    """Raise where ``make_fx`` traces an emulated product outside torch.compile (``torch.func.linearize``,
    functorch's ``aot_function``): the reference's range fix-up decides on the data, and the Triton kernels
    launched in eager code would not be in the graph."""
    if not torch.compiler.is_compiling() and \
            torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY) is not None:
        raise RuntimeError(f"tcemu.{op}: emulated products cannot be traced by make_fx outside torch.compile "
                           "(torch.func.linearize, aot_function); use torch.func.jvp for tangents, or torch.compile")


#: the deepest legacy vmap level :func:`legacy_level` looks for on a tensor
_MAX_LEGACY_LEVEL = 64


def legacy_level(*tensors: Tensor | None) -> int | None:
    """The legacy vmap level (``is_grads_batched=True``) of batched operands among ``tensors``, else None.

    The level is this thread's legacy vmap nesting where the vmap runs here; a CUDA backward runs on autograd's
    own threads, whose nesting is 0, so the level is then read off the tensor: the one whose removal leaves a
    plain tensor (where none does, the operand is batched at several levels and the thread's is returned)."""
    if torch.compiler.is_compiling():
        return None
    for t in tensors:  # (a loop, not any(): this runs for every eager product)
        if t is not None and _is_legacy(t):
            break
    else:
        return None
    here = torch._C._vmapmode_increment_nesting() - 1
    torch._C._vmapmode_decrement_nesting()
    for level in (here, *range(1, _MAX_LEGACY_LEVEL + 1)):
        if level >= 1 and not _is_legacy(torch._remove_batch_dim(t, level, 1, 0)):
            return level
    return max(here, 1)


def batched_or_dual(*tensors: Tensor | None) -> bool:
    """Whether a product of these operands is under a transform (:func:`needs_function`, or legacy-batched
    operands): it must not go straight to a GEMM backend or a fused kernel."""
    return needs_function(*tensors) or legacy_level(*tensors) is not None


def legacy_batched(level: int, fn: Callable[..., Tensor], *tensors: Tensor | None) -> Tensor:
    """``fn(*physical, batched)`` on the operands with the legacy vmap ``level``'s batch dimension taken off
    (first, size 1 where an operand has none there; ``batched[i]``: whether ``physical[i]`` has it), its
    result (batch dimension first) batched again at ``level``."""
    physical, batched = [], []
    for t in tensors:
        if t is not None and _functorch.is_legacy_batchedtensor(t):
            p = torch._remove_batch_dim(t, level, 1, 0)
            if _functorch.is_legacy_batchedtensor(p):
                raise NotImplementedError(
                    "tcemu: emulated products under a legacy vmap nested in another (torch._vmap_internals, "
                    "is_grads_batched=True inside one) are not supported; use torch.func.vmap")
            physical.append(p)
            batched.append(True)
        else:
            physical.append(t)
            batched.append(False)
    return torch._add_batch_dim(fn(*physical, batched), 0, level)


def batched_matmul_operands(a: Tensor, a_batched: bool, b: Tensor, b_batched: bool) -> tuple[Tensor, Tensor]:
    """``a`` and ``b`` (both at least 2-D, a batch dimension first where ``*_batched``) such that
    ``torch.matmul`` broadcasting of the pair gives the batched product, batch dimension first: a batched
    operand gets size-1 dimensions after its batch dimension up to the other operand's logical rank."""
    rank = max(a.dim() - a_batched, b.dim() - b_batched)

    def pad(x: Tensor, is_batched: bool) -> Tensor:
        if not is_batched:
            return x
        return x.reshape(x.shape[0], *([1] * (rank - (x.dim() - 1))), *x.shape[1:])

    return pad(a, a_batched), pad(b, b_batched)
