"""tcemu.mlip's modules import each other one way only: no module imports, at module level or inside a function
(or for type checking), a module that imports it back.

The imports are read from the source (AST), not by importing: a function-level import closes a circle as surely
as a module-level one, only later. ``importlib.import_module("tcemu.mlip.x")`` with a literal name counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tcemu.mlip

PACKAGE = "tcemu.mlip"
ROOT = Path(tcemu.mlip.__file__).parent

#: The report's modules, lowest first: a module may import only modules of a lower rank.
REPORT_CHAIN = {"results": 0, "criteria": 1, "report_text": 2, "plots": 2, "report": 3}
#: The potentials' modules, lowest first.
POTENTIAL_CHAIN = {"potential": 0, "pet": 1, "calculators": 2, "distilled": 2, "labels": 3, "models": 3}


def _module_names() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__.py``)."""
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((PACKAGE, *parts))] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its source."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(target: str, names: list[str]) -> None:
        for n in names:  # ``from tcemu.mlip import models`` imports the module tcemu.mlip.models
            if f"{target}.{n}" in known:
                found.add(f"{target}.{n}")
        if target in known and target != PACKAGE:
            found.add(target)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            add(target, [a.name for a in node.names])
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            add(node.args[0].value, [])
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    """``{module: the package's modules it imports}`` for every module of tcemu.mlip."""
    modules = _module_names()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_package_has_no_import_circle():
    cycle = _cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle)


@pytest.mark.parametrize("chain", [REPORT_CHAIN, POTENTIAL_CHAIN], ids=["report", "potentials"])
def test_each_group_imports_down_its_chain(chain):
    graph = import_graph()
    for low in chain:
        assert f"{PACKAGE}.{low}" in graph, f"{PACKAGE}.{low} is missing"
    wrong = [f"{a} imports {b}" for a, rank in chain.items() for b in sorted(chain)
             if f"{PACKAGE}.{b}" in graph[f"{PACKAGE}.{a}"] and chain[b] >= rank]
    assert not wrong, "; ".join(wrong)


def test_the_reader_sees_function_level_and_type_checking_imports(tmp_path):
    """The check itself: a function-level import, a relative one, a TYPE_CHECKING one and import_module count."""
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tcemu.mlip.report import SuiteResult\n"
                   "def f():\n    from . import labels\n    import importlib\n"
                   "    importlib.import_module('tcemu.mlip.distilled')\n")
    known = {f"{PACKAGE}.{m}" for m in ("report", "labels", "distilled", "models")}
    assert _imports(f"{PACKAGE}.m", src, known) == {f"{PACKAGE}.report", f"{PACKAGE}.labels", f"{PACKAGE}.distilled"}
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
