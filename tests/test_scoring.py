"""The Scoring column: the published rows recomputed from their cells as written,
clamping at both ends of every axis, zero confirmed, the NmSSs totals, and the CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.verdicts.scoring import (
    LOCAL_WEIGHTS,
    REMOTE_WEIGHTS,
    accuracy_points,
    confirmed_points,
    format_total,
    parse_total,
    rank_key,
    score_local,
    score_remote,
    seconds_per_confirmed_points,
    total_points,
    usd_per_confirmed_points,
)

CLI = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "llms-benchmark"

# Remote headline rows (README 352c96), verbatim: cells as written, bold included.
REMOTE_ROWS = [
    "| **#1** | `openai/gpt-5.6-luna` | medium | copilot | Copilot | 1.13.0 | **79.7** | 7 / 8 | 3 / 2 / 2 "
    "| 6m29s | $0.11 | 88% | $0.016 | 56s |",
    "| **#2** | `deepseek/deepseek-v4.1-flash` | default | opencode | OpenRouter | 1.13.0 | 70.9 | **16 / 16** "
    "| 10 / 3 / 3 | 29m05s | $0.16 | **100%** | **$0.010** | 109s |",
]
# The only local headline row (README 352c96), verbatim.
LOCAL_ROWS = [
    "| **#1** | [`odd-qwen3-8-27b`](../.vot/presets/odd-qwen3-8-27b.yaml) | default | opencode | A100 80 GB "
    "| 1.13.0 | **9.0** | 7 / 11 | 4 / 3 / 0 | **150m02s** | **64%** | **1286s** |",
]
REMOTE_HEADERS = ["Rank", "Model", "Effort", "CLI", "Provider", "oddyssey", "Scoring", "Confirmed / reported",
                  "Telemetry / Perf / Behavior", "Total", "Cost", "Accuracy", "$/confirmed", "seconds/confirmed"]
LOCAL_HEADERS = ["Rank", "Preset", "Effort", "CLI", "GPU", "oddyssey", "Scoring", "Confirmed / reported",
                 "Telemetry / Perf / Behavior", "Total", "Accuracy", "seconds/confirmed"]


def cells(row: str, headers: list[str]) -> dict[str, str]:
    parts = [c.strip() for c in row.strip().strip("|").split("|")]
    assert len(parts) == len(headers), parts
    return dict(zip(headers, parts, strict=True))


def published(cell: str) -> float:
    return float(cell.replace("**", ""))


@pytest.mark.parametrize("row", REMOTE_ROWS)
def test_remote_rows_recompute_from_their_cells(row):
    c = cells(row, REMOTE_HEADERS)
    result = score_remote(c["$/confirmed"], c["seconds/confirmed"], c["Total"], c["Accuracy"],
                          c["Confirmed / reported"])
    assert result.score == published(c["Scoring"])


@pytest.mark.parametrize("row", LOCAL_ROWS)
def test_local_row_recomputes_from_its_cells(row):
    c = cells(row, LOCAL_HEADERS)
    result = score_local(c["seconds/confirmed"], c["Total"], c["Accuracy"], c["Confirmed / reported"])
    assert result.score == published(c["Scoring"]) == 9.0
    # Both time axes clamp to 0: (28 + 35) / 7.
    assert result.axes == {"seconds_per_confirmed": 0.0, "total": 0.0, "accuracy": 28.0, "confirmed": 35.0}


def test_published_scores_from_plain_numbers():
    assert score_remote(0.016, 56, 389, 88, 7).score == 79.7
    assert score_remote(0.010, 109, 1745, 100, 16).score == 70.9
    assert score_local(1286, 9002, 64, 7).score == 9.0


def test_weights():
    assert sum(REMOTE_WEIGHTS.values()) == pytest.approx(1)
    assert sum(LOCAL_WEIGHTS.values()) == pytest.approx(1)
    assert list(REMOTE_WEIGHTS) == ["usd_per_confirmed", "seconds_per_confirmed", "total", "accuracy", "confirmed"]
    for axis, w in LOCAL_WEIGHTS.items():  # the remote weights renormalized over the four local axes
        assert w == pytest.approx(REMOTE_WEIGHTS[axis] / 0.7)


def test_anchors():
    assert usd_per_confirmed_points(0.01) == pytest.approx(100)
    assert usd_per_confirmed_points(0.10) == pytest.approx(50)
    assert usd_per_confirmed_points(1.00) == pytest.approx(0)
    assert seconds_per_confirmed_points(30) == pytest.approx(100)
    assert seconds_per_confirmed_points(600) == pytest.approx(0)
    assert total_points(300) == pytest.approx(100)
    assert total_points(3600) == pytest.approx(0)
    assert accuracy_points(50) == 0 and accuracy_points(75) == 50 and accuracy_points(100) == 100
    assert confirmed_points(0) == 0 and confirmed_points(10) == 50 and confirmed_points(20) == 100


def test_clamping_at_both_ends():
    # Past the best bound: 100, never more.
    assert usd_per_confirmed_points(0.001) == 100
    assert usd_per_confirmed_points(0) == 100  # a `$0.000` cell
    assert seconds_per_confirmed_points(5) == 100
    assert total_points(60) == 100
    assert total_points(0) == 100
    assert confirmed_points(35) == 100
    # Past the worst bound: 0, never negative.
    assert usd_per_confirmed_points(2.50) == 0
    assert seconds_per_confirmed_points(1286) == 0
    assert total_points(9002) == 0
    assert accuracy_points(20) == 0
    best = score_remote("$0.001", "5s", "1m00s", "100%", 40)
    assert best.score == 100.0 and all(p == 100 for p in best.axes.values())
    worst = score_remote("$3.00", "900s", "200m00s", "40%", "1 / 3")
    assert worst.axes["confirmed"] == 5.0
    assert worst.score == 0.5 and all(worst.axes[a] == 0 for a in REMOTE_WEIGHTS if a != "confirmed")
    assert score_local("10s", "2m00s", "100%", 25).score == 100.0


def test_zero_confirmed_scores_zero_and_ranks_last():
    remote = score_remote("—", "—", "12m00s", "0%", "0 / 5")
    assert remote.axes["usd_per_confirmed"] == 0 and remote.axes["seconds_per_confirmed"] == 0
    assert remote.axes["confirmed"] == 0 and remote.axes["total"] == total_points(720) > 0  # kept, for the record
    assert remote.score == 0.0
    # Whatever the per-finding cells say (even a fast, cheap-looking figure), they score 0.
    assert score_remote("$0.01", "30s", "12m00s", "0%", 0).score == 0.0
    # An empty report of a 5-minute run: Total alone would give 28.6; it scores 0.0 ...
    empty = score_local(None, "5m00s", "0%", 0)
    assert empty.axes["total"] == 100 and empty.score == 0.0
    # ... and one confirmed finding, however slow, outscores it and ranks first.
    one = score_local("9000s", "150m00s", "10%", "1 / 10")
    assert one.score > empty.score
    keys = sorted([("empty", rank_key(empty, total="5m00s")), ("one", rank_key(one, total="150m00s"))],
                  key=lambda kv: kv[1])
    assert [k for k, _ in keys] == ["one", "empty"]


def test_missing_per_finding_cell_with_confirmed_findings_is_refused():
    with pytest.raises(UserError, match="seconds_per_confirmed"):
        score_local("—", "10m00s", "80%", 4)
    with pytest.raises(UserError, match="usd_per_confirmed"):
        score_remote(None, "60s", "10m00s", "80%", 4)


@pytest.mark.parametrize(("cell", "seconds"), [
    ("150m02s", 9002), ("6m29s", 389), ("29m05s", 1745), ("**150m02s**", 9002), ("0m56s", 56), ("56s", 56),
    ("12m", 720), ("9002", 9002), (9002, 9002), ("1h07m37s", 4057),
])
def test_parse_total(cell, seconds):
    assert parse_total(cell) == seconds


@pytest.mark.parametrize("cell", ["5x", "", "m", "12m5", "-30", "1h2h", "6:29", "abc"])
def test_parse_total_refuses(cell):
    with pytest.raises(UserError) as exc:
        parse_total(cell)
    assert exc.value.field == "total"


@pytest.mark.parametrize(("seconds", "text"), [(9002, "150m02s"), (389, "6m29s"), (56, "0m56s"), (3600, "60m00s"),
                                               (0, "0m00s"), (389.4, "6m29s"), (389.5, "6m30s")])
def test_format_total(seconds, text):
    assert format_total(seconds) == text


@pytest.mark.parametrize("seconds", [0, 1, 59, 60, 389, 1745, 3599, 3600, 9002, 86_400])
def test_total_round_trips(seconds):
    assert parse_total(format_total(seconds)) == seconds
    text = format_total(seconds)
    assert format_total(parse_total(text)) == text


def test_cell_forms_score_the_same_as_numbers():
    assert score_remote("**$0.016**", "**56s**", "**6m29s**", "**88%**", "**7 / 8**") == \
        score_remote(0.016, 56, 389, 88, 7)
    assert score_local("1286", "9002", "64", "7") == score_local(1286, 9002, 64, 7)


@pytest.mark.parametrize("bad", [
    {"accuracy": "88 percent"}, {"accuracy": "120%"}, {"confirmed": "seven"}, {"confirmed": -1},
    {"usd_per_confirmed": "€0.01"}, {"seconds_per_confirmed": "1m"}, {"total": "5x"},
])
def test_bad_cells_are_user_errors(bad):
    args = {"usd_per_confirmed": "$0.016", "seconds_per_confirmed": "56s", "total": "6m29s",
            "accuracy": "88%", "confirmed": "7"} | bad
    with pytest.raises(UserError) as exc:
        score_remote(**args)
    assert exc.value.field == next(iter(bad))


def test_rank_key_orders_by_score_then_tiebreak():
    a = score_remote(0.016, 56, 389, 88, 7)  # 79.7
    b = score_remote(0.010, 109, 1745, 100, 16)  # 70.9
    rows = [(b, "$0.16"), (a, "$0.11"), (a, "$0.05")]
    ordered = sorted(rows, key=lambda r: rank_key(r[0], cost=r[1]))
    assert ordered == [(a, "$0.05"), (a, "$0.11"), (b, "$0.16")]  # tie → cheaper run
    local = score_local(1286, 9002, 64, 7)
    assert rank_key(local, total="150m02s") < rank_key(local, total="150m03s")  # tie → shorter run
    assert rank_key(80.0, kind="local", total="200m00s") < rank_key(local, total="1m00s")
    with pytest.raises(UserError):
        rank_key(a)  # remote without its cost


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "score", *args], capture_output=True, text=True, timeout=60)


def test_cli_local_json():
    proc = run_cli("local", "--seconds-per-confirmed", "1286s", "--total", "150m02s", "--accuracy", "64%",
                   "--confirmed", "7", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data == {"score": 9.0, "axes": {"seconds_per_confirmed": 0.0, "total": 0.0, "accuracy": 28.0,
                                           "confirmed": 35.0}}


def test_cli_local_total_in_seconds():
    proc = run_cli("local", "--seconds-per-confirmed", "1286", "--total", "9002", "--accuracy", "64",
                   "--confirmed", "7", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["score"] == 9.0


@pytest.mark.parametrize(("cells_", "score"), [
    (("$0.016", "56s", "6m29s", "88%", "7"), 79.7),
    (("$0.010", "109s", "29m05s", "100%", "16 / 16"), 70.9),
])
def test_cli_remote_json(cells_, score):
    usd, spc, total, acc, n = cells_
    proc = run_cli("remote", "--usd-per-confirmed", usd, "--seconds-per-confirmed", spc, "--total", total,
                   "--accuracy", acc, "--confirmed", n, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["score"] == score
    assert set(data["axes"]) == set(REMOTE_WEIGHTS)


def test_cli_table_output():
    proc = run_cli("remote", "--usd-per-confirmed", "$0.016", "--seconds-per-confirmed", "56s", "--total", "6m29s",
                   "--accuracy", "88%", "--confirmed", "7")
    assert proc.returncode == 0, proc.stderr
    assert "79.7" in proc.stdout and "usd_per_confirmed" in proc.stdout


def test_cli_bad_total_is_one_clear_error():
    proc = run_cli("local", "--seconds-per-confirmed", "56s", "--total", "5x", "--accuracy", "88%",
                   "--confirmed", "7", "--json")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "total" in proc.stderr and "5x" in proc.stderr
    assert proc.stdout == ""


def test_cli_missing_per_finding_cell_is_one_clear_error():
    proc = run_cli("remote", "--seconds-per-confirmed", "56s", "--total", "6m29s", "--accuracy", "88%",
                   "--confirmed", "7")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "usd_per_confirmed" in proc.stderr
