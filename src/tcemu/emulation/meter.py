"""``tcemu.coverage()``: how much of a model's float32 contraction work was emulated, per op and per module.

    with tcemu.coverage() as cov:
        energy = model(x); forces = -torch.autograd.grad(energy, x)[0]
    print(cov.table()); assert cov.fraction >= 0.99

Two sources, so that nothing is counted twice and nothing is missed:

* **Emulated products** are counted where tcemu runs them (every GEMM backend call of :func:`tcemu.matmul`,
  :func:`tcemu.linear`, ``EmulatedLinear`` and their gradients, and the fused attention ops), by their logical
  FLOPs (``2 M N K`` once, not once per piece) with the method. The cuBLAS SGEMM that the CUDA backend runs for
  small shapes instead is its own kind, ``fallback``.
* **Plain products** are counted at the aten level by a ``TorchDispatchMode``: ``mm``, ``bmm``, ``addmm``,
  ``baddbmm``, ``addbmm``, ``mv``, ``addmv``, ``dot``, ``vdot``, ``_trilinear`` (bilinear), convolutions and the
  attention kernels, which is what ``torch.matmul``, ``einsum``, ``tensordot``, ``F.linear`` and TorchScript
  code come down to. tcemu's own piece products (inside a backend call) are not counted there.

Kinds: ``emulated``, ``fallback``, ``fp32`` (a float32 product that ran plain), ``no_contraction`` (a product
without accumulation, K = 1, or an einsum outer product: one FP32 rounding per element, not judged),
``other_dtype`` (float64, half, complex, integer: not float32 work) and ``opaque`` (calls of custom ops whose
products the meter cannot see; calls counted, no FLOPs). ``fraction`` is emulated / (emulated + fallback + fp32).
Each row says the innermost module (forward and backward; named as torch's ModuleTracker names them: the first
module called, by its class, then dotted paths), the op and the phase.

A meter counts the products of the thread and asyncio task that entered it (and of tasks started inside it), in
forward and backward: an emulated product of a backward counts for the meters its forward ran in (autograd runs a
CUDA backward on threads of its own, :mod:`tcemu.emulation.context`), a plain one for the meters of the thread
that called ``backward`` (torch hands its dispatch modes to autograd's threads).

Where it cannot see: compiled graphs. torch does not compile under a dispatch mode, so inside the meter a
``torch.compile``d function runs eagerly (with ``fullgraph=True`` torch raises instead): the meter measures the
eager code. Entering it inside a compiled region raises. Custom ops (a library's own CUDA kernels) are listed as
``opaque``.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

from .context import ContextStack, foreign_thread, leave_mode
from .module_tracker import ModuleTracker

__all__ = ["coverage", "Coverage", "CoverageRow", "KINDS", "guard_backend", "labelled", "report_uncontracted"]

KINDS = ("emulated", "fallback", "fp32", "no_contraction", "other_dtype", "opaque")
_JUDGED = ("emulated", "fallback", "fp32")

class _ThreadState(threading.local):
    depth = 0  # inside a tcemu backend call (its piece products are not the model's)
    label = None  # the routed torch function


_TLS = _ThreadState()
_METERS = ContextStack("meters")  # the meters measuring in this thread and task
_NULL = contextlib.nullcontext()


def _depth() -> int:
    return _TLS.depth


def _meters() -> tuple[Coverage, ...]:
    """The meters measuring here: this thread's and task's; on autograd's own threads, those whose dispatch mode
    torch handed over from the thread that called ``backward``."""
    meters = _METERS.get()
    if not meters and foreign_thread():
        return tuple(m.meter for m in _get_current_dispatch_mode_stack() if isinstance(m, _AtenCounter))
    return meters


def active() -> bool:
    """Whether a :func:`coverage` meter is measuring here."""
    return bool(_meters())


def forward_meters() -> tuple[Coverage, ...]:
    """The meters measuring here, for an autograd Function's forward to keep (``ctx``)."""
    return _meters()


