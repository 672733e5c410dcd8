"""The results columns are declared once (harness/results/columns.py); the tables' headers,
the remote rows file's keys and `score check`'s reading of the page follow from them."""

from __future__ import annotations

from harness.results.check import check_rows
from harness.results.columns import COLUMNS, REMOTE_CELLS, REMOTE_REQUIRED, headers
from harness.results.serving_columns import SERVING_HEADERS


def test_headers_derived_from_the_declarations_are_the_page_s():
    assert headers("remote", "headline") == [
        "Rank", "Model", "Effort", "CLI", "Provider", "oddyssey", "Scoring", "Confirmed / reported",
        "Telemetry / Perf / Behavior", "Total", "Cost", "Accuracy", "$/confirmed", "seconds/confirmed"]
    assert headers("local", "headline") == [
        "Rank", "Preset", "Effort", "CLI", "GPU", "Protocol", "Scoring", "Confirmed / reported",
        "Telemetry / Perf / Behavior", "Total", "Accuracy", "seconds/confirmed"]
    # The hand-kept local rows oddyssey measured: their column is oddyssey's version, not our protocol.
    assert headers("local", "headline", hand=True)[5] == "oddyssey"
    detail = ["Effort", "CLI", "Provider", "oddyssey", "Preflight", "Drive", "Observation", "Turns", "Median turn",
              "Input", "Output", "Cache", "Signals"]
    assert headers("remote", "detail") == ["Model", *detail, "Date", "Source"]
    local = {"Provider": "GPU", "oddyssey": "Protocol", "Output": "Output + reasoning"}
    assert headers("local", "detail") == ["Preset", *[local.get(h, h) for h in detail], "Planted found", "Date",
                                          "Source", "Ended", "Served by", "opencode", "GPU-hours", "GPU $/h", "Trials",
                                          *SERVING_HEADERS]


def test_remote_file_keys_follow_the_columns():
    assert list(REMOTE_CELLS) == [
        "model", "effort", "cli", "provider", "oddyssey", "confirmed_reported", "by_kind", "total", "cost",
        "accuracy", "usd_per_confirmed", "seconds_per_confirmed", "preflight", "drive", "observation", "turns",
        "median_turn", "input", "output", "cache", "signals", "date", "source"]
    assert REMOTE_REQUIRED == tuple(list(REMOTE_CELLS)[:12])


def test_every_best_column_can_read_its_cells():
    assert all(c.parse is not None for c in COLUMNS if c.best)
    assert len({c.attr for c in COLUMNS}) == len(COLUMNS)


def test_score_check_reads_cells_by_column_not_position():
    head = headers("local", "headline")
    # One row: its every best value bold, as render writes it (score check reads the bold marks too).
    values = {"Rank": "**#1**", "Preset": "p", "Effort": "medium", "CLI": "opencode", "GPU": "CPU",
              "Protocol": "llms-benchmark 1", "Scoring": "**9.9**", "Confirmed / reported": "1 / 2",
              "Telemetry / Perf / Behavior": "1 / 0 / 0", "Total": "**10m00s**", "Accuracy": "**50%**",
              "seconds/confirmed": "**600s**"}
    page = "| " + " | ".join(head) + " |\n|" + "---|" * len(head) + "\n| " + " | ".join(values[h] for h in head) + " |\n"
    checked, problems = check_rows(page)
    assert checked == 1 and len(problems) == 1 and "Scoring '9.9'" in problems[0], problems
    short = page.rsplit(" | ", 3)[0] + " |\n"  # Total, Accuracy and seconds/confirmed gone
    assert check_rows(short)[1][0].endswith("cannot recompute its Scoring: missing column 'Total'")
