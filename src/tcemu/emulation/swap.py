"""One-call module swap: ``emulate_(model, method)`` and its reverse ``restore_(model)``.

``emulate_`` replaces each ``nn.Linear`` (post-order, in place) by an
:class:`~tcemu.emulation.linear.EmulatedLinear` sharing its parameters, so state-dict keys,
optimizers and hooks are unaffected, and ``print(model)`` shows each layer's method.

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

from .linear import EmulatedLinear
from .methods import MethodSpec, get_method
from .mode import emulation_mode

__all__ = ["emulate_", "emulate_functional_", "restore_", "unreachable_layers", "UnreachableLayer"]

FilterFn = Callable[[nn.Module, str], bool]


@dataclass(frozen=True)
class UnreachableLayer:
    """A module whose products a Linear swap does not emulate, and why."""

    fqn: str
    type_name: str
    reason: str


def _overrides_forward(mod: nn.Module) -> bool:
    return type(mod).forward is not nn.Linear.forward and not isinstance(mod, EmulatedLinear)


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
        elif isinstance(mod, nn.Linear) and _overrides_forward(mod):
            found.append(UnreachableLayer(
                fqn, type(mod).__name__, "subclass of nn.Linear with its own forward: not swapped"))
        elif isinstance(mod, (nn.Bilinear, nn.modules.conv._ConvNd)):
            found.append(UnreachableLayer(fqn, type(mod).__name__, "not an nn.Linear: not emulated"))
    return found


def _swappable(mod: nn.Module) -> bool:
    return (
        isinstance(mod, nn.Linear)
        and not isinstance(getattr(mod, "weight", None), nn.parameter.UninitializedParameter)
        and (isinstance(mod, EmulatedLinear) or not _overrides_forward(mod))
    )


def emulate_(
    model: nn.Module,
    method: str | MethodSpec = "tf32x3",
    filter_fn: FilterFn | None = None,
    *,
    grad_weight_method: str | MethodSpec | None = None,
    backend: str = "auto",
    warn_unreachable: bool = True,
) -> nn.Module:
    """Swap the model's ``nn.Linear`` layers for :class:`EmulatedLinear`, in place.

    Args:
        model: any module; if it is itself an ``nn.Linear``, the swapped module is returned.
        method: emulation method (name or spec).
        filter_fn: ``filter_fn(module, fqn) -> bool``; only layers for which it returns True are swapped.
        grad_weight_method: method of the weight gradients (defaults to ``method``).
        backend: ``"auto"``, ``"torch"`` or ``"triton"``.
        warn_unreachable: warn about layers the swap cannot reach (see :func:`unreachable_layers`).

    Returns:
        The model (the same object, unless it was a bare ``nn.Linear``).
    """
    kwargs = dict(grad_weight_method=grad_weight_method, backend=backend)
    skip = {u.fqn for u in unreachable_layers(model)}

    def convert(mod: nn.Module, fqn: str) -> nn.Module:
        if fqn in skip or not _swappable(mod):
            return mod
        if filter_fn is not None and not filter_fn(mod, fqn):
            return mod
        if isinstance(mod, EmulatedLinear):
            mod.set_method(method, **kwargs)
            return mod
        return EmulatedLinear.from_linear(mod, method, **kwargs)

    def visit(parent: nn.Module, prefix: str) -> None:
        for name, child in list(parent.named_children()):
            fqn = f"{prefix}.{name}" if prefix else name
            if fqn in skip:
                continue
            visit(child, fqn)
            new = convert(child, fqn)
            if new is not child:
                setattr(parent, name, new)

    visit(model, "")
    if warn_unreachable:
        unreached = unreachable_layers(model)
        if unreached:
            lines = "; ".join(f"{u.fqn} ({u.type_name}): {u.reason}" for u in unreached[:5])
            more = f" and {len(unreached) - 5} more" if len(unreached) > 5 else ""
            warnings.warn(f"tcemu.emulate_: not reached by the swap: {lines}{more}", stacklevel=2)
    return convert(model, "") if isinstance(model, nn.Linear) else model


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
    """Undo :func:`emulate_` and :func:`emulate_functional_`: every :class:`EmulatedLinear` goes back to its
    original class and scoped ``forward`` wrappers are removed."""
    for mod in model.modules():
        if _scoped_forward(mod) is not None:
            del mod.__dict__["forward"]
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, EmulatedLinear):
                setattr(parent, name, child.to_linear())
    return model.to_linear() if isinstance(model, EmulatedLinear) else model
