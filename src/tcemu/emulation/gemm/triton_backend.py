"""The Triton GEMM backend (:class:`TritonBackend`) and its torch ops.

Under ``torch.compile`` every product goes through one of three torch ops, so that the compiler treats the
kernels as opaque calls with known output shapes (fake implementations below) and CUDA graphs capture them;
eager code calls the same kernels directly (an op call costs host time):

* ``tcemu::split_t(b, method) -> pieces``: split a (R, C) matrix into transposed pieces (C, R);
* ``tcemu::emu_mm(a, p0, p1, p2, bias, method, b=None) -> out``: ``a @ b + bias`` from a (Z, M, K) and b's
  pieces, with FP32 ``b`` transposed (the range fix-up's operand; optional);
* ``tcemu::sgemm(a, b, bias) -> out``: the small-shape fallback, cuBLAS SGEMM with TF32 off.

Small shapes. Below a row count an emulated GEMM is no faster than cuBLAS SGEMM, so by default it falls back to
SGEMM, which keeps FP32 accuracy. The row count is measured per GPU model, method, layout and (N, K)
(:mod:`.decision`; where nothing is measured, ``small_shape_min_flops`` of 2 M N K:
:class:`~tcemu.emulation.configuration.EmulationConfig`). Switch with ``with
tcemu.config(small_shape_fallback=False):`` or ``TCEMU_SMALL_SHAPE_FALLBACK=0``; every fallback is counted in
:func:`fallback_stats` and logged once per shape at INFO level (logger ``tcemu.emulation.gemm``).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from ..._hw import capability, gpu_name, interpreting, tensor_core_generation
from ..configuration import get_config, setting
from ..methods import MethodSpec
from ..reference import cuda_fp32_precision, no_autocast
from .decision import DecisionTable, flop_threshold, row_threshold, shipped_tables
from .launch import KERNEL_METHODS, _emu_mm, _split_t, emu_mm, piece_dtype, split_t

__all__ = ["TritonBackend", "PreparedWeight", "fallback_stats"]

log = logging.getLogger("tcemu.emulation.gemm")


@torch.compiler.assume_constant_result
def _fp32_gemm_is_ieee() -> bool:
    """Whether CUDA FP32 GEMMs run as IEEE FP32 (not TF32): read at trace time under torch.compile, where
    Dynamo's global-state guard recompiles the graph when the TF32 setting changes."""
    # "none" (torch's default) inherits torch.backends.fp32_precision, which the CUDA value already reflects
    # when set; both "none" means IEEE FP32 (allow_tf32 off)
    return torch.backends.cuda.matmul.fp32_precision != "tf32"


_FALLBACKS: collections.Counter = collections.Counter()


class _ThreadFallbacks(threading.local):
    count = 0


#: the fallbacks taken by this thread: the coverage meter tells a fallback from an emulated product by this count,
#: which another thread's products do not change
_THREAD = _ThreadFallbacks()


def fallback_stats() -> dict[tuple[str, int, int, int], int]:
    """How often each (method, M, N, K) fell back to cuBLAS SGEMM in this process."""
    return dict(_FALLBACKS)


def thread_fallbacks() -> int:
    """How many GEMMs this thread ran as the small-shape fallback so far."""
    return _THREAD.count


_TABLES: dict[str | None, tuple[DecisionTable, ...]] = {}  # small_shape_table -> the tables read, in order
_THRESHOLDS: dict[tuple, tuple[int, str]] = {}  # (settings, device, method, role, N, K) -> (rows, why)


def _tables(path: str | None) -> tuple[DecisionTable, ...]:
    """The user's table (``small_shape_table``) then the shipped ones, read once per path."""
    tables = _TABLES.get(path)
    if tables is None:
        tables = _TABLES[path] = ((DecisionTable.load(path),) if path else ()) + tuple(shipped_tables().values())
    return tables


