"""Emulation of TorchScript modules: their graphs rewritten to call tcemu's ops.

A scripted module (``torch.jit.script``, ``torch.jit.load``, metatomic's exported ``.pt``, a deployed MACE or
torchani model) runs compiled graphs that a torch-function mode cannot see. :func:`emulate_script_` rewrites
them: every float32-capable product node (``aten::linear``, ``matmul``, ``mm``, ``bmm``, ``addmm``,
``einsum``, ``scaled_dot_product_attention``, ...; :data:`tcemu.emulation.script_ops.OPS`) becomes a call of
the ``tcemu::`` op of the same name, with the method and backend as constant arguments. The op runs what
:func:`tcemu.emulation_mode` runs in eager code, so forward, backward, double backward, dtype fallbacks and the
coverage meter behave as in the eager emulated model.

Why a private copy, not the module's own graphs. A method's graph belongs to its class type, which every
instance of that class shares (two ``torch.jit.script`` calls of one ``nn.Module`` class share the compiled
type), and the graph executor keeps the graph it optimized at the first call (an edit after that is ignored).
So the module is copied into a fresh compilation unit (``torch.jit.save`` / ``load`` in memory), the copy's
graphs are rewritten before they ever run, the copy's parameters, buffers and other attributes are set to the
original's objects (nothing is duplicated, training and ``.data`` edits are shared), and the module object the
caller holds (its Python wrapper, and those of its submodules) is pointed at the copy. :func:`restore_script_`
points it back at the untouched original: exactly the original graphs and code. A type shared by instances
that ``filter_fn`` treats differently cannot be rewritten for some only: that raises.

What stays as it is is listed by :func:`script_unreachable` (and :func:`tcemu.unreachable_layers`): custom ops
(a library's own C++/CUDA code: metatomic, featomic, torch-cluster, ...), products of other forms
(convolutions, in-place and ``out=`` variants), and anything inside them.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from .ops import GemmConfig
from .script_ops import OPS

__all__ = ["emulate_script_", "restore_script_", "is_script", "script_roots", "script_unreachable",
           "ScriptUnreachable", "rewritten_ops", "is_emulated"]

FilterFn = Callable[[nn.Module, str], bool]

#: where the wrapper keeps the original C++ module while it is emulated
_ORIGINAL = "_tcemu_script_original"
#: namespaces of node kinds that are TorchScript's and torch's own (not a library's custom ops)
_OWN_NAMESPACES = frozenset({"aten", "prim", "tcemu", "profiler", "cuda", "quantized", "prepacked", "_caffe2",
                             "onnx"})
#: aten products that have no rewrite (their kinds; the rewrite matches exact overloads)
_OTHER_PRODUCTS = frozenset({"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::convolution",
                             "aten::_convolution", "aten::conv_transpose1d", "aten::conv_transpose2d",
                             "aten::conv_transpose3d", "aten::conv_tbc", "aten::_scaled_dot_product_attention_math",
                             "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                             "aten::addmm_", "aten::baddbmm_", "aten::addbmm_", "aten::addmv_"})
_PRODUCT_KINDS = frozenset(op.aten_schema.split("(", 1)[0] for op in OPS.values()) | _OTHER_PRODUCTS
_LINEAR_TYPE = "torch.nn.modules.linear.Linear"


@dataclass(frozen=True)
class ScriptUnreachable:
    """Something in a scripted module's graphs that tcemu does not rewrite, and why."""

    fqn: str
    type_name: str
    reason: str


def is_script(mod: object) -> bool:
    """Whether ``mod`` is a TorchScript module (scripted, traced or loaded)."""
    return isinstance(mod, torch.jit.ScriptModule) and hasattr(mod, "_c")


def is_emulated(wrapper: nn.Module) -> bool:
    """Whether :func:`emulate_script_` rewrote this TorchScript module's graphs."""
    return _ORIGINAL in wrapper.__dict__


