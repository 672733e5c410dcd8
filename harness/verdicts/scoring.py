"""The results tables' Scoring column: pure functions, recomputable from a row's cells.

Each axis is scored 0–100 against fixed bounds and clamped, so a row's score depends
only on its own cells, taken **as written** (the rounded `$/confirmed`,
`seconds/confirmed`, `Total`, `Accuracy` and `Confirmed` cells):

| axis                     | remote | local | points                         |
| ------------------------ | ------ | ----- | ------------------------------ |
| $/confirmed `c` USD      | 0.30   | —     | 100·ln(1.00/c)/ln(100)         |
| seconds/confirmed `s`    | 0.30   | 3/7   | 100·ln(600/s)/ln(20)           |
| Total `T` seconds        | 0.20   | 2/7   | 100·ln(3600/T)/ln(12)          |
| Accuracy `a` percent     | 0.10   | 1/7   | 100·(a−50)/50                  |
| Confirmed `n`            | 0.10   | 1/7   | 100·n/20                       |

The weighted sum is rounded to one decimal. A zero in a log axis (`$0.000` once
rounded, a zero-second total) is past the best bound: 100.

Zero confirmed scores 0.0. The per-finding axes ($/confirmed, seconds/confirmed) are
undefined with no confirmed finding (their cells read `—`), and the other axes alone
would reward a run for reporting nothing quickly: an empty report of a 5-minute run
would score 28.6 on Total, above real rows. Such a row keeps its cells (and its axes,
for the record) but scores 0.0, so it ranks below every row with a confirmed finding.
Ties: remote → the cheaper run, local → the shorter run (`rank_key`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from harness.errors import UserError

# Fixed bounds: (best, worst). Changing one re-scores every row.
USD_PER_CONFIRMED_BOUNDS = (0.01, 1.00)
SECONDS_PER_CONFIRMED_BOUNDS = (30.0, 600.0)
TOTAL_BOUNDS = (5 * 60.0, 60 * 60.0)
ACCURACY_BOUNDS = (50.0, 100.0)
CONFIRMED_FULL = 20

REMOTE_WEIGHTS: dict[str, float] = {
    "usd_per_confirmed": 0.30,
    "seconds_per_confirmed": 0.30,
    "total": 0.20,
    "accuracy": 0.10,
    "confirmed": 0.10,
}
LOCAL_WEIGHTS: dict[str, float] = {
    "seconds_per_confirmed": 3 / 7,
    "total": 2 / 7,
    "accuracy": 1 / 7,
    "confirmed": 1 / 7,
}

_EMPTY = {"", "—", "–", "-", "n/a"}
_TOTAL_RE = re.compile(r"^(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m)?(?:(?P<s>\d+(?:\.\d+)?)s)?$")
_NUMBER_RE = re.compile(r"^\d+(?:\.\d+)?$")


@dataclass(frozen=True)
class Score:
    """One row's Scoring: `score` (one decimal) and each axis's points (0–100, unrounded)."""

    kind: str  # "remote" or "local"
    score: float
    axes: dict[str, float]
    weights: dict[str, float] = field(repr=False)

    def to_dict(self) -> dict:
        return {"score": self.score, "axes": {k: round(v, 2) for k, v in self.axes.items()}}


# --- cells -----------------------------------------------------------------------------

def _clean(cell: object) -> str:
    """A cell as text, without the table's bold markers and surrounding spaces."""
    return str(cell).strip().replace("**", "").strip()


def _bad(field_name: str, value: object, expected: str) -> UserError:
    return UserError(f"cannot read {value!r}", field=field_name, fix=f"write it as {expected}")


