"""The queries a finding cites, read from its Evidence cell: `obs ...` commands and SQL (`SELECT`,
`WITH`, DuckDB's `FROM`-first), in backticks or bare, each with the number the finding quotes
for it ("→ 12", "returned 0"); and the finding's prose, its words without those queries (what
its accused code and measured numbers are read from). The number a markdown finding quotes is
read from its text here; a record states it in a field (`read`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.telemetry import sqlread

PROSE_CAP = 8000  # characters of a finding's words read for code and numbers (cells are capped before)
_CODE_SPAN = re.compile(r"`([^`]+)`")
_BARE_OBS = re.compile(r"(?<![\w/-])obs\s+(?:traces|metrics|logs|profiles|sql)\b")
_SQL_HEAD = re.compile(r"^\s*\(?\s*(select|with|from)\b", re.IGNORECASE)


def is_sql(text: str) -> bool:
    """SQL as people write it: SELECT, WITH, DuckDB's FROM-first, headed by `--`/`/* */` comments."""
    return bool(_SQL_HEAD.match(sqlread.strip_leading_comments(text or "")))
_CLAIM_WORD = re.compile(r"(→|->|=>|\breturn(?:ed|s)?\b|\bgives?\b|\bgave\b|\bshows?\b|\bshowed\b|\byields?\b|=|:)")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?![\w.]*\w)")
_STOP_CHARS = ("→", "->", "=>", ";")


@dataclass
class Cited:
    text: str  # the command or SQL as the finding cites it
    claimed: float | None  # the number the finding quotes for it


def _cut(text: str) -> str:
    """A bare command ends at an arrow, a `;` or a pipe outside quotes."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == "\\" and quote == '"':
                continue
            if ch == quote and (i == 0 or text[i - 1] != "\\"):
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "|\n" or any(text.startswith(s, i) for s in _STOP_CHARS):
            return text[:i]
        elif text.startswith((" returned", " returns", " gives", " shows", " → "), i):
            return text[:i]
    return text


def _claim(after: str) -> float | None:
    """The number a finding quotes for a query: the first after a claim word, else the first."""
    after = after.split("`", 1)[0]
    word = _CLAIM_WORD.search(after)
    for text in ([after[word.end():]] if word else []) + [after]:
        m = _NUMBER.search(text)
        if m:
            return float(m.group(0))
    return None


def read_claim(read: str) -> float | None:
    """The number a recorded reading states ("72 rows", "about 12"): the first number in it."""
    return _claim(read)


def cited_queries(evidence: str) -> list[Cited]:
    """The `obs` commands and SQL an Evidence cell cites, in order, each with its quoted number."""
    evidence = evidence or ""
    found: list[tuple[int, int, str]] = []  # (start, end, text)
    for m in _CODE_SPAN.finditer(evidence):
        body = m.group(1).strip()
        if body.startswith("obs ") or is_sql(body):
            found.append((m.start(), m.end(), _cut(body).strip() if body.startswith("obs ") else body))
    covered = [(s, e) for s, e, _ in found]
    for m in _BARE_OBS.finditer(evidence):
        if any(s <= m.start() < e for s, e in covered):
            continue
        text = _cut(evidence[m.start():]).strip()
        found.append((m.start(), m.start() + len(text), text))
    found.sort()
    out = []
    for i, (_, end, text) in enumerate(found):
        nxt = found[i + 1][0] if i + 1 < len(found) else len(evidence)
        out.append(Cited(text=text, claimed=_claim(evidence[end:nxt])))
    return out


def prose(text: str) -> str:
    """A finding's words without the queries it cites: SQL's `now()`, `count(*)` or table names
    accuse no code."""
    text = (text or "")[:PROSE_CAP]
    for c in cited_queries(text):
        text = text.replace(c.text, " ")
    out = []
    for m in re.split(r"(`[^`]*`)", text):
        body = m[1:-1].strip() if m.startswith("`") and m.endswith("`") and len(m) > 1 else None
        if body is not None and (is_sql(body) or body.startswith("obs ")
                                 or re.search(r"\b(from|where|select)\b", body, re.IGNORECASE)):
            out.append(" ")
        else:
            out.append(m)
    return "".join(out)