def _decide(device_index: int | None, method: str, role: str, N: int, K: int) -> tuple[int, str]:
    """(row threshold, what decided it) under the current configuration, cached per settings and shape."""
    cfg = get_config()
    key = (cfg.small_shape_rule, cfg.small_shape_min_flops, cfg.small_shape_margin, cfg.small_shape_table,
           device_index, method, role, N, K)
    hit = _THRESHOLDS.get(key)
    if hit is None:
        if cfg.small_shape_rule == "flops":
            hit = (flop_threshold(N, K, cfg.small_shape_min_flops), f"below {cfg.small_shape_min_flops:.3g} FLOP")
        else:
            hit = row_threshold(_tables(cfg.small_shape_table), gpu_name(device_index) or "", method, role, N, K,
                                cfg.small_shape_margin, cfg.small_shape_min_flops)
        _THRESHOLDS[key] = hit
    return hit


@torch.compiler.assume_constant_result
def _row_threshold(device_index: int, method: str, role: str, N: int, K: int) -> int:
    """The smallest M from which an M x K x N product of ``role`` runs emulated (:mod:`.decision`). Under
    ``torch.compile`` it runs at trace time and is a constant of the graph, like the settings it reads."""
    return _decide(None if device_index < 0 else device_index, method, role, N, K)[0]


def _plain_int(size: int) -> bool:
    """Whether a size is a Python int, not a symbolic one (torch.compile's dynamic shapes). Dynamo reports a
    symbolic size's type as int, so ``isinstance(size, torch.SymInt)`` is False there; its ``__class__`` is not
    (torch 2.13). Dynamo of torch 2.11 answers False for a static size too, so a caller that knows its sizes
    are a weight's passes ``weight_dims`` to :func:`_use_fallback` rather than relying on this."""
    return size.__class__ is int


def _use_fallback(spec: MethodSpec, M: int, N: int, K: int, device: torch.device, role: str = "bwd_input",
                  count: bool = True, weight_dims: bool = False) -> bool:
    """Whether an M x K x N product (N outputs, contraction K) of ``role`` (``"fwd"``: ``a @ W^T``;
    ``"bwd_input"``: ``a @ B``) runs as cuBLAS SGEMM (the small-shape fallback); counted and logged when it
    does in eager code, unless ``count`` is False (a query). ``weight_dims``: N and K are a weight's sizes,
    static under torch.compile (Dynamo keeps parameters' shapes static), so the measured table decides there
    whatever Dynamo says of their type."""
    if device.type != "cuda" or not setting("small_shape_fallback"):
        return False
    index = -1 if device.index is None else device.index
    if weight_dims:
        if M >= _row_threshold(index, spec.name, role, int(N), int(K)):
            return False
    elif not (_plain_int(N) and _plain_int(K)):
        # sizes symbolic under torch.compile's dynamic shapes (an activation's, not a weight's): the FLOP rule, a
        # guard on them, as the table's lookup needs constants (and would specialize the size, one graph each)
        if 2.0 * M * N * K >= setting("small_shape_min_flops"):
            return False
    elif M >= _row_threshold(index, spec.name, role, N, K):
        return False
    if not count or torch.compiler.is_compiling():  # decided at trace time; counted and logged only in eager code
        return True
    key = (spec.name, M, N, K)
    if key not in _FALLBACKS:
        rows, why = _decide(None if index < 0 else index, spec.name, role, N, K)
        log.info("tcemu: %s %s GEMM M=%d N=%d K=%d is under %s rows (%s): cuBLAS SGEMM (FP32) instead",
                 spec.name, role, M, N, K, rows, why)
    _FALLBACKS[key] += 1
    _THREAD.count += 1
    return True


# =====================================================================================================
# torch ops
# =====================================================================================================


# Defined with the low-level torch.library.Library API rather than ``torch.library.custom_op``: the latter
# wraps every call in two Python layers (autograd and backend wrappers with aliasing checks), about 0.2 ms
# of host time per call on the H200 machine (cProfile, torch 2.11), which compiled small-system MD steps
# pay ~24 times per step. These ops never need autograd: they run inside the autograd.Functions of
# ``tcemu.emulation.ops`` (grad mode off), and return new tensors (no aliasing).
_LIB = torch.library.Library("tcemu", "DEF")  # noqa: TOR901 - kept alive for the process
_LIB.define("split_t(Tensor b, str method) -> Tensor[]")
_LIB.define("emu_mm(Tensor a, Tensor p0, Tensor? p1, Tensor? p2, Tensor? bias, str method, Tensor? b=None) -> Tensor")
_LIB.define("sgemm(Tensor a, Tensor b, Tensor? bias) -> Tensor")