def parse_total(cell: str | int | float) -> float:
    """`150m02s`, `6m29s`, `56s`, `1h07m37s` or plain seconds (`9002`) → seconds."""
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        if cell < 0 or not math.isfinite(cell):
            raise _bad("total", cell, "NmSSs (150m02s) or a number of seconds (9002)")
        return float(cell)
    text = _clean(cell)
    match = _TOTAL_RE.match(text)
    if _NUMBER_RE.match(text):
        seconds = float(text)
    elif not text or match is None or not any(match.groupdict().values()):
        raise _bad("total", cell, "NmSSs (150m02s) or a number of seconds (9002)")
    else:
        h, m, s = (float(match[g] or 0) for g in ("h", "m", "s"))
        seconds = h * 3600 + m * 60 + s
    if not math.isfinite(seconds):  # digits past what a float holds
        raise _bad("total", cell, "NmSSs (150m02s) or a number of seconds (9002)")
    return seconds


def format_total(seconds: float) -> str:
    """Seconds → `NmSSs`, whole seconds, minutes not rolled into hours (9002 → `150m02s`)."""
    if seconds < 0 or not math.isfinite(seconds):
        raise _bad("total", seconds, "a non-negative number of seconds")
    whole = int(Decimal(str(seconds)).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    return f"{whole // 60}m{whole % 60:02d}s"


def parse_seconds(cell: str | int | float, field_name: str = "seconds_per_confirmed") -> float:
    """`56s` / `1286s` / `56` → 56.0."""
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        value = float(cell)
    else:
        text = _clean(cell).removesuffix("s").strip()
        if not _NUMBER_RE.match(text):
            raise _bad(field_name, cell, "seconds, e.g. 56s or 56")
        value = float(text)
    if value < 0 or not math.isfinite(value):
        raise _bad(field_name, cell, "a non-negative number of seconds")
    return value


def parse_usd(cell: str | int | float, field_name: str = "usd_per_confirmed") -> float:
    """`$0.016` / `0.016` → 0.016."""
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        value = float(cell)
    else:
        text = _clean(cell).removeprefix("$").strip()
        if not _NUMBER_RE.match(text):
            raise _bad(field_name, cell, "dollars, e.g. $0.016 or 0.016")
        value = float(text)
    if value < 0 or not math.isfinite(value):
        raise _bad(field_name, cell, "a non-negative amount of dollars")
    return value


def parse_percent(cell: str | int | float, field_name: str = "accuracy") -> float:
    """`88%` / `88` → 88.0 (0–100)."""
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        value = float(cell)
    else:
        text = _clean(cell).removesuffix("%").strip()
        if not _NUMBER_RE.match(text):
            raise _bad(field_name, cell, "a whole percent, e.g. 88% or 88")
        value = float(text)
    if not 0 <= value <= 100:
        raise _bad(field_name, cell, "a percent between 0 and 100")
    return value


def parse_confirmed(cell: str | int) -> int:
    """`7`, or the `Confirmed / reported` cell `7 / 8` (its numerator) → 7."""
    if isinstance(cell, int) and not isinstance(cell, bool):
        value = cell
    else:
        text = _clean(cell).split("/")[0].strip()
        try:  # ASCII digits only ('²' is a digit to isdigit, not to int); int() refuses 4300+ digits
            value = int(text) if text.isascii() and text.isdigit() else None
        except ValueError:
            value = None
        if value is None:
            raise _bad("confirmed", cell, "a whole number of confirmed findings, e.g. 7 or 7 / 8")
    if value < 0:
        raise _bad("confirmed", cell, "a non-negative whole number")
    return value


# --- axes ------------------------------------------------------------------------------

def clamp(points: float) -> float:
    return max(0.0, min(100.0, points))


def _log_axis(value: float, best: float, worst: float) -> float:
    """100 at `best`, 0 at `worst`, log-linear between, clamped; 0 is past best → 100."""
    if value <= 0:
        return 100.0
    return clamp(100 * math.log(worst / value) / math.log(worst / best))


def usd_per_confirmed_points(c: float) -> float:
    return _log_axis(c, *USD_PER_CONFIRMED_BOUNDS)


def seconds_per_confirmed_points(s: float) -> float:
    return _log_axis(s, *SECONDS_PER_CONFIRMED_BOUNDS)


def total_points(t: float) -> float:
    return _log_axis(t, *TOTAL_BOUNDS)


def accuracy_points(a: float) -> float:
    low, high = ACCURACY_BOUNDS
    return clamp(100 * (a - low) / (high - low))


def confirmed_points(n: int) -> float:
    return clamp(100 * n / CONFIRMED_FULL)


def round1(x: float) -> float:
    """One decimal, halves up (Python's round() would round a float 79.25 to even)."""
    return float(Decimal(repr(x)).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))


