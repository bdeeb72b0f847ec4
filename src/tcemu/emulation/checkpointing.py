"""``torch.utils.checkpoint`` inside ``emulation_mode``: the recompute runs under the first pass's emulation.

Activation checkpointing runs a function twice: once in the forward (its activations dropped) and again in the
backward (the recompute), where the mode of the forward is no longer active. Unless the recompute runs under
the same emulation, its products are plain FP32 (reentrant checkpoint: the gradients are not the emulated
ones) or save other tensors than the forward did (non-reentrant: torch's ``CheckpointError``). torch keeps
autocast and the device context for the recompute, not other torch-function modes, so
:class:`~tcemu.emulation.mode.emulation_mode` hands its setting to the checkpoint itself:

* reentrant (``CheckpointFunction``): when the mode sees the forward's ``torch.no_grad()`` entered in
  ``CheckpointFunction.forward``, it wraps that call's ``ctx.run_function``;
* non-reentrant: when the mode emulates a product while a checkpoint's saved-tensor hooks are the innermost,
  it wraps that checkpoint's ``recompute_fn``, with the emulation in effect where ``checkpoint`` was called
  (scopes entered inside the checkpointed function are not part of it: they enter again in the recompute).

Both read torch's checkpoint internals; where they differ (another torch), nothing is wrapped and torch
behaves as without tcemu. The wrapper runs the function inside a fresh :class:`~tcemu.emulation.scope.Scope`
of the same method, backend and switches, and under the first pass's :func:`tcemu.config` and coverage meters
(a CUDA recompute runs on autograd's own threads), so modules left out by ``filter_fn`` stay plain, and the
recompute gives the first pass's bits (the emulation is deterministic).
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

import torch
import torch.utils.checkpoint as _ckpt

from . import mode as _mode
from .configuration import for_backward, forward_state
from .scope import Scope, _run_in_scope

__all__ = ["on_grad_disabled", "on_product"]

try:
    _REENTRANT_FORWARD = inspect.unwrap(_ckpt.CheckpointFunction.forward).__code__
    _CHECKPOINT = inspect.unwrap(_ckpt.checkpoint).__code__
except AttributeError:  # another torch's checkpoint: nothing is wrapped
    _REENTRANT_FORWARD = _CHECKPOINT = None
_RUN_IN_SCOPE = _run_in_scope.__code__
_PACK_HOOK = "_checkpoint_hook.__init__.<locals>.pack_hook"
_MARK = "_tcemu_recompute"


def _recompute(scope: Scope, state: Any, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn`` of a checkpoint, recomputed under the emulation, configuration and meters of its first pass (a
    CUDA backward runs on autograd's own threads, which see neither)."""
    with forward_state(state):
        return _run_in_scope(scope, fn, args, kwargs)


def _wrap(fn: Any, mode: Any) -> Any:
    scope = Scope(mode.method, mode.backend, mode.attention, mode.matmuls, origin="checkpoint")
    wrapped = functools.partial(_recompute, scope, for_backward(), fn)
    setattr(wrapped, _MARK, True)
    return wrapped


def on_grad_disabled(mode: Any) -> None:
    """``mode`` (in effect) saw ``torch.no_grad()`` entered: in a reentrant checkpoint's forward, wrap its
    ``run_function`` for the backward."""
    f = sys._getframe(2)
    for _ in range(6):
        if f is None:
            return
        if f.f_code is _REENTRANT_FORWARD:
            ctx = f.f_locals.get("ctx")
            fn = getattr(ctx, "run_function", None)
            if fn is not None and not getattr(fn, _MARK, False):
                ctx.run_function = _wrap(fn, mode)
            return
        f = f.f_back


def _checkpoint_frame() -> Any:
    """The non-reentrant checkpoint frame whose saved-tensor hooks are the innermost, if any."""
    hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
    if not hooks:
        return None
    pack = hooks[0]
    if getattr(pack, "__qualname__", "") != _PACK_HOOK or "frame" not in pack.__code__.co_freevars:
        return None
    return pack.__closure__[pack.__code__.co_freevars.index("frame")].cell_contents


def on_product(mode: Any) -> None:
    """``mode`` emulates a product while autograd records: inside a non-reentrant checkpoint, wrap its
    recompute (once) in the emulation in effect where ``checkpoint`` was called."""
    try:
        frame = _checkpoint_frame()
    except (AttributeError, TypeError, ValueError, IndexError):
        return  # another torch's internals
    if frame is None or getattr(frame, _MARK, False):
        return
    setattr(frame, _MARK, True)  # decided once per checkpoint
    outer = _outer_mode(mode)
    if outer is not None:
        frame.recompute_fn = _wrap(frame.recompute_fn, outer)


def _outer_mode(mode: Any) -> Any:
    """The emulation_mode in effect where ``checkpoint`` was called (None: none, or not found)."""
    inner_scopes: list[int] = []  # positions (_run_in_scope's ``pos``) of scopes entered inside the function
    f = sys._getframe(2)
    while f is not None and f.f_code is not _CHECKPOINT:
        if f.f_code is _RUN_IN_SCOPE and "pos" in f.f_locals:
            inner_scopes.append(f.f_locals["pos"])
        f = f.f_back
    if f is None:
        return None
    stack = _mode.SWITCHES.get()
    entry = stack[:min(inner_scopes)] if inner_scopes else list(stack)
    from torch.overrides import _get_current_function_mode_stack  # noqa: PLC0415

    modes = [*_get_current_function_mode_stack(), mode]  # (the handling mode is off the stack while it runs)
    for m in reversed(modes):
        if not isinstance(m, _mode.emulation_mode):
            continue
        if m.scope is not None and (m.scope >= len(entry) or (entry and entry[-1] > m.scope)):
            continue  # entered inside the function, or switched off where the checkpoint was called
        return m
    return None
