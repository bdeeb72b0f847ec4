"""One frozen configuration of the emulation: :class:`EmulationConfig`, read from the environment once.

The settings that are not arguments of a call (small-shape fallbacks, autotuning, the fused attention, a forced
kernel configuration) live here, and with them the method, backend, weight-gradient method and attention scope
that whole-model entry points (``tcemu run``, :mod:`tcemu.mlip`) apply. The process default comes from the
``TCEMU_*`` variables (docs/emulation.md, "Configuration"), read at the first :func:`get_config`; a block of
code changes it with ``with tcemu.config(small_shape_fallback=False): ...``. The override lives in a
:class:`contextvars.ContextVar`, so it is local to the thread (and asyncio task) that entered it: an MD loop in
one thread never sees another thread's override, and a new thread starts from the process default. A backward
pass runs under the configuration its forward saw, and counts its emulated products for the coverage meters its
forward ran in (autograd runs a CUDA backward on threads of its own): :func:`for_backward`.

Under ``torch.compile`` a setting is read at trace time (:func:`setting`) and becomes a constant of the graph:
change the configuration before compiling (or call ``torch.compiler.reset()``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from .meter import backward_meters, forward_meters

__all__ = ["ATTENTION_SCOPES", "ATTENTION_SUFFIXES", "BACKENDS", "ENV_VARS", "SMALL_SHAPE_RULES", "EmulationConfig",
           "ForwardState",
           "backward_config", "config", "env_flag", "for_backward", "get_config", "setting"]

#: strings an environment switch accepts (after stripping and lower-casing); unset or empty means its default
TRUE_STRINGS = ("1", "true", "yes", "on")
FALSE_STRINGS = ("0", "false", "no", "off")
BACKENDS = ("auto", "torch", "triton")
#: where attention is emulated by whole-model entry points: nowhere, in the model's attention blocks, or in the
#: whole step (every call of the step runs inside :func:`tcemu.emulation_mode` with ``attention=True``)
ATTENTION_SCOPES = ("none", "blocks", "step")
#: the command line's and ``TCEMU_FP32_PRECISION``'s spelling of an attention scope after the method
#: (``tf32x3+attn``): :meth:`EmulationConfig.from_method_string` and :attr:`EmulationConfig.method_string`
ATTENTION_SUFFIXES = {"none": "", "blocks": "+attn", "step": "+attn-step"}
#: how the small-shape fallback decides (``EmulationConfig.small_shape_rule``)
SMALL_SHAPE_RULES = ("measured", "flops")


def env_flag(name: str, default: bool, environ: Mapping[str, str] | None = None) -> bool:
    """The true/false switch ``name`` of the environment: ``1 true yes on`` or ``0 false no off`` (any case);
    unset or empty gives ``default``; anything else is a ValueError naming the variable."""
    raw = (os.environ if environ is None else environ).get(name, "").strip().lower()
    if not raw:
        return default
    if raw in TRUE_STRINGS:
        return True
    if raw in FALSE_STRINGS:
        return False
    raise ValueError(f"{name}={raw!r} is not a switch: set it to one of {', '.join(TRUE_STRINGS)} (on) or "
                     f"{', '.join(FALSE_STRINGS)} (off), or unset it")


def _env_float(name: str, default: float, environ: Mapping[str, str], what: str = "a FLOP count",
               example: str = "6e9") -> float:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{name}={raw!r} is not {what}: set it to a finite number >= 0 (e.g. {example}), "
                         "or unset it")
    return value


def _flop_count(value: Any) -> float:
    """``small_shape_min_flops`` as a float: a number >= 0, or a string of one (``"6e9"``, as the environment
    gives it)."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise ValueError(f"EmulationConfig.small_shape_min_flops must be a FLOP count (a number >= 0, e.g. 6e9), "
                             f"got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"EmulationConfig.small_shape_min_flops must be a number >= 0 (e.g. 6e9), got "
                        f"{type(value).__name__} {value!r}")
    if not value >= 0:
        raise ValueError(f"small_shape_min_flops must be >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class EmulationConfig:
    """How tcemu emulates FP32 products (frozen: derive another with :meth:`replace` or :func:`config`).

    Attributes:
        method: the emulation method whole-model entry points apply (``tcemu run``, :mod:`tcemu.mlip`).
        backend: ``"auto"`` (the Triton kernels where they run the method, else the PyTorch reference),
            ``"torch"`` or ``"triton"``, for those entry points.
        grad_weight_method: method of the weight gradients (None: ``method``).
        attention: where those entry points emulate attention (:data:`ATTENTION_SCOPES`).
        small_shape_fallback: on CUDA, GEMMs where the emulation does not pay run as cuBLAS SGEMM (FP32
            accuracy kept), as ``small_shape_rule`` decides (docs/kernels.md, "Design": small shapes).
        small_shape_rule: ``"measured"``: per (method, M, N, K) from the GPU's measured table
            (:mod:`tcemu.emulation.gemm.decision`: ``small_shape_table``, else the one shipped for this GPU
            model), and the FLOP rule where there is none; ``"flops"``: the FLOP rule everywhere.
        small_shape_min_flops: the FLOP rule: GEMMs below 2 M N K = this run as SGEMM. 6 GFLOP: on the H200,
            from 6.04 GFLOP up TF32x3, BF16x3 and BF16x6 ran faster than SGEMM on GPU time in every measured
            case, at 4.03 GFLOP 0.37-1.59x (benchmarks/results/h200/gemm/small_shape_threshold.csv).
        small_shape_margin: the measured rule emulates only where SGEMM's 20th-percentile time over the
            emulation's 80th reaches ``1 + margin``.
        small_shape_table: a table file written by ``benchmarks/gemm_decision.py`` on this machine, read before
            the shipped ones (used where its GPU name is this device's); None: the shipped tables only.
        attention_fallback: on CUDA, attention batches of fewer than
            :data:`~tcemu.emulation.attention.FUSED_MIN_HEADS` heads in all run torch's FP32 attention (too few
            programs to fill the GPU; benchmarks/results/h200/attention/batch_sweep.csv).
        fused_attention: ``backend="auto"`` attention runs the fused Triton kernels where they apply (else the
            reference).
        autotune: the first GEMM of each (method, M bucket, N, K) times a few candidate kernel configurations
            and keeps the fastest that agrees with the first (compile time is user time: off by default).
        kernel_config: one kernel configuration for every GEMM (e.g. ``"128x128x32w8s3m1"``), for
            experiments; None: the measured table (or autotuning).
        range_fixup: the range check in every GEMM kernel and the fix-up of the rows it flags (docs/emulation.md,
            "The top of the range"). Off is a diagnostic (Inf, NaN or lost accuracy near FLT_MAX), to time what
            they cost (benchmarks/gemm_range_cost.py).
        direct_launch: on CUDA, a kernel launched before with the same specialization is launched through its
            compiled launcher, without Triton's per-call argument binding (:mod:`tcemu.emulation.gemm.direct`: the
            same binary, so the same bits: ``tests/emulation/gemm/test_direct_launch.py`` on the GPU); off:
            Triton's path for every launch.
    """

    method: str = "tf32x3"
    backend: str = "auto"
    grad_weight_method: str | None = None
    attention: str = "none"
    small_shape_fallback: bool = True
    small_shape_rule: str = "measured"
    small_shape_min_flops: float = 6e9
    small_shape_margin: float = 0.05
    small_shape_table: str | None = None
    attention_fallback: bool = True
    fused_attention: bool = True
    autotune: bool = False
    kernel_config: str | None = None
    range_fixup: bool = True
    direct_launch: bool = True

    def __post_init__(self) -> None:
        from .methods import get_method  # noqa: PLC0415 - methods does not import this module

        get_method(self.method)
        if self.grad_weight_method is not None:
            get_method(self.grad_weight_method)
        if self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose one of {', '.join(BACKENDS)}")
        if self.attention not in ATTENTION_SCOPES:
            raise ValueError(f"unknown attention scope {self.attention!r}; choose one of "
                             f"{', '.join(ATTENTION_SCOPES)}")
        object.__setattr__(self, "small_shape_min_flops", _flop_count(self.small_shape_min_flops))
        if not self.small_shape_min_flops >= 0:
            raise ValueError(f"small_shape_min_flops must be >= 0, got {self.small_shape_min_flops!r}")
        if self.small_shape_rule not in SMALL_SHAPE_RULES:
            raise ValueError(f"unknown small_shape_rule {self.small_shape_rule!r}; choose one of "
                             f"{', '.join(SMALL_SHAPE_RULES)}")
        if not 0 <= self.small_shape_margin < math.inf:
            raise ValueError(f"small_shape_margin must be a finite number >= 0, got {self.small_shape_margin!r}")
        if self.kernel_config is not None:
            from .gemm.configs import KernelConfig  # noqa: PLC0415 - imports triton: only when one is named

            KernelConfig.parse(self.kernel_config)
        for name in ("small_shape_fallback", "attention_fallback", "fused_attention", "autotune", "range_fixup",
                     "direct_launch"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"EmulationConfig.{name} must be True or False, got {getattr(self, name)!r}")

    def replace(self, **changes: Any) -> EmulationConfig:
        """A copy with ``changes`` (checked as a new configuration)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"EmulationConfig has no field {', '.join(sorted(unknown))}; fields: "
                            f"{', '.join(f.name for f in dataclasses.fields(self))}")
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_method_string(cls, text: str, **fields: Any) -> EmulationConfig:
        """``"tf32x3+attn"`` -> ``EmulationConfig(method="tf32x3", attention="blocks")`` (any case; ``+attn-step``:
        ``"step"``), with ``fields`` set too: the spelling of the command line and of ``TCEMU_FP32_PRECISION``."""
        raw = str(text).strip().lower()
        method, plus, suffix = raw.partition("+")
        scopes = {v: k for k, v in ATTENTION_SUFFIXES.items()}
        scope = scopes.get(plus + suffix)
        if scope is None:
            raise ValueError(f"{text!r}: unknown suffix {plus + suffix!r}; write a method alone or with "
                             f"{' or '.join(repr(v) for v in ATTENTION_SUFFIXES.values() if v)} (e.g. tf32x3+attn)")
        from .methods import get_method  # noqa: PLC0415

        if scope != "none" and not get_method(method).uses_tensor_cores:
            raise ValueError(f"{text!r}: attention is emulated by emulation methods only, not {method}")
        return cls(method=method, attention=scope, **fields)

    @property
    def method_string(self) -> str:
        """The method with its attention scope, as :meth:`from_method_string` reads it (``"tf32x3+attn"``)."""
        return self.method + ATTENTION_SUFFIXES[self.attention]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> EmulationConfig:
        """The configuration the ``TCEMU_*`` variables of :data:`ENV_VARS` give (unset ones: the defaults)."""
        env = os.environ if environ is None else environ
        d = cls()
        return cls(
            small_shape_fallback=env_flag("TCEMU_SMALL_SHAPE_FALLBACK", d.small_shape_fallback, env),
            small_shape_rule=env.get("TCEMU_SMALL_SHAPE_RULE", "").strip().lower() or d.small_shape_rule,
            small_shape_min_flops=_env_float("TCEMU_SMALL_SHAPE_MIN_FLOPS", d.small_shape_min_flops, env),
            small_shape_margin=_env_float("TCEMU_SMALL_SHAPE_MARGIN", d.small_shape_margin, env, "a margin", "0.05"),
            small_shape_table=env.get("TCEMU_SMALL_SHAPE_TABLE", "").strip() or None,
            attention_fallback=env_flag("TCEMU_ATTENTION_FALLBACK", d.attention_fallback, env),
            fused_attention=env_flag("TCEMU_FUSED_ATTENTION", d.fused_attention, env),
            autotune=env_flag("TCEMU_GEMM_AUTOTUNE", d.autotune, env),
            kernel_config=env.get("TCEMU_GEMM_CONFIG", "").strip() or None,
            direct_launch=env_flag("TCEMU_DIRECT_LAUNCH", d.direct_launch, env),
        )


#: the environment variables of :meth:`EmulationConfig.from_env` and the field each sets
ENV_VARS = {
    "TCEMU_SMALL_SHAPE_FALLBACK": "small_shape_fallback",
    "TCEMU_SMALL_SHAPE_RULE": "small_shape_rule",
    "TCEMU_SMALL_SHAPE_MIN_FLOPS": "small_shape_min_flops",
    "TCEMU_SMALL_SHAPE_MARGIN": "small_shape_margin",
    "TCEMU_SMALL_SHAPE_TABLE": "small_shape_table",
    "TCEMU_ATTENTION_FALLBACK": "attention_fallback",
    "TCEMU_FUSED_ATTENTION": "fused_attention",
    "TCEMU_GEMM_AUTOTUNE": "autotune",
    "TCEMU_GEMM_CONFIG": "kernel_config",
    "TCEMU_DIRECT_LAUNCH": "direct_launch",
}


@functools.cache
def _process_default() -> EmulationConfig:
    """The environment's configuration, read once per process."""
    return EmulationConfig.from_env()


_CURRENT: contextvars.ContextVar[EmulationConfig | None] = contextvars.ContextVar("tcemu_config", default=None)


def get_config() -> EmulationConfig:
    """The configuration in effect here: the innermost :func:`config` of this thread, else the environment's."""
    cfg = _CURRENT.get()
    return _process_default() if cfg is None else cfg


@contextlib.contextmanager
def config(cfg: EmulationConfig | None = None, /, **changes: Any) -> Iterator[EmulationConfig]:
    """Run a block under ``cfg`` (default: the current configuration) with ``changes``; yields it.

    ``with tcemu.config(small_shape_fallback=False, attention_fallback=False): ...`` makes every product of the
    block run the method itself. Nested blocks stack; the override is local to this thread (and task).
    """
    if cfg is not None and not isinstance(cfg, EmulationConfig):
        raise TypeError(f"tcemu.config takes an EmulationConfig or fields by name (e.g. tcemu.config(method="
                        f"'bf16x6')), got {type(cfg).__name__} {cfg!r}")
    new = (get_config() if cfg is None else cfg).replace(**changes) if changes else (cfg or get_config())
    token = _CURRENT.set(new)
    try:
        yield new
    finally:
        _CURRENT.reset(token)


@dataclass(frozen=True)
class ForwardState:
    """What a backward needs of its forward's thread and task: the configuration and the coverage meters."""

    config: EmulationConfig
    meters: tuple


def for_backward() -> ForwardState | None:
    """The configuration and the meters in force here, for an autograd ``setup_context`` to keep
    (``ctx.settings``): autograd runs a CUDA backward on threads of its own (and a backward may be called from
    another thread), which do not see this thread's :func:`config` and meters. None while compiling, where the
    settings are constants of the traced graphs, forward and backward alike (and no meter measures)."""
    if torch.compiler.is_compiling():
        return None
    return ForwardState(get_config(), forward_meters())


@contextlib.contextmanager
def _restored(state: ForwardState) -> Iterator[None]:
    with config(state.config), backward_meters(state.meters):
        yield


def forward_state(state: ForwardState | None) -> contextlib.AbstractContextManager:
    """Run under a kept :func:`for_backward` state (nothing where None): its configuration, and its meters
    counting the emulated products too."""
    return contextlib.nullcontext() if state is None else _restored(state)


def backward_config(ctx: Any) -> contextlib.AbstractContextManager:
    """Run a backward under the configuration its forward kept (:func:`for_backward`), if it kept one, counting
    its emulated products for the forward's meters too."""
    return forward_state(getattr(ctx, "settings", None))


@torch.compiler.assume_constant_result
def setting(name: str) -> Any:
    """One field of :func:`get_config` (a bool, float, str or None). Under ``torch.compile`` it runs at trace
    time and its value is a constant of the graph (no graph break)."""
    return getattr(get_config(), name)
