"""Emulation for a script that never imports tcemu: ``tcemu run`` and ``TCEMU_FP32_PRECISION``.

:func:`install` registers one global forward pre-hook (``torch.nn.modules.module.register_module_forward_pre_hook``).
At the first call of a module it has not seen, the hook emulates that module's whole tree in place, as
:func:`tcemu.ase.emulate_calculator` does (``nn.Linear`` layers by :func:`tcemu.emulate_`; with attention, the
attention blocks tcemu knows), and marks every module of the tree as seen. The outermost module of a model is
called first, so each model is emulated once, whole. Later calls of a seen module cost the hook one check
of a flag in the module's ``__dict__``; code outside modules is not touched at all (no torch-function mode
is ever active outside the models).

* Models that already hold tcemu layers (a script that emulates explicitly) are left as they are.
* Modules without float32 parameters (float64 models, parameter-free modules) are marked seen and left alone.
  TorchScript models get their graphs rewritten (:mod:`tcemu.emulation.script`); one called directly (not
  from a Python module) runs emulated from its second call, as a bare layer does (below).
* The hook does nothing while ``torch.compile`` traces: a model is emulated at its first eager call, which
  for ``torch.compile(model)`` is the call of the compiled wrapper, before Dynamo traces the inner model.
* Submodules are swapped before the outermost module's ``forward`` runs, so its first call is emulated;
  only a wrapper installed on the outermost module itself (a bare ``nn.Linear`` called directly, say) takes
  effect from its second call, because ``nn.Module`` binds ``forward`` before it runs the pre-hooks.

``TCEMU_FP32_PRECISION`` (:data:`ENV_VAR`) has the meaning of ``tcemu run --method``: ``tf32x3``, ``bf16x6``, ...,
with ``+attn`` for the attention (``tf32x3+attn``); ``ieee``, ``fp32``, ``none`` or empty: off. With the
package installed (not editable), ``tcemu-autoload.pth`` reads it at interpreter start (``_tcemu_autoload``):
unset, that costs one environment lookup; set, it waits for ``import torch`` and then installs this hook.
"""

from __future__ import annotations

import atexit
import os
import sys
from dataclasses import dataclass

import torch
from torch import nn

from ._engine import EmulationReport

__all__ = ["ENV_VAR", "AutoloadConfig", "install", "install_from_environment", "installed", "parse_precision",
           "reports", "uninstall"]

#: the environment variable that turns emulation on for a whole process (and its children)
ENV_VAR = "TCEMU_FP32_PRECISION"
#: its values that mean "off" (torch's own fp32_precision names for plain FP32, and empty)
OFF_VALUES = ("", "ieee", "fp32", "none", "off", "0")
#: environment variable: print what was emulated at exit (``tcemu run --report`` sets it)
REPORT_VAR = "TCEMU_REPORT"
_SEEN = "_tcemu_autoload_seen"


@dataclass(frozen=True)
class AutoloadConfig:
    """What the hook applies: the method, whether attention is emulated too, the backend, whether to report."""

    method: str
    attention: bool = False
    backend: str = "auto"
    report: bool = False


def parse_precision(value: str | None) -> AutoloadConfig | None:
    """``"tf32x3+attn"`` -> AutoloadConfig("tf32x3", attention=True); an off value -> None.

    Raises:
        ValueError: an unknown method or suffix (the message names :data:`ENV_VAR` and the choices).
    """
    text = (value or "").strip().lower()
    if text in OFF_VALUES:
        return None
    from .emulation.configuration import EmulationConfig
    from .emulation.methods import METHODS

    try:
        cfg = EmulationConfig.from_method_string(text)
    except ValueError:
        cfg = None
    if cfg is None or cfg.method == "fp32" or cfg.attention not in ("none", "blocks"):
        choices = ", ".join(m for m in METHODS if m != "fp32")
        raise ValueError(f"{ENV_VAR}={value!r}: choose an emulation method ({choices}), optionally with '+attn' "
                         f"(e.g. tf32x3+attn), or {', '.join(repr(v) for v in OFF_VALUES[1:4])} for plain FP32")
    return AutoloadConfig(cfg.method, attention=cfg.attention == "blocks")


class _State:
    """The installed hook (one per process) and what it emulated."""

    handle = None
    config: AutoloadConfig | None = None
    reports: list[tuple[str, EmulationReport]] = []
    skipped: list[tuple[str, str]] = []
    atexit_registered = False


def _mark(module: nn.Module) -> None:
    for sub in module.modules():
        sub.__dict__[_SEEN] = True


