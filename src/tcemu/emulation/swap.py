"""One-call module swap: ``emulate_(model, method)`` and its reverse ``restore_(model)``.

``emulate_`` turns each ``nn.Linear`` into an :class:`~tcemu.emulation.linear.EmulatedLinear` in place, by
changing its class: the module object stays, so a layer registered under two names, hooks, state-dict keys,
optimizer references and parametrizations are unaffected, ``isinstance(layer, MyLinear)`` still holds for a
subclass, and ``print(model)`` shows each layer's method. ``nn.LazyLinear`` is emulated from its first forward.

What a swap cannot reach is listed by :func:`unreachable_layers` and reported with a warning:
products that do not go through an ``nn.Linear`` module call, e.g. ``nn.MultiheadAttention``
(its projections are called through ``F.multi_head_attention_forward`` with the raw weights),
``F.scaled_dot_product_attention``'s QK^T and AV, subclasses of ``nn.Linear`` that override
``forward``, and any ``torch.matmul`` / ``F.linear`` a model calls itself. Cover the functional
ones with :func:`tcemu.emulation_mode`, which routes float32 ``torch.matmul``, ``@``, ``mm``,
``bmm``, ``addmm`` and ``F.linear`` calls through the emulation while it is active, or, scoped to
chosen modules, with :func:`emulate_functional_`, which runs only their ``forward`` inside that mode.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from .linear import EmulatedLinear, emulate_module_, overrides_forward, restore_module_
from .methods import MethodSpec, get_method
from .mode import emulation_mode
from .ops import GemmConfig

__all__ = ["emulate_", "emulate_functional_", "restore_", "unreachable_layers", "UnreachableLayer"]

FilterFn = Callable[[nn.Module, str], bool]


@dataclass(frozen=True)
class UnreachableLayer:
    """A module whose products a Linear swap does not emulate, and why."""

    fqn: str
    type_name: str
    reason: str


def unreachable_layers(model: nn.Module) -> list[UnreachableLayer]:
    """Modules with matrix products that :func:`emulate_` cannot swap, with the reason."""
    found: list[UnreachableLayer] = []
    inside_mha: set[str] = set()
    for fqn, mod in model.named_modules():
        if isinstance(mod, nn.MultiheadAttention):
            found.append(UnreachableLayer(
                fqn, type(mod).__name__,
                "in/out projections run through F.multi_head_attention_forward on the raw weights, and "
                "attention itself through SDPA: use `with tcemu.emulation_mode(method):`",
            ))
            inside_mha.update(f"{fqn}.{name}" if fqn else name for name, _ in mod.named_modules() if name)
        elif fqn in inside_mha:
            continue
        elif overrides_forward(mod):
            found.append(UnreachableLayer(
                fqn, type(mod).__name__, "subclass of nn.Linear with its own forward: not swapped"))
        elif isinstance(mod, (nn.Bilinear, nn.modules.conv._ConvNd)):
            found.append(UnreachableLayer(fqn, type(mod).__name__, "not an nn.Linear: not emulated"))
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
) -> nn.Module:
    """Emulate the model's ``nn.Linear`` layers, in place (each layer's class becomes an emulated one).

    Args:
        model: any module, an ``nn.Linear`` itself included.
        method: emulation method (name or spec).
        filter_fn: ``filter_fn(module, fqn) -> bool``; only layers for which it returns True are swapped.
        grad_weight_method: method of the weight gradients (defaults to ``method``).
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.
        warn_unreachable: warn about layers the swap cannot reach (see :func:`unreachable_layers`).

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
    if warn_unreachable:
        unreached = unreachable_layers(model)
        if unreached:
            lines = "; ".join(f"{u.fqn} ({u.type_name}): {u.reason}" for u in unreached[:5])
            more = f" and {len(unreached) - 5} more" if len(unreached) > 5 else ""
            warnings.warn(f"tcemu.emulate_: not reached by the swap: {lines}{more}", stacklevel=2)
    return model


def _forward_in_mode(module: nn.Module, mode_kwargs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """The class's ``forward`` of ``module``, run inside ``emulation_mode(**mode_kwargs)``."""
    with emulation_mode(**mode_kwargs):
        return type(module).forward(module, *args, **kwargs)


def _scoped_forward(module: nn.Module) -> functools.partial | None:
    fwd = module.__dict__.get("forward")
    return fwd if isinstance(fwd, functools.partial) and fwd.func is _forward_in_mode else None


def emulate_functional_(
    model: nn.Module,
    method: str | MethodSpec,
    filter_fn: FilterFn,
    *,
    attention: bool = True,
    matmuls: bool = True,
    backend: str = "auto",
) -> nn.Module:
    """Emulate the functional products inside the selected modules only, in place.

    Each module for which ``filter_fn(module, fqn)`` is True runs its ``forward`` inside
    ``emulation_mode(method, attention=..., matmuls=..., backend=...)``: ``F.scaled_dot_product_attention``
    and float32 ``torch.matmul`` / ``F.linear`` calls there are emulated, and code outside those modules
    pays nothing for the mode (a mode around a whole step intercepts every torch call of its eager parts).
    The wrapper is an instance attribute: parameters, buffers and state-dict keys are untouched,
    ``copy.deepcopy`` binds it to the copy, ``torch.compile`` traces through it, and :func:`restore_`
    removes it. For PET: ``filter_fn=lambda m, fqn: type(m).__name__ == "AttentionBlock"``.

    Raises:
        ValueError: if ``filter_fn`` selects no module, or a selected module already has an instance
            ``forward`` of another origin (it would be lost).
    """
    mode_kwargs = dict(method=get_method(method), backend=backend, attention=attention, matmuls=matmuls)
    emulation_mode(**mode_kwargs)  # validates the arguments before any module changes
    selected = [(fqn, mod) for fqn, mod in model.named_modules() if filter_fn(mod, fqn)]
    if not selected:
        raise ValueError("tcemu.emulate_functional_: filter_fn selected no module of the model, so nothing "
                         "would be emulated; check the filter against model.named_modules()")
    for fqn, mod in selected:
        if "forward" in mod.__dict__ and _scoped_forward(mod) is None:
            raise ValueError(f"tcemu.emulate_functional_: module {fqn or '<root>'!r} already has an instance "
                             "attribute 'forward' (another wrapper); remove it first")
    for _, mod in selected:
        mod.forward = functools.partial(_forward_in_mode, mod, mode_kwargs)
    return model


def restore_(model: nn.Module) -> nn.Module:
    """Undo :func:`emulate_` and :func:`emulate_functional_` in place: every :class:`EmulatedLinear` gets its
    original class back (the same object) and scoped ``forward`` wrappers are removed."""
    _check_module(model, "restore_")
    for mod in model.modules():
        if _scoped_forward(mod) is not None:
            del mod.__dict__["forward"]
        if isinstance(mod, EmulatedLinear):
            restore_module_(mod)
    return model
