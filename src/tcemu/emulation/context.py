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
from typing import Any

import torch

__all__ = ["ContextStack", "foreign_thread"]


def foreign_thread() -> bool:
    """Whether this thread was started outside Python (autograd's worker threads): its state is the one torch
    hands it with its mode stacks, not a context of its own."""
    return isinstance(threading.current_thread(), threading._DummyThread)


class ContextStack:
    """A stack of values local to the thread and asyncio task (innermost last)."""

    def __init__(self, name: str) -> None:
        var: contextvars.ContextVar[tuple] = contextvars.ContextVar(f"tcemu_{name}", default=())
        self._var = var
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
