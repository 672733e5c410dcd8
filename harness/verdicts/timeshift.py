"""A cited query's time filters, mapped onto the store it is re-run on.

An agent filters on `now() - INTERVAL 10 MINUTE` or on the absolute times it saw (epoch
nanoseconds, ISO strings). Re-run later, or on a control store driven days before, such a
filter reads nothing, and "nothing" then differs from every control. So each store gets the
query with its own clock: `now()` (and `current_timestamp`, `get_current_timestamp()`,
`transaction_timestamp()`) becomes the store's last recorded instant, and every absolute time
in the text moves by the distance between the run's first record and the store's.

The text is rewritten token by token with DuckDB's own tokenizer (`duckdb.tokenize`), never a
regex over SQL: a `now()` inside a string or a comment is not touched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_NOW_CALLS = {"now", "get_current_timestamp", "transaction_timestamp"}
_NOW_WORDS = {"current_timestamp", "localtimestamp"}
# Epoch literals of 2020-2035 in each unit a query may use: ns per unit -> the range it reads as a time.
_EPOCH = {1: (1.57e18, 2.06e18), 1_000: (1.57e15, 2.06e15), 1_000_000: (1.57e12, 2.06e12),
          1_000_000_000: (1.57e9, 2.06e9)}
_ISO = re.compile(r"^(20[23]\d-\d\d-\d\d)([ T])(\d\d:\d\d(?::\d\d(?:\.\d+)?)?)(Z|[+-]\d\d:?\d\d)?$")


@dataclass(frozen=True)
class Clock:
    """Where a store's records lie: its first and last instant (ns since the epoch)."""

    start_ns: int
    end_ns: int


def store_clock(con) -> Clock | None:
    try:
        row = con.execute("SELECT min(start_ns), max(end_ns) FROM spans").fetchone()
    except Exception:  # noqa: BLE001 - a store without spans has no clock; its queries run unmapped
        return None
    if not row or row[0] is None or row[1] is None:
        return None
    return Clock(int(row[0]), int(row[1]))


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S.%f+00")


def mapped(sql: str, run: Clock, store: Clock) -> str:
    """`sql` with its clock moved from the run's onto `store`'s (unchanged where it has none)."""
    import duckdb

    try:
        tokens = duckdb.tokenize(sql)
    except Exception:  # noqa: BLE001 - what does not tokenize is left to the parser to refuse
        return sql
    shift = store.start_ns - run.start_ns
    out, last = [], 0
    bounds = [(pos, tokens[i + 1][0] if i + 1 < len(tokens) else len(sql), kind) for i, (pos, kind) in enumerate(tokens)]
    i = 0
    while i < len(bounds):
        pos, end, kind = bounds[i]
        word = sql[pos:end].rstrip()
        name = kind.name if hasattr(kind, "name") else str(kind)
        replacement = None
        low = word.lower()
        if name in ("identifier", "keyword") and low in _NOW_CALLS | _NOW_WORDS:
            # now() / get_current_timestamp(): the call's parentheses go with it.
            stop = pos + len(word)
            if i + 2 < len(bounds) and sql[bounds[i + 1][0]:bounds[i + 1][1]].strip() == "(" \
                    and sql[bounds[i + 2][0]:bounds[i + 2][1]].strip().startswith(")"):
                stop = bounds[i + 2][0] + 1
                i += 2
            elif low in _NOW_CALLS:
                stop = None  # a column or alias named `now`: not the clock
            if stop is not None:
                out.append(sql[last:pos] + f"TIMESTAMPTZ '{_iso(store.end_ns)}'")
                last = stop
        elif name == "numeric_const":
            replacement = _shift_number(word, shift)
        elif name == "string_const":
            replacement = _shift_iso(word, shift)
        if replacement is not None:
            out.append(sql[last:pos] + replacement)
            last = pos + len(word)
        i += 1
    out.append(sql[last:])
    return "".join(out)


def _shift_number(word: str, shift_ns: int) -> str | None:
    try:
        value = float(word)
    except ValueError:
        return None
    for unit_ns, (low, high) in _EPOCH.items():
        if low <= value <= high:
            return str(int(value + shift_ns / unit_ns))
    return None


def _shift_iso(word: str, shift_ns: int) -> str | None:
    if len(word) < 3 or word[0] != "'" or word[-1] != "'":
        return None
    m = _ISO.match(word[1:-1])
    if not m:
        return None
    try:
        when = datetime.fromisoformat(f"{m.group(1)}T{m.group(3)}" + (m.group(4) or "").replace("Z", "+00:00"))
    except ValueError:
        return None
    moved = when + timedelta(microseconds=shift_ns // 1000)
    return "'" + moved.isoformat(sep=m.group(2)) + "'"
