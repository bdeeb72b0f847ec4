"""``emulation_mode``: emulate the products a module swap cannot reach.

Inside ``with tcemu.emulation_mode("tf32x3"):`` every float32 contraction called through torch's Python API
goes through :func:`tcemu.matmul` / :func:`tcemu.linear` (with autograd, double backward included):

* the matmul family: ``torch.matmul`` / ``@`` / ``torch.linalg.matmul``, ``mm``, ``bmm``, ``mv``, ``dot``,
  ``vdot``, ``inner``, ``torch.linalg.vecdot``, ``torch.linalg.multi_dot``, ``torch.chain_matmul``;
* ``addmm``, ``baddbmm``, ``addbmm``, ``addmv`` (and their in-place ``Tensor`` forms) with torch's ``alpha`` and
  ``beta`` semantics: at ``beta=0`` the input is ignored (NaN in it does not propagate), at ``alpha=0`` no
  product is formed;
* ``F.linear`` (a bias that broadcasts to the output, such as (1, N), added to the emulated product),
  ``F.bilinear``, ``torch.tensordot`` and ``torch.einsum`` (lowered to batched GEMMs by
  :mod:`tcemu.emulation.contractions`: any subscripts, ellipsis, broadcasting, three or more operands);
* with ``attention=True``, ``F.scaled_dot_product_attention`` without dropout or causal masking
  (:func:`tcemu.scaled_dot_product_attention`).

What stays as it is (torch's own call, with torch's result or error): other dtypes (float64, half, complex,
integer), sparse and meta tensors, operands on two devices, operands whose shapes do not fit, calls with
``out=``, an einsum or tensordot without a summed index (an outer product: one FP32 rounding per element,
nothing accumulates; reported to :func:`tcemu.coverage` as ``no_contraction``), convolutions, and products
inside TorchScript (:func:`tcemu.emulate_` rewrites those graphs to call the same handlers:
:mod:`tcemu.emulation.script_ops`) or inside torch functions that run their own Python
(``F.multi_head_attention_forward``): a torch-function mode
cannot see those. :func:`tcemu.coverage` measures what ran in plain FP32 at the aten level.
``matmuls=False`` leaves the products alone (attention only).

The mode sees every torch call while it is active, so it costs host time on each op of eager code.
:func:`tcemu.emulate_` scopes it to the selected modules (their ``forward`` runs inside the mode).

A mode is local to the thread and the asyncio task that entered it (:mod:`tcemu.emulation.context`): torch's
mode stack is per thread, and a mode on it acts as the innermost mode of the running task (two tasks holding
different modes across an ``await`` keep theirs). Under ``torch.autocast`` the products it routes are
emulated all the same and return float32 (FP32-faithful); what it leaves to torch follows autocast.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from . import contractions as C
from .meter import labelled, report_uncontracted
from .attention import scaled_dot_product_attention
from .context import ContextStack, foreign_thread, leave_mode
from .methods import MethodSpec, get_method
from .ops import emulable, linear, matmul

__all__ = ["emulation_mode", "ROUTED", "SWITCHES", "pop_scope", "push_scope"]

_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")

#: Scope switches of :mod:`tcemu.emulation.scope`, innermost last: each entry is the position of the innermost
#: "off" switch at or below it (-1: none). A mode entered by a scope at position p emulates while the innermost
#: "off" is below p, so that modules left out by ``filter_fn`` run plain, and selected ones inside them do not.
#: Local to the thread and task.
SWITCHES = ContextStack("scope_switches")
#: the emulation_mode blocks of this thread and task, innermost last
_MODES = ContextStack("modes")


def push_scope(emulate: bool) -> int:
    """Enter a scope switch; returns its position."""
    stack = SWITCHES.get()
    pos = len(stack)
    SWITCHES.push((stack[-1] if stack else -1) if emulate else pos)
    return pos


def pop_scope() -> None:
    """Leave the innermost scope switch."""
    SWITCHES.pop()


_fp32 = emulable  # the operands the emulation runs; anything else is torch's own call, its errors included


def _matmul_fits(a: Tensor, b: Tensor) -> bool:
    """Whether ``torch.matmul(a, b)`` accepts the shapes (both at least 1-D); torch raises otherwise."""
    if a.shape[-1] != (b.shape[-2] if b.dim() > 1 else b.shape[0]):
        return False
    if a.dim() > 2 or b.dim() > 2:
        try:
            torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except RuntimeError:
            return False
    return True


class _Pass(Exception):
    """A handler declines the call: it runs as torch's own (torch raises for bad arguments)."""


