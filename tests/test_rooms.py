"""Issue 57: rooms import downward only. A room is a folder of the package (preview/call, server/ws, bench/demo,
and each package's own modules: preview, server, bench); an import of any kind, at the top or inside a function,
makes an edge from the importing module's room to the imported one's. A cycle between rooms fails the test,
naming the rooms and the import lines that close it."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "previewlab"


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path) -> list[tuple[int, list[str]]]:
    """Each import statement of a module (line, the names it may bring: a module, or a module's attribute)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, [node.module, *(f"{node.module}.{a.name}" for a in node.names)]))
        elif isinstance(node, ast.Import):
            out.append((node.lineno, [a.name for a in node.names]))
    return out


def room_edges(mods: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """(importing room, imported room) -> the import lines that make that edge."""
    def room(name: str) -> str | None:
        path = mods.get(name)
        return None if path is None else str(path.parent.relative_to(PACKAGE.parent))

    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in mods.items():
        here = str(path.parent.relative_to(PACKAGE.parent))
        for line, targets in imports(path):
            for there in {r for r in map(room, targets) if r is not None and r != here}:
                edges.setdefault((here, there), []).append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    return edges


def module_edges(mods: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """(importing module, imported module) -> its import lines; a package's __init__ is not a module of its own
    here (importing a module imports its package first, which is no edge of the code's)."""
    edges: dict[tuple[str, str], list[str]] = {}
    for name, path in mods.items():
        for line, targets in imports(path):
            for there in {t for t in targets if t in mods and t != name and mods[t].name != "__init__.py"}:
                edges.setdefault((name, there), []).append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    return edges


def cycles(edges: dict[tuple[str, str], list[str]]) -> list[list[str]]:
    """The rooms that reach each other (Tarjan's strongly connected components of more than one room)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def test_the_finder_names_a_cycle_it_is_shown():
    """The check itself: two rooms importing each other are one cycle, a third below them is not in it."""
    edges = {("a", "b"): ["a/x.py:1"], ("b", "a"): ["b/y.py:2"], ("b", "c"): ["b/y.py:3"]}
    assert cycles(edges) == [["a", "b"]]


def test_no_cycle_between_rooms():
    edges = room_edges(modules())
    assert len(edges) > 20  # the package's rooms were read
    found = cycles(edges)
    lines = [f"{' <-> '.join(c)}: " + "; ".join(f"{a} -> {b} ({', '.join(edges[(a, b)][:3])})"
                                                for a in c for b in c if (a, b) in edges) for c in found]
    assert not found, "\n".join(lines)


def test_no_cycle_between_modules():
    """Inside a room too, modules import downward only (issue 57: the bench's cli -> cluster -> unit -> nodes ->
    cli). An import only for the type checker counts: it is the same dependency, written where it hides."""
    edges = module_edges(modules())
    assert len(edges) > 100
    found = cycles(edges)
    lines = [f"{' <-> '.join(c)}: " + "; ".join(f"{a} -> {b} ({', '.join(edges[(a, b)][:3])})"
                                                for a in c for b in c if (a, b) in edges) for c in found]
    assert not found, "\n".join(lines)
