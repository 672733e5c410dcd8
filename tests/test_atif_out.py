"""ATIF out: a run folder's trajectory.json, validated by the `atif` package's own models.

Sources: a real-model run folder (tests/fixtures/runs/: qwen2.5-coder-1.5b on llama.cpp, the
hello mission; its opencode events, wire log and record as the launch left them), the committed
real-model runs (run.json and report.md only), and an opencode store built here with a subagent.
A replay launch whose agent prints its key and its folder: the key redacted by the post-run
scrub, which follows the trajectory's writing, the path replaced (and test_launch_e2e.py)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import atif
import pytest
from opencode_store import new_store

from harness.records.record import RunRecord
from harness.sandbox import wirelog
from harness.sandbox.secrets import scrub_tree
from harness.trajectory.atif_out import build_trajectory, write_trajectory
from harness.trajectory.launch_hook import record_trajectory

REPO = Path(__file__).resolve().parents[1]
REAL = REPO / "tests" / "fixtures" / "runs" / "20261206T030208Z-cpu-qwen2-5-coder-1-5b-medium-8176"
COMMITTED = sorted(p.parent for p in (REPO / ".llms-benchmark" / "runs").glob("*/run.json"))


def copy_run(tmp_path: Path, src: Path = REAL) -> Path:
    """The run folder where the launch would have it: <project>/.llms-benchmark/runs/<id>."""
    dest = tmp_path / "project" / ".llms-benchmark" / "runs" / src.name
    shutil.copytree(src, dest)
    return dest


def written(run_dir: Path) -> atif.Trajectory:
    path = write_trajectory(run_dir)
    assert path == run_dir / "trajectory.json"
    return atif.Trajectory.model_validate(json.loads(path.read_text()))


def test_a_real_model_run_validates_and_its_metrics_are_the_wires(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    traj = written(run_dir)
    figures = wirelog.figures(wirelog.read_log(run_dir / "wire.jsonl"))
    record = RunRecord.load(run_dir / "run.json")

    # The agent and the model as served.
    assert traj.agent.name == "opencode" and traj.agent.version == record.session.opencode_version == "1.18.33"
    assert traj.agent.model_name == record.served_name
    assert traj.agent.extra["engine"]["name"] == record.engine.name and traj.agent.extra["preset"] == record.key.preset
    assert traj.agent.extra["effort"] == record.key.effort

    # The prompt first (the events carry none: the mission's prompt file, whose sha256 is the run's).
    assert traj.steps[0].source == "user" and "two Python scripts" in traj.steps[0].message
    agent = [s for s in traj.steps if s.source == "agent"]
    assert len(agent) == figures["turns"] == 12
    # Per step, the wire's own figures: summed, the wire log's totals to the token.
    assert all(s.metrics is not None and s.metrics.extra["source"] == "wire.jsonl" for s in agent)
    assert sum(s.metrics.prompt_tokens for s in agent) == figures["tokens"]["input"] == record.wire.tokens.input
    assert sum(s.metrics.completion_tokens for s in agent) == figures["tokens"]["output"]
    assert sum(s.metrics.cached_tokens for s in agent) == figures["tokens"]["cache"]
    fm = traj.final_metrics
    assert (fm.total_prompt_tokens, fm.total_completion_tokens, fm.total_cached_tokens) == (
        figures["tokens"]["input"], figures["tokens"]["output"], figures["tokens"]["cache"])
    # Tool calls and their observations, as many as the wire saw the model make.
    calls = Counter(c.function_name for s in agent for c in s.tool_calls or [])
    assert dict(calls) == figures["tool_calls"] == {"bash": 23, "write": 11}
    for s in agent:
        ids = [c.tool_call_id for c in s.tool_calls or []]
        assert [r.source_call_id for r in (s.observation.results if s.observation else [])] == ids
    assert any("hello from the workspace" in (r.content or "") for s in agent for r in s.observation.results)
    assert agent[-1].message  # the last turn's text
    # The opencode events name the host's run folder (/tmp/demo-clone/...): never in the trajectory.
    text = (run_dir / "trajectory.json").read_text()
    assert "/tmp/demo-clone" in (run_dir / "opencode-events.jsonl").read_text()
    assert "demo-clone" not in text and str(tmp_path) not in text


@pytest.mark.parametrize("run_dir", [p for p in COMMITTED if RunRecord.load(p / "run.json").times.mission_start
                                     and (RunRecord.load(p / "run.json").wire or RunRecord.load(p / "run.json").session)
                                     and not RunRecord.load(p / "run.json").scripted],  # a real model's runs
                         ids=lambda p: p.name[:24])
def test_committed_real_model_runs_validate_with_the_wires_totals(run_dir: Path) -> None:
    record = RunRecord.load(run_dir / "run.json")
    traj = build_trajectory(run_dir)
    tokens = (record.wire or record.session).tokens
    fm = traj.final_metrics
    assert (fm.total_prompt_tokens, fm.total_completion_tokens, fm.total_cached_tokens) == (
        tokens.input, tokens.output, tokens.cache)
    assert traj.agent.model_name == record.served_name and not record.scripted
    committed = run_dir / "trajectory.json"
    if committed.is_file():  # the one `export --atif` wrote and git holds
        kept = atif.Trajectory.model_validate(json.loads(committed.read_text()))
        assert kept.final_metrics == fm
        assert str(REPO) not in committed.read_text() and str(Path.home()) not in committed.read_text()


def _plant(run_dir: Path, output: str, argument: str = "x") -> None:
    """A tool call whose output the agent chose, added to the run's opencode events."""
    events = run_dir / "opencode-events.jsonl"
    lines = events.read_text().splitlines()
    first = json.loads(lines[1])
    assert first["type"] == "tool_use"
    first["part"]["state"]["output"] = output
    first["part"]["state"]["input"] = {"command": argument, "nested": {"deep": [argument] * 3}}
    lines[1] = json.dumps(first)
    events.write_text("\n".join(lines) + "\n")


