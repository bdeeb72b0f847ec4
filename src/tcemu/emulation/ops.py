"""``tcemu.matmul`` and ``tcemu.linear``: emulated FP32 products with autograd.

One :class:`torch.autograd.Function` per op runs the output GEMM in ``forward`` and the
input / weight gradients in ``backward``, each under its own method (:class:`GemmConfig`):
the input gradient uses the forward method by default, the weight gradient is configurable.
Backward passes call the differentiable ops again, so double backward (training on forces)
works too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .configuration import backward_config, for_backward
from .dispatch import GemmBackend, resolve_backend
from .methods import MethodSpec, get_method
from .reference import ieee_fp32_matmul, no_autocast
from .transforms import (batched_matmul_operands, batched_or_dual, compiled_under_transform, legacy_batched,
                         legacy_level, needs_function, refuse_proxy_tracing, with_fp32_derivative)

__all__ = ["GemmConfig", "OperandError", "matmul", "linear", "check_operands", "emulable"]

_DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class GemmConfig:
    """Methods of the three GEMMs of a product and the backend that runs them.

    Attributes:
        forward: method of the output GEMM.
        grad_input: method of the input-gradient GEMM (``dy @ W``); defaults to ``forward``.
        grad_weight: method of the weight-gradient GEMM (``dy^T @ x``); defaults to ``forward``.
        backend: ``"auto"`` (Triton on CUDA where available, else the PyTorch reference),
            ``"torch"`` or ``"triton"``.
    """

    forward: MethodSpec
    grad_input: MethodSpec
    grad_weight: MethodSpec
    backend: str = "auto"

    @classmethod
    def make(
        cls,
        method: str | MethodSpec,
        *,
        grad_input_method: str | MethodSpec | None = None,
        grad_weight_method: str | MethodSpec | None = None,
        backend: str = "auto",
    ) -> GemmConfig:
        fwd = get_method(method)
        if backend not in ("auto", "torch", "triton"):
            raise ValueError(f"unknown backend {backend!r}; choose auto, torch or triton")
        return cls(
            forward=fwd,
            grad_input=get_method(grad_input_method) if grad_input_method is not None else fwd,
            grad_weight=get_method(grad_weight_method) if grad_weight_method is not None else fwd,
            backend=backend,
        )

    def only(self, spec: MethodSpec) -> GemmConfig:
        """The config used for a gradient GEMM (and its own gradients, for double backward)."""
        return GemmConfig(spec, spec, spec, self.backend)

    @property
    def sgemm_key(self) -> str | None:
        """What :func:`sgemm_row_limit` needs of this config, as one string (one guard under torch.compile):
        ``"backend:method"`` where all three GEMMs use one method, else None (a mixed product is never traced
        as the FP32 model's linear)."""
        return f"{self.backend}:{self.forward.name}" if _one_method(self) else None


#: the largest row count :func:`sgemm_row_limit` searches (more rows than any product has)
_MAX_ROWS = 1 << 50


@torch.compiler.assume_constant_result
def sgemm_row_limit(key: str, device_type: str, device_index: int, N: int, K: int) -> int:
    """Under torch.compile: the largest M for which an M x K x N product of the ``key``'s method (and its
    gradients, of the same 2 M N K FLOPs) runs as IEEE FP32 cuBLAS SGEMM on this device, 0 where none does
    (``key``: :attr:`GemmConfig.sgemm_key`).

    Dynamo runs this at trace time and keeps the result as a constant, so an emulated layer on the fallback
    side pays one shape guard (``M <= limit``) instead of the guards of the backend's resolution code; the
    backends' ``runs_as_sgemm`` is monotone in M (a FLOP threshold), which the bisection relies on. Like the
    settings it reads, the result is a constant of the graph; the FP32 GEMM mode is in Dynamo's global-state
    guard. ``device_index`` is -1 for a device without an index."""
    device = torch.device(device_type) if device_index < 0 else torch.device(device_type, device_index)
    backend, method = key.split(":", 1)
    spec = get_method(method)
    backend_impl = resolve_backend(backend, device, spec)
    if not backend_impl.runs_as_sgemm(1, N, K, device, spec):
        return 0
    low, high = 1, _MAX_ROWS  # runs_as_sgemm(low) holds; find the last M for which it does
    if backend_impl.runs_as_sgemm(high, N, K, device, spec):
        return high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if backend_impl.runs_as_sgemm(mid, N, K, device, spec) else (low, mid)
    return low


def compiled_fp32_linear(key: str | None, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor | None:
    """Under torch.compile, the FP32 model's own linear for ``x`` (..., K) where every GEMM of the product (the
    output and both gradients, of the same 2 M N K FLOPs) would take the small-shape SGEMM fallback: Inductor
    fuses and differentiates it as in FP32 (an autograd.Function around the same SGEMMs costs host time), and
    the graph pays one shape guard (``M <= sgemm_row_limit``). None where the emulated path decides (another
    row count, a mixed-method ``key`` of None, or dtypes and devices it checks and refuses)."""
    if (key is None or x.dtype != torch.float32 or weight.dtype != torch.float32 or x.dim() == 0
            or weight.dim() != 2 or x.shape[-1] != weight.shape[1] or x.device != weight.device
            or (bias is not None and (bias.dtype != torch.float32 or bias.device != weight.device))):
        return None
    device = weight.device
    N, K = weight.shape
    limit = sgemm_row_limit(key, device.type, -1 if device.index is None else device.index, int(N), int(K))
    lead = x.shape[:-1]
    rows = lead.numel()
    if limit == 0 or rows == 0 or rows > limit:
        return None
    with torch._C.DisableTorchFunction(), no_autocast(device.type):
        return F.linear(x.reshape(rows, K), weight, bias).reshape(*lead, N)


# --------------------------------------------------------------------------- validation


class OperandError(ValueError, RuntimeError):
    """Operands whose shapes or devices do not fit together: a ValueError, as tcemu documents, and the
    RuntimeError that torch raises for the same operands, so that code catching torch's error still does."""


def emulable(*tensors: Any) -> bool:
    """Whether the operands are what the emulation runs: float32, dense, on one CPU or CUDA device. Where they
    are not (other dtypes, sparse or meta tensors, two devices), :func:`tcemu.emulation_mode` and
    ``EmulatedLinear`` leave the call to torch, torch's result or error included."""
    device = None
    for t in tensors:
        if not isinstance(t, Tensor) or t.dtype != torch.float32 or t.device.type not in _DEVICES:
            return False
        if device is None:
            device = t.device
        elif t.device != device:
            return False
        # (not while compiling: Dynamo refuses a layout read in some traced contexts; see check_operands)
        if not torch.compiler.is_compiling() and t.layout != torch.strided:
            return False
    return True


def check_operands(op: str, *tensors: Tensor | None) -> None:
    """Refuse what the emulation cannot run faithfully, with a message that says what to do."""
    device = None
    for t in tensors:
        if t is None:
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"tcemu.{op}: expected torch.Tensor operands, got {type(t).__name__}")
        if t.dtype != torch.float32:
            raise TypeError(
                f"tcemu.{op} emulates FP32 products and takes float32 tensors only, got {t.dtype}. "
                "Cast with .float() (the emulation exists to give FP32 accuracy), or use torch.matmul / "
                "F.linear directly for other dtypes."
            )
        if t.device.type not in _DEVICES:
            raise ValueError(f"tcemu.{op}: tensors on {t.device.type!r} are not supported; use cpu or cuda")
        if device is None:
            device = t.device
        elif t.device != device:
            raise OperandError(f"tcemu.{op}: operands are on different devices ({device} and {t.device})")
        # (not while compiling: Dynamo refuses a `layout` read inside an autograd.Function under a torch-function
        # mode such as emulation_mode; the eager call of the same code has checked it)
        if not torch.compiler.is_compiling() and (t.is_sparse or t.layout != torch.strided):
            raise ValueError(f"tcemu.{op}: only dense (strided) tensors are supported; call .to_dense() first")


# --------------------------------------------------------------------------- matmul


def _plain_matmul(a: Tensor, b: Tensor, cfg: GemmConfig) -> Tensor:
    refuse_proxy_tracing("matmul")
    backend = resolve_backend(cfg.backend, a.device, cfg.forward)
    return backend.matmul(a, b, cfg.forward)


class _EmulatedMatmul(torch.autograd.Function):
    @staticmethod
    def forward(a: Tensor, b: Tensor, cfg: GemmConfig) -> Tensor:  # type: ignore[override]
        return _plain_matmul(a, b, cfg)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        a, b, cfg = inputs
        # each operand is kept only for the other's gradient, as autograd does for torch.matmul: a model with
        # frozen weights (an MD potential) must not hold every layer input until the backward pass
        ctx.save_for_backward(a if b.requires_grad else None, b if a.requires_grad else None)
        ctx.shapes = (a.shape, b.shape)
        ctx.cfg = cfg
        ctx.settings = for_backward()

    @staticmethod
    def backward(ctx: Any, grad: Tensor | None):  # type: ignore[override]
        a, b = ctx.saved_tensors
        if grad is None:  # not materialized (the transforms' Function): no gradient reaches the output
            return None, None, None
        a_shape, b_shape = ctx.shapes
        cfg: GemmConfig = ctx.cfg
        grad_a = grad_b = None
        with backward_config(ctx):
            if ctx.needs_input_grad[0]:
                grad_a = _matmul_nd(grad, b.mT, cfg.only(cfg.grad_input)).sum_to_size(a_shape)
            if ctx.needs_input_grad[1]:
                grad_b = _matmul_nd(a.mT, grad, cfg.only(cfg.grad_weight)).sum_to_size(b_shape)
        return grad_a, grad_b, None


class _TransformedMatmul(_EmulatedMatmul):
    """:class:`_EmulatedMatmul` with forward-mode AD and ``torch.func.vmap`` rules, for products under a
    transform (torch.compile refuses a Function with a ``jvp``, so compiled code keeps the plain one)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        _EmulatedMatmul.setup_context(ctx, inputs, output)
        ctx.save_for_forward(*inputs[:2])
        ctx.set_materialize_grads(False)  # an operand without a tangent adds no product to jvp's

    @staticmethod
    def jvp(ctx: Any, tangent_a: Tensor | None, tangent_b: Tensor | None, _: None) -> Tensor:
        """Forward-mode AD: ``dA @ B + A @ dB``, both emulated products of the forward's method."""
        a, b = ctx.saved_for_forward
        cfg: GemmConfig = ctx.cfg
        out = None if tangent_a is None else _matmul_nd(tangent_a, b, cfg)
        if tangent_b is not None:
            term = _matmul_nd(a, tangent_b, cfg)
            out = term if out is None else out + term
        return out

    @staticmethod
    def vmap(info: Any, in_dims: tuple, a: Tensor, b: Tensor, cfg: GemmConfig) -> tuple[Tensor, int | None]:
        """``torch.func.vmap``: one emulated product of the batched operands (the batch dimension first)."""
        da, db, _ = in_dims
        if da is None and db is None:
            return _matmul_nd(a, b, cfg), None
        a = a if da is None else a.movedim(da, 0)
        b = b if db is None else b.movedim(db, 0)
        return _matmul_nd(*batched_matmul_operands(a, da is not None, b, db is not None), cfg), 0


def _legacy_matmul(a: Tensor, b: Tensor, batched: list[bool], cfg: GemmConfig) -> Tensor:
    return _matmul_nd(*batched_matmul_operands(a, batched[0], b, batched[1]), cfg)


def _matmul_nd(a: Tensor, b: Tensor, cfg: GemmConfig) -> Tensor:
    """Both operands at least 2-D."""
    if compiled_under_transform():  # the emulated value, the FP32 product's derivatives (docs/emulation.md)
        return with_fp32_derivative(_plain_matmul(a.detach(), b.detach(), cfg), a, b, None, ieee_fp32_matmul)
    if needs_function(a, b):
        return _TransformedMatmul.apply(a, b, cfg)
    level = legacy_level(a, b)
    if level is not None:  # a backward under is_grads_batched=True: the batched product (differentiable)
        return legacy_batched(level, lambda a, b, batched: _legacy_matmul(a, b, batched, cfg), a, b)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return _EmulatedMatmul.apply(a, b, cfg)
    return _plain_matmul(a, b, cfg)


def matmul(
    a: Tensor,
    b: Tensor,
    method: str | MethodSpec = "tf32x3",
    *,
    grad_weight_method: str | MethodSpec | None = None,
    backend: str = "auto",
) -> Tensor:
    """Emulated-FP32 ``torch.matmul(a, b)``: same shapes, broadcasting and autograd.

    Args:
        a, b: float32 tensors (1-D, 2-D or batched) on CPU or CUDA.
        method: ``"fp32"``, ``"tf32"``, ``"tf32x3"``, ``"bf16x3"``, ``"bf16x6"``, ``"bf16x9"`` or a
            :class:`~tcemu.emulation.methods.MethodSpec`.
        grad_weight_method: method of the gradient with respect to ``b`` (defaults to ``method``);
            the gradient with respect to ``a`` always uses ``method``.
        backend: ``"auto"``, ``"torch"`` (reference, any device) or ``"triton"`` (CUDA kernels).

    Returns:
        float32 tensor with ``torch.matmul``'s result shape.
    """
    check_operands("matmul", a, b)
    if a.dim() == 0 or b.dim() == 0:
        raise OperandError("tcemu.matmul: both arguments need at least 1 dimension (as torch.matmul)")
    cfg = GemmConfig.make(method, grad_weight_method=grad_weight_method, backend=backend)
    squeeze_rows = a.dim() == 1
    squeeze_cols = b.dim() == 1
    a2 = a.unsqueeze(0) if squeeze_rows else a
    b2 = b.unsqueeze(-1) if squeeze_cols else b
    if a2.shape[-1] != b2.shape[-2]:
        raise OperandError(
            f"tcemu.matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} cannot be multiplied "
            f"({a2.shape[-1]} != {b2.shape[-2]})"
        )
    try:
        torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except RuntimeError:
        raise OperandError(
            f"tcemu.matmul: batch dimensions of {tuple(a.shape)} and {tuple(b.shape)} do not broadcast"
        ) from None
    if a2.numel() == 0 or b2.numel() == 0:
        # a zero M, N, K or batch size: an empty result or exact zeros (an empty sum), gradients likewise
        with no_autocast(a.device.type):
            return torch.matmul(a, b)
    out = _matmul_nd(a2, b2, cfg)
    if squeeze_cols:
        out = out.squeeze(-1)
    if squeeze_rows:
        out = out.squeeze(-1 if squeeze_cols else -2)
    return out


# --------------------------------------------------------------------------- linear


class _EmulatedLinear(torch.autograd.Function):
    """y = x @ W^T + bias on 2-D x. The weight is split at use: its forward pieces here, its input-gradient
    pieces in ``backward`` from the saved weight (what torch's own backward of ``F.linear`` would read)."""

    @staticmethod
    def forward(x: Tensor, weight: Tensor, bias: Tensor | None, backend: GemmBackend,
                cfg: GemmConfig) -> Tensor:  # type: ignore[override]
        return backend.linear(x, weight, None, cfg.forward, bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        x, weight, bias, backend, cfg = inputs
        # x only for the weight gradient (autograd's own linear does the same): frozen weights keep no inputs
        ctx.save_for_backward(x if weight.requires_grad else None, weight)
        ctx.backend, ctx.cfg = backend, cfg
        ctx.has_bias = bias is not None
        ctx.settings = for_backward()

    @staticmethod
    def backward(ctx: Any, grad: Tensor):  # type: ignore[override]
        x, weight = ctx.saved_tensors
        cfg: GemmConfig = ctx.cfg
        grad_x = grad_w = grad_b = None
        if grad is None:
            return grad_x, grad_w, grad_b, None, None
        with backward_config(ctx):
            if ctx.needs_input_grad[0]:
                if torch.is_grad_enabled() or cfg.grad_input is not cfg.forward or batched_or_dual(grad, weight):
                    # create_graph=True (double backward), another method or a transform (a batched or dual
                    # gradient): the differentiable general op
                    grad_x = _matmul_nd(grad, weight, cfg.only(cfg.grad_input))
                else:
                    grad_x = ctx.backend.linear_input_grad(grad, weight, None, cfg.forward)
            if ctx.needs_input_grad[1]:
                grad_w = _matmul_nd(grad.mT, x, cfg.only(cfg.grad_weight))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad.sum(0)
        return grad_x, grad_w, grad_b, None, None


class _TransformedLinear(_EmulatedLinear):
    """:class:`_EmulatedLinear` with forward-mode AD and ``torch.func.vmap`` rules (as :class:`_TransformedMatmul`)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: Tensor) -> None:
        _EmulatedLinear.setup_context(ctx, inputs, output)
        ctx.save_for_forward(*inputs[:2])
        ctx.set_materialize_grads(False)

    @staticmethod
    def jvp(ctx: Any, tangent_x: Tensor | None, tangent_w: Tensor | None, tangent_b: Tensor | None,
            *_: None) -> Tensor:
        """Forward-mode AD: ``dx @ W^T + x @ dW^T + db``, the products emulated with the forward's method."""
        x, weight = ctx.saved_for_forward
        out = None if tangent_x is None else linear_2d(tangent_x, weight, None, ctx.cfg)
        if tangent_w is not None:
            term = linear_2d(x, tangent_w, None, ctx.cfg)
            out = term if out is None else out + term
        if tangent_b is not None:
            out = tangent_b.expand(x.shape[0], -1).clone() if out is None else out + tangent_b
        return out

    @staticmethod
    def vmap(info: Any, in_dims: tuple, x: Tensor, weight: Tensor, bias: Tensor | None, backend: GemmBackend,
             cfg: GemmConfig) -> tuple[Tensor, int | None]:
        """``torch.func.vmap``: one emulated product of the batched operands (the batch dimension first)."""
        dims = in_dims[:3]
        if all(d is None for d in dims):
            return linear_2d(x, weight, bias, cfg), None
        x, weight, bias = (t if d is None else t.movedim(d, 0) for t, d in zip((x, weight, bias), dims))
        return _batched_linear(x, weight, bias, [d is not None for d in dims], cfg), 0


def _batched_linear(x: Tensor, weight: Tensor, bias: Tensor | None, batched: list[bool], cfg: GemmConfig) -> Tensor:
    """``x @ weight^T + bias`` for x (M, K), weight (N, K), bias (N,), each with a batch dimension first where
    ``batched`` says; the result (B, M, N)."""
    x_batched, w_batched, b_batched = batched
    if w_batched:  # a weight per batch entry: a batched product
        y = _matmul_nd(*batched_matmul_operands(x, x_batched, weight.mT, True), cfg)
        if bias is not None and not b_batched:
            y = y + bias
    else:
        y = linear_2d(x.reshape(-1, x.shape[-1]), weight, None if b_batched else bias, cfg)
        if x_batched:
            y = y.reshape(x.shape[0], x.shape[1], weight.shape[0])
    return y + bias.unsqueeze(-2) if b_batched else y


def _one_method(cfg: GemmConfig) -> bool:
    return cfg.grad_input.name == cfg.forward.name and cfg.grad_weight.name == cfg.forward.name


def linear_2d(x: Tensor, weight: Tensor, bias: Tensor | None, cfg: GemmConfig) -> Tensor:
    """The core of :func:`linear` for 2-D ``x`` (M, K) and ``weight`` (N, K)."""
    if x.numel() == 0 or weight.numel() == 0:
        # M, N or K is zero: an empty result, or the bias alone (an empty sum is exactly 0), with torch's
        # gradients (empty or zero): nothing is rounded, so every method gives these same values
        with no_autocast(x.device.type):
            return F.linear(x, weight, bias)
    if torch.compiler.is_compiling():
        y = compiled_fp32_linear(cfg.sgemm_key, x, weight, bias)
        if y is not None:
            return y
    refuse_proxy_tracing("linear")
    backend = resolve_backend(cfg.backend, x.device, cfg.forward)
    needs_grad = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    if compiled_under_transform():  # as _matmul_nd
        bias_value = None if bias is None else bias.detach()
        value = backend.linear(x.detach(), weight.detach(), None, cfg.forward, bias_value)
        return with_fp32_derivative(value, x, weight.mT, bias, ieee_fp32_matmul)
    if needs_function(x, weight, bias):
        return _TransformedLinear.apply(x, weight, bias, backend, cfg)
    level = legacy_level(x, weight, bias)
    if level is not None:  # a backward under is_grads_batched=True: the batched product (differentiable)
        return legacy_batched(level, lambda x, w, b, batched: _batched_linear(x, w, b, batched, cfg), x, weight, bias)
    if needs_grad:
        return _EmulatedLinear.apply(x, weight, bias, backend, cfg)
    return backend.linear(x, weight, None, cfg.forward, bias)


def linear(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    method: str | MethodSpec = "tf32x3",
    *,
    grad_weight_method: str | MethodSpec | None = None,
    backend: str = "auto",
) -> Tensor:
    """Emulated-FP32 ``torch.nn.functional.linear``: ``x @ weight.T + bias``.

    Args:
        x: float32 (..., K) input (any leading dims, including none).
        weight: float32 (N, K).
        bias: float32 (N,) or None.
        method: emulation method (name or spec); also used for the input gradient.
        grad_weight_method: method of the weight gradient (defaults to ``method``).
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.

    Returns:
        float32 (..., N).
    """
    check_operands("linear", x, weight, bias)
    if weight.dim() != 2:
        raise ValueError(f"tcemu.linear: weight must be 2-D (out_features, in_features), got {tuple(weight.shape)}")
    if x.dim() == 0:
        raise ValueError("tcemu.linear: input must have at least 1 dimension")
    if x.shape[-1] != weight.shape[1]:
        raise OperandError(
            f"tcemu.linear: input has {x.shape[-1]} features but weight {tuple(weight.shape)} expects {weight.shape[1]}"
        )
    if bias is not None and bias.shape != (weight.shape[0],):
        raise ValueError(f"tcemu.linear: bias must have shape ({weight.shape[0]},), got {tuple(bias.shape)}")
    cfg = GemmConfig.make(method, grad_weight_method=grad_weight_method, backend=backend)
    lead = x.shape[:-1]
    y = linear_2d(x.reshape(lead.numel(), x.shape[-1]), weight, bias, cfg)
    return y.reshape(*lead, weight.shape[0])
