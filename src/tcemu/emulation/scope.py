"""Scoped functional emulation: :func:`emulation_mode` active inside chosen modules' ``forward`` only.

A scoped module's ``forward`` becomes an instance attribute, ``functools.partial(_forward_in_scope, module,
scope)``, which runs the class's ``forward`` inside ``emulation_mode(**scope)``, or, for a module that
``filter_fn`` left out inside a scoped one, with the enclosing scopes switched off. A ``forward`` that others had
assigned to the instance (hooks and wrappers of accelerate, PEFT, the user) is run inside the scope instead, by
``functools.partial(_wrapped_forward_in_scope, module, scope, that_forward)``, and put back by
:func:`remove_scopes`. Being an instance attribute, it leaves parameters, buffers and state-dict keys alone;
``copy.deepcopy`` and pickling bind it to the copy (a torch.fx GraphModule's through torch.fx's preserved
attributes in a deepcopy; torch.fx rebuilds an unpickled GraphModule without it, so there a pickle keeps the
emulation only through a scoped parent); ``torch.compile`` traces through it; :func:`remove_scopes` deletes it.
Code outside the scoped modules pays nothing for the mode (a mode around a whole step intercepts every torch call
of its eager parts).

:func:`install_scopes` (called by :func:`tcemu.emulate_`) puts the mode on every selected module (entered once:
a module inside an active scope of the same call runs as it is) and an "off" switch on each unselected module
below a selected one; it also turns e3nn's TorchScript-compiled code into eager code that the mode can see
(:mod:`tcemu.emulation.codegen`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, jit, nn

from .context import ContextStack
from .linear import EmulatedLinear
from .methods import MethodSpec, get_method
from .mode import emulation_mode, pop_scope, push_scope

__all__ = ["Scope", "install_scopes", "remove_scopes", "scope_of", "emulate_functional_"]

FilterFn = Callable[[nn.Module, str], bool]


@dataclass(frozen=True)
class Scope:
    """What a scoped module's ``forward`` runs in: ``emulation_mode(method, ...)``, or, with ``method=None``,
    no emulation (a module left out by ``filter_fn``). ``origin`` names the function that installed it."""

    method: MethodSpec | None
    backend: str = "auto"
    attention: bool = True
    matmuls: bool = True
    origin: str = "emulate_"

    @property
    def emulates(self) -> bool:
        return self.method is not None


#: The scopes being run in this thread and task, innermost last, by ``id`` (a module inside a scope that is
#: already active runs as it is).
_ACTIVE = ContextStack("scopes")


def _run_in_scope(scope: Scope, forward: Callable, args: tuple, kwargs: dict) -> Any:
    """``forward(*args, **kwargs)`` inside the scope."""
    active = _ACTIVE.get()
    # (a context copied into another thread has the scope but not torch's per-thread mode stack: entered again)
    if active and active[-1] == id(scope) and (scope.method is None or torch._C._len_torch_function_stack()):
        return forward(*args, **kwargs)
    _ACTIVE.push(id(scope))
    pos = push_scope(scope.emulates)
    try:
        if not scope.emulates:
            return forward(*args, **kwargs)
        with emulation_mode(scope.method, backend=scope.backend, attention=scope.attention,
                            matmuls=scope.matmuls, scope=pos):
            return forward(*args, **kwargs)
    finally:
        pop_scope()
        _ACTIVE.pop()


def _forward_in_scope(module: nn.Module, scope: Scope, *args: Any, **kwargs: Any) -> Any:
    """The class's ``forward`` of ``module``, inside the scope."""
    return _run_in_scope(scope, type(module).forward, (module, *args), kwargs)


def _wrapped_forward_in_scope(module: nn.Module, scope: Scope, forward: Callable, *args: Any,
                              **kwargs: Any) -> Any:
    """``forward``, the forward that was assigned to the instance before tcemu came (a hook or wrapper of
    accelerate, PEFT or the user), inside the scope; ``module`` is kept for copies (``copy.deepcopy`` binds both
    to the copy)."""
    return _run_in_scope(scope, forward, args, kwargs)


_SCOPED = (_forward_in_scope, _wrapped_forward_in_scope)


def scope_of(module: nn.Module) -> Scope | None:
    """The module's scope, if tcemu installed one."""
    fwd = module.__dict__.get("forward")
    if isinstance(fwd, functools.partial) and fwd.func in _SCOPED:
        return fwd.args[1]
    return None


def instance_forward(module: nn.Module) -> Callable | None:
    """The ``forward`` assigned to the instance by others (a hook or wrapper), under tcemu's scope if it has one;
    None where the class's ``forward`` runs."""
    fwd = module.__dict__.get("forward")
    if isinstance(fwd, functools.partial) and fwd.func in _SCOPED:
        return fwd.args[2] if fwd.func is _wrapped_forward_in_scope else None
    return fwd


class _GraphModuleForward(functools.partial):
    """The scoped ``forward`` of a torch.fx GraphModule: Dynamo, inlining a GraphModule's generated forward, reads
    ``module.forward.__code__`` (to tie that code to its module), which is the class's forward's code. A property,
    so that copies and pickles carry no code object."""

    @property
    def __code__(self):
        return type(self.args[0]).forward.__code__


