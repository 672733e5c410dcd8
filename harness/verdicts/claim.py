"""What a finding claims, read from its own words: the numbers it quotes as measured and the
direction it says its query reads against a healthy system.

A structured finding (findings.json) states its direction (`higher`, `lower`, `absent`,
`present`); a markdown row states one only through its words. There the quoted number
decides where it can (a query quoted as reading 0 claims an absence), then explicit
comparatives ("more than", "fewer", "far above"); plain negations ("never", "no") are not
read, since they say nothing of which way a query counts (a count of spans *without* a child
is high where the child is never recorded).
"""

from __future__ import annotations

import re

from harness.verdicts import cited as ci

# A number the finding's text quotes as a measurement: "12 spans", "40 % self", "→ 259",
# "40 GET /products/{id} calls" (up to three words between the number and its unit).
_UNIT = (r"(?:%|ms\b|s\b|(?:spans?|rows?|traces?|records?|lines|requests|points|samples|series|calls|orders|"
         r"errors|times|metrics|logs|children|distinct|values|refs|references|hits|attempts|retries|tokens|"
         r"fetches|queries|entries|messages|events|frames|bytes)\b)")
_MEASURED = re.compile(
    r"(?<![\w./{#-])(\d[\d,]{0,14}(?:\.\d{1,6})?)\s*((?:[^\s\d]{1,40}\s+){0,3}?)" + _UNIT, re.IGNORECASE)
_ARROWED = re.compile(r"(?:→|->|=>|\breturn(?:ed|s)\b|\bgave\b|\breads?\b)\s*(\d[\d,]{0,14}(?:\.\d{1,6})?)(?![\w.])")
# HTTP statuses and code constants are not measurements: "404", "409 errors", "instead of 404 or 409".
_STATUS_CONTEXT = re.compile(r"(?:http|status|code|instead of|rather than|not|or|and|/)\s*$", re.IGNORECASE)
_STATUS_AFTER = re.compile(r"^\s*(?:or|and|/|,)\s*\d{3}\b|^\s*(?:status|code|response|error\s+code)", re.IGNORECASE)

LOWER_WORDS = re.compile(r"\b(fewer|lower|less\b[^.;:]{0,40}?\bthan|below|too few|under-?counts?|drops? to|smaller)\b",
                         re.IGNORECASE)
HIGHER_WORDS = re.compile(r"\b(more\b[^.;:]{0,40}?\bthan|higher|above|too many|excess(ive)?|extra|over-?counts?|larger|"
                          r"far above|inflated|duplicated?|repeated(ly)?)\b", re.IGNORECASE)


_AFTER_STATUS = re.compile(r"^(?:for|on|in|when|twice|once|from|to|and|or|with|at|if|because|after|again|is|was|"
                           r"were|are|instead|rather|than|errors?|responses?|status|code)\b", re.IGNORECASE)


def _is_status(text: str, m: re.Match) -> bool:
    value = m.group(1).replace(",", "")
    if not (value.isdigit() and 100 <= int(value) <= 599):
        return False
    before, after = text[max(0, m.start() - 16):m.start()], text[m.end(1):m.end(1) + 24]
    if _STATUS_CONTEXT.search(before) or _STATUS_AFTER.search(after):
        return True
    # "404 twice in one trace", "500 for the product", "409 errors": a status; "400 GET calls": a count.
    return bool(_AFTER_STATUS.match(after.strip()))


def text_claims(text: str) -> list[float]:
    """The numbers a finding's own words quote as measured (a count with its unit, or after an
    arrow), never ids, HTTP statuses or code constants; the cited queries are taken out first."""
    words = ci.prose(text or "")[:ci.PROSE_CAP]
    out = []
    for pattern in (_MEASURED, _ARROWED):
        for m in pattern.finditer(words):
            if _is_status(words, m):
                continue
            try:
                out.append(float(m.group(1).replace(",", "")))
            except ValueError:
                continue
    return out


def direction_of(stated: str | None, claimed: float | None, words: str) -> str | None:
    """The direction a finding claims for one query: stated, or from its quoted number and its
    comparatives; None when it states none (a markdown row that quotes no number and compares nothing)."""
    if stated:
        return stated
    # The words' comparative first: "more children than products" quoted as reading 0 claims
    # more, and its 0 contradicts it; else a quoted 0 claims an absence.
    lower, higher = bool(LOWER_WORDS.search(words or "")), bool(HIGHER_WORDS.search(words or ""))
    if lower != higher:
        return "lower" if lower else "higher"
    if claimed == 0:
        return "absent"
    return None


def moved(direction: str | None, run: float, control: float) -> bool:
    """Whether the run's reading sits on the claimed side of the control's (a healthy system's)."""
    if direction is None:
        return run != control
    if direction in ("higher", "present"):
        return run > control
    if direction == "lower":
        return run < control
    if direction == "absent":
        return run == 0 and control > 0
    return False