def _has_float32_parameters(module: nn.Module) -> bool:
    return any(p.dtype == torch.float32 for p in module.parameters())


def _emulated_by_script(module: nn.Module) -> bool:
    """Whether the tree holds tcemu layers or wrappers that this hook did not make (they carry its mark)."""
    from .emulation.linear import EmulatedLinear

    try:  # emulate_functional_'s wrappers (a private helper of tcemu.emulation.swap)
        from .emulation.swap import _scoped_forward
    except ImportError:  # pragma: no cover - another layout of the swap: its layers still tell
        def _scoped_forward(m):
            return None

    from .emulation.script import is_emulated, is_script

    return any((isinstance(m, EmulatedLinear) or _scoped_forward(m) is not None
                or (is_script(m) and is_emulated(m))) and _SEEN not in m.__dict__
               for m in module.modules())


def _emulate_root(module: nn.Module) -> None:
    """Emulate the tree of a module seen for the first time (see the module docstring)."""
    from ._engine import emulate_models_
    from .emulation.swap import emulate_functional_

    cfg = _State.config
    name = type(module).__qualname__
    by_script = _emulated_by_script(module)
    _mark(module)
    if not _has_float32_parameters(module):
        return  # nothing to emulate (a parameter-free module, or a float64 model)
    if by_script:
        _State.skipped.append((name, "already emulated by the script"))
        return
    if type(module) is nn.Linear:  # a bare layer: its own F.linear, by a scoped mode (from its next call)
        emulate_functional_(module, cfg.method, lambda m, fqn: fqn == "", attention=False, matmuls=True,
                            backend=cfg.backend)
        return
    report = emulate_models_([(name, module)], cfg.method, attention=cfg.attention, backend=cfg.backend)
    _State.reports.append((name, report))


def _pre_hook(module: nn.Module, args: tuple) -> None:
    if torch.compiler.is_compiling() or _SEEN in module.__dict__:
        return None
    _emulate_root(module)
    return None


def _print_reports() -> None:
    cfg = _State.config
    if cfg is None:
        return
    lines = [f"tcemu autoload ({cfg.method}{'+attn' if cfg.attention else ''}): {len(_State.reports)} model(s) emulated"]
    lines += [report.summary() for _, report in _State.reports]
    lines += [f"  left alone: {name}: {why}" for name, why in _State.skipped]
    print("\n".join(lines), file=sys.stderr)


def install(method: str | AutoloadConfig, *, attention: bool = False, backend: str = "auto",
            report: bool = False) -> AutoloadConfig:
    """Emulate every model of this process from its first call on (replaces an installed configuration).

    ``method`` may carry ``"+attn"``; ``report``: print what was emulated at exit (stderr).
    """
    if isinstance(method, AutoloadConfig):
        cfg = method
    else:
        parsed = parse_precision(method)
        if parsed is None:
            raise ValueError(f"{method!r} is plain FP32: nothing to install (call uninstall() to turn emulation off)")
        cfg = AutoloadConfig(parsed.method, attention=attention or parsed.attention, backend=backend, report=report)
    from .emulation.ops import GemmConfig

    GemmConfig.make(cfg.method, backend=cfg.backend)  # checks the backend name before any model changes
    _State.config = cfg
    if _State.handle is None:
        _State.handle = nn.modules.module.register_module_forward_pre_hook(_pre_hook)
    if cfg.report and not _State.atexit_registered:
        atexit.register(_print_reports)
        _State.atexit_registered = True
    return cfg


def uninstall() -> None:
    """Remove the hook (models emulated so far stay emulated: ``tcemu.restore_`` undoes that)."""
    if _State.handle is not None:
        _State.handle.remove()
    _State.handle = None
    _State.config = None


def installed() -> AutoloadConfig | None:
    """The configuration of the installed hook, or None."""
    return _State.config if _State.handle is not None else None


def reports() -> list[tuple[str, EmulationReport]]:
    """(model class, report) of every model the hook emulated, in order."""
    return list(_State.reports)


def install_from_environment() -> AutoloadConfig | None:
    """Install the hook as :data:`ENV_VAR` says (None, and nothing installed, when it is unset or off)."""
    cfg = parse_precision(os.environ.get(ENV_VAR))
    if cfg is None:
        return None
    from .emulation.configuration import env_flag  # noqa: PLC0415 - the one true/false rule

    report = env_flag(REPORT_VAR, False)
    return install(AutoloadConfig(cfg.method, cfg.attention, report=report))
