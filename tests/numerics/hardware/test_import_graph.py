"""No import circle in tcemu.numerics: a static graph of every import (function-level ones included), and the
modules that once imported each other (campaign, probe, replay) each imported first, on its own."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[3] / "src"


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    """module -> the modules of the same tree it imports anywhere in its body (``from . import x`` resolved)."""
    modules: dict[str, tuple[Path, bool]] = {}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)

    def known(name: str, importer: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name if name and name != importer else None

    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = name.split(".") if is_package else name.split(".")[:-1]
                    parent = parent[: len(parent) - (node.level - 1)]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {m for t in targets if (m := known(t, name))}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_a_circle_through_a_function_level_import(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import g\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_tcemu_numerics_has_no_import_circle():
    graph = import_graph(SRC / "tcemu")
    assert [c for c in cycles(graph) if any(m.startswith("tcemu.numerics") for m in c)] == []
    assert "tcemu.numerics.hardware.measured" in graph["tcemu.numerics.hardware.probe"]  # the graph sees lazy imports


#: Imports each module first, in one interpreter: tcemu (and torch) once, then for each module every
#: tcemu.numerics.hardware module forgotten and that one imported alone (a circle fails on a partial module).
IMPORT_EACH_FIRST = """
import importlib, sys
import tcemu
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.startswith("tcemu.numerics.hardware")]:
        del sys.modules[loaded]
    importlib.import_module("tcemu.numerics.hardware." + name)
"""


def test_each_module_imports_first_on_its_own():
    modules = ["campaign", "probe", "replay", "measured"]
    run = subprocess.run([sys.executable, "-c", IMPORT_EACH_FIRST, *modules], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=300)
    assert run.returncode == 0, run.stderr
