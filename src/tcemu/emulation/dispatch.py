"""GEMM backends and the dispatch that picks one for each product (where an emulated product runs).

* ``"torch"``: :class:`ReferenceBackend`, plain PyTorch on any device (the reference).
* ``"triton"``: the fast CUDA kernels of :mod:`tcemu.emulation.gemm` (Hopper, Ampere).
* ``"auto"``: ``"triton"`` where it can run the method on the tensors' device, else ``"torch"``.

A backend implements :class:`GemmBackend`. Linear layers call ``linear`` / ``linear_input_grad`` with
``prepared=None``: the backend splits the weight at use, in the layout that GEMM reads, and only where a
kernel runs. ``prepare_weight`` splits beforehand (benchmarks and tests time or check the GEMM alone).
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from .configuration import config
from .meter import guard_backend
from .methods import MethodSpec
from .reference import cuda_fp32_precision, mm_reference, no_autocast
from .split import split

__all__ = ["GemmBackend", "ReferenceBackend", "get_backend", "backend_names", "resolve_backend",
           "every_gemm_emulated"]


class GemmBackend(Protocol):
    """What a GEMM backend provides. All tensors are float32; shapes as named."""

    name: str

    def unavailable_reason(self, device: torch.device, spec: MethodSpec | None = None) -> str | None:
        """``None`` if the backend can run ``spec`` on ``device``, else why not (one sentence)."""

    def matmul(self, a: Tensor, b: Tensor, spec: MethodSpec) -> Tensor:
        """``a @ b`` for a (..., M, K), b (..., K, N) with torch.matmul broadcasting (both >= 2-D)."""

    def prepare_weight(self, weight: Tensor, spec: MethodSpec) -> Any:
        """Split an nn.Linear weight (N, K) beforehand, for ``prepared`` (valid while the weight is unchanged)."""

    def linear(self, x: Tensor, weight: Tensor, prepared: Any, spec: MethodSpec, bias: Tensor | None) -> Tensor:
        """``x @ weight.T + bias`` for x (M, K), weight (N, K), bias (N,) or None -> (M, N); ``prepared`` is
        ``prepare_weight(weight)`` or None (split here)."""

    def linear_input_grad(self, grad_out: Tensor, weight: Tensor, prepared: Any, spec: MethodSpec) -> Tensor:
        """``grad_out @ weight`` for grad_out (M, N), weight (N, K) -> (M, K)."""

    def runs_as_sgemm(self, M: int, N: int, K: int, device: torch.device, spec: MethodSpec) -> bool:
        """Under torch.compile: whether an M x K x N product of ``spec`` (and its gradients, of the same 2 M N K
        FLOPs) runs as IEEE FP32 cuBLAS SGEMM here (the small-shape fallback), so that it may be traced as the
        FP32 model's own op. A query (nothing counted or logged), monotone in M: ``ops.sgemm_row_limit``
        bisects it."""


class ReferenceBackend:
    """Plain PyTorch, any device: the executable spec (:func:`~tcemu.emulation.reference.mm_reference`)."""

    name = "torch"

    def unavailable_reason(self, device: torch.device, spec: MethodSpec | None = None) -> str | None:
        if device.type not in ("cpu", "cuda"):
            return f"device type {device.type!r} is not supported (cpu or cuda)"
        return None

    def matmul(self, a: Tensor, b: Tensor, spec: MethodSpec) -> Tensor:
        if spec.name == "tf32" and a.is_cuda:  # the baseline users compare against: cuBLAS TF32
            return _cublas_tf32_matmul(a, b)
        return mm_reference(a, b, spec)

    def prepare_weight(self, weight: Tensor, spec: MethodSpec) -> tuple[Tensor, ...]:
        with torch.no_grad():
            return split(weight.detach(), spec)

    def linear(self, x: Tensor, weight: Tensor, prepared: Any, spec: MethodSpec, bias: Tensor | None) -> Tensor:
        if spec.name == "tf32" and x.is_cuda:
            y = _cublas_tf32_matmul(x, weight.mT)
        else:
            pieces = None if prepared is None else tuple(p.mT for p in prepared)
            y = mm_reference(x, weight.mT, spec, b_pieces=pieces)
        return y if bias is None else y + bias

    def runs_as_sgemm(self, M: int, N: int, K: int, device: torch.device, spec: MethodSpec) -> bool:
        return False

    def linear_input_grad(self, grad_out: Tensor, weight: Tensor, prepared: Any, spec: MethodSpec) -> Tensor:
        if spec.name == "tf32" and grad_out.is_cuda:
            return _cublas_tf32_matmul(grad_out, weight)
        return mm_reference(grad_out, weight, spec, b_pieces=None if prepared is None else tuple(prepared))


def _cublas_tf32_matmul(a: Tensor, b: Tensor) -> Tensor:
    with cuda_fp32_precision("tf32"), no_autocast(a.device.type):
        return torch.matmul(a, b)


@functools.cache
def _triton_backend() -> GemmBackend | str:
    """The Triton backend, or why it cannot be imported."""
    try:
        from .gemm import TritonBackend  # noqa: PLC0415 - optional, imports triton
    except ImportError as exc:
        return f"the Triton kernels cannot be imported ({exc}); install the 'triton' extra"
    except Exception as exc:  # noqa: BLE001 - a broken optional backend must not break the library
        return f"the Triton kernels failed to load: {type(exc).__name__}: {exc}"
    return TritonBackend()


def backend_names() -> list[str]:
    return ["auto", "torch", "triton"]


def every_gemm_emulated() -> contextlib.AbstractContextManager:
    """The current configuration without the small-shape SGEMM fallback and the attention's small-batch
    fallback, for a ``with`` block: ``tcemu.config(small_shape_fallback=False, attention_fallback=False)``.

    The fallbacks keep FP32 accuracy for products too small for emulation to pay, so with them a measurement of
    a method on small shapes (``tcemu accuracy``, the MLIP suite's small systems) would judge cuBLAS SGEMM and
    torch's attention (and the coverage meter would say so). Where a method's own arithmetic is measured, every
    product runs the method.
    """
    return config(small_shape_fallback=False, attention_fallback=False)


def get_backend(name: str) -> GemmBackend:
    """Backend by name (``"torch"`` or ``"triton"``); raises with the reason if unavailable."""
    if name == "torch":
        return _REFERENCE
    if name == "triton":
        be = _triton_backend()
        if isinstance(be, str):
            raise RuntimeError(be)
        return be
    raise ValueError(f"unknown backend {name!r}; choose one of {', '.join(backend_names())}")


# CUDA resolutions, computed once per (backend name, device, method) in eager code. Under torch.compile the
# resolution is a constant of the graph (computed at trace time by :func:`_resolve_cuda_name`), so that a
# first resolution inside a compiled region does not break the graph (it queries the device).
_RESOLVED_CUDA: dict[tuple[str, int | None, str], GemmBackend] = {}
_INSTANCES: dict[str, GemmBackend] = {}


def resolve_backend(name: str, device: torch.device, spec: MethodSpec) -> GemmBackend:
    """Pick the backend that runs ``spec`` on ``device``: ``"auto"`` prefers Triton on CUDA. While a
    :func:`tcemu.coverage` meter or a torch-function mode is active (eager code), its calls are counted and run
    with the modes off (:func:`~tcemu.emulation.meter.guard_backend`)."""
    return guard_backend(_pick_backend(name, device, spec))


def _pick_backend(name: str, device: torch.device, spec: MethodSpec) -> GemmBackend:
    if device.type != "cuda":
        return _resolve(name, device, spec)
    if torch.compiler.is_compiling():
        return _INSTANCES[_resolve_cuda_name(name, device.index, spec.name, spec.uses_tensor_cores)]
    key = (name, device.index, spec.name)
    be = _RESOLVED_CUDA.get(key)
    if be is None:
        be = _RESOLVED_CUDA[key] = _resolve(name, device, spec)
    return be


@dataclass(frozen=True)
class _MethodKey:
    """What backend resolution reads of a :class:`MethodSpec` (kernels are keyed by the method's name)."""

    name: str
    uses_tensor_cores: bool


@torch.compiler.assume_constant_result
def _resolve_cuda_name(name: str, index: int | None, method: str, uses_tensor_cores: bool) -> str:
    """The name of the backend that runs ``method`` on CUDA device ``index``; the instance goes to
    ``_INSTANCES``. Dynamo runs this at trace time and keeps the result as a constant (no graph break)."""
    device = torch.device("cuda", index) if index is not None else torch.device("cuda")
    be = _resolve(name, device, _MethodKey(method, uses_tensor_cores))  # type: ignore[arg-type]
    _INSTANCES[be.name] = be
    return be.name


def _resolve(name: str, device: torch.device, spec: MethodSpec) -> GemmBackend:
    if name == "auto":
        if device.type == "cuda" and spec.uses_tensor_cores and spec.name != "tf32":
            be = _triton_backend()
            if not isinstance(be, str) and be.unavailable_reason(device, spec) is None:
                return be
        return _REFERENCE
    be = get_backend(name)
    why = be.unavailable_reason(device, spec)
    if why is not None:
        raise RuntimeError(f"backend {name!r} cannot run {spec.name} on {device}: {why}")
    return be


_REFERENCE = ReferenceBackend()
