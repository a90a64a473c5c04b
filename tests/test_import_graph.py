"""The package's import graph has no cycle.

Every import of a ``titans_atlas`` module counts, at module level or inside a function (an
import put in a function to dodge a cycle is still a cycle), and so does the parent package
an import runs first (``import titans_atlas.eval.recall`` executes ``eval/__init__.py``).
Imports under ``if TYPE_CHECKING:`` count too: a cycle of types is still two modules that
each need the other. Third-party imports (the optional dependencies a function imports on
use) are not package modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "titans_atlas"


def _module_name(path: Path, package: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """module -> {imported package module: line of the first such import}."""
    files = {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    packages = {_module_name(p, package) for p in package.rglob("__init__.py")}
    graph: dict[str, dict[str, int]] = {m: {} for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        here = module if module in packages else module.rpartition(".")[0]
        ancestors = {module.rsplit(".", i)[0] for i in range(module.count(".") + 1)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = here.split(".")[: here.count(".") + 2 - node.level]
                    source = ".".join(parts + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [
                    f"{source}.{a.name}" if f"{source}.{a.name}" in files else source
                    for a in node.names
                ]
            else:
                continue
            for target in targets:
                while target and target not in files:
                    target = target.rpartition(".")[0]
                while target and target != module:  # the module, then each parent it runs
                    if target not in ancestors:
                        graph[module].setdefault(target, node.lineno)
                    target = target.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    edges = [
        f"    {a} -> {b} (line {line})"
        for a in component
        for b, line in graph[a].items()
        if b in members
    ]
    return "\n".join([" <-> ".join(component), *edges])


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(_describe(c, graph) for c in found)


def test_the_cycle_finder_sees_function_level_and_parent_package_imports(tmp_path):
    root = tmp_path / "titans_atlas"
    (root / "a").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a" / "__init__.py").write_text("from . import x\n")
    (root / "a" / "x.py").write_text("")
    (root / "b.py").write_text("def f():\n    from .a.x import thing\n")
    (root / "a" / "y.py").write_text("from ..b import f\n")
    (root / "a" / "x.py").write_text("from . import y\n")
    (root / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import b\n"
    )
    graph = import_graph(root)
    assert graph["titans_atlas.b"] == {"titans_atlas.a.x": 2, "titans_atlas.a": 2}
    assert graph["titans_atlas.c"] == {"titans_atlas.b": 3}
    assert cycles(graph) == [
        ["titans_atlas.a", "titans_atlas.a.x", "titans_atlas.a.y", "titans_atlas.b"]
    ]
