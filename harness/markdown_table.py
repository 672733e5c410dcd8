"""Markdown tables: the one writer and the one reader of the reports, pages and benches
(harness/fitness/host_checks.py apart: one standard-library file copied to and run on a serving
host, it writes its own rows).

Writing: `table(header, rows)` (or `row`/`rule` for a table built line by line). Every cell goes
through `cell`: its whitespace runs, newlines included, become one space (a newline would end
the row) and each `|` is written `\\|` (GFM's one escape for a pipe, honoured inside code spans
too). Other backslashes are left as they are: cells are markdown (`**bold**`, `` `code` ``,
links), and a backslash inside a code span is literal, so doubling it would show twice.

Reading: `tables(text)` finds the tables, their rows and the heading above each on
markdown-it-py's token stream (a table in a code fence or an HTML block is not a table). The
cells of a row are split from its source line by `split_row`, not taken from markdown-it's
cell tokens, for two measured reasons: markdown-it pads or cuts every row to the header's width
(a short row must be named as short; cells past the header must not vanish), and it splits on a
pipe inside backticks, which agents write unescaped in SQL (`a || b`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

_RULES = {"l": "---", "r": "---:", "c": ":---:"}


def one_line(value: object) -> str:
    """The text with each whitespace run, newlines included, as one space (a part of a cell)."""
    return " ".join(str(value).split())


def cell(value: object) -> str:
    """One cell's text as a table holds it: one line, every `|` escaped."""
    return one_line(value).replace("|", "\\|")


def row(cells: Iterable[object]) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def rule(width: int, align: str = "", spaced: bool = False) -> str:
    """The separator row: `align` has one letter a column (l, r, c; left when short)."""
    marks = [_RULES[align[i] if i < len(align) else "l"] for i in range(width)]
    return ("| " + " | ".join(marks) + " |") if spaced else ("|" + "|".join(marks) + "|")


def table(header: Sequence[object], rows: Iterable[Iterable[object]], align: str = "", spaced: bool = False) -> str:
    """The whole table, lines joined by newlines (no trailing newline)."""
    return "\n".join([row(header), rule(len(header), align, spaced), *(row(r) for r in rows)])


# --- reading --------------------------------------------------------------------------------

def split_row(line: str) -> list[str]:
    """A row's cells, stripped: split on each pipe not escaped (`\\|`) and not inside backticks;
    `\\|` read back as `|`."""
    cells, buf, in_code, prev = [], [], False, ""
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    for ch in body:
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code and prev != "\\":
            cells.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
        prev = ch
    cells.append("".join(buf).strip())
    return [c.replace("\\|", "|") for c in cells]


def is_rule(cells: Sequence[str]) -> bool:
    """A separator row (`|---|:--:|`)."""
    return all(set(c) <= set("-: ") for c in cells) and any("-" in c for c in cells)


@dataclass
class Table:
    heading: str  # the text of the nearest heading above ("" when none)
    level: int  # that heading's level (1 for `#`; 0 when none)
    rows: list[list[str]] = field(default_factory=list)  # the header first, the separator row left out
    lines: tuple[int, int] = (0, 0)  # the source lines it spans, [start, end)


@lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table")


def parse(text: str) -> list:
    """markdown-it-py's block tokens for `text` (CommonMark with GFM tables, HTML allowed)."""
    return _parser().parse(text)


def table_rows(lines: Sequence[str], start: int, end: int) -> list[list[str]]:
    """The rows (header first, separator left out) of the source lines [start, end)."""
    return [r for r in (split_row(x) for x in lines[start:end] if x.strip()) if not is_rule(r)]


def tables(text: str) -> list[Table]:
    """Every table in `text`, in document order, with the heading it sits under."""
    lines, found = text.splitlines(), []
    heading, level = "", 0
    tokens = parse(text)
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            heading = tokens[i + 1].content if i + 1 < len(tokens) else ""
            level = int(t.tag[1:])
        elif t.type == "table_open" and t.map:
            found.append(Table(heading, level, table_rows(lines, *t.map), (t.map[0], t.map[1])))
    return found