def script_roots(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The outermost TorchScript modules in ``model`` (``model`` itself if it is one), with their names."""
    found: list[tuple[str, nn.Module]] = []

    def visit(mod: nn.Module, fqn: str) -> None:
        if is_script(mod):
            found.append((fqn, mod))
            return
        for name, child in mod.named_children():
            visit(child, f"{fqn}.{name}" if fqn else name)

    visit(model, "")
    return found


# --------------------------------------------------------------------------- the C++ module tree


def _children(cpp: torch._C.ScriptModule) -> list[tuple[str, torch._C.ScriptModule]]:
    return list(torch._C.ModuleDict(cpp).items())


def _walk(cpp: torch._C.ScriptModule, fqn: str = "") -> Iterator[tuple[str, torch._C.ScriptModule]]:
    yield fqn, cpp
    for name, child in _children(cpp):
        yield from _walk(child, f"{fqn}.{name}" if fqn else name)


def _qualname(cpp: torch._C.ScriptModule) -> str:
    return cpp._type().qualified_name()


def _plain_qualname(qualname: str) -> str:
    """The class's name without TorchScript's prefix and mangling (``torch.nn.modules.linear.Linear``)."""
    return re.sub(r"___torch_mangle_\d+\.", "", qualname).removeprefix("__torch__.")


def _attributes(cpp: torch._C.ScriptModule) -> list[str]:
    """Names of the module's attributes that are not submodules (parameters, buffers and the others)."""
    concrete = torch._C.ConcreteModuleType.from_jit_type(cpp._type())
    children = {name for name, _ in _children(cpp)}
    return [name for name in concrete.get_attributes() if name not in children]


def _share_state(source: torch._C.ScriptModule, target: torch._C.ScriptModule) -> None:
    """Set the target's attributes (of every module of the tree) to the source's objects: tensors shared, not
    duplicated; flags and numbers as the source has them."""
    for name in _attributes(source):
        try:
            target.setattr(name, source.getattr(name))
        except (RuntimeError, TypeError):  # an object of a TorchScript class of the source's compilation unit
            pass  # (the target's own class): the target keeps its equal copy
    for (_, a), (_, b) in zip(_children(source), _children(target), strict=True):
        _share_state(a, b)


def _rebind(wrapper: nn.Module, cpp: torch._C.ScriptModule) -> None:
    """Point a TorchScript module's Python wrapper, and its submodules' wrappers, at ``cpp`` (same tree shape).

    The wrappers stay the same objects (hooks, references held elsewhere); methods it cached are dropped."""
    from torch.jit._recursive import wrap_cpp_module  # noqa: PLC0415
    from torch.jit._script import OrderedDictWrapper, OrderedModuleDict  # noqa: PLC0415

    d = wrapper.__dict__
    if "_actual_script_module" in d:  # a traced module: a facade whose attributes are its scripted module's
        _rebind(d["_actual_script_module"], cpp)
        return
    for key in [k for k, v in d.items() if isinstance(v, torch._C.ScriptMethod)]:
        del d[key]
    old_children = dict(d["_modules"]._python_modules) if "_modules" in d else {}
    d["_c"] = cpp
    d["_concrete_type"] = torch._C.ConcreteModuleType.from_jit_type(cpp._type())
    d["_parameters"] = OrderedDictWrapper(torch._C.ParameterDict(cpp))
    d["_buffers"] = OrderedDictWrapper(torch._C.BufferDict(cpp))
    children = {}
    for name, child in _children(cpp):
        old = old_children.get(name)
        if is_script(old):
            _rebind(old, child)
            children[name] = old
        else:
            children[name] = wrap_cpp_module(child)
    d["_modules"] = OrderedModuleDict(cpp, children)


# --------------------------------------------------------------------------- graph rewrite


def _nodes(graph: torch._C.Graph) -> Iterator[torch._C.Node]:
    """Every node of the graph, those in nested blocks (if, loop) included."""
    for node in graph.nodes():
        yield node
        yield from _block_nodes(node)


def _block_nodes(node: torch._C.Node) -> Iterator[torch._C.Node]:
    for block in node.blocks():
        for inner in block.nodes():
            yield inner
            yield from _block_nodes(inner)


def _callee(node: torch._C.Node, module_types: Container[str]) -> str | None:
    """The qualified name of the non-module function a ``prim::CallFunction`` / ``prim::CallMethod`` node calls
    (a free function or a TorchScript class's method; None for a method of a module type or an interface)."""
    if node.kind() == "prim::CallFunction":
        return node.inputsAt(0).type().str()
    if node.kind() == "prim::CallMethod":
        t = node.inputsAt(0).type()
        if isinstance(t, torch.ClassType) and t.qualified_name() not in module_types:
            return f"{t.qualified_name()}.{node.s('name')}"
    return None


def _rewrite_graph(graph: torch._C.Graph, constants: Callable[[str], tuple[str, ...]],
                   only: frozenset[str] | None = None) -> int:
    """Replace the graph's product nodes (of the ops ``only`` names, all when None) by ``tcemu::`` calls whose
    trailing arguments are ``constants(op_name)``; returns how many."""
    count = 0
    for node in [n for n in _nodes(graph) if n.kind() in _PRODUCT_KINDS]:
        op = OPS.get(node.schema())
        if op is None or (only is not None and op.name not in only):
            continue
        with graph.insert_point_guard(node):
            tail = [graph.insertConstant(value) for value in constants(op.name)]
            new = graph.create(op.qualified_name, [*node.inputs(), *tail], 1)
            graph.insertNode(new)
        new.copyMetadata(node)
        new.output().setType(node.output().type())
        node.output().replaceAllUsesWith(new.output())
        node.destroy()
        count += 1
    graph.lint()
    return count


def _verdicts(wrapper: nn.Module, prefix: str, filter_fn: FilterFn | None) -> dict[str, bool]:
    """fqn (inside the scripted module) -> whether ``filter_fn`` selects that module."""
    out = {}
    for fqn, mod in wrapper.named_modules(remove_duplicate=False):
        full = f"{prefix}.{fqn}" if prefix and fqn else (prefix or fqn)
        out[fqn] = True if filter_fn is None else bool(filter_fn(mod, full))
    return out


def _type_verdicts(copy: torch._C.ScriptModule, verdicts: dict[str, bool], where: str) -> dict[str, bool]:
    """Module type -> verdict; one type's instances must agree (they share their graphs)."""
    by_type: dict[str, dict[str, bool]] = defaultdict(dict)
    for fqn, cpp in _walk(copy):
        by_type[_qualname(cpp)][fqn] = verdicts.get(fqn, True)
    out = {}
    for qualname, per_fqn in by_type.items():
        if len(set(per_fqn.values())) > 1:
            raise ValueError(f"tcemu.emulate_: in the TorchScript module {where or '<root>'}, the modules "
                             f"{', '.join(map(repr, per_fqn))} share one compiled class "
                             f"({_plain_qualname(qualname)}), whose graphs cannot be emulated for some of them "
                             f"only; filter_fn selects {per_fqn}: make it agree on all of them")
        out[qualname] = next(iter(per_fqn.values()))
    return out


def _function_verdicts(cu_functions: dict[str, torch._C.ScriptFunction], module_types: dict[str, bool],
                       root_verdict: bool) -> dict[str, bool]:
    """Verdict of every function: a module's method has its module's; a free function (or a TorchScript class's
    method) that of the modules that call it, directly or through other such functions."""
    owner = {name: name.rsplit(".", 1)[0] for name in cu_functions}
    out = {name: module_types[o] for name, o in owner.items() if o in module_types}
    callers: dict[str, set[bool]] = defaultdict(set)
    frontier = list(out)
    while frontier:
        name = frontier.pop()
        for node in _nodes(cu_functions[name].graph):
            callee = _callee(node, module_types)
            if callee is None or callee not in cu_functions:
                continue
            before = set(callers[callee])
            callers[callee].add(out[name])
            if callers[callee] != before:
                if len(callers[callee]) > 1:
                    raise ValueError(f"tcemu.emulate_: the TorchScript function {callee} is called from modules "
                                     "that filter_fn selects and from modules it leaves out; one compiled function "
                                     "cannot be both: make filter_fn agree on its callers")
                out[callee] = out[name]
                frontier.append(callee)
    for name in cu_functions:
        out.setdefault(name, root_verdict)  # never called from a module method
    return out


def _unit(cpp: torch._C.ScriptModule, where: str) -> tuple[torch._C.ScriptModule, dict[str, torch._C.ScriptFunction]]:
    """A copy of ``cpp`` in a fresh compilation unit (types, functions and graphs of its own, not run yet), and the
    unit's functions by qualified name."""
    try:
        data = cpp.save_to_buffer({})
    except RuntimeError as exc:
        raise RuntimeError(f"tcemu: cannot copy the TorchScript module {where or '<root>'} to read or rewrite its "
                           f"graphs: torch.jit.save refuses it ({str(exc).splitlines()[0]}); emulate the eager "
                           "nn.Module instead") from None
    cu = torch._C.CompilationUnit()
    copy = torch._C.import_ir_module_from_buffer(cu, data, None, {}, False)
    return copy, {f.qualified_name: f for f in cu.get_functions()}


def emulate_script_(wrapper: nn.Module, cfg: GemmConfig, filter_fn: FilterFn | None = None, *, prefix: str = "",
                    functional: bool = True) -> int:
    """Emulate a TorchScript module's products in place (see the module docstring); returns the number of
    rewritten product nodes. ``prefix``: the module's name in the model ``filter_fn`` sees.

    An emulated module is restored first (the copy is made from the original)."""
    restore_script_(wrapper)
    original = wrapper._c
    copy, functions = _unit(original, prefix)
    _share_state(original, copy)
    types = _type_verdicts(copy, _verdicts(wrapper, prefix, filter_fn), prefix)
    verdicts = _function_verdicts(functions, types, types[_qualname(copy)])
    fwd, gw = cfg.forward.name, cfg.grad_weight.name
    count = 0
    for name, fn in functions.items():
        if not verdicts[name]:
            continue
        in_linear = _plain_qualname(name.rsplit(".", 1)[0]) == _LINEAR_TYPE
        if not functional and not in_linear:
            continue

        def constants(op: str, in_linear: bool = in_linear) -> tuple[str, ...]:
            if op == "linear":
                return fwd, (gw if in_linear else fwd), cfg.backend
            return fwd, cfg.backend

        count += _rewrite_graph(fn.graph, constants, None if functional else frozenset({"linear"}))
    _rebind(wrapper, copy)
    wrapper.__dict__[_ORIGINAL] = (original, functions)
    return count


def restore_script_(wrapper: nn.Module) -> bool:
    """Point an emulated TorchScript module back at its original graphs; returns whether it was emulated.

    What the emulated copy holds that the original does not (a buffer that ``.to()`` replaced, the ``training``
    flag) is handed to the original first, so the module keeps its state. A module whose graphs call tcemu's ops without being
    emulated here (a ``copy.deepcopy`` of an emulated one, or one saved emulated and loaded back) gets a copy with
    those calls turned back into the aten ops they replaced."""
    saved = wrapper.__dict__.pop(_ORIGINAL, None)
    if saved is not None:
        _share_state(wrapper._c, saved[0])
        _rebind(wrapper, saved[0])
        return True
    if not any(node.kind().startswith("tcemu::") for _, cpp in _walk(wrapper._c)
               for method in cpp._type().method_names() for node in _nodes(cpp._get_method(method).graph)):
        return False
    copy, functions = _unit(wrapper._c, "")
    _share_state(wrapper._c, copy)
    for fn in functions.values():
        _unrewrite_graph(fn.graph)
    _rebind(wrapper, copy)
    return True


def _unrewrite_graph(graph: torch._C.Graph) -> None:
    """Turn the graph's ``tcemu::`` product calls back into the aten ops they replaced."""
    by_name = {op.qualified_name: op for op in OPS.values()}
    for node in [n for n in _nodes(graph) if n.kind() in by_name]:
        op = by_name[node.kind()]
        inputs = list(node.inputs())[:len(op.aten._schema.arguments)]
        with graph.insert_point_guard(node):
            old = graph.insertNode(graph.create(op.aten_schema.split("(", 1)[0], inputs, 1))
        old.copyMetadata(node)
        old.output().setType(node.output().type())
        node.output().replaceAllUsesWith(old.output())
        node.destroy()
    graph.lint()


def rewritten_ops(wrapper: nn.Module) -> dict[str, int]:
    """``tcemu::`` op -> how many nodes call it in the graphs of an emulated TorchScript module (every method of
    every submodule, and the functions they call); {} for one that is not emulated."""
    saved = wrapper.__dict__.get(_ORIGINAL)
    counts: dict[str, int] = defaultdict(int)
    for fn in (saved[1].values() if saved is not None else ()):
        for node in _nodes(fn.graph):
            if node.kind().startswith("tcemu::"):
                counts[node.kind()] += 1
    return dict(counts)


def script_unreachable(wrapper: nn.Module, prefix: str = "") -> list[ScriptUnreachable]:
    """What a TorchScript module's graphs run that :func:`emulate_script_` does not rewrite: custom ops (their own
    compiled code) and products of other forms, per module (its methods and the functions they call)."""
    saved = wrapper.__dict__.get(_ORIGINAL)
    root, functions = (wrapper._c, saved[1]) if saved is not None else _unit(wrapper._c, prefix)
    found: list[ScriptUnreachable] = []
    module_types = {_qualname(cpp) for _, cpp in _walk(root)}
    for fqn, cpp in _walk(root):
        full = f"{prefix}.{fqn}" if prefix and fqn else (prefix or fqn)
        name = _plain_qualname(_qualname(cpp)).rsplit(".", 1)[-1]
        kinds: dict[str, str] = {}
        for graph in _graphs_of(cpp, functions, module_types):
            for node in _nodes(graph):
                kind = node.kind()
                namespace = kind.split("::", 1)[0]
                if namespace not in _OWN_NAMESPACES:
                    kinds.setdefault(kind, f"custom op {kind}: runs its library's own compiled code, which tcemu "
                                           "cannot rewrite (products inside it, if any, stay as they are; "
                                           "tcemu.coverage() counts its calls as opaque)")
                elif kind in _PRODUCT_KINDS and OPS.get(node.schema()) is None:
                    kinds.setdefault(kind, f"{node.schema()}: no tcemu op for this product (it runs as it is; "
                                           "tcemu.coverage() counts it)")
        found.extend(ScriptUnreachable(full, name, reason) for reason in kinds.values())
    return found


def _graphs_of(cpp: torch._C.ScriptModule, functions: dict[str, torch._C.ScriptFunction],
               module_types: Container[str]) -> Iterator[torch._C.Graph]:
    """The graphs of a module's own methods and of the non-module functions they call (transitively)."""
    names = [f"{_qualname(cpp)}.{m}" for m in cpp._type().method_names()]
    seen = set(names)
    while names:
        fn = functions.get(names.pop())
        if fn is None:
            continue
        yield fn.graph
        for node in _nodes(fn.graph):
            callee = _callee(node, module_types)
            if callee is not None and callee not in seen:
                seen.add(callee)
                names.append(callee)
