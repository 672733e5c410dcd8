"""The local detail table's serving columns, each declared once: its header and how its
cell is read from the run record (and the row's confirmed count, for $/confirmed).

What the serving did while the agent worked (the record's `serving` section) and what the
GPU cost; none of it enters Scoring. A record without the figure shows `—`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.records.record import RunRecord
from harness.records.serving import ServingFigures

DASH = "—"


@dataclass(frozen=True)
class Column:
    header: str
    cell: Callable[[ServingFigures, int], str]  # (serving section, confirmed findings) -> cell


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{round(value * 100)}%"


def _tps(value: float | None) -> str:
    return DASH if value is None else f"{value:.0f}"


def _decode(s: ServingFigures, _: int) -> str:
    if s.decode_tps_p50_context is None:
        return DASH
    return f"{_tps(s.decode_tps_p50_context)} / {_tps(s.decode_tps_p90_context)} tok/s"


def _usd_per_confirmed(s: ServingFigures, confirmed: int) -> str:
    return DASH if s.gpu_cost_usd is None or not confirmed else f"${s.gpu_cost_usd / confirmed:.3f}"


SERVING_COLUMNS: tuple[Column, ...] = (
    Column("Prefix-cache hit", lambda s, _: _pct(s.prefix_cache_hit)),
    Column("Decode at p50 / p90 context", _decode),
    Column("KV peak", lambda s, _: _pct(s.kv_peak)),
    Column("Preemptions", lambda s, _: DASH if s.preemptions is None else str(s.preemptions)),
    Column("Queue p95", lambda s, _: DASH if s.queue_wait_p95_s is None else f"{s.queue_wait_p95_s:.2f}s"),
    Column("Tool calls leaked / malformed", lambda s, _: f"{s.tool_calls.leaked} / {s.tool_calls.malformed}"),
    Column("GPU cost", lambda s, _: DASH if s.gpu_cost_usd is None else f"${s.gpu_cost_usd:.2f}"),
    Column("GPU $/confirmed", _usd_per_confirmed),
)
SERVING_HEADERS = [c.header for c in SERVING_COLUMNS]


def serving_cells(record: RunRecord, confirmed: int) -> list[str]:
    if record.serving is None:
        return [DASH] * len(SERVING_COLUMNS)
    return [c.cell(record.serving, confirmed) for c in SERVING_COLUMNS]
