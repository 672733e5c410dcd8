"""Import circles between the harness's packages, imports inside functions included (issue 49).

    .venv/bin/python bench/import_circles.py

Prints each strongly connected set of packages (a top-level module counts as its own package)
and the edges inside it; exit 1 when there is one. Reads the code with `ast`, runs nothing."""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def package(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "harness" or len(parts) == 1:
        return None
    if (ROOT / "harness" / parts[1]).is_dir():
        return parts[1]
    return f"harness.{parts[1]}" if (ROOT / "harness" / f"{parts[1]}.py").is_file() else None


def edges() -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for path in sorted((ROOT / "harness").rglob("*.py")):
        here = package(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                there = package(name)
                if here and there and there != here:
                    out[here].add(there)
    return out


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one package."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
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

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main() -> int:
    graph = edges()
    found = circles(graph)
    for comp in found:
        print(f"{len(comp)} packages import each other: {', '.join(comp)}")
        for a in comp:
            for b in sorted(graph[a] & set(comp)):
                print(f"  {a} -> {b}")
    if not found:
        print("no import circle between packages")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
