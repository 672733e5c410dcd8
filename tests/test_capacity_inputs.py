"""A capacity result commits what regenerates it (issue 52): the trace and the per-level
agents.json are kept by git beside the record, carry no address or path of the machine, and
bench/agents_capacity.py rebuilds the table from every turn they keep — and says so when the
saved figures do not match those turns."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

from timed_replay import MODEL, REPO, make_timed  # noqa: F401 - the fixture

from harness.load.agents import rebuild
from harness.records.capacity import CapacityFigures, CapacityLevel
from harness.load.agents.run import run_agents
from harness.load.agents.slo import Measure, Slo
from harness.load.agents.trace import AgentTrace, Session, Turn, dump

TRACE = AgentTrace(source="/home/someone/runs/20261205T000000Z-x", block_size=16, sessions=[
    Session(id="s0", turns=[Turn(start_s=0, prompt_tokens=64, reused_blocks=0, output_tokens=10),
                            Turn(start_s=0.2, prompt_tokens=100, reused_blocks=4, output_tokens=10, think_s=0.05)])])


def bench():
    spec = importlib.util.spec_from_file_location("agents_capacity", REPO / "bench" / "agents_capacity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def capacity_run(server_url: str, run_dir: Path) -> Path:
    """A run folder as `launch --capacity` leaves it: run.json, capacity/trace.jsonl, capacity/agents.json."""
    folder = run_dir / "capacity"
    folder.mkdir(parents=True)
    dump(TRACE.model_copy(update={"source": "20261205T000000Z-x"}), folder / "trace.jsonl")
    # one request at a time, ~0.55 s each: one agent's TTFT is ~0.05 s, a second one's waits past 0.5 s
    slo = Slo(ttft_p99_s=0.5, turn_p99_s=30)
    outcome, path = run_agents(TRACE, base_url=server_url, model=MODEL, levels=[1, 2, 4], slo=slo, stagger_s=0,
                               limit_s=30, out_root=folder, folder=folder, sample_interval_s=0.2,
                               measure=Measure(repeats=3))
    keep = set(CapacityLevel.model_fields)
    from dataclasses import asdict
    figures = CapacityFigures(sustained=outcome.figure, limit_found=outcome.limit_found, slo=outcome.slo,
                              ttft_p99_s=0.5, turn_p99_s=30, rule=outcome.rule, trace="run x's own wire log",
                              sessions=1, turns_per_copy=2, results=str(path.relative_to(run_dir)),
                              slo_def=outcome.slo_def, measure=outcome.measure,
                              levels=[CapacityLevel(**{k: v for k, v in asdict(lv).items() if k in keep})
                                      for lv in outcome.levels])
    (run_dir / "run.json").write_text(json.dumps({"status": "ok", "mission": "hello", "stack": "local",
                                                  "capacity": figures.model_dump(mode="json")}))
    return path


def test_the_table_is_rebuilt_from_the_committed_turns_and_matches(make_timed, tmp_path: Path) -> None:  # noqa: F811
    server = make_timed("--ttft", "0.05", "--itl", "0.05", "--max-running", "1")
    run_dir = tmp_path / "20261205T000000Z-cpu-x-medium-abcd"
    path = capacity_run(server.url, run_dir)
    text = path.read_text() + (run_dir / "capacity" / "trace.jsonl").read_text()
    assert "127.0.0.1" not in text and "/home/someone" not in text and str(tmp_path) not in text
    saved = json.loads(path.read_text())
    # rebuilt from the turns alone, the levels are the sweep's own
    again = rebuild.levels(saved)
    assert [lv.verdict for lv in again] == [lv["verdict"] for lv in saved["levels"]] == ["pass", "fail"]
    assert [lv.ttft_p99_s for lv in again] == [lv["ttft_p99_s"] for lv in saved["levels"]]
    assert [lv.ttft_interval_s for lv in again] == [lv["ttft_interval_s"] for lv in saved["levels"]]
    run = bench().load(run_dir)
    assert run["drift"] == []
    table = bench().render(run)
    assert "rebuilt from every turn the sweep kept" in table and "matches the figures the sweep saved" in table
    assert "| 1 | 6 | 0 / 0 | " in table and "| 2 | 12 | 0 / 0 | " in table and "inter_token_latency" in table
    assert "3 repeats (95 % interval over the repeats)" in table
    # a saved figure that its turns do not give is shown, not hidden
    saved["levels"][0]["ttft_p99_s"] = 0.001
    path.write_text(json.dumps(saved))
    tampered = bench().load(run_dir)
    assert tampered["drift"] and "1 agents ttft_p99_s: saved 0.001" in tampered["drift"][0]
    assert "differs from the saved figures" in bench().render(tampered)


def test_git_keeps_the_capacity_inputs_beside_the_record_and_nothing_else_of_the_folder() -> None:
    run = ".llms-benchmark/runs/20261205T000000Z-cpu-x-medium-abcd"
    for name, kept in (("run.json", True), ("capacity/agents.json", True), ("capacity/trace.jsonl", True),
                       ("capacity/fault.txt", False), ("wire.jsonl", False), ("capacity/other.json", False)):
        ignored = subprocess.run(["git", "check-ignore", "-q", f"{run}/{name}"], cwd=REPO, timeout=30).returncode == 0
        assert ignored != kept, name


def test_the_committed_repeats_measurement_is_rebuilt_from_its_turns() -> None:
    """bench/results/agents-capacity-repeats.md states figures of a real llama.cpp sweep: its
    committed turns give them again."""
    saved = json.loads((REPO / "bench" / "results" / "agents-capacity-repeats.agents.json").read_text())
    (level,) = rebuild.levels(saved)
    assert level.copies == 1 and level.turns == 36 and level.repeats == 3 and level.stat == "max"
    assert [round(x, 2) for x in level.ttft_by_repeat_s] == [9.57, 2.68, 3.51]
    assert [round(x, 2) for x in level.ttft_interval_s] == [0.0, 14.6]
    assert level.verdict == "fail" and "95 % interval 0.00-14.60 s reaches past 10 s" in level.why
    assert level.verdict == saved["levels"][0]["verdict"] and level.ttft_p99_s == saved["levels"][0]["ttft_p99_s"]
    assert round(level.goodput_per_s, 2) == 0.20 and round(level.inter_token_latency_p50_s * 1000, 1) == 32.0
    text = (REPO / "bench" / "results" / "agents-capacity-repeats.md").read_text()
    assert "0.00–14.60 s" in text and "goodput 0.20 req/s" in text
