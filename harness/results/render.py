"""Render the results page: the tables between `<!-- results:begin -->` and
`<!-- results:end -->`, from run records + rulings (local) and the remote rows file.

Everything outside the markers is hand-written prose and is kept byte for byte. All
rows are built (and every remote cell checked) before anything is written; the page is
written atomically (temp file + os.replace) and only when a byte changes, so a second
render is a no-op.
"""

from __future__ import annotations

import re
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from harness import markdown_table
from harness.atomic import file_lock, write_atomic
from harness.errors import UserError
from harness.records.paths import ProjectPaths
from harness.results.columns import DASH, HAND_LOCAL_CELLS, Column, bold, columns, headers, preset_link
from harness.results.row import Row
from harness.results.rows import (
    NonConclusive, RecordsLeftOut, load_local_rows, load_non_conclusive, load_oddyssey_local_rows, load_remote_rows,
)
from harness.verdicts import scoring
from harness.verdicts.scoring import rank_key
from harness.vot.loader import is_file

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"
PAGE = ProjectPaths(Path(".")).page  # relative to the project root
TEMPLATES = Path(__file__).parent / "templates"

# Derived from the column declarations (harness/results/columns.py): never listed here.
REMOTE_HEADERS = headers("remote", "headline")
REMOTE_DETAIL_HEADERS = headers("remote", "detail")
LOCAL_HEADERS = headers("local", "headline")
LOCAL_DETAIL_HEADERS = headers("local", "detail")
HAND_LOCAL_HEADERS = headers("local", "headline", hand=True)
# The hand-kept rows' detail: only the columns their file can write (no run record behind them).
HAND_LOCAL_DETAIL_COLUMNS = [c for c in columns("local", "detail") if c in HAND_LOCAL_CELLS.values()]
HAND_LOCAL_DETAIL_HEADERS = [c.header_for("local", hand=True) for c in HAND_LOCAL_DETAIL_COLUMNS]
NON_CONCLUSIVE_HEADERS = ["Preset", "Environment", "Date", "Reason"]


def _best(rows: list[Row], col: Column) -> set[int]:
    """Indexes of the rows that hold the column's best value (ties all bold); `—` never wins."""
    cells = {i: col.text(r, i + 1) for i, r in enumerate(rows)}
    values = {i: col.parse(cell) for i, cell in cells.items() if cell not in (DASH, None)}
    if not values:
        return set()
    best = max(values.values()) if col.best == "max" else min(values.values())
    return {i for i, v in values.items() if v == best}


def sort_rows(rows: list[Row]) -> list[Row]:
    """Highest Scoring first; a tie goes to the cheaper run (remote) or the shorter run (local)."""
    return sorted(rows, key=lambda r: rank_key(r.score, cost=r.cost, total=r.total))


def table_cells(rows: list[Row], hand: bool = False) -> tuple[list[list[str]], list[list[str]]]:
    """(headline cells, detail cells) per row, in rank order, bold applied. `hand`: the hand-kept
    local rows oddyssey measured (their detail has no cells only a run record gives)."""
    rows = sort_rows(rows)
    kind = "remote" if rows and rows[0].kind == "remote" else "local"
    head_cols, detail_cols = columns(kind, "headline"), columns(kind, "detail", rows)
    if hand:
        detail_cols = HAND_LOCAL_DETAIL_COLUMNS
    bolded = {c.attr: _best(rows, c) for c in head_cols if c.best}

    def cell(col: Column, i: int, row: Row) -> str:
        text = col.text(row, i + 1)
        return bold(text) if i in bolded.get(col.attr, ()) else text

    headline = [[cell(c, i, r) for c in head_cols] for i, r in enumerate(rows)]
    detail = [[c.text(r, i + 1) for c in detail_cols] for i, r in enumerate(rows)]
    return headline, detail


def _non_conclusive_cells(entries: list[NonConclusive], link: bool = True) -> list[list[str]]:
    """`link`: the preset is ours (a file under .vot/presets); oddyssey's are named only."""
    return [[preset_link(e.preset) if link else f"`{e.preset}`", f"`{e.environment}`", e.date, e.reason]
            for e in entries]


def scoring_terms() -> dict:
    """The Scoring's bounds and weights as the page states them, read from harness.verdicts.scoring
    (so the page can never state other bounds than the ones that scored it)."""
    def num(x: float) -> str:
        return f"{x:g}"
    (usd_best, usd_worst), (spc_best, spc_worst) = scoring.USD_PER_CONFIRMED_BOUNDS, scoring.SECONDS_PER_CONFIRMED_BOUNDS
    (t_best, t_worst), (a_worst, a_best) = scoring.TOTAL_BOUNDS, scoring.ACCURACY_BOUNDS
    rw, lw = scoring.REMOTE_WEIGHTS, scoring.LOCAL_WEIGHTS

    def frac(w: float | None) -> str:
        if w is None:
            return "—"
        sevenths = w * 7
        return f"{round(sevenths)}/7" if abs(sevenths - round(sevenths)) < 1e-9 else num(w)
    sevenths = {k: round(w * 7) for k, w in lw.items()}
    terms = [f"{sevenths['seconds_per_confirmed']}·points(s)", f"{sevenths['total']}·points(T)",
             f"{sevenths['accuracy']}·points(a)", f"{sevenths['confirmed']}·points(n)"]
    return {
        "local_formula": f"({' + '.join(terms)}) / 7",
        "axes": [
            ["$/confirmed `c` (USD)", num(rw["usd_per_confirmed"]), "—",
             f"100·ln({num(usd_worst)}/c)/ln({num(usd_worst / usd_best)})", f"${num(usd_best)} → 100, ≥ ${num(usd_worst)} → 0"],
            ["seconds/confirmed `s`", num(rw["seconds_per_confirmed"]), frac(lw["seconds_per_confirmed"]),
             f"100·ln({num(spc_worst)}/s)/ln({num(spc_worst / spc_best)})", f"{num(spc_best)} s → 100, ≥ {num(spc_worst)} s → 0"],
            ["Total `T` (seconds)", num(rw["total"]), frac(lw["total"]),
             f"100·ln({num(t_worst)}/T)/ln({num(t_worst / t_best)})",
             f"{num(t_best / 60)} min → 100, ≥ {num(t_worst / 60)} min → 0"],
            ["Accuracy `a` (percent)", num(rw["accuracy"]), frac(lw["accuracy"]),
             f"100·(a−{num(a_worst)})/{num(a_best - a_worst)}", f"≤ {num(a_worst)} % → 0, {num(a_best)} % → 100"],
            ["Confirmed `n`", num(rw["confirmed"]), frac(lw["confirmed"]), f"100·n/{scoring.CONFIRMED_FULL}",
             f"≥ {scoring.CONFIRMED_FULL} → 100"],
        ],
    }


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), undefined=StrictUndefined, autoescape=False,
                      keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    env.filters["mdrow"] = markdown_table.row
    env.filters["mdrule"] = lambda cells: markdown_table.rule(len(cells), spaced=True)
    return env


