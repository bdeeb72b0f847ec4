"""One-call emulation: ``emulate_(model, method)`` and its reverse ``restore_(model)``.

``emulate_`` turns each ``nn.Linear`` into an :class:`~tcemu.emulation.linear.EmulatedLinear` in place, by
changing its class: the module object stays, so a layer registered under two names, hooks, state-dict keys,
optimizer references and parametrizations are unaffected, ``isinstance(layer, MyLinear)`` still holds for a
subclass, and ``print(model)`` shows each layer's method. ``nn.LazyLinear`` is emulated from its first forward.
It also emulates the model's functional products (``torch.matmul``, ``einsum``, ``tensordot``, ``F.linear``,
``bmm``, ``addmm``, attention, ...: the list in :mod:`tcemu.emulation.mode`) by running the selected modules'
``forward`` inside :func:`tcemu.emulation_mode` (:mod:`tcemu.emulation.scope`), and rebuilds e3nn's
TorchScript-compiled code in eager form so that the mode sees it (:mod:`tcemu.emulation.codegen`). TorchScript
modules (scripted, traced, loaded: a whole model or a part of one) get their graphs' products rewritten to
tcemu's ops (:mod:`tcemu.emulation.script`).

What it cannot reach is listed by :func:`unreachable_layers` and reported with a warning: ``nn.MultiheadAttention``
(its projections and attention run inside ``F.multi_head_attention_forward``, which a torch-function mode cannot
look into), convolutions, and custom ops inside TorchScript graphs (a library's own compiled code). A ``forward``
assigned to a module instance by others (hooks and wrappers of accelerate, PEFT or the user) runs inside the
scope, and :func:`restore_` puts it back as it was. :func:`tcemu.coverage` measures what a run emulated and what
ran in plain FP32.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from . import scope
from .script import emulate_script_, restore_script_, script_roots, script_unreachable
from .linear import EmulatedLinear, emulate_module_, overrides_forward, restore_module_
from .methods import MethodSpec
from .ops import GemmConfig
from .scope import emulate_functional_
from .scope import scope_of as _scoped_forward  # noqa: F401 - the name tcemu.autoload looks for

__all__ = ["emulate_", "emulate_functional_", "restore_", "unreachable_layers", "UnreachableLayer"]

FilterFn = Callable[[nn.Module, str], bool]


@dataclass(frozen=True)
class UnreachableLayer:
    """A module whose products :func:`emulate_` does not emulate, and why."""

    fqn: str
    type_name: str
    reason: str


def unreachable_layers(model: nn.Module, *, functional: bool = True) -> list[UnreachableLayer]:
    """Modules with products that :func:`emulate_` cannot reach, with the reason.

    ``functional=False``: what the ``nn.Linear`` swap alone reaches (``emulate_(..., functional=False)``), so
    also ``nn.Linear`` subclasses with their own ``forward`` and ``nn.Bilinear``.
    """
    found: list[UnreachableLayer] = []
    inside_mha: set[str] = set()
    inside_script = {id(sub) for _, root in script_roots(model) for sub in root.modules()}
    for fqn, mod in model.named_modules():
        if id(mod) in inside_script:
            continue  # its graphs are rewritten: listed below by what they run
        if isinstance(mod, nn.MultiheadAttention):
            found.append(UnreachableLayer(
                fqn, type(mod).__name__,
                "in/out projections and attention run inside F.multi_head_attention_forward, which a torch-function "
                "mode cannot look into: not emulated (tcemu.coverage() counts them as plain FP32)",
            ))
            inside_mha.update(f"{fqn}.{name}" if fqn else name for name, _ in mod.named_modules() if name)
        elif fqn in inside_mha:
            continue
        elif not functional and overrides_forward(mod):
            found.append(UnreachableLayer(
                fqn, type(mod).__name__, "subclass of nn.Linear with its own forward: not swapped"))
        elif not functional and isinstance(mod, nn.Bilinear):
            found.append(UnreachableLayer(fqn, type(mod).__name__, "not an nn.Linear: not emulated"))
        elif isinstance(mod, nn.modules.conv._ConvNd):
            found.append(UnreachableLayer(fqn, type(mod).__name__, "convolutions are not emulated"))
        elif isinstance(scope.instance_forward(mod), (torch.jit.ScriptFunction, torch.jit.ScriptModule)):
            found.append(UnreachableLayer(
                fqn, type(mod).__name__, "its forward was replaced on the instance by TorchScript code, whose "
                "products a torch-function mode cannot see: not emulated"))
        elif not functional and isinstance(mod, nn.Linear) and scope.instance_forward(mod) is not None:
            found.append(UnreachableLayer(
                fqn, type(mod).__name__, "its forward was replaced on the instance (a hook or wrapper), which may "
                "call nn.Linear's forward as it was before the swap: emulate with functional=True"))
    for fqn, root in script_roots(model):
        found.extend(UnreachableLayer(u.fqn, u.type_name, u.reason) for u in script_unreachable(root, fqn))
    return found


def _check_module(model: Any, func: str) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"tcemu.{func} expects an nn.Module (the model), got {type(model).__name__}")


def _inside_mha(model: nn.Module) -> set[int]:
    """Ids of the modules inside an ``nn.MultiheadAttention`` (its projections run functionally: not swapped)."""
    return {id(sub) for mod in model.modules() if isinstance(mod, nn.MultiheadAttention)
            for sub in mod.modules() if sub is not mod}


def _selected(mod: nn.Module, names: list[str], filter_fn: FilterFn | None) -> bool:
    """Whether ``filter_fn`` selects ``mod``; one module under several names must be selected under all or none."""
    if filter_fn is None:
        return True
    verdicts = {name: bool(filter_fn(mod, name)) for name in names}
    if len(set(verdicts.values())) > 1:
        raise ValueError(f"tcemu.emulate_: one module is registered as {', '.join(map(repr, names))} and "
                         f"filter_fn selects it under some names only ({verdicts}); one module cannot be both "
                         "emulated and not: make filter_fn agree on all of its names")
    return next(iter(verdicts.values()))


def emulate_(
    model: nn.Module,
    method: str | MethodSpec = "tf32x3",
    filter_fn: FilterFn | None = None,
    *,
    grad_weight_method: str | MethodSpec | None = None,
    backend: str = "auto",
    warn_unreachable: bool = True,
    functional: bool = True,
) -> nn.Module:
    """Emulate the model's float32 products, in place: its ``nn.Linear`` layers become emulated ones (each
    layer's class changes, the object stays), and its functional products (forward and backward) run through
    the emulation.

    Args:
        model: any module, an ``nn.Linear`` itself included.
        method: emulation method (name or spec).
        filter_fn: ``filter_fn(module, fqn) -> bool``; only modules for which it returns True are emulated (a
            module it leaves out is not emulated, even inside a selected one). None: all.
        grad_weight_method: method of the linear layers' weight gradients (defaults to ``method``).
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.
        warn_unreachable: warn about modules whose products it cannot reach (see :func:`unreachable_layers`).
        functional: also the functional products (``torch.matmul``, ``einsum``, ``tensordot``, attention,
            ...), by ``emulation_mode`` inside the selected modules' ``forward`` (:mod:`tcemu.emulation.scope`);
            False: the ``nn.Linear`` swap only (no mode, no host time for it in eager code).

    Returns:
        The model (the same object).

    Raises:
        TypeError: ``model`` is not an ``nn.Module``.
        ValueError: an unknown method or backend (nothing is changed), or a ``filter_fn`` that selects a module
            under one of its names and not under another.
    """
    _check_module(model, "emulate_")
    cfg = GemmConfig.make(method, grad_weight_method=grad_weight_method, backend=backend)
    skip = _inside_mha(model)
    names: dict[int, list[str]] = {}
    modules: dict[int, nn.Module] = {}
    for fqn, mod in model.named_modules(remove_duplicate=False):
        if isinstance(mod, nn.Linear) and id(mod) not in skip and not overrides_forward(mod):
            names.setdefault(id(mod), []).append(fqn)
            modules[id(mod)] = mod
    chosen = [mod for key, mod in modules.items() if _selected(mod, names[key], filter_fn)]
    for mod in chosen:
        emulate_module_(mod, cfg)
    scoped = scope.install_scopes(model, cfg.forward, filter_fn, backend=backend) if functional else []
    for fqn, root in script_roots(model):  # after install_scopes, which rebuilds e3nn's scripted code eagerly
        if emulate_script_(root, cfg, filter_fn, prefix=fqn, functional=functional):
            scoped.append(fqn)
    if warn_unreachable:
        unreached = unreachable_layers(model, functional=functional)
        if unreached:
            lines = "; ".join(f"{u.fqn} ({u.type_name}): {u.reason}" for u in unreached[:5])
            more = f" and {len(unreached) - 5} more" if len(unreached) > 5 else ""
            warnings.warn(f"tcemu.emulate_: not reached: {lines}{more}", stacklevel=2)
    if not scoped and not chosen:
        warnings.warn("tcemu.emulate_: nothing was emulated: no nn.Linear was swapped"
                      + (" and filter_fn selected no module" if functional else " (functional=False)")
                      + "; check filter_fn against model.named_modules(), and measure with tcemu.coverage()",
                      stacklevel=2)
    return model


def restore_(model: nn.Module) -> nn.Module:
    """Undo :func:`emulate_` and :func:`emulate_functional_` in place: every :class:`EmulatedLinear` gets its
    original class back (the same object), scoped ``forward`` wrappers are removed and TorchScript modules run
    their original graphs again. (e3nn code rebuilt in eager form stays eager: it computes what the TorchScript
    code did.)"""
    _check_module(model, "restore_")
    scope.remove_scopes(model)
    for _, root in script_roots(model):
        restore_script_(root)
    for mod in model.modules():
        if isinstance(mod, EmulatedLinear):
            restore_module_(mod)
    return model