@contextlib.contextmanager
def backward_meters(kept: tuple[Coverage, ...]):
    """Count a backward's emulated products for the meters of its forward (``kept``, those still measuring) and
    those measuring here."""
    here = _meters()
    meters = tuple(m for m in kept if not m.finished and m not in here) + here
    if meters == here:
        yield
        return
    token = _METERS.set(meters)
    try:
        yield
    finally:
        _METERS.reset(token)


@contextlib.contextmanager
def _label(name: str):
    old = _TLS.label
    if old is None:
        _TLS.label = name
    try:
        yield
    finally:
        _TLS.label = old


def labelled(name: str):
    """Name the emulated products made inside (the torch function that ``emulation_mode`` routed)."""
    return _label(name) if not torch.compiler.is_compiling() and _meters() else _NULL


def _phase() -> str:
    return "backward" if torch._C._current_graph_task_id() != -1 else "forward"


def _record(op: str, kind: str, method: str, flops: float, calls: int = 1) -> None:
    phase = _phase()
    for meter in _meters():
        meter._add(meter._module(), op, phase, kind, method, flops, calls)


def report_uncontracted(op: str, flops: float) -> None:
    """Record a float32 product without accumulation left to torch (an einsum outer product)."""
    if not torch.compiler.is_compiling() and _meters():
        _record(op, "no_contraction", "", flops)


# --------------------------------------------------------------------------- emulated products


class _GuardedBackend:
    """A GEMM backend whose calls run with torch-function modes off (tcemu's own piece products are not the
    model's: a mode must not emulate them again) and, in eager code, are counted by the active meters (which do
    not count the pieces either)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.name = inner.name
        self.prepares_lazily = getattr(inner, "prepares_lazily", False)

    def unavailable_reason(self, device, spec=None):
        return self._inner.unavailable_reason(device, spec)

    def _run(self, fn, args: tuple, spec, op: str, flops, device: torch.device, k: int):
        if torch.compiler.is_compiling():
            with torch._C.DisableTorchFunction():
                return fn(*args)
        depth = _depth()
        outer = depth == 0 and bool(_meters())
        before = _fallbacks(self._inner, device) if outer else 0
        _TLS.depth = depth + 1
        try:
            with torch._C.DisableTorchFunction():
                out = fn(*args)
        finally:
            _TLS.depth = depth
        if outer:
            if k == 1:  # nothing accumulates: as the aten counter classifies a K = 1 product
                kind, method = "no_contraction", ""
            else:
                kind = "fallback" if _fallbacks(self._inner, device) != before else "emulated"
                method = spec.name
            _record(_TLS.label or op, kind, method, flops())
        return out

    def matmul(self, a, b, spec):
        def flops():
            z = math.prod(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
            return 2.0 * z * a.shape[-2] * a.shape[-1] * b.shape[-1]

        return self._run(self._inner.matmul, (a, b, spec), spec, "matmul", flops, a.device, a.shape[-1])

    def prepare_weight(self, weight, spec):
        with torch._C.DisableTorchFunction():
            return self._inner.prepare_weight(weight, spec)

    def runs_as_sgemm(self, M, N, K, device, spec):
        return self._inner.runs_as_sgemm(M, N, K, device, spec)

    def linear(self, x, weight, prepared, spec, bias):
        def flops():
            return 2.0 * (x.numel() // max(x.shape[-1], 1)) * weight.shape[0] * weight.shape[1]

        return self._run(self._inner.linear, (x, weight, prepared, spec, bias), spec, "linear", flops, x.device,
                         weight.shape[1])

    def linear_input_grad(self, grad_out, weight, prepared, spec):
        def flops():
            return 2.0 * (grad_out.numel() // max(grad_out.shape[-1], 1)) * weight.shape[0] * weight.shape[1]

        return self._run(self._inner.linear_input_grad, (grad_out, weight, prepared, spec), spec, "linear",
                         flops, grad_out.device, weight.shape[0])


def _fallbacks(backend: Any, device: torch.device) -> int:
    """Calls of this thread that took the CUDA backend's small-shape SGEMM fallback so far."""
    if device.type != "cuda" or backend.name != "triton":
        return 0
    from .gemm.triton_backend import thread_fallbacks  # noqa: PLC0415 - the Triton backend is in use: it imports

    return thread_fallbacks()


_GUARDED: dict[int, _GuardedBackend] = {}


