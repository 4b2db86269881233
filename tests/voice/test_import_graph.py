"""Issue 19: no import cycles in vramfit (the planner's plan <-> fixes <-> render one included).

The graph counts every import, at module level or inside a function: a lazy import hides a cycle
from Python, not from a reader. `from package import module` is an edge to the module.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def import_graph(root: Path = REPO / "vramfit") -> dict[str, set[str]]:
    def name(path: Path) -> str:
        parts = path.relative_to(root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {name(p): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in files:
                subs = {f"{node.module}.{a.name}" for a in node.names} & files.keys()
                graph[module] |= subs if len(subs) == len(node.names) else {node.module, *subs}
            elif isinstance(node, ast.Import):
                graph[module] |= {a.name for a in node.names} & files.keys()
        graph[module].discard(module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
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

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_vramfit_has_no_import_cycle():
    graph = import_graph()
    assert cycles(graph) == [], "modules that import each other (move what they share into a module of its own)"


@pytest.mark.parametrize("module", ["vramfit.planner.plan", "vramfit.planner.fixes", "vramfit.planner.render"])
def test_each_planner_module_imports_alone(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
