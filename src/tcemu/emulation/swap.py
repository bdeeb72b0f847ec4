"""One-call emulation: ``emulate_(model, method)`` and its reverse ``restore_(model)``.

``emulate_`` replaces each ``nn.Linear`` (post-order, in place) by an
:class:`~tcemu.emulation.linear.EmulatedLinear` sharing its parameters, so state-dict keys,
optimizers and hooks are unaffected, and ``print(model)`` shows each layer's method. It also emulates the
model's functional products (``torch.matmul``, ``einsum``, ``tensordot``, ``F.linear``, ``bmm``, ``addmm``,
attention, ...: the list in :mod:`tcemu.emulation.mode`) by running the selected modules' ``forward`` inside
:func:`tcemu.emulation_mode` (:mod:`tcemu.emulation.scope`), and rebuilds e3nn's TorchScript-compiled code in
eager form so that the mode sees it (:mod:`tcemu.emulation.codegen`).

What it cannot reach is listed by :func:`unreachable_layers` and reported with a warning: ``nn.MultiheadAttention``
(its projections and attention run inside ``F.multi_head_attention_forward``, which a torch-function mode cannot
look into), TorchScript modules other than e3nn's generated code, and convolutions. :func:`tcemu.coverage`
measures what a run emulated and what ran in plain FP32.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from . import scope
from .codegen import scripted_products
from .linear import EmulatedLinear
from .methods import MethodSpec
from .scope import emulate_functional_
from .scope import scope_of as _scoped_forward  # noqa: F401 - the name tcemu.autoload looks for

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


def unreachable_layers(model: nn.Module, *, functional: bool = True) -> list[UnreachableLayer]:
    """Modules with products that :func:`emulate_` cannot reach, with the reason.

    ``functional=False``: what the ``nn.Linear`` swap alone reaches (``emulate_(..., functional=False)``), so
    also ``nn.Linear`` subclasses with their own ``forward`` and ``nn.Bilinear``.
    """
    found: list[UnreachableLayer] = []
    inside_mha: set[str] = set()
    for fqn, mod in model.named_modules():
        if isinstance(mod, nn.MultiheadAttention):
            found.append(UnreachableLayer(
                fqn, type(mod).__name__,
                "in/out projections and attention run inside F.multi_head_attention_forward, which a torch-function "
                "mode cannot look into: not emulated (tcemu.coverage() counts them as plain FP32)",
            ))
            inside_mha.update(f"{fqn}.{name}" if fqn else name for name, _ in mod.named_modules() if name)
        elif fqn in inside_mha:
            continue
        elif not functional and isinstance(mod, nn.Linear) and _overrides_forward(mod):
            found.append(UnreachableLayer(
                fqn, type(mod).__name__, "subclass of nn.Linear with its own forward: not swapped"))
        elif not functional and isinstance(mod, nn.Bilinear):
            found.append(UnreachableLayer(fqn, type(mod).__name__, "not an nn.Linear: not emulated"))
        elif isinstance(mod, nn.modules.conv._ConvNd):
            found.append(UnreachableLayer(fqn, type(mod).__name__, "convolutions are not emulated"))
    found.extend(UnreachableLayer(c.fqn, c.owner, c.reason) for c in scripted_products(model))
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
    functional: bool = True,
) -> nn.Module:
    """Emulate the model's float32 products, in place: swap its ``nn.Linear`` layers for
    :class:`EmulatedLinear`, and run its functional products (forward and backward) through the emulation.

    Args:
        model: any module; if it is itself an ``nn.Linear``, the swapped module is returned.
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
    out = convert(model, "") if isinstance(model, nn.Linear) else model
    scoped = scope.install_scopes(out, method, filter_fn, backend=backend) if functional else []
    if warn_unreachable:
        unreached = unreachable_layers(out, functional=functional)
        if unreached:
            lines = "; ".join(f"{u.fqn} ({u.type_name}): {u.reason}" for u in unreached[:5])
            more = f" and {len(unreached) - 5} more" if len(unreached) > 5 else ""
            warnings.warn(f"tcemu.emulate_: not reached: {lines}{more}", stacklevel=2)
    if not scoped and not any(isinstance(m, EmulatedLinear) for m in out.modules()):
        warnings.warn("tcemu.emulate_: nothing was emulated: no nn.Linear was swapped"
                      + (" and filter_fn selected no module" if functional else " (functional=False)")
                      + "; check filter_fn against model.named_modules(), and measure with tcemu.coverage()",
                      stacklevel=2)
    return out


def restore_(model: nn.Module) -> nn.Module:
    """Undo :func:`emulate_` and :func:`emulate_functional_`: every :class:`EmulatedLinear` goes back to its
    original class and scoped ``forward`` wrappers are removed. (e3nn code rebuilt in eager form stays eager: it
    computes what the TorchScript code did.)"""
    scope.remove_scopes(model)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, EmulatedLinear):
                setattr(parent, name, child.to_linear())
    return model.to_linear() if isinstance(model, EmulatedLinear) else model
