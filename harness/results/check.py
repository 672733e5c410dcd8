"""Check a results page: every Scoring cell recomputed from its own row's cells, and each
table's ranks, order and bold marks as render writes them.

Any table on the page whose header is the remote or the local headline header (as the
columns declare them, harness/results/columns.py) is checked, bold markers stripped; cells
are read by column, not by position. One message per row that disagrees (or whose cells
cannot be read), naming the row.
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.errors import UserError
from harness.markdown_table import tables
from harness.results.columns import DASH, Kind, columns
from harness.results.render import read_page
from harness.verdicts.scoring import rank_key, score_local, score_remote

_LINK = re.compile(r"\[`?([^`\]]+)`?\]\([^)]*\)")


def _plain(cell: str) -> str:
    cell = cell.replace("**", "").strip()
    return _LINK.sub(r"\1", cell).strip("`").strip()


# The headline header of each kind of table (the local one also as the hand-kept rows oddyssey
# measured write it), and the Row attribute under each header.
_HEADLINES: list[tuple[Kind, list[tuple[str, str]]]] = [
    (kind, [(c.header_for(kind, hand), c.attr) for c in columns(kind, "headline")])
    for kind, hand in (("remote", False), ("local", False), ("local", True))
]


def headline_tables(text: str) -> list[tuple[str, Kind, list[dict[str, str]]]]:
    """(section, kind, rows as cells by Row attribute, as written) for each headline table on the page."""
    found: list[tuple[str, Kind, list[dict[str, str]]]] = []
    for table in tables(text):
        header, *rows = table.rows
        match = next(((kind, [a for _, a in cols]) for kind, cols in _HEADLINES if header == [h for h, _ in cols]), None)
        if match:
            found.append((table.heading, match[0], [dict(zip(match[1], cells, strict=False)) for cells in rows]))
    return found


def scored_rows(text: str) -> list[tuple[str, Kind, dict[str, str]]]:
    """(section, kind, cells by Row attribute) for each row of a headline table on the page."""
    return [(section, kind, cells) for section, kind, rows in headline_tables(text) for cells in rows]


def _row_name(section: str, cells: dict[str, str]) -> str:
    name = _plain(cells.get("name") or "?")
    where = _plain(cells.get("where") or "")
    rank = _plain(cells.get("rank", ""))
    key = ", ".join(x for x in (_plain(cells.get("effort", "")), _plain(cells.get("cli", "")), where) if x)
    return f"{section or 'table'}: row {rank} {name} ({key})"


def _score(kind: Kind, c: dict[str, str]):
    if kind == "remote":
        return score_remote(c.get("usd_per_confirmed"), c.get("seconds_per_confirmed"), c["total"],
                            c["accuracy"], c["confirmed_reported"])
    return score_local(c.get("seconds_per_confirmed"), c["total"], c["accuracy"], c["confirmed_reported"])


def _is_bold(cell: str) -> bool:
    cell = cell.strip()
    return len(cell) > 4 and cell.startswith("**") and cell.endswith("**")


def check_table(section: str, kind: Kind, rows: list[dict[str, str]]) -> list[str]:
    """One table's Scoring cells, then its ranks (#1, #2, … in page order), its order (highest
    Scoring first, a tie to the cheaper or shorter run) and its bold marks (each best value, ties
    all, and a ratio with every finding confirmed), as render writes them."""
    problems, scores = [], []
    for cells in rows:
        c = {k: _plain(v) for k, v in cells.items()}
        try:
            score = _score(kind, c)
        except UserError as exc:
            problems.append(f"{_row_name(section, cells)}: cannot recompute its Scoring: {exc.render()}")
            scores.append(None)
            continue
        except KeyError as exc:  # a row shorter than its header: name the column as the page does
            header = next(h for k, cols in _HEADLINES if k == kind for h, a in cols if a == exc.args[0])
            problems.append(f"{_row_name(section, cells)}: cannot recompute its Scoring: missing column {header!r}")
            scores.append(None)
            continue
        scores.append(score)
        written = c.get("score", "")
        try:
            agrees = float(written) == score.score
        except ValueError:
            agrees = False
        if not agrees:
            problems.append(f"{_row_name(section, cells)}: Scoring {written!r} but its cells give {score.score:.1f}")

    # Ranks: #1, #2, … down the page, bold as render writes them.
    for i, cells in enumerate(rows, start=1):
        written = cells.get("rank", "").strip()
        if written != f"**#{i}**":
            problems.append(f"{_row_name(section, cells)}: Rank {written!r} in place {i} (render writes **#{i}**)")

    # Order: highest Scoring first; a tie to the cheaper (remote: Cost) or shorter (local: Total) run.
    if all(s is not None for s in scores):
        try:
            keys = [rank_key(s, kind=kind, cost=_plain(r.get("cost", "")) if kind == "remote" else None,
                             total=_plain(r.get("total", "")) if kind == "local" else None)
                    for s, r in zip(scores, rows, strict=True)]
        except UserError as exc:
            keys = None
            problems.append(f"{section or 'table'}: cannot check the order: {exc.render()}")
        for i in range(len(rows) - 1) if keys else ():
            if keys[i] > keys[i + 1]:
                why = "scores lower" if keys[i][0] > keys[i + 1][0] else \
                    ("ties and costs more" if kind == "remote" else "ties and took longer")
                problems.append(f"{_row_name(section, rows[i])}: ranked above "
                                f"{_plain(rows[i + 1].get('name', '?'))} but {why} "
                                f"({scores[i].score:.1f} vs {scores[i + 1].score:.1f})")

    # Bold: each column's best value (ties all, — never), and a ratio with every finding confirmed.
    for col in columns(kind, "headline"):
        header = col.header_for(kind)
        if col.best:
            values = {}
            for i, cells in enumerate(rows):
                text = _plain(cells.get(col.attr, ""))
                if text in ("", DASH):
                    continue
                try:
                    values[i] = col.parse(text)
                except (UserError, ValueError):
                    continue  # an unreadable cell is named by the Scoring check above
            best = (max if col.best == "max" else min)(values.values()) if values else None
            should = {i for i, v in values.items() if v == best}
        elif col.attr == "confirmed_reported":
            should = set()
            for i, cells in enumerate(rows):
                parts = _plain(cells.get(col.attr, "")).split(" / ")
                if len(parts) == 2 and all(p.isdigit() for p in parts) and int(parts[1]) > 0 and parts[0] == parts[1]:
                    should.add(i)
        else:
            continue
        for i, cells in enumerate(rows):
            bolded = _is_bold(cells.get(col.attr, ""))
            if bolded and i not in should:
                problems.append(f"{_row_name(section, cells)}: {header} {_plain(cells[col.attr])!r} is bold but "
                                + ("not the column's best" if col.best else "not every finding was confirmed"))
            elif i in should and not bolded:
                problems.append(f"{_row_name(section, cells)}: {header} {_plain(cells.get(col.attr, ''))!r} is "
                                + ("the column's best but not bold" if col.best else "all confirmed but not bold"))
    return problems


def check_rows(text: str) -> tuple[int, list[str]]:
    """(rows checked, one message per disagreement: a Scoring, a rank, the order or a bold mark)."""
    problems, checked = [], 0
    for section, kind, rows in headline_tables(text):
        checked += len(rows)
        problems += check_table(section, kind, rows)
    return checked, problems


def check_page(path: Path) -> list[str]:
    """One message per row whose Scoring disagrees with its own cells; [] when all agree."""
    return check_rows(read_page(Path(path), missing_fix="render it with: llms-benchmark render"))[1]