def guard_backend(backend: Any) -> Any:
    """``backend``, or its guarded twin while a meter measures or a torch-function mode is active."""
    if torch.compiler.is_compiling():  # no meter under compile; a mode there must still skip the pieces
        return _GuardedBackend(backend) if torch._C._len_torch_function_stack() else backend
    if not (torch._C._len_torch_function_stack() or _meters()):
        return backend
    g = _GUARDED.get(id(backend))
    if g is None or g._inner is not backend:
        g = _GUARDED[id(backend)] = _GuardedBackend(backend)
    return g


# --------------------------------------------------------------------------- plain products (aten)


def _shape(x) -> tuple[int, ...]:
    return tuple(x.shape)


def _mm_flops(a, b) -> tuple[float, int]:
    return 2.0 * math.prod(_shape(a)[:-1]) * _shape(b)[-1] * _shape(a)[-1], _shape(a)[-1]


def _flops_and_k(packet, args, kwargs, out) -> tuple[float, int]:
    """FLOPs (2 per multiply-add) and the accumulation length K of an aten product."""
    aten = torch.ops.aten
    if packet in (aten.mm, aten.bmm):
        return _mm_flops(args[0], args[1])
    if packet in (aten.addmm, aten.baddbmm, aten._addmm_activation):
        return _mm_flops(args[1], args[2])
    if packet is aten.addbmm:
        b, n, k = _shape(args[1])
        return 2.0 * b * n * k * _shape(args[2])[-1], b * k
    if packet is aten.mv:
        return 2.0 * args[0].numel(), _shape(args[0])[-1]
    if packet is aten.addmv:
        return 2.0 * args[1].numel(), _shape(args[1])[-1]
    if packet in (aten.dot, aten.vdot):
        return 2.0 * args[0].numel(), args[0].numel()
    if packet is aten._trilinear:
        i1, i2, i3, e1, e2, e3, sumdim = args[:7]
        shapes = []
        for t, exp in ((i1, e1), (i2, e2), (i3, e3)):
            s = list(_shape(t))
            for d in sorted(exp):
                s.insert(d, 1)
            shapes.append(s)
        full = torch.broadcast_shapes(*shapes)
        return 2.0 * math.prod(full), math.prod(full[d] for d in sumdim) if sumdim else 1
    if packet in (aten._scaled_dot_product_flash_attention_for_cpu,
                  aten._scaled_dot_product_flash_attention_for_cpu_backward):
        q, k, v = (args[1:4] if "backward" in str(packet) else args[:3])
        lead = math.prod(_shape(q)[:-2])
        fwd = 2.0 * lead * _shape(q)[-2] * _shape(k)[-2] * (_shape(q)[-1] + _shape(v)[-1])
        return (2 * fwd if "backward" in str(packet) else fwd), _shape(q)[-1]
    from torch.utils.flop_counter import flop_registry  # noqa: PLC0415

    return float(flop_registry[packet](*args, **kwargs, out_val=out)), 0  # convolutions, attention kernels