def _split_t_impl(b: Tensor, method: str) -> list[Tensor]:
    return list(split_t(b, method))


def _emu_mm_impl(
    a: Tensor, p0: Tensor, p1: Tensor | None, p2: Tensor | None, bias: Tensor | None, method: str,
    b: Tensor | None = None,
) -> Tensor:
    pieces = tuple(p for p in (p0, p1, p2) if p is not None)
    return emu_mm(a, pieces, method, bias, b=b)


def _plain_gemm(a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
    """``a @ b + bias`` in the current FP32 precision (autocast off); a 2-D product with a bias is one ``addmm``
    (bias in the GEMM epilogue, as ``F.linear`` does), not a GEMM and a separate add."""
    with no_autocast(a.device.type):
        if bias is not None and a.dim() == 2 and b.dim() == 2:
            return torch.addmm(bias, a, b)
        out = torch.matmul(a, b)
    return out if bias is None else out + bias


def _sgemm_impl(a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
    """cuBLAS SGEMM with TF32 off."""
    with cuda_fp32_precision("ieee") if a.is_cuda else contextlib.nullcontext():
        return _plain_gemm(a, b, bias)


for _name, _fn in (("split_t", _split_t_impl), ("emu_mm", _emu_mm_impl), ("sgemm", _sgemm_impl)):
    _LIB.impl(_name, _fn, "CUDA")
    _LIB.impl(_name, _fn, "CPU")  # CPU tensors: the kernels under TRITON_INTERPRET=1 (tests)


@torch.library.register_fake("tcemu::split_t", lib=_LIB)
def _(b: Tensor, method: str) -> list[Tensor]:
    from ..methods import get_method  # noqa: PLC0415

    spec = get_method(method)
    R, C = b.shape
    return [b.new_empty((C, R), dtype=piece_dtype(spec)) for _ in range(spec.n_pieces)]


@torch.library.register_fake("tcemu::emu_mm", lib=_LIB)
def _(a, p0, p1, p2, bias, method, b=None):
    N = p0.shape[-2]
    return a.new_empty((*a.shape[:-1], N))


@torch.library.register_fake("tcemu::sgemm", lib=_LIB)
def _(a, b, bias):
    return a.new_empty(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]))


_split_t_op = torch.ops.tcemu.split_t.default
_emu_mm_op = torch.ops.tcemu.emu_mm.default
_sgemm_op = torch.ops.tcemu.sgemm.default


def _pieces_args(pieces: tuple[Tensor, ...]) -> tuple[Tensor, Tensor | None, Tensor | None]:
    p = tuple(pieces) + (None,) * (3 - len(pieces))
    return p[0], p[1], p[2]


# The ops exist for torch.compile (opaque calls with fake shapes). Eager code skips them: a Python op's
# dispatch costs host time on every call, which small emulated MD steps (host-bound) pay in full.


# The method travels as its spec from the backend (which resolved it and checked that it has a kernel) to the
# launch; only the torch ops, whose schema carries a name, look the spec up again.


def _split_pieces(b: Tensor, spec: MethodSpec) -> tuple[Tensor, ...]:
    return tuple(_split_t_op(b, spec.name)) if torch.compiler.is_compiling() else _split_t(b, spec)


def _emu(a: Tensor, pieces: tuple[Tensor, ...], bias: Tensor | None, spec: MethodSpec, b_t: Tensor | None) -> Tensor:
    """``a @ b + bias`` from b's transposed pieces; ``b_t``: FP32 b transposed, a view (for the range fix-up), or
    None where it is not at hand without a copy (the fix-up then rebuilds b from the pieces)."""
    if torch.compiler.is_compiling():
        return _emu_mm_op(a, *_pieces_args(pieces), bias, spec.name, b_t)
    return _emu_mm(a, tuple(pieces), spec, bias, b=b_t)


