"""No host path in a trajectory: every string of the document (keys included) with the run
folder, the project root and the home folder replaced (`<run>`, `<project>`, `~`), and the run
folder also where it was moved from (any path ending in `.llms-benchmark/runs/<run-id>`: the
agent's tools saw the launch's own path, which a copied folder no longer has)."""

from __future__ import annotations

import re
from pathlib import Path


def unhost(doc, run_dir: Path, run_id: str):
    """Every string (keys included) of `doc` with the run folder, the project root and the home
    folder replaced: the trajectory names nothing of the host it was made on."""
    run = run_dir.resolve()
    pairs = [(str(run), "<run>"), (str(run_dir.absolute()), "<run>")]
    if run.parent.parent.name == ".llms-benchmark":
        pairs.append((str(run.parents[2]), "<project>"))
    home = str(Path.home())
    if len(home) > 1:
        pairs.append((home, "~"))
    pairs = sorted({p for p in pairs if len(p[0]) > 1}, key=lambda p: -len(p[0]))
    moved = re.compile(r"[^\s\"'<>()\[\]{}]*\.llms-benchmark/(?:runs|inconclusive|refused)/" + re.escape(run_id))

    def clean(text: str) -> str:
        text = moved.sub("<run>", text)
        for host, alias in pairs:
            text = text.replace(host, alias)
        return text

    def walk(node):
        if isinstance(node, str):
            return clean(node)
        if isinstance(node, list):
            return [walk(x) for x in node]
        if isinstance(node, dict):
            return {clean(k): walk(v) for k, v in node.items()}
        return node

    return walk(doc)
