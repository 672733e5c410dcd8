"""`launch … --capacity`: the agents sweep on the served unit after the mission, before the
destroy (harness/stages/capacity.py), end to end with the real opencode CLI on the replay
stack; its figure on the run record and the results page's optional detail column."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from conftest import REPO, TEST_TRAJECTORIES, Project
from harness.records.capacity import CapacityFigures, CapacityLevel
from harness.results.columns import DASH, columns, headers


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_launch_capacity_runs_the_sweep_on_the_serve_before_the_destroy(project: Project):
    project.add_trajectory("hello", TEST_TRAJECTORIES / "hello-timed.yaml")
    code, out, err = project.run_cli(
        ["launch", "local", "replay", "replay-hello", "--mission", "hello", "--probe-long-tokens", "2000",
         "--capacity", "--capacity-copies", "1,2", "--capacity-ttft-p99", "30", "--capacity-turn-p99", "60",
         "--capacity-stagger", "0.2", "--capacity-limit", "60", "--json"], timeout=280)
    assert code == 0, f"\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    assert "Traceback" not in err
    run_dir, rec = project.only_run()
    assert rec["status"] == "ok"
    cap = rec["capacity"]
    assert cap is not None and cap["error"] is None, cap
    # the run's own sessions: the hello mission's 3 turns, one session
    assert cap["own_trace"] and rec["run_id"] in cap["trace"] and cap["sessions"] == 1 and cap["turns_per_copy"] == 3
    assert [lv["copies"] for lv in cap["levels"]] == [1, 2] and all(lv["passed"] for lv in cap["levels"])
    assert cap["sustained"] == 2 and cap["limit_found"] is False  # no level failed: the most tried
    assert cap["ttft_p99_s"] == 30 and "TTFT p99 <= 30 s" in cap["slo"]
    assert cap["slo_def"]["ttft_p99_s"] == 30 and cap["slo_def"]["product"] is False  # given: said so
    assert cap["measure"]["repeats"] == 1 and cap["ended_by"] is None
    assert cap["probe"]["prefill_tps"] > 0  # the serve probed again before the sweep (realism's replay side)
    assert len(cap["host_load"]) == 2 and all(x >= 0 for x in cap["host_load"])
    # on the serve: after the mission's end, before the destroy
    times = {k: datetime.fromisoformat(v) for k, v in rec["times"].items() if v}
    assert times["mission_end"] <= datetime.fromisoformat(cap["started"]) <= datetime.fromisoformat(cap["ended"]) \
        <= times["destroyed"]
    results = json.loads((run_dir / cap["results"]).read_text())
    assert (run_dir / "capacity" / "trace.jsonl").is_file()
    turns = results["turns_by_level"]["2"]
    assert len(turns) == 6 and all(t["ok"] for t in turns) and {t["copy"] for t in turns} == {0, 1}
    # what the replay server served after the mission: the probe's 4 requests, then the sweep's 3 + 6 turns, as
    # its fallback (no scenario), each asking for the recorded turn's output tokens
    served = [json.loads(line) for line in (run_dir / "served.jsonl").read_text().splitlines() if line.strip()]
    after = [s for s in served if s["started"] >= datetime.fromisoformat(cap["started"]).timestamp()]
    assert len(after) == 4 + 9, after
    after = after[4:]
    assert [s["kind"] for s in after] == ["fallback"] * 9, after
    recorded = [t["output_tokens"] for line in (run_dir / "capacity" / "trace.jsonl").read_text().splitlines()[1:]
                for t in json.loads(line)["turns"]]
    assert sorted(s["usage"]["completion_tokens"] for s in after) == sorted(recorded * 3)
    assert project.ledger() == {}


def test_the_capacity_column_shows_only_where_a_row_has_it():
    from harness.results.row import Row

    def row(capacity: str) -> Row:
        return Row(kind="local", name="p", effort="medium", cli="opencode", where="CPU", oddyssey="llms-benchmark 1",
                   confirmed_reported="0 / 0", by_kind="0 / 0 / 0", total="1m00s", accuracy="0%",
                   seconds_per_confirmed=DASH, capacity=capacity)
    assert "Agents sustained" not in headers("local", "detail")
    assert "Agents sustained" not in headers("local", "detail", rows=[row(DASH)])
    figures = CapacityFigures(sustained=3, limit_found=True, slo="s", ttft_p99_s=2, turn_p99_s=60, own_trace=True)
    cell = figures.cell()
    assert cell == "3 (TTFT p99 ≤ 2s, turn p99 ≤ 60s; own sessions)" and "|" not in cell
    shown = headers("local", "detail", rows=[row(DASH), row(cell)])
    assert shown[-1] == "Agents sustained" and len(shown) == len(columns("local", "detail")) + 1
    lower = CapacityFigures(sustained=8, limit_found=False, ttft_p99_s=2, turn_p99_s=60, own_trace=False,
                            trace="/x/y/agentx.trace.jsonl")
    assert lower.cell() == "≥ 8 (TTFT p99 ≤ 2s, turn p99 ≤ 60s; trace agentx.trace.jsonl)"
    assert CapacityFigures(error="boom").cell() == "— (sweep failed)"


def test_capacity_options_refused_before_anything_is_served(project: Project, tmp_path):
    bad = tmp_path / "bad.trace.jsonl"
    bad.write_text("{not json\n")
    for extra, field in ((["--capacity-copies", "0,2"], "--capacity-copies"),
                         (["--capacity-copies", "a"], "--capacity-copies"),
                         (["--capacity-ttft-p99", "0"], "--capacity-ttft-p99"),
                         (["--capacity-trace", str(bad)], "bad.trace.jsonl")):
        code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "hello",
                                          "--capacity", *extra], timeout=60)
        assert code == 2, (extra, out, err)
        assert "Traceback" not in err and field in err, (extra, err)
        assert project.run_dirs() == []


def test_a_given_trace_is_named_on_the_record_by_its_file_and_source_never_its_path(tmp_path: Path):
    """The record is committed: `--capacity-trace /abs/dir/x.trace.jsonl` must not put /abs/dir on it."""
    from harness.load.agents.trace import AgentTrace, Session, Turn, dump
    from harness.stages.capacity import CapacityOptions, _trace

    path = tmp_path / "deep" / "x.trace.jsonl"
    path.parent.mkdir()
    dump(AgentTrace(source="20261204T000000Z-some-run", sessions=[Session(id="s", turns=[
        Turn(start_s=0, prompt_tokens=10, reused_blocks=0, output_tokens=2)])]), path)
    opts = CapacityOptions(trace=path.resolve())
    trace, named = _trace(opts, [])
    assert named == "x.trace.jsonl (from 20261204T000000Z-some-run)" and str(tmp_path) not in opts.describe()
    assert len(trace.sessions) == 1


def _bench_capacity():
    import importlib.util

    spec = importlib.util.spec_from_file_location("agents_capacity", REPO / "bench" / "agents_capacity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_capacity_tables_are_written_from_the_sweeps_own_record(tmp_path: Path, capsys):
    """bench/agents_capacity.py: a found limit reads as found, a failing level says why, a sweep
    whose levels all passed reads as a lower bound, and a run with no sweep is refused."""
    bench = _bench_capacity()
    levels = [CapacityLevel(copies=1, passed=True, turns=12, failed=0, ttft_p99_s=5.8, turn_p99_s=9.7,
                            why="within the SLO"),
              CapacityLevel(copies=2, passed=False, turns=24, failed=0, ttft_p99_s=13.3, turn_p99_s=19.6,
                            why="TTFT p99 13.3 s > 10 s")]
    found = CapacityFigures(sustained=1, limit_found=True, slo="TTFT p99 <= 10 s", ttft_p99_s=10, turn_p99_s=120,
                            trace="own", levels=levels)
    (tmp_path / "found").mkdir()
    (tmp_path / "found" / "run.json").write_text(json.dumps(
        {"status": "ok", "mission": "hello", "capacity": found.model_dump(mode="json")}))
    text = bench.render(bench.load(tmp_path / "found"))
    assert "**1 agent sustained**" in text and "≥" not in text
    assert "| 2 | 24 | 0 | 13.3 s | 19.6 s | no: TTFT p99 13.3 s > 10 s |" in text

    # the folder's full sweep wins over the record's summary, with the watcher's readings
    bound = found.model_copy(update={"limit_found": False, "sustained": 1, "levels": levels[:1],
                                     "results": "capacity/agents.json"})
    (tmp_path / "bound" / "capacity").mkdir(parents=True)
    (tmp_path / "bound" / "run.json").write_text(json.dumps({"capacity": bound.model_dump(mode="json")}))
    (tmp_path / "bound" / "capacity" / "agents.json").write_text(json.dumps({"warm_prefixes": True, "levels": [
        {"copies": 1, "turns": 12, "failed": 0, "ttft_p50_s": 1.3, "ttft_p99_s": 5.8, "turn_p50_s": 8.0,
         "turn_p99_s": 9.7, "decode_p50_tok_s": 15.5, "passed": True, "why": "within the SLO",
         "server": {"kv_usage_peak": 0.38, "prefix_cache_hit": 0.91, "preemptions": 0, "waiting_peak": 3}}]}))
    text = bench.render(bench.load(tmp_path / "bound"))
    assert "**≥ 1 agent sustained (1 the most tried: a lower bound)**" in text
    assert "| 1 | 12 | 0 | 1.3 / 5.8 s | 8.0 / 9.7 s | 15.5 tok/s | 38 % | 91 % | 0 | 3 | yes |" in text

    (tmp_path / "none").mkdir()
    (tmp_path / "none" / "run.json").write_text(json.dumps({"capacity": None}))
    with pytest.raises(SystemExit) as exc:
        bench.load(tmp_path / "none")
    assert exc.value.code == 2 and "--capacity" in capsys.readouterr().err