def _sgemm(a: Tensor, b: Tensor, bias: Tensor | None) -> Tensor:
    """The small-shape fallback. Inside a compiled graph with FP32 GEMMs in IEEE mode it is plain aten
    (``addmm``/``matmul``), which Inductor schedules and fuses like the model's other FP32 GEMMs; with TF32
    on, the ``tcemu::sgemm`` op, which forces IEEE FP32 whatever the setting; in eager code, its body."""
    if torch.compiler.is_compiling():
        return _plain_gemm(a, b, bias) if _fp32_gemm_is_ieee() else _sgemm_op(a, b, bias)
    return _sgemm_impl(a, b, bias)


# =====================================================================================================
# backend
# =====================================================================================================


@dataclass(frozen=True)
class PreparedWeight:
    """An nn.Linear weight (N, K) split once, in the two layouts the kernels read.

    Attributes:
        method: the method's name.
        fwd: pieces of W, each (N, K), K contiguous: B of ``x @ W.T`` (K-major, as TF32 wgmma needs).
        bwd: pieces of W.T, each (K, N), N contiguous: B of ``dy @ W``.
    """

    method: str
    fwd: tuple[Tensor, ...]
    bwd: tuple[Tensor, ...]


def _unflatten(out: Tensor, lead: torch.Size, n: int) -> Tensor:
    """(M, n) -> (*lead, n); the 2-D result itself when no reshape is needed, so that it is not a view
    (a view made inside an autograd Function cannot be modified in place, and models add into outputs)."""
    return out if len(lead) == 1 else out.view(*lead, n)