def _weighted(kind: str, axes: dict[str, float], weights: dict[str, float], confirmed: int) -> Score:
    """The weighted sum; 0.0 with no confirmed finding (the per-finding axes are undefined)."""
    total = sum(weights[k] * axes[k] for k in weights) if confirmed else 0.0
    return Score(kind=kind, score=round1(total), axes=axes, weights=dict(weights))


def _per_finding(n: int, cell: object, field_name: str, parse, points) -> float:
    """A per-finding axis: 0 with no confirmed finding (its cell then is `—`), else scored."""
    if n == 0:
        return 0.0
    if cell is None or (isinstance(cell, str) and _clean(cell) in _EMPTY):
        raise UserError("missing, and the row has confirmed findings", field=field_name,
                        fix="give the row's cell as written")
    return points(parse(cell, field_name))


def score_local(seconds_per_confirmed: str | float | None, total: str | float,
                accuracy: str | float, confirmed: str | int) -> Score:
    """A local-serving row: seconds/confirmed 3/7, Total 2/7, Accuracy 1/7, Confirmed 1/7."""
    n = parse_confirmed(confirmed)
    t, a = total_points(parse_total(total)), accuracy_points(parse_percent(accuracy))
    axes = {
        "seconds_per_confirmed": _per_finding(n, seconds_per_confirmed, "seconds_per_confirmed",
                                              parse_seconds, seconds_per_confirmed_points),
        "total": t,
        "accuracy": a,
        "confirmed": confirmed_points(n),
    }
    return _weighted("local", axes, LOCAL_WEIGHTS, n)


def score_remote(usd_per_confirmed: str | float | None, seconds_per_confirmed: str | float | None,
                 total: str | float, accuracy: str | float, confirmed: str | int) -> Score:
    """A remote-serving row: $/confirmed 0.30, seconds/confirmed 0.30, Total 0.20,
    Accuracy 0.10, Confirmed 0.10."""
    n = parse_confirmed(confirmed)
    t, a = total_points(parse_total(total)), accuracy_points(parse_percent(accuracy))
    axes = {
        "usd_per_confirmed": _per_finding(n, usd_per_confirmed, "usd_per_confirmed",
                                          parse_usd, usd_per_confirmed_points),
        "seconds_per_confirmed": _per_finding(n, seconds_per_confirmed, "seconds_per_confirmed",
                                              parse_seconds, seconds_per_confirmed_points),
        "total": t,
        "accuracy": a,
        "confirmed": confirmed_points(n),
    }
    return _weighted("remote", axes, REMOTE_WEIGHTS, n)


def rank_key(score: Score | float, *, kind: str | None = None, cost: str | float | None = None,
             total: str | float | None = None) -> tuple[float, float]:
    """Sort key (ascending) for a table's rows: highest Scoring first; a tie goes to the
    cheaper run (remote, by its `Cost` cell) or the shorter run (local, by its `Total`)."""
    kind = kind or (score.kind if isinstance(score, Score) else None)
    value = score.score if isinstance(score, Score) else float(score)
    if kind == "remote":
        if cost is None:
            raise UserError("a remote row's tie-break needs its Cost", field="cost", fix="pass cost=")
        return (-value, parse_usd(cost, "cost"))
    if kind == "local":
        if total is None:
            raise UserError("a local row's tie-break needs its Total", field="total", fix="pass total=")
        return (-value, parse_total(total))
    raise UserError(f"unknown table {kind!r}", field="kind", fix="use 'remote' or 'local'")