def _scalars_only(kwargs: dict, allowed: tuple[str, ...]) -> tuple:
    if set(kwargs) - set(allowed):
        raise _Pass  # out= and friends: torch's own op
    vals = tuple(kwargs.get(k, 1) for k in allowed)
    if not all(isinstance(v, (int, float)) and not isinstance(v, complex) for v in vals):
        raise _Pass
    return tuple(int(v) if isinstance(v, bool) else v for v in vals)  # torch reads True and False as 1 and 0


# ------------------------------------------------------------------ handlers: (mode, args, kwargs) -> Tensor


def _h_matmul(m, args, kwargs):
    if (len(args) != 2 or kwargs or not _fp32(*args) or args[0].dim() == 0 or args[1].dim() == 0
            or not _matmul_fits(*args)):
        raise _Pass
    return matmul(args[0], args[1], m.method, backend=m.backend)


def _h_rmatmul(m, args, kwargs):
    return _h_matmul(m, (args[1], args[0]) if len(args) == 2 else args, kwargs)


def _h_mm(m, args, kwargs):
    if (len(args) != 2 or kwargs or not _fp32(*args) or args[0].dim() != 2 or args[1].dim() != 2
            or not _matmul_fits(*args)):
        raise _Pass
    return matmul(args[0], args[1], m.method, backend=m.backend)


def _h_bmm(m, args, kwargs):
    if (len(args) != 2 or kwargs or not _fp32(*args) or args[0].dim() != 3 or args[1].dim() != 3
            or args[0].shape[0] != args[1].shape[0] or not _matmul_fits(*args)):
        raise _Pass
    return matmul(args[0], args[1], m.method, backend=m.backend)


def _h_mv(m, args, kwargs):
    if (len(args) != 2 or kwargs or not _fp32(*args) or args[0].dim() != 2 or args[1].dim() != 1
            or not _matmul_fits(*args)):
        raise _Pass
    return matmul(args[0], args[1], m.method, backend=m.backend)


def _h_dot(m, args, kwargs):
    if (len(args) != 2 or kwargs or not _fp32(*args) or args[0].dim() != 1 or args[1].dim() != 1
            or not _matmul_fits(*args)):
        raise _Pass
    return matmul(args[0], args[1], m.method, backend=m.backend)


def _h_inner(m, args, kwargs):
    if (len(args) != 2 or kwargs or not _fp32(*args) or args[0].dim() == 0 or args[1].dim() == 0
            or args[0].shape[-1] != args[1].shape[-1]):
        raise _Pass
    return C.tensordot(args[0], args[1], ([-1], [-1]), method=m.method, backend=m.backend)


def _h_vecdot(m, args, kwargs):
    if len(args) != 2 or set(kwargs) - {"dim"} or not _fp32(*args):
        raise _Pass
    x, y = args
    dim = kwargs.get("dim", -1)
    try:
        shape = torch.broadcast_shapes(x.shape, y.shape)
    except RuntimeError:
        raise _Pass from None
    x, y = x.expand(shape).movedim(dim, -1), y.expand(shape).movedim(dim, -1)
    return matmul(x.unsqueeze(-2), y.unsqueeze(-1), m.method, backend=m.backend).squeeze(-1).squeeze(-1)


def _h_multi_dot(m, args, kwargs):
    tensors = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    if kwargs or len(tensors) < 2 or not _fp32(*tensors):
        raise _Pass
    return C.multi_dot(tensors, method=m.method, backend=m.backend)


def _h_linear(m, args, kwargs):
    a = dict(zip(("input", "weight", "bias"), args)) | kwargs
    x, w, b = a.get("input"), a.get("weight"), a.get("bias")
    if (set(a) - {"input", "weight", "bias"} or not _fp32(x, w, *(() if b is None else (b,))) or w.dim() != 2
            or x.dim() == 0 or x.shape[-1] != w.shape[1]):
        raise _Pass
    if b is None or b.shape == (w.shape[0],):
        return linear(x, w, b, m.method, backend=m.backend)
    out_shape = (*x.shape[:-1], w.shape[0])
    try:
        fits = x.dim() > 1 and torch.broadcast_shapes(b.shape, out_shape) == out_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise _Pass  # torch's result (a 1-D input) or error
    return linear(x, w, None, m.method, backend=m.backend) + b  # a bias broadcast to the output


def _h_bilinear(m, args, kwargs):
    a = dict(zip(("input1", "input2", "weight", "bias"), args)) | kwargs
    x1, x2, w, b = (a.get(k) for k in ("input1", "input2", "weight", "bias"))
    if set(a) - {"input1", "input2", "weight", "bias"} or not _fp32(x1, x2, w) or (b is not None and not _fp32(b)):
        raise _Pass
    return C.bilinear(x1, x2, w, b, method=m.method, backend=m.backend)


