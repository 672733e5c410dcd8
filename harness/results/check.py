"""Check a results page: every Scoring cell recomputed from its own row's cells.

Any table on the page whose header is the remote or the local headline header (as the
columns declare them, harness/results/columns.py) is checked, bold markers stripped; cells
are read by column, not by position. One message per row that disagrees (or whose cells
cannot be read), naming the row.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.errors import UserError
from harness.results.columns import Kind, columns
from harness.results.render import read_page
from harness.verdicts.scoring import score_local, score_remote

_LINK = re.compile(r"\[`?([^`\]]+)`?\]\([^)]*\)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _plain(cell: str) -> str:
    cell = cell.replace("**", "").strip()
    return _LINK.sub(r"\1", cell).strip("`").strip()


# The headline header of each kind of table (the local one also as the hand-kept rows oddyssey
# measured write it), and the Row attribute under each header.
_HEADLINES: list[tuple[Kind, list[tuple[str, str]]]] = [
    (kind, [(c.header_for(kind, hand), c.attr) for c in columns(kind, "headline")])
    for kind, hand in (("remote", False), ("local", False), ("local", True))
]


def scored_rows(text: str) -> list[tuple[str, Kind, dict[str, str]]]:
    """(section, kind, cells by Row attribute) for each row of a headline table on the page."""
    rows, section, table = [], "", None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            section = stripped.lstrip("#").strip()
        if not stripped.startswith("|"):
            table = None
            continue
        cells = _cells(stripped)
        if table is None:
            table = next(((kind, [a for _, a in cols]) for kind, cols in _HEADLINES
                          if cells == [h for h, _ in cols]), ())
            continue
        if not table or all(set(c) <= set("-: ") for c in cells):
            continue
        kind, attrs = table
        rows.append((section, kind, dict(zip(attrs, cells, strict=False))))
    return rows


def _row_name(section: str, cells: dict[str, str]) -> str:
    name = _plain(cells.get("name") or "?")
    where = _plain(cells.get("where") or "")
    rank = _plain(cells.get("rank", ""))
    key = ", ".join(x for x in (_plain(cells.get("effort", "")), _plain(cells.get("cli", "")), where) if x)
    return f"{section or 'table'}: row {rank} {name} ({key})"


def check_rows(text: str) -> tuple[int, list[str]]:
    """(rows checked, one message per row whose Scoring disagrees)."""
    problems = []
    rows = scored_rows(text)
    for section, kind, cells in rows:
        c = {k: _plain(v) for k, v in cells.items()}
        try:
            if kind == "remote":
                score = score_remote(c.get("usd_per_confirmed"), c.get("seconds_per_confirmed"), c["total"],
                                     c["accuracy"], c["confirmed_reported"])
            else:
                score = score_local(c.get("seconds_per_confirmed"), c["total"], c["accuracy"],
                                    c["confirmed_reported"])
        except UserError as exc:
            problems.append(f"{_row_name(section, cells)}: cannot recompute its Scoring: {exc.render()}")
            continue
        except KeyError as exc:  # a row shorter than its header: name the column as the page does
            header = next(h for k, cols in _HEADLINES if k == kind for h, a in cols if a == exc.args[0])
            problems.append(f"{_row_name(section, cells)}: cannot recompute its Scoring: missing column {header!r}")
            continue
        written = c.get("score", "")
        try:
            agrees = float(written) == score.score
        except ValueError:
            agrees = False
        if not agrees:
            problems.append(f"{_row_name(section, cells)}: Scoring {written!r} but its cells give {score.score:.1f}")
    return len(rows), problems


def check_page(path: Path) -> list[str]:
    """One message per row whose Scoring disagrees with its own cells; [] when all agree."""
    return check_rows(read_page(Path(path), missing_fix="render it with: llms-benchmark render"))[1]
