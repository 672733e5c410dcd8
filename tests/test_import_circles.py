"""Issue 49: no import circle between the harness's packages, imports inside functions included
(read with `ast` by bench/import_circles.py, which also prints the edges of any circle)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import import_circles  # noqa: E402


def test_no_package_imports_one_that_imports_it_back():
    graph = import_circles.edges()
    assert graph, "no imports read: the reader is broken"
    assert "records" in graph.get("stages", set())  # the reader sees the packages it should
    assert import_circles.circles(graph) == []


def test_the_reader_finds_a_circle_made_inside_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert import_circles.circles(graph) == [["a", "b", "c"]]