def _h_tensordot(m, args, kwargs):
    a = dict(zip(("a", "b", "dims"), args)) | kwargs
    if a.get("out") is not None or set(a) - {"a", "b", "dims", "out"} or not _fp32(a.get("a"), a.get("b")):
        raise _Pass
    x, y, dims = a["a"], a["b"], a.get("dims", 2)
    if not C.tensordot_contracts(x, y, dims):
        report_uncontracted("tensordot", x.numel() * y.numel())
        raise _Pass
    return C.tensordot(x, y, dims, method=m.method, backend=m.backend)


def _h_einsum(m, args, kwargs):
    if kwargs:
        raise _Pass
    equation, operands = C.parse_einsum_args(args)
    if not operands or not _fp32(*operands):
        raise _Pass
    if not C.einsum_contracts(equation, operands):
        if len(operands) > 1:
            report_uncontracted("einsum", math.prod(C.einsum_shape(equation, operands)))
        raise _Pass
    return C.einsum(equation, *operands, method=m.method, backend=m.backend)


def _addmm_like(product_shape: Callable, product: Callable, ndims: tuple[int, int]):
    """Handler of ``op(input, x, y, *, beta, alpha)``: ``x`` and ``y`` of ``ndims`` dimensions."""

    def handler(m, args, kwargs):
        if len(args) != 3 or not _fp32(*args) or (args[1].dim(), args[2].dim()) != ndims:
            raise _Pass
        beta, alpha = _scalars_only(kwargs, ("beta", "alpha"))
        inp, x, y = args
        try:
            shape = product_shape(x, y)
        except (IndexError, RuntimeError):
            raise _Pass from None
        try:
            return C.add_scaled(inp, lambda: product(m, x, y), shape, beta, alpha)
        except ValueError:
            raise _Pass from None  # shapes that do not fit: torch's error

    return handler


def _bmm_shape(x, y):
    if x.shape[0] != y.shape[0] or x.shape[2] != y.shape[1]:
        raise RuntimeError
    return (x.shape[0], x.shape[1], y.shape[2])


def _mm_shape(x, y):
    if x.shape[-1] != y.shape[0]:
        raise RuntimeError
    return (x.shape[0], *y.shape[1:])


def _addbmm_shape(x, y):
    b, n, _ = _bmm_shape(x, y)
    return (x.shape[1], y.shape[2])


def _prod(m, x, y):
    return matmul(x, y, m.method, backend=m.backend)


def _prod_addbmm(m, x, y):
    """sum_b x[b] @ y[b]: one GEMM over K = (batch, k)."""
    b, n, k = x.shape
    return matmul(x.permute(1, 0, 2).reshape(n, b * k), y.reshape(b * k, y.shape[2]), m.method, backend=m.backend)


_h_addmm = _addmm_like(_mm_shape, _prod, (2, 2))
_h_addmv = _addmm_like(_mm_shape, _prod, (2, 1))
_h_baddbmm = _addmm_like(_bmm_shape, _prod, (3, 3))
_h_addbmm = _addmm_like(_addbmm_shape, _prod_addbmm, (3, 3))


def _in_place(handler):
    """``Tensor.addmm_(self, ...)``: the out-of-place result copied into ``self``."""

    def h(m, args, kwargs):
        out = handler(m, args, kwargs)
        return args[0].copy_(out)

    return h


#: The torch functions the mode emulates, with their handlers.
_HANDLERS: dict[Callable, Callable] = {}
for _funcs, _h in (
    ((torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.linalg.matmul), _h_matmul),
    ((torch.Tensor.__rmatmul__,), _h_rmatmul),
    ((torch.mm, torch.Tensor.mm), _h_mm),
    ((torch.bmm, torch.Tensor.bmm), _h_bmm),
    ((torch.mv, torch.Tensor.mv), _h_mv),
    ((torch.dot, torch.Tensor.dot, torch.vdot, torch.Tensor.vdot), _h_dot),
    ((torch.inner, torch.Tensor.inner), _h_inner),
    ((torch.linalg.vecdot,), _h_vecdot),
    ((torch.linalg.multi_dot, torch.functional.chain_matmul), _h_multi_dot),
    ((F.linear, torch._C._nn.linear), _h_linear),
    ((F.bilinear, torch.bilinear), _h_bilinear),
    ((torch.functional.tensordot,), _h_tensordot),
    ((torch.functional.einsum,), _h_einsum),
    ((torch.addmm, torch.Tensor.addmm), _h_addmm),
    ((torch.addmv, torch.Tensor.addmv), _h_addmv),
    ((torch.baddbmm, torch.Tensor.baddbmm), _h_baddbmm),
    ((torch.addbmm, torch.Tensor.addbmm), _h_addbmm),
    ((torch.Tensor.addmm_,), _in_place(_h_addmm)),
    ((torch.Tensor.addmv_,), _in_place(_h_addmv)),
    ((torch.Tensor.baddbmm_,), _in_place(_h_baddbmm)),
    ((torch.Tensor.addbmm_,), _in_place(_h_addbmm)),
):
    for _f in _funcs:
        _HANDLERS[_f] = _h
