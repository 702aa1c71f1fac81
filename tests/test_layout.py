"""The package's layers: imports point down only, and no import cycle.

Read from the sources with ``ast``, so that imports under ``if TYPE_CHECKING:``
and inside functions count too: a cycle that only the type checker sees, or
that an import moved into a function hides from the interpreter, still ties
two modules together for a reader.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import of a module: at module level, under ``TYPE_CHECKING``, in a function.

    An import inside a function is one that was moved there to break a
    cycle; it still ties the two modules together, so it counts.
    """
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def import_graph() -> dict[str, set[str]]:
    """corun module -> the corun modules it imports, wherever the import is."""
    modules = {_module_name(p): p for p in (SRC / "corun").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for node in _imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                assert node.level == 0, f"{name}: relative import"
                base = node.module or ""
                # `from pkg import mod` imports the module pkg.mod.
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            edges.update(t for t in targets if t in modules and t != name)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_imports_in_functions_and_under_type_checking_count() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    import a\n"
        "def f():\n"
        "    from b import c\n"
    )
    names = {
        node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
        for node in _imports(tree)
    }
    assert names == {"typing", "a", "b"}


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


# What each layer may import from corun, besides itself. Imports point down.
ALLOWED = {
    "corun.runtime._constants": set(),
    "corun.runtime.engine": {"corun.runtime._constants"},
    "corun.runtime.transports": {"corun.runtime._constants", "corun.runtime.engine"},
    "corun.runtime.net": {
        "corun.runtime._constants",
        "corun.runtime.engine",
        "corun.runtime.transports",
    },
    "corun._version": set(),
    "corun.observe": {"corun._version", "corun.runtime"},
    "corun.resilience": set(),
    # pytest_plugin hands tests corun's loop factory
    "corun.testing": {"corun.resilience", "corun.runtime"},
}


def _layer(module: str) -> str | None:
    matches = [layer for layer in ALLOWED if module == layer or module.startswith(layer + ".")]
    return max(matches, key=len) if matches else None


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_imports_point_down(layer: str) -> None:
    graph = import_graph()
    members = [m for m in graph if _layer(m) == layer]
    assert members, f"no module in {layer}"
    wrong = {
        f"{module} -> {target}"
        for module in members
        for target in graph[module]
        if _layer(target) != layer
        and not any(
            target == allowed or target.startswith(allowed + ".") for allowed in ALLOWED[layer]
        )
    }
    assert not wrong


def test_runtime_knows_nothing_above_it() -> None:
    graph = import_graph()
    upward = {
        f"{module} -> {target}"
        for module, targets in graph.items()
        if module.startswith("corun.runtime")
        for target in targets
        if not target.startswith("corun.runtime")
    }
    assert not upward


def test_resilience_does_without_aiohttp() -> None:
    for path in (SRC / "corun" / "resilience").rglob("*.py"):
        for node in _imports(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            assert not any((n or "").split(".")[0] == "aiohttp" for n in names), path


def test_a_compiled_module_older_than_its_source_is_found(tmp_path: Path) -> None:
    import os

    from stale_build import stale_compiled_modules

    mine, other = ".cpython-311-x86_64-linux-gnu.so", ".cpython-314-x86_64-linux-gnu.so"
    for name in ("fresh", "edited", "other"):
        (tmp_path / f"{name}.py").write_text("")
        (tmp_path / f"{name}{mine}").write_bytes(b"")
    (tmp_path / f"other{other}").write_bytes(b"")
    os.utime(tmp_path / "fresh.py", (1_000, 1_000))
    os.utime(tmp_path / "other.py", (1_000, 1_000))
    os.utime(tmp_path / f"edited{mine}", (1_000, 1_000))
    # Another interpreter's build, older than its source, is that interpreter's concern.
    os.utime(tmp_path / f"other{other}", (500, 500))
    assert stale_compiled_modules(tmp_path, mine) == ["edited.py"]
    assert stale_compiled_modules(tmp_path, other) == ["other.py"]
