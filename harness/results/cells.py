"""A local row's cells written from a run record's figures: tokens (`182k`, `5.0M`), durations,
the median turn, output beside reasoning, how the run ended, the GPU's price. Rounded half up,
as a person reads them."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from harness.records.record import RunRecord
from harness.results.row import DASH
from harness.verdicts.scoring import format_total


def half_up(value: float, places: str = "1") -> Decimal:
    return Decimal(repr(value)).quantize(Decimal(places), rounding=ROUND_HALF_UP)


def format_tokens(n: int | None) -> str:
    """5_012_345 → `5.0M`, 182_400 → `182k`, 0 or absent → `—`."""
    if not n:
        return DASH
    if n < 1000:
        return str(n)
    k = int(half_up(n / 1000))
    if k < 1000:
        return f"{k}k"
    return f"{half_up(n / 1_000_000, '0.1')}M"


def format_duration(seconds: float | None) -> str:
    return DASH if seconds is None else format_total(seconds)


def format_median_turn(seconds: float | None) -> str:
    return DASH if seconds is None else f"{half_up(seconds, '0.1')}s"


def format_output(tokens) -> str:
    """Output and reasoning apart: `43k + 139k` (the record's output counts both)."""
    if tokens is None or not tokens.output:
        return DASH
    reasoning = tokens.reasoning or 0
    return f"{format_tokens(tokens.output - reasoning)} + {format_tokens(reasoning) if reasoning else '0'}"


def ended_cell(record: RunRecord) -> str:
    run = record.run
    if run is not None and run.stopped_after_report:
        return f"stopped after its report ({run.stopped_after_report})"
    return "on its own"


def gpu_price_cell(record: RunRecord) -> str:
    s = record.serving
    if s is None or s.gpu_hourly_usd is None:
        return DASH
    return f"${s.gpu_hourly_usd:.2f}" + (f" ({' '.join(s.gpu_price_source.replace('|', '/').split())})" if s.gpu_price_source else "")
