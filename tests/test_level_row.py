"""A load level's figures are declared once (harness/load/level_row.py): summary.csv's
columns, summary.json's entries and the `load` table all follow the declaration."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.load.level_row import CSV_COLUMNS, LevelRow, table_columns


def _row(**over):
    base = {name: None for name in LevelRow.model_fields}
    base.update(shape="short", concurrency=8, requests=10, succeeded=9, failed=1, errors={"HTTP 500": 1},
                target_input_tokens=512, itl_samples=90, usage_reported=9, metrics_samples=3)
    base.update(over)
    return LevelRow(**base).model_dump()


def test_csv_columns_are_the_declared_figures_without_the_json_only_ones():
    assert CSV_COLUMNS[:5] == ("shape", "concurrency", "requests", "succeeded", "failed")
    assert "errors" not in CSV_COLUMNS and "idle_before" not in CSV_COLUMNS
    assert list(LevelRow.model_fields)[:len(CSV_COLUMNS)] == list(CSV_COLUMNS)  # CSV first, in order


def test_the_load_table_cells_and_a_missing_figure():
    row = _row(ttft_p50_s=0.1234, preemptions=2)
    cells = {header: cell(row) for header, cell in table_columns()}
    assert cells["ok"] == "9/10" and cells["c"] == "8" and cells["TTFT p50"] == "0.123"
    assert cells["preempt"] == "2" and cells["KV peak %"] == "-"


def test_counts_stay_ints_and_an_undeclared_figure_is_refused():
    assert _row(preemptions=3)["preemptions"] == 3 and isinstance(_row(preemptions=3)["preemptions"], int)
    with pytest.raises(ValidationError):
        _row(ttft_p42_s=0.1)
