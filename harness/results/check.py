"""Check a results page: every Scoring cell recomputed from its own row's cells.

Any table on the page whose header is the remote or the local headline header is
checked, bold markers stripped. One message per row that disagrees (or whose cells
cannot be read), naming the row.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.errors import UserError
from harness.results.render import LOCAL_HEADERS, REMOTE_HEADERS, read_page
from harness.scoring import score_local, score_remote

_LINK = re.compile(r"\[`?([^`\]]+)`?\]\([^)]*\)")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _plain(cell: str) -> str:
    cell = cell.replace("**", "").strip()
    return _LINK.sub(r"\1", cell).strip("`").strip()


def scored_rows(text: str) -> list[tuple[str, dict[str, str]]]:
    """(section, cells by header) for each row of a headline table on the page."""
    rows, section, headers = [], "", None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            section = stripped.lstrip("#").strip()
        if not stripped.startswith("|"):
            headers = None
            continue
        cells = _cells(stripped)
        if headers is None:
            headers = cells if cells in (REMOTE_HEADERS, LOCAL_HEADERS) else []
            continue
        if not headers or all(set(c) <= set("-: ") for c in cells):
            continue
        rows.append((section, dict(zip(headers, cells, strict=False))))
    return rows


def _row_name(section: str, cells: dict[str, str]) -> str:
    name = _plain(cells.get("Model") or cells.get("Preset") or "?")
    where = _plain(cells.get("Provider") or cells.get("GPU") or "")
    rank = _plain(cells.get("Rank", ""))
    key = ", ".join(x for x in (_plain(cells.get("Effort", "")), _plain(cells.get("CLI", "")), where) if x)
    return f"{section or 'table'}: row {rank} {name} ({key})"


def check_rows(text: str) -> tuple[int, list[str]]:
    """(rows checked, one message per row whose Scoring disagrees)."""
    problems = []
    rows = scored_rows(text)
    for section, cells in rows:
        c = {k: _plain(v) for k, v in cells.items()}
        try:
            if "Model" in c:
                score = score_remote(c.get("$/confirmed"), c.get("seconds/confirmed"), c["Total"], c["Accuracy"],
                                     c["Confirmed / reported"])
            else:
                score = score_local(c.get("seconds/confirmed"), c["Total"], c["Accuracy"], c["Confirmed / reported"])
        except (UserError, KeyError) as exc:
            text_ = exc.render() if isinstance(exc, UserError) else f"missing column {exc}"
            problems.append(f"{_row_name(section, cells)}: cannot recompute its Scoring: {text_}")
            continue
        written = c.get("Scoring", "")
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