class TritonBackend:
    """Triton kernels for tf32x3, bf16x3, bf16x6, bf16x9 on CUDA (compute capability >= 8.0).

    Under ``TRITON_INTERPRET=1`` the same kernels also run on CPU tensors (slowly; for tests).
    """

    name = "triton"

    @functools.lru_cache(maxsize=64)  # noqa: B019 - the backend is a process-wide singleton
    def unavailable_reason(self, device: torch.device, spec: MethodSpec | None = None) -> str | None:
        if spec is not None and spec.name not in KERNEL_METHODS:
            if spec.name == "fp32":
                return "method fp32 has no Triton kernel (it is cuBLAS SGEMM)"
            return f"method {spec.name} has no Triton kernel (have {', '.join(KERNEL_METHODS)})"
        device = torch.device(device)
        if device.type == "cpu" and interpreting():
            return None
        if device.type != "cuda":
            return f"needs a CUDA device of compute capability >= 8.0, got device type {device.type!r}"
        if not torch.cuda.is_available():
            return "needs a CUDA device of compute capability >= 8.0; torch.cuda is not available"
        cap = capability(device)
        if tensor_core_generation(device) is None:
            return f"needs a CUDA device of compute capability >= 8.0, got {cap[0]}.{cap[1]}"
        return None

    # ---- general product ----
    def matmul(self, a: Tensor, b: Tensor, spec: MethodSpec) -> Tensor:
        """``a @ b`` with torch.matmul broadcasting (both at least 2-D), any strides."""
        if a.dim() < 2 or b.dim() < 2:
            raise ValueError("TritonBackend.matmul needs a and b of at least 2 dimensions")
        M, K = a.shape[-2:]
        Kb, N = b.shape[-2:]
        if K != Kb:
            raise ValueError(f"matmul shapes {tuple(a.shape)} and {tuple(b.shape)} do not match")
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        Z = 1
        for d in batch:
            Z *= d
        # (b a Parameter: its sizes are static under torch.compile, so the measured table decides there too)
        if _use_fallback(spec, M * Z, N, K, a.device, weight_dims=isinstance(b, torch.nn.Parameter)):
            return _sgemm(a, b, None)
        if b.dim() == 2:  # one weight-like b: fold the batch into M where a allows it
            pieces = _split_pieces(b, spec)
            a_b = a.expand(*batch, M, K)
            try:
                a2 = a_b.view(-1, K)
                out = _emu(a2, pieces, None, spec, b.mT)
                return out.view(*batch, M, N)
            except RuntimeError:
                a3 = a_b.reshape(-1, M, K)
                out = _emu(a3, pieces, None, spec, b.mT)
                return out.view(*batch, M, N)
        a3 = a.expand(*batch, M, K).reshape(-1, M, K)
        b_batch = b.shape[:-2]
        b3 = b.reshape(-1, K, N)
        Zb = b3.shape[0]
        # every entry's pieces from one split of (K, Zb * N): its transposed pieces are (Zb * N, K) = (Zb, N, K)
        wide = b3.permute(1, 0, 2).reshape(K, Zb * N)
        stacked = tuple(p.view(Zb, N, K) for p in _split_pieces(wide, spec))
        b_t = b3.mT
        if b3.shape[0] != Z:  # broadcast b's pieces over the batch (stride 0 where possible)
            stacked = tuple(
                p.view(*b_batch, N, K).expand(*batch, N, K).reshape(-1, N, K) for p in stacked
            )
            b_t = None  # (a broadcast b would need a copy: the fix-up rebuilds it from the pieces)
        out = _emu(a3, stacked, None, spec, b_t)
        return out.view(*batch, M, N)

    # ---- linear layers ----
    def prepare_weight(self, weight: Tensor, spec: MethodSpec) -> PreparedWeight:
        """Split W (N, K) beforehand: forward pieces (N, K) and input-gradient pieces (K, N)."""
        fwd, bwd = (self._pieces(weight, None, spec, layout) for layout in ("fwd", "bwd"))
        return PreparedWeight(spec.name, fwd, bwd)

    @staticmethod
    def _pieces(weight: Tensor, prepared, spec: MethodSpec, layout: str) -> tuple[Tensor, ...]:
        """The ``layout`` (``"fwd"`` or ``"bwd"``) pieces: from ``prepared``, or split now (that layout only)."""
        if isinstance(prepared, PreparedWeight) and prepared.method == spec.name:
            return getattr(prepared, layout)
        with torch.no_grad():
            w = weight.detach()
            return _split_pieces(w.t() if layout == "fwd" else w, spec)

    def linear(self, x: Tensor, weight: Tensor, prepared, spec: MethodSpec, bias: Tensor | None) -> Tensor:
        """``x @ W.T + bias`` for x (M, K) (or (..., K)), W (N, K), bias (N,) fused in the kernel."""
        N, K = weight.shape
        lead = x.shape[:-1]
        x2 = x.reshape(-1, K)
        M = x2.shape[0]
        if _use_fallback(spec, M, N, K, x.device, "fwd", weight_dims=True):
            return _unflatten(_sgemm(x2, weight.t(), bias), lead, N)
        return _unflatten(_emu(x2, self._pieces(weight, prepared, spec, "fwd"), bias, spec, weight), lead, N)

    def runs_as_sgemm(self, M: int, N: int, K: int, device: torch.device, spec: MethodSpec) -> bool:
        """Under torch.compile (where the fallback is decided at trace time and not counted): whether the product,
        forward and input gradient, takes the small-shape fallback with FP32 GEMMs in IEEE mode (plain aten, as in
        the FP32 model). Monotone in M: each is a row threshold."""
        def fallback(rows, n, k, role):
            return _use_fallback(spec, rows, n, k, device, role, count=False, weight_dims=True)

        return (device.type == "cuda" and fallback(M, N, K, "fwd") and fallback(M, K, N, "bwd_input")
                and _fp32_gemm_is_ieee())

    def linear_input_grad(self, grad_out: Tensor, weight: Tensor, prepared, spec: MethodSpec) -> Tensor:
        """``grad_out @ W`` for grad_out (M, N) (or (..., N)), W (N, K) -> (M, K)."""
        N, K = weight.shape
        lead = grad_out.shape[:-1]
        g2 = grad_out.reshape(-1, N)
        M = g2.shape[0]
        if _use_fallback(spec, M, K, N, grad_out.device, "bwd_input", weight_dims=True):
            return _unflatten(_sgemm(g2, weight, None), lead, K)
        return _unflatten(_emu(g2, self._pieces(weight, prepared, spec, "bwd"), None, spec, weight.t()), lead, K)