def _aten_products() -> frozenset:
    aten = torch.ops.aten
    names = ("mm", "bmm", "addmm", "baddbmm", "addbmm", "_addmm_activation", "mv", "addmv", "dot", "vdot",
             "_trilinear", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_flash_attention_for_cpu_backward")
    from torch.utils.flop_counter import flop_registry  # noqa: PLC0415

    found = {getattr(aten, n) for n in names if hasattr(aten, n)}
    found |= {k for k in flop_registry if getattr(k, "__module__", None) != "torch._higher_order_ops"
              and str(k).startswith("aten.") and k is not aten._scaled_mm}
    return frozenset(found)


_ATTENTION_PREFIXES = ("aten._scaled_dot_product", "aten._flash_attention", "aten._efficient_attention")
_SEEN_NAMESPACES = frozenset({"aten", "prims", "prim", "tcemu", "profiler", "_c10d_functional", "c10d"})


class _AtenCounter(TorchDispatchMode):
    def __init__(self, meter: Coverage) -> None:
        super().__init__()
        self.meter = meter
        self.products = _aten_products()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if _depth() or not self.meter._measures_here():
            return out  # tcemu's own pieces, or another thread's or task's products
        packet = func._overloadpacket
        if packet in self.products:
            self.meter._aten(packet, args, kwargs, out)
        elif func.namespace == "tcemu" and str(packet) in ("tcemu.attention_fwd", "tcemu.attention_bwd"):
            q, k, v = args[:3]
            fwd = 2.0 * math.prod(_shape(q)[:-2]) * _shape(q)[-2] * _shape(k)[-2] * (_shape(q)[-1] + _shape(v)[-1])
            bwd = str(packet) == "tcemu.attention_bwd"
            self.meter._add(self.meter._module(), _TLS.label or "scaled_dot_product_attention",
                            _phase(), "emulated", str(args[8] if bwd else args[5]), 2 * fwd if bwd else fwd, 1)
        elif func.namespace not in _SEEN_NAMESPACES:
            self.meter._add(self.meter._module(), str(packet), _phase(), "opaque", "", 0.0, 1)
        return out


# --------------------------------------------------------------------------- which module runs


# --------------------------------------------------------------------------- the meter


@dataclass(frozen=True)
class CoverageRow:
    """FLOPs of one (module, op, phase, kind, method): ``module`` is the innermost module's name
    (``"MACE.interactions.0.conv_tp"``: the class of the first module called, then the path; ``""`` outside any
    module)."""

    module: str
    op: str
    phase: str
    kind: str
    method: str
    flops: float
    calls: int


class Coverage:
    """A coverage meter: use as ``with tcemu.coverage() as cov:`` (see the module docstring). Entered again
    after its block, it adds to its counts; entered inside its own block, it refuses."""

    def __init__(self, *models: torch.nn.Module) -> None:
        self._models = models
        self._counts: dict[tuple, list] = defaultdict(lambda: [0.0, 0])
        self._tracker = None
        self._counter = None
        self.finished = False

    # ---- measuring
    def __enter__(self) -> Coverage:
        if self._counter is not None:
            raise RuntimeError("tcemu.coverage: this meter is measuring already (its `with` entered inside "
                               "itself); measure the inner block with a second tcemu.coverage()")
        if torch.compiler.is_compiling():
            raise RuntimeError("tcemu.coverage() cannot measure inside a compiled region: enter it around eager "
                               "code (torch.compile'd functions called inside it run eagerly)")
        tracker = ModuleTracker(self._models, self._measures_here).__enter__()
        try:
            self._counter = _AtenCounter(self).__enter__()
        except BaseException:
            tracker.__exit__(None, None, None)
            raise
        self._tracker = tracker
        _METERS.push(self)
        self.finished = False
        return self

    def __exit__(self, *exc) -> None:
        counter, self._counter = self._counter, None
        if counter is None:
            return
        try:
            _METERS.remove(self)
            leave_mode(counter, True, lambda: counter.__exit__(*exc))
        finally:
            self._tracker.__exit__(*exc)
            self.finished = True

    def _measures_here(self) -> bool:
        """Whether this meter counts what runs here (this thread and task, or autograd's threads)."""
        return self in _METERS.get() or foreign_thread()

    def _module(self) -> str:
        return self._tracker.current() if self._tracker is not None else ""

    def _add(self, module: str, op: str, phase: str, kind: str, method: str, flops: float, calls: int) -> None:
        entry = self._counts[(module, op, phase, kind, method)]
        entry[0] += flops
        entry[1] += calls

    def _aten(self, packet, args, kwargs, out) -> None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if tensors and tensors[0].device.type == "meta":
            return  # shape computations (tcemu's own checks), not products
        dtype = tensors[-1].dtype if tensors else torch.float32
        try:
            flops, k = _flops_and_k(packet, args, kwargs, out)
        except Exception:  # noqa: BLE001 - an unusual overload: counted as a call without FLOPs
            flops, k = 0.0, 0
        op = str(packet)
        label = _TLS.label
        if dtype != torch.float32:
            kind, method = "other_dtype", str(dtype).removeprefix("torch.")
        elif k == 1:
            kind, method = "no_contraction", ""
        elif label == "scaled_dot_product_attention" and op.startswith(_ATTENTION_PREFIXES):
            kind, method = "fallback", "fp32"  # tcemu's attention ran torch's for a small batch
        else:
            kind, method = "fp32", ""
        self._add(self._module(), op, _phase(), kind, method, flops, 1)

    # ---- results
    @property
    def rows(self) -> list[CoverageRow]:
        """Every (module, op, phase, kind, method) with its FLOPs and calls, largest first."""
        rows = [CoverageRow(*key, flops, calls) for key, (flops, calls) in self._counts.items()]
        return sorted(rows, key=lambda r: (-r.flops, r.module, r.op))

    def flops(self, kind: str | None = None, phase: str | None = None) -> float:
        """Total FLOPs of one kind (all judged kinds: emulated, fallback, fp32, when None) and phase."""
        kinds = _JUDGED if kind is None else (kind,)
        return sum(r.flops for r in self.rows if r.kind in kinds and (phase is None or r.phase == phase))

    @property
    def fraction(self) -> float:
        """Emulated share of the float32 contraction FLOPs (NaN when there were none)."""
        total = self.flops()
        return self.flops("emulated") / total if total else math.nan

    @property
    def methods(self) -> dict[str, float]:
        """Emulated FLOPs per method."""
        out: dict[str, float] = defaultdict(float)
        for r in self.rows:
            if r.kind == "emulated":
                out[r.method] += r.flops
        return dict(out)

    def by_module(self) -> dict[str, dict[str, float]]:
        """Innermost module -> FLOPs per kind."""
        out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for r in self.rows:
            out[r.module][r.kind] += r.flops
        return {m: dict(v) for m, v in out.items()}

    def summary(self) -> dict[str, Any]:
        """The headline numbers: fraction, FLOPs per kind and phase, methods."""
        s: dict[str, Any] = {"fraction": self.fraction, "methods": self.methods}
        for kind in KINDS:
            s[f"{kind}_flops"] = self.flops(kind)
        for phase in ("forward", "backward"):
            s[f"{phase}_flops"] = self.flops(phase=phase)
        s["opaque_calls"] = sum(r.calls for r in self.rows if r.kind == "opaque")
        return s

    def table(self, max_rows: int = 25) -> str:
        """Plain-text report: the totals, then the rows with the largest FLOPs (plain FP32 ones first)."""
        total = self.flops()
        head = (f"tcemu coverage: {_pct(self.fraction)} of {total:.4g} float32 contraction FLOPs emulated "
                f"(forward {self.flops(phase='forward'):.4g}, backward {self.flops(phase='backward'):.4g})")
        lines = [head]
        for kind in KINDS:
            f = self.flops(kind)
            n = sum(r.calls for r in self.rows if r.kind == kind)
            if n:
                share = f"{100 * f / total:6.2f} %" if total and kind in _JUDGED else "   -    "
                lines.append(f"  {kind:15s} {f:12.4g} FLOPs {share}  {n} calls")
        rows = sorted(self.rows, key=lambda r: (r.kind == "emulated", -r.flops))[:max_rows]
        if rows:
            w = max(12, *(len(r.module) for r in rows))
            lines.append(f"{'module':{w}s}  {'op':34s} {'phase':8s} {'kind':14s} {'method':8s} {'calls':>6s} "
                         f"{'FLOPs':>11s}")
            lines.extend(f"{r.module or '-':{w}s}  {r.op:34s} {r.phase:8s} {r.kind:14s} {r.method or '-':8s} "
                         f"{r.calls:6d} {r.flops:11.4g}" for r in rows)
            if len(self.rows) > max_rows:
                lines.append(f"... and {len(self.rows) - max_rows} more rows (Coverage.rows)")
        if any(r.kind == "opaque" for r in self.rows):
            lines.append("opaque: custom ops whose products (if any) the meter cannot see")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Coverage(fraction={_pct(self.fraction)}, flops={self.flops():.4g})"


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.2f} %"


def coverage(*models: torch.nn.Module) -> Coverage:
    """A coverage meter for the code run inside ``with tcemu.coverage() as cov:`` (module docstring).

    ``models``: name modules by their path in these (``"MACE.interactions.0"``) even when the code calls a
    submodule first; otherwise the first module called is the root of the names."""
    return Coverage(*models)
