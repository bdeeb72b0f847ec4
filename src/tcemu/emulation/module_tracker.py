"""The innermost module running, in forward and backward, for :mod:`tcemu.emulation.meter`'s per-module rows."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree


class ModuleTracker:
    """The innermost module running, in forward and backward.

    Forward: a stack kept by global module hooks. Backward: each autograd node made during a module's forward
    belongs to the innermost such module (found by walking the graph from the module's outputs back to the nodes
    made before it started, when its forward returns), and the node the engine runs names the module.
    (torch's ModuleTracker hooks the gradients of module inputs, which fails in ``autograd.grad`` with a leaf
    input, the usual way an MLIP computes forces.)
    """

    def __init__(self, roots: tuple[torch.nn.Module, ...] = (), here: Callable[[], bool] = lambda: True) -> None:
        self.here = here  # whether a module call belongs to this tracker (the global hooks see every thread's)
        self.stack: list[tuple[str, int]] = []
        self.names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        for root in roots:
            self._name(root)
        self.owner: dict[Any, str] = {}  # autograd node -> module name
        self._probe = torch.zeros((), requires_grad=True)
        self._handles: list = []

    def __enter__(self) -> ModuleTracker:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = [register_module_forward_pre_hook(self._pre),
                         register_module_forward_hook(self._post, always_call=True)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self.owner.clear()

    def _name(self, mod: torch.nn.Module) -> str:
        name = self.names.get(mod)
        if name is None:
            name = self.names[mod] = type(mod).__name__
            for fqn, sub in mod.named_modules():
                if fqn and sub not in self.names:
                    self.names[sub] = f"{name}.{fqn}"
        return name

    def _pre(self, mod, args) -> None:
        if not self.here():
            return
        start = -1
        if torch.is_grad_enabled():
            with torch._C._DisableFuncTorch():  # inside a torch.func transform too: a plain autograd node
                start = self._probe.view_as(self._probe).grad_fn._sequence_nr()
        self.stack.append((self._name(mod), start))

    def _post(self, mod, args, output) -> None:
        if not self.stack or not self.here():
            return
        name, start = self.stack.pop()
        if start < 0:
            return
        todo = [t.grad_fn for t in pytree.tree_leaves(output)
                if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        seen = set()
        while todo:
            node = todo.pop()
            if node is None or id(node) in seen or node._sequence_nr() <= start:
                continue
            seen.add(id(node))
            self.owner.setdefault(node, name)
            todo.extend(n for n, _ in node.next_functions)

    def current(self) -> str:
        if torch._C._current_graph_task_id() != -1:
            current_node = getattr(torch._C, "_current_autograd_node", None)  # torch >= 2.1
            node = current_node() if current_node is not None else None
            return self.owner.get(node, "") if node is not None else ""
        return self.stack[-1][0] if self.stack else ""