_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}

#: Names of the torch functions routed through the emulation (documentation and tests).
ROUTED = tuple(sorted({getattr(f, "__qualname__", getattr(f, "__name__", str(f))) for f in _HANDLERS}))


def _checkpointing():
    """:mod:`tcemu.emulation.checkpointing` (it imports the scopes, which import this module)."""
    from . import checkpointing  # noqa: PLC0415

    return checkpointing


class emulation_mode(TorchFunctionMode):  # noqa: N801 - used like a function: `with emulation_mode(...)`
    """Context manager routing float32 contractions through the emulation (the list in the module docstring).

    Args:
        method: emulation method (name or spec).
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.
        attention: also route float32 ``F.scaled_dot_product_attention`` (no dropout, not causal, no
            grouped-query heads) through :func:`tcemu.scaled_dot_product_attention`.
        matmuls: route the contractions listed above (default); ``False`` with ``attention=True``
            emulates attention only.
        scope: the position of the module scope that enters it (:mod:`tcemu.emulation.scope`; it then follows
            the scope switches, so that modules left out by ``filter_fn`` run plain); None for user code.
    """

    def __init__(self, method: str | MethodSpec = "tf32x3", *, backend: str = "auto", attention: bool = False,
                 matmuls: bool = True, scope: int | None = None) -> None:
        super().__init__()
        if not (attention or matmuls):
            raise ValueError("emulation_mode(attention=False, matmuls=False) would emulate nothing: "
                             "set attention=True, matmuls=True or both")
        if backend not in ("auto", "torch", "triton"):
            raise ValueError(f"unknown backend {backend!r}; choose auto, torch or triton")
        self.method = get_method(method)
        self.backend = backend
        self.attention = attention
        self.matmuls = matmuls
        self.scope = scope

    def __enter__(self) -> emulation_mode:
        if not torch.compiler.is_compiling():
            _MODES.push(self)
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        if torch.compiler.is_compiling():
            super().__exit__(*exc)
            return
        _MODES.remove(self)
        leave_mode(self, False, lambda: super(emulation_mode, self).__exit__(*exc))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if torch.compiler.is_compiling():  # Dynamo traces the mode it found (no ContextVar under Dynamo)
            return self._route(func, types, args, kwargs)
        modes = _MODES.var.get()
        if modes:
            mode = modes[-1]  # this task's innermost mode (another task's may be the one on torch's stack)
        elif foreign_thread():
            mode = self  # autograd's worker thread: torch's stack, handed over from the caller, is the state
        else:
            return func(*args, **(kwargs or {}))  # no mode of this thread and task
        if not torch._C._len_torch_function_stack():  # no mode below this one (torch took it off while it runs)
            return mode._route(func, types, args, kwargs)
        token = _MODES.var.set(modes[:-1])  # as torch's stack: the calls made here go to the modes below
        try:
            return mode._route(func, types, args, kwargs)
        finally:
            _MODES.var.reset(token)

    def _route(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.scope is not None:
            switches = SWITCHES.get()
            if switches and switches[-1] > self.scope:
                return func(*args, **kwargs)  # inside a module left out by filter_fn
        if func is torch._C._set_grad_enabled and args and not args[0] and not torch.compiler.is_compiling():
            _checkpointing().on_grad_disabled(self)  # a reentrant checkpoint's recompute: under this mode
        if self.attention and func in _SDPA:
            a = dict(zip(_SDPA_ARGS, args)) | kwargs
            if (_fp32(a["query"], a["key"], a["value"]) and not a.get("dropout_p", 0.0)
                    and not a.get("is_causal", False) and not a.get("enable_gqa", False)):
                with labelled("scaled_dot_product_attention"):
                    return scaled_dot_product_attention(a["query"], a["key"], a["value"], a.get("attn_mask"),
                                                        scale=a.get("scale"), method=self.method,
                                                        backend=self.backend)
        handler = _HANDLERS.get(func) if self.matmuls else None
        if handler is not None:
            if torch.is_grad_enabled() and not torch.compiler.is_compiling():
                _checkpointing().on_product(self)  # a non-reentrant checkpoint's recompute: under this mode
            try:
                with labelled(getattr(func, "__name__", "product")):
                    return handler(self, args, kwargs)
            except _Pass:
                pass
        return func(*args, **kwargs)