def render_results(root: Path, include_scripted: bool = False, left_out: list[UserError] | None = None) -> str:
    """The text that goes between the markers (raises before anything is written). `left_out`: a
    list that collects the runs whose record or rulings cannot be read (None: the first is raised)."""
    root = Path(root)
    remote_head, remote_detail = table_cells(load_remote_rows(root))
    local_rows = load_local_rows(root, include_scripted, left_out)
    local_head, local_detail = table_cells(local_rows)
    local_detail_headers = headers("local", "detail", rows=local_rows)  # with an optional column a row has
    hand_head, hand_detail = table_cells(load_oddyssey_local_rows(root), hand=True)
    paths = ProjectPaths(root)
    body = _environment().get_template("results.md.j2").render(
        hand_local_headers=HAND_LOCAL_HEADERS, hand_local_detail_headers=HAND_LOCAL_DETAIL_HEADERS,
        hand_local_rows=hand_head, hand_local_detail_rows=hand_detail,
        oddyssey_non_conclusive_rows=_non_conclusive_cells(
            load_non_conclusive(root, paths.oddyssey_non_conclusive), link=False),
        scoring=scoring_terms(),
        remote_headers=REMOTE_HEADERS, remote_detail_headers=REMOTE_DETAIL_HEADERS,
        remote_rows=remote_head, remote_detail_rows=remote_detail,
        local_headers=LOCAL_HEADERS, local_detail_headers=local_detail_headers,
        local_rows=local_head, local_detail_rows=local_detail,
        non_conclusive_headers=NON_CONCLUSIVE_HEADERS,
        non_conclusive_rows=_non_conclusive_cells(load_non_conclusive(root)),
    )
    return re.sub(r"\n{3,}", "\n\n", body).strip("\n")  # one blank line between blocks


def splice(text: str, body: str, page: Path) -> str:
    """Replace what lies between the markers; every byte outside them is kept."""
    if text.count(BEGIN) != 1 or text.count(END) != 1:
        raise UserError(f"the page needs exactly one {BEGIN} and one {END} line", file=page,
                        fix="put the two marker lines where the results tables go")
    start = text.index(BEGIN) + len(BEGIN)
    stop = text.index(END)
    if stop < start:
        raise UserError(f"{END} comes before {BEGIN}", file=page, fix="put the begin marker first")
    return text[:start] + "\n" + body + "\n" + text[stop:]


def read_page(page: Path, missing_fix: str = f"write the page with its prose and the markers {BEGIN} / {END}") -> str:
    """The page's text, byte for byte; missing, a folder, unreadable or not UTF-8 is one UserError."""
    try:
        with open(page, encoding="utf-8", newline="") as fh:
            return fh.read()
    except FileNotFoundError:
        raise UserError("no results page", file=page, fix=missing_fix) from None
    except IsADirectoryError:
        raise UserError("is a folder, not the results page", file=page,
                        fix="pass the page's file with --page") from None
    except UnicodeDecodeError:
        raise UserError("is not UTF-8 text", file=page, fix="save it as UTF-8") from None
    except OSError as exc:
        raise UserError(f"cannot be read: {exc.strerror or exc}", file=page) from None


def render_page(root: Path, page: Path | None = None, include_scripted: bool = False) -> bool:
    """Render the results into the page between its markers; True when a byte changed.
    The page is locked while it is read and rewritten, so two launches finishing at once
    never interleave (the second renders after the first, from both records).

    A run whose record (or rulings) cannot be read never blocks the page: the rest is rendered and
    written, then RecordsLeftOut names each one left out (a hand-kept file's error still blocks:
    it is one file, and its rows would all be lost)."""
    root = Path(root)
    page = Path(page) if page is not None else root / PAGE
    if include_scripted and page.resolve() == (root / PAGE).resolve():
        raise UserError("scripted replay rows never go on the published results page", file=page,
                        field="--include-scripted", fix="render them to a page of their own with --page PATH")
    if not is_file(page):
        raise UserError("no results page", file=page,
                        fix=f"write the page with its prose and the two markers {BEGIN} / {END}")
    left_out: list[UserError] = []
    with file_lock(page):
        text = read_page(page)
        new = splice(text, render_results(root, include_scripted, left_out), page)
        changed = new != text
        if changed:
            write_atomic(page, new)
    if left_out:
        raise RecordsLeftOut(left_out, changed)
    return changed
