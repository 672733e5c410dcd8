"""One load level's figures, declared once: the fields in order are summary.json's `levels`
entries; those not marked `csv=False` are summary.csv's columns; those with a `table`
header are the `load` command's table, each with its format."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Number = int | float  # as measured: a count stays an int, a figure a float (the CSV writes them so)


def col(*, csv: bool = True, table: str | None = None, fmt: str | Callable[[dict], str] | None = None) -> Any:
    """A field: in the CSV or not; its table header and format (a format spec for the value,
    or a function of the whole row) when the `load` table shows it."""
    return Field(json_schema_extra={"csv": csv, "table": table, "fmt": fmt})


class LevelRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    shape: str = col(table="shape", fmt=lambda r: r["shape"])
    concurrency: int = col(table="c", fmt=lambda r: str(r["concurrency"]))
    requests: int = col()
    succeeded: int = col(table="ok", fmt=lambda r: f"{r['succeeded']}/{r['requests']}")
    failed: int = col()
    input_tokens_mean: Number | None = col(table="in tok", fmt=",.0f")
    output_tokens_mean: Number | None = col()
    wall_time_s: Number | None = col()
    request_throughput_rps: Number | None = col()
    output_throughput_tok_s: Number | None = col(table="out tok/s", fmt=",.1f")
    total_throughput_tok_s: Number | None = col()
    ttft_p50_s: Number | None = col(table="TTFT p50", fmt=".3f")
    ttft_p95_s: Number | None = col()
    ttft_p99_s: Number | None = col(table="TTFT p99", fmt=".3f")
    e2e_p50_s: Number | None = col(table="E2E p50", fmt=".3f")
    e2e_p95_s: Number | None = col()
    tpot_mean_ms: Number | None = col()
    itl_p50_ms: Number | None = col(table="ITL p50 ms", fmt=".2f")
    itl_p95_ms: Number | None = col()
    itl_p99_ms: Number | None = col()
    preemptions: Number | None = col(table="preempt", fmt="g")
    kv_cache_peak_percent: Number | None = col(table="KV peak %", fmt=".1f")
    running_peak: Number | None = col()
    waiting_peak: Number | None = col()
    # summary.json only: what explains the figures
    errors: dict[str, int] = col(csv=False)
    target_input_tokens: int = col(csv=False)
    itl_samples: int = col(csv=False)
    usage_reported: int = col(csv=False)
    metrics_samples: int = col(csv=False)
    idle_before: bool | None = col(csv=False)
    idle_wait_s: Number | None = col(csv=False)


def _extra(name: str) -> dict:
    return LevelRow.model_fields[name].json_schema_extra  # type: ignore[return-value]


CSV_COLUMNS: tuple[str, ...] = tuple(n for n in LevelRow.model_fields if _extra(n)["csv"])


def table_columns() -> list[tuple[str, Callable[[dict], str]]]:
    """(header, cell of a row dict) for each column of the `load` table; a missing figure is `-`."""
    out = []
    for name in LevelRow.model_fields:
        header, fmt = _extra(name)["table"], _extra(name)["fmt"]
        if header is None:
            continue
        if callable(fmt):
            out.append((header, fmt))
        else:
            out.append((header, lambda r, n=name, f=fmt: "-" if r[n] is None else format(r[n], f)))
    return out
