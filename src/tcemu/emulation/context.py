"""State of the emulation that is local to a thread and an asyncio task: the module scopes being run, the active
:func:`tcemu.emulation_mode` blocks and :func:`tcemu.coverage` meters.

Each is a :class:`ContextStack`, a :class:`contextvars.ContextVar` holding a tuple, as :func:`tcemu.config` is:
two threads (or two tasks awaiting in turn) running an emulated model at once each see their own scopes, modes
and meters, and a new thread starts with none. Two cases need more:

* Autograd runs a CUDA backward on threads of its own, started outside Python: they have no context of their
  own, and torch hands them the mode stacks of the thread that called ``backward`` (:func:`foreign_thread`).
  There tcemu follows torch's stacks; and the autograd Functions keep what their forward saw
  (:func:`tcemu.emulation.configuration.for_backward`).
* Dynamo cannot trace a ContextVar: while compiling, a stack reads the eager state once (a constant of the graph,
  as the configuration's settings are) and keeps the pushes of the traced code in a list that the compiled code
  replays.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["ContextStack", "foreign_thread", "leave_mode"]


def foreign_thread() -> bool:
    """Whether this thread was started outside Python (autograd's worker threads): its state is the one torch
    hands it with its mode stacks, not a context of its own."""
    return isinstance(threading.current_thread(), threading._DummyThread)


def leave_mode(mode: Any, dispatch: bool, exit_mode: Callable[[], None]) -> None:
    """Run ``exit_mode`` (``mode``'s ``__exit__``, which pops the top of torch's per-thread function or dispatch
    mode stack) with ``mode`` on top: modes above it, entered later by another asyncio task that still holds them,
    are taken off and put back after."""
    C = torch._C
    if dispatch:
        length, at, push = C._len_torch_dispatch_stack, C._get_dispatch_stack_at, C._push_on_torch_dispatch_stack

        def pop() -> Any:
            return C._pop_torch_dispatch_stack(None)
    else:
        length, at, pop = C._len_torch_function_stack, C._get_function_stack_at, C._pop_torch_function_stack
        push = C._push_on_torch_function_stack
    n = length()
    above = []
    if n and at(n - 1) is not mode and any(at(i) is mode for i in range(n)):
        while at(length() - 1) is not mode:
            above.append(pop())
    try:
        exit_mode()
    finally:
        for m in reversed(above):
            push(m)


class ContextStack:
    """A stack of values local to the thread and asyncio task (innermost last)."""

    def __init__(self, name: str) -> None:
        var: contextvars.ContextVar[tuple] = contextvars.ContextVar(f"tcemu_{name}", default=())
        #: the ContextVar itself, for eager code that reads it on every torch call
        self.var = self._var = var
        #: the pushes of compiled code (Dynamo replays its side effects on this list, not on a ContextVar)
        self.traced: list = []
        self._at_trace = torch.compiler.assume_constant_result(lambda: var.get())

    def get(self) -> tuple:
        """The stack here, innermost last."""
        if torch.compiler.is_compiling():
            return self._at_trace() + tuple(self.traced)
        return self._var.get() + tuple(self.traced) if self.traced else self._var.get()

    def push(self, value: Any) -> None:
        if torch.compiler.is_compiling():
            self.traced.append(value)
        else:
            self._var.set(self._var.get() + (value,))

    def pop(self) -> None:
        if torch.compiler.is_compiling():
            self.traced.pop()
            return
        stack = self._var.get()
        if stack:
            self._var.set(stack[:-1])
        elif self.traced:  # pushed by compiled code, popped after a graph break in eager code
            self.traced.pop()

    def remove(self, value: Any) -> None:
        """Remove the innermost occurrence of ``value`` (eager code)."""
        stack = self._var.get()
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is value:
                self._var.set(stack[:i] + stack[i + 1:])
                return

    def set(self, values: tuple) -> contextvars.Token:
        """Replace the stack (eager code); reset with :meth:`reset`."""
        return self._var.set(values)

    def reset(self, token: contextvars.Token) -> None:
        self._var.reset(token)