def _set_scope(module: nn.Module, scope: Scope) -> None:
    """Run the module's forward inside ``scope``: the class's, or the one assigned to the instance by others
    (wrapped, and put back by :func:`remove_scopes`)."""
    graph_module = isinstance(module, fx.GraphModule)
    inner = instance_forward(module)
    kind = _GraphModuleForward if graph_module else functools.partial
    if inner is None:
        fwd = kind(_forward_in_scope, module, scope)
    else:
        fwd = kind(_wrapped_forward_in_scope, module, scope, inner)
    shown = type(module).forward if inner is None else inner
    # what the forward shows to code that inspects it (metatomic checks forward's annotations)
    for attr in ("__name__", "__qualname__", "__doc__", "__annotations__"):
        if hasattr(shown, attr):
            setattr(fwd, attr, getattr(shown, attr))
    try:
        fwd.__signature__ = inspect.signature(module.forward)
    except (TypeError, ValueError):
        pass
    if graph_module:  # GraphModule's deepcopy rebuilds the module and sets back only these attributes
        preserved = module.meta.setdefault(_PRESERVED, {})
        old = preserved.get("forward")  # a wrapper of others preserved there is put back by remove_scopes
        if old is not None and old is module.__dict__.get("forward") and scope_of(module) is not None:
            old = getattr(old, "_tcemu_preserved", None)  # a scope of tcemu replaced: what it kept
        fwd._tcemu_preserved = old
        preserved["forward"] = fwd
    module.forward = fwd


#: where a GraphModule keeps the attributes its deepcopy sets back (torch.fx's ``_USER_PRESERVED_ATTRIBUTES_KEY``)
_PRESERVED = "_user_preserved_attributes"


def remove_scopes(model: nn.Module, origin: str | None = None) -> None:
    """Delete the scope wrappers (of one ``origin`` only, when given)."""
    for mod in model.modules():
        s = scope_of(mod)
        if s is not None and (origin is None or s.origin == origin):
            fwd = mod.__dict__.pop("forward")
            if fwd.func is _wrapped_forward_in_scope:
                mod.__dict__["forward"] = fwd.args[2]  # the wrapper of others, as it was
            preserved = getattr(mod, "meta", {}).get(_PRESERVED, {})
            if preserved.get("forward") is fwd:
                if getattr(fwd, "_tcemu_preserved", None) is not None:
                    preserved["forward"] = fwd._tcemu_preserved
                else:
                    del preserved["forward"]


def install_scopes(model: nn.Module, method: str | MethodSpec, filter_fn: FilterFn | None = None, *,
                   backend: str = "auto", attention: bool = True, matmuls: bool = True) -> list[str]:
    """Scope ``emulation_mode`` to the modules ``filter_fn`` selects (all when None), in place.

    Replaces the scopes of an earlier :func:`install_scopes`; keeps those of :func:`emulate_functional_`.
    Modules whose products the mode cannot reach stay as they are (:func:`tcemu.unreachable_layers` names
    them). Returns the names of the scoped modules.
    """
    from . import codegen  # noqa: PLC0415 - e3nn support, imported when used

    on = Scope(get_method(method), backend, attention, matmuls)
    emulation_mode(on.method, backend=backend, attention=attention, matmuls=matmuls)  # validates the arguments
    off = Scope(None, backend, attention, matmuls)
    remove_scopes(model, origin="emulate_")
    scoped: list[str] = []

    def visit(mod: nn.Module, fqn: str, under_selected: bool) -> None:
        if isinstance(mod, jit.ScriptModule):
            return  # its ops are invisible to a torch-function mode (unreachable_layers names it)
        selected = filter_fn is None or bool(filter_fn(mod, fqn))
        if selected and isinstance(mod, EmulatedLinear) and instance_forward(mod) is None:
            return  # emulates its own product: no mode needed (a forward replaced on the instance may call
            # nn.Linear's, captured before the swap: that one gets the mode, whose F.linear it emulates)
        if selected:
            codegen.make_eager_(mod)
        # every selected module gets the mode (so that it is emulated when called directly too, as MACE's
        # calculator calls model.atomic_energies_fn), every unselected one below a selected one the "off" switch
        if (selected or under_selected) and scope_of(mod) is None:
            _set_scope(mod, on if selected else off)
            scoped.append(fqn)
        for name, child in mod.named_children():
            visit(child, f"{fqn}.{name}" if fqn else name, under_selected or selected)

    visit(model, "", False)
    return scoped


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
    and the float32 contractions there are emulated, and code outside those modules pays nothing for the mode.
    :func:`tcemu.emulate_` does the same for every selected module (and switches unselected ones off); this
    function adds a narrower scope, e.g. PET's attention blocks:
    ``filter_fn=lambda m, fqn: type(m).__name__ == "AttentionBlock"``. :func:`restore_` removes it.

    Raises:
        ValueError: if ``filter_fn`` selects no module.
    """
    scope = Scope(get_method(method), backend, attention, matmuls, origin="emulate_functional_")
    emulation_mode(scope.method, backend=backend, attention=attention, matmuls=matmuls)  # validates the arguments
    selected = [(fqn, mod) for fqn, mod in model.named_modules() if filter_fn(mod, fqn)]
    if not selected:
        raise ValueError("tcemu.emulate_functional_: filter_fn selected no module of the model, so nothing "
                         "would be emulated; check the filter against model.named_modules()")
    for _, mod in selected:
        _set_scope(mod, scope)
    return model