def test_hostile_output_is_bounded_and_host_paths_do_not_appear(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    huge = "A" * (3 << 20)
    _plant(run_dir, f"{run_dir.resolve()}/workspace/x.py and {Path.home()}/.ssh/id_rsa and {REPO}\n" + huge,
           argument=str(run_dir.resolve()) + "B" * (64 << 10))
    with (run_dir / "opencode-events.jsonl").open("a") as fh:  # a line past PART_CAP: named, never parsed
        fh.write(json.dumps({"type": "text", "part": {"messageID": "m", "type": "text", "text": "C" * (8 << 20)}}) + "\n")
    traj = written(run_dir)
    text = (run_dir / "trajectory.json").read_text()
    assert len(text) < 1 << 20, len(text)  # 11 MB of output, argument and text: bounded
    assert "1 store row(s) or event line(s) over" in traj.notes and "CCCC" not in text
    out = traj.steps[1].observation.results[0].content
    assert "[truncated:" in out and out.startswith("<run>/workspace/x.py and ~/.ssh/id_rsa")
    assert str(run_dir.resolve()) not in text and str(tmp_path) not in text and str(Path.home()) + "/" not in text
    assert "<run>" in json.dumps(traj.steps[1].tool_calls[0].arguments)


def test_a_key_in_the_run_files_is_gone_once_the_post_run_scrub_walked_the_folder(tmp_path: Path) -> None:
    # The launch writes trajectory.json before the post-run scrub (harness/trajectory/launch_hook.py):
    # the scrub redacts it like every text file of the run folder.
    key = "sk-vot-" + "7f3a9c1e" * 4
    run_dir = copy_run(tmp_path)
    _plant(run_dir, f"VOT_API_KEY={key}\n")
    write_trajectory(run_dir)
    assert key in (run_dir / "trajectory.json").read_text()  # it carries what the agent printed...
    changed, left = scrub_tree(run_dir, [key])
    assert changed and left == []
    text = (run_dir / "trajectory.json").read_text()
    assert key not in text and "[redacted]" in text  # ...until the scrub, which always follows it
    atif.Trajectory.model_validate(json.loads(text))


def test_a_trajectory_that_cannot_be_built_is_a_note_never_a_crash(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    (run_dir / "opencode-events.jsonl").write_text("not json\n")  # no model turn to read
    record = RunRecord.load(run_dir / "run.json")
    said: list[str] = []
    record_trajectory(record, run_dir, said.append, secrets=[])
    assert not (run_dir / "trajectory.json").exists() and record.artifacts.trajectory is None
    assert record.notes and "trajectory.json not written" in record.notes[0] and str(run_dir) not in record.notes[0]
    assert said and said[0].startswith("WARNING")
    record = RunRecord.load(REAL / "run.json")
    record_trajectory(record, copy_run(tmp_path / "b"), said.append, secrets=[])
    assert record.artifacts.trajectory == "trajectory.json" and record.notes == []


# -- a subagent, from opencode's store -------------------------------------------------------
def _store(data_dir: Path, t0: float) -> None:
    conn = new_store(data_dir)

    def ms(s: float) -> int:
        return int((t0 + s) * 1000)

    conn.execute("INSERT INTO session (id, parent_id, time_created) VALUES ('ses_root', NULL, ?)", (ms(0),))
    conn.execute("INSERT INTO session (id, parent_id, time_created) VALUES ('ses_child', 'ses_root', ?)", (ms(3),))
    messages = [("m0", "ses_root", "user", 0, None), ("m1", "ses_root", "assistant", 1, 9),
                ("m2", "ses_child", "user", 3, None), ("m3", "ses_child", "assistant", 3.5, 5),
                ("m4", "ses_root", "assistant", 9.5, 11)]
    for mid, sid, role, created, completed in messages:
        data = {"role": role, "time": {"created": ms(created), **({"completed": ms(completed)} if completed else {})},
                "modelID": "replay-hello"}
        conn.execute("INSERT INTO message VALUES (?, ?, ?)", (mid, sid, json.dumps(data)))
    parts = [("p0", "m0", {"type": "text", "text": "Find the bug."}),
             ("p1", "m1", {"type": "reasoning", "text": "Delegate the search."}),
             ("p2", "m1", {"type": "tool", "tool": "task", "callID": "call_task",
                           "state": {"status": "completed", "input": {"prompt": "search"}, "output": "found it",
                                     "metadata": {"sessionId": "ses_child"},
                                     "time": {"start": ms(2.5), "end": ms(8.5)}}}),
             ("p3", "m2", {"type": "text", "text": "search"}),
             ("p4", "m3", {"type": "text", "text": "It is in numbers.py."}),
             ("p5", "m4", {"type": "text", "text": "Done."})]
    for pid, mid, data in parts:
        conn.execute("INSERT INTO part VALUES (?, ?, '', ?)", (pid, mid, json.dumps(data)))
    conn.commit()
    conn.close()


def test_a_subagent_is_an_embedded_trajectory_its_task_call_names(tmp_path: Path) -> None:
    run_dir = copy_run(tmp_path)
    (run_dir / "opencode-events.jsonl").unlink()
    t0 = 1796526428.0
    _store(run_dir / "opencode" / "xdg" / "data" / "opencode", t0)
    record = json.loads((run_dir / "run.json").read_text())
    record["session"]["root_session"] = "ses_root"
    (run_dir / "run.json").write_text(json.dumps(record))

    def exchange(start: float, end: float, prompt: int, out: int) -> dict:
        from datetime import UTC, datetime

        def iso(s: float) -> str:
            return datetime.fromtimestamp(t0 + s, UTC).isoformat()
        return {"started": iso(start), "first_data": iso(start + 0.2), "ended": iso(end), "seconds": end - start,
                "method": "POST", "path": "/v1/chat/completions", "status": 200, "origin": "opencode",
                "usage": {"prompt_tokens": prompt, "completion_tokens": out, "cached_tokens": 0, "reasoning_tokens": 0},
                "tool_calls": [], "finish_reason": "stop"}
    rows = [exchange(1.1, 2.4, 100, 10), exchange(3.6, 4.8, 50, 5), exchange(9.6, 10.5, 130, 3)]
    (run_dir / "wire.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    traj = written(run_dir)
    assert [s.source for s in traj.steps] == ["user", "agent", "agent"]
    assert traj.steps[0].message == "Find the bug." and traj.steps[1].reasoning_content == "Delegate the search."
    [child] = traj.subagent_trajectories
    assert child.trajectory_id == "ses_child" and [s.message for s in child.steps] == ["search", "It is in numbers.py."]
    [result] = traj.steps[1].observation.results
    assert result.source_call_id == "call_task" and result.subagent_trajectory_ref[0].trajectory_id == "ses_child"
    # Each exchange is the message it lies in: the child's call lies in the parent's task turn too.
    assert [s.metrics.prompt_tokens for s in traj.steps[1:]] == [100, 130]
    assert child.steps[1].metrics.prompt_tokens == 50
    assert traj.final_metrics.total_prompt_tokens == 280 and traj.final_metrics.extra["model_calls"] == 3
    assert "opencode.db" in traj.notes


def test_a_run_that_never_reached_its_mission_is_refused_by_name(tmp_path: Path) -> None:
    from harness.errors import UserError

    refused = next(p for p in COMMITTED if RunRecord.load(p / "run.json").times.mission_start is None)
    with pytest.raises(UserError) as exc:
        build_trajectory(refused)
    assert exc.value.field == "times.mission_start" and "never started its mission" in exc.value.message


# -- a launch: the trajectory written before the post-run scrub, which covers it ---------------
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_launch_writes_the_trajectory_and_its_scrub_covers_it(project) -> None:
    from test_postrun_e2e import _bash, _launch, _write

    steps = [_bash("key", 'printf "key=%s\\n" "$VOT_API_KEY"'), _bash("where", "pwd"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    project.env.update(VLLM_API_KEY="sk-user-" + "5e1f" * 6)  # the unit then serves a key minted for the launch
    code, out, err, run_dir, rec = _launch(project, "leaky-trajectory", steps, env=["VLLM_API_KEY"])
    assert code == 0, (out[-2000:], err[-2000:])
    assert rec["status"] == "ok" and rec["artifacts"]["trajectory"] == "trajectory.json" and rec["notes"] == []
    text = (run_dir / "trajectory.json").read_text()
    traj = atif.Trajectory.model_validate(json.loads(text))
    outputs = {c.arguments.get("description"): r.content for s in traj.steps if s.observation
               for c, r in zip(s.tool_calls, s.observation.results)}
    assert rec["api_key"].startswith("minted for this launch")
    assert outputs["key"].strip() == "key=[redacted]"  # the minted key the agent printed, redacted by the scrub
    assert outputs["where"].strip() == "<run>/workspace"  # the host path the agent saw, replaced
    assert str(project.root) not in text and traj.final_metrics.total_prompt_tokens == rec["wire"]["tokens"]["input"]
