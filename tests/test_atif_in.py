"""Issue 50, parts 3 and 4: any agent's ATIF trajectory as load (harness/trajectory/atif_in.py).

The fixtures in tests/data/atif/ were written by hand in the RFC's shape (a Claude-Code-like
session with an embedded subagent; an agent that records neither token counts nor times); the
expected figures are read from them here, not restated."""

from __future__ import annotations

import copy
import json
import os
from datetime import datetime
from pathlib import Path

import pytest
from timed_replay import MODEL, make_timed  # noqa: F401 - the fixture

from harness.errors import UserError
from harness.load.agents.trace import AgentTrace, dump, load
from harness.trajectory import atif_in
from harness.trajectory.atif_in import CHARS_PER_TOKEN, convert, read, sniff

DATA = Path(__file__).parent / "data" / "atif"
CLAUDE = DATA / "claude-code-subagent.trajectory.json"
BARE = DATA / "no-metrics.trajectory.json"


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _agent_steps(traj: dict) -> list[dict]:
    return [s for s in traj["steps"] if s["source"] == "agent"]


def _write(tmp_path: Path, data: dict, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_a_claude_code_like_trajectory_with_a_subagent() -> None:
    raw = json.loads(CLAUDE.read_text())
    trace = convert(CLAUDE)
    root, sub = trace.sessions
    sub_raw = raw["subagent_trajectories"][0]
    # each agent step with metrics is a turn: the file's own counts, untouched
    for session, steps in ((root, _agent_steps(raw)), (sub, _agent_steps(sub_raw))):
        assert [t.prompt_tokens for t in session.turns] == [s["metrics"]["prompt_tokens"] for s in steps]
        assert [t.output_tokens for t in session.turns] == [s["metrics"]["completion_tokens"] for s in steps]
        assert [t.cached_tokens for t in session.turns] == [s["metrics"].get("cached_tokens") for s in steps]
        assert [t.tool_calls for t in session.turns] == [[c["function_name"] for c in s.get("tool_calls") or []]
                                                         for s in steps]
        # timestamps only: think time is the gap between successive agent steps
        stamps = [_at(s["timestamp"]) for s in steps]
        assert [t.think_s for t in session.turns] == [None] + [pytest.approx(b - a, abs=1e-6)
                                                               for a, b in zip(stamps, stamps[1:], strict=False)]
    # the subagent forks after the turn of the step that delegates to it (the Task call) and the
    # parent's next turn waits for it
    task = next(i for i, s in enumerate(_agent_steps(raw)) if (s.get("tool_calls") or [{}])[0].get("function_name")
                == "Task")
    assert (sub.parent, sub.fork_after_turn, sub.rejoin_before_turn) == (root.id, task, task + 1)
    # start times are seconds after the trace's first model call, the subagent's on the same clock
    first = _at(_agent_steps(raw)[0]["timestamp"])
    assert sub.turns[0].start_s == pytest.approx(_at(_agent_steps(sub_raw)[0]["timestamp"]) - first)
    # a grown prompt reuses the previous one's full blocks (no token ids in the file)
    assert root.turns[1].reused_blocks == root.turns[0].prompt_tokens // trace.block_size
    # what was assumed is said, and kept
    assert len(trace.notes) == 1 and "upper bound" in trace.notes[0] and "7 of 7" in trace.notes[0]


def test_a_trajectory_without_metrics_or_times_is_estimated_and_says_so() -> None:
    raw = json.loads(BARE.read_text())
    trace = convert(BARE)
    (session,) = trace.sessions
    agent = _agent_steps(raw)
    assert len(session.turns) == len(agent)

    def chars(step: dict) -> int:
        obs = sum(len(r.get("content") or "") for r in (step.get("observation") or {}).get("results", []))
        return len(step["message"]) + obs
    for i, (turn, step) in enumerate(zip(session.turns, agent, strict=True)):
        before = raw["steps"][:raw["steps"].index(step)]
        assert turn.prompt_tokens == max(1, round(sum(chars(s) for s in before) / CHARS_PER_TOKEN))
        assert turn.output_tokens == max(1, round(len(step["message"]) / CHARS_PER_TOKEN))
        assert turn.think_s == (None if i == 0 else 0.0) and turn.start_s == 0.0 and turn.duration_s is None
    said = " | ".join(trace.notes)
    for field in ("metrics.prompt_tokens", "metrics.completion_tokens", "timestamp"):
        assert f"steps[].{field} absent on 4 of 4" in said
    assert "4 characters a token" in said and "think time is 0" in said


def test_recorded_request_times_give_exact_think_times_durations_and_ttft(tmp_path: Path) -> None:
    def step(n: int, start: str, first: str, end: str, prompt: int) -> dict:
        return {"step_id": n, "source": "agent", "message": "ok", "timestamp": start,
                "metrics": {"prompt_tokens": prompt, "completion_tokens": 9},
                "extra": {"request_started": start, "first_data": first, "request_ended": end}}
    data = {"schema_version": "ATIF-v1.8", "agent": {"name": "x", "version": "1"}, "steps": [
        {"step_id": 1, "source": "user", "message": "go"},
        step(2, "2026-11-20T10:00:00+00:00", "2026-11-20T10:00:00.250+00:00", "2026-11-20T10:00:02+00:00", 300),
        step(3, "2026-11-20T10:00:05.5+00:00", "2026-11-20T10:00:05.6+00:00", "2026-11-20T10:00:06+00:00", 420)]}
    trace = convert(_write(tmp_path, data))
    a, b = trace.sessions[0].turns
    assert (a.duration_s, a.ttft_s, b.think_s, b.start_s) == (2.0, 0.25, 3.5, 5.5)
    assert trace.notes == []


def test_prompt_token_ids_give_the_exact_shared_prefix(tmp_path: Path) -> None:
    ids = list(range(100, 164))  # 64 tokens: 4 blocks of 16
    changed = ids[:40] + [7] * 40  # shares 40 tokens with the first: 2 full blocks
    data = {"schema_version": "ATIF-v1.5", "agent": {"name": "x", "version": "1"}, "steps": [
        {"step_id": 1, "source": "agent", "message": "a",
         "metrics": {"prompt_tokens": 64, "completion_tokens": 3, "prompt_token_ids": ids}},
        {"step_id": 2, "source": "agent", "message": "b",
         "metrics": {"prompt_tokens": 80, "completion_tokens": 3, "prompt_token_ids": changed}}]}
    turns = convert(_write(tmp_path, data)).sessions[0].turns
    assert (turns[1].reused_blocks, turns[1].reuse) == (2, "append")


def test_subagent_files_beside_it_and_continuations_are_followed_never_outside(tmp_path: Path) -> None:
    def traj(prompts: list[int], **more) -> dict:
        return {"schema_version": "ATIF-v1.6", "agent": {"name": "x", "version": "1"}, **more, "steps": [
            {"step_id": i + 1, "source": "agent", "message": "m", "metrics": {"prompt_tokens": p, "completion_tokens": 5}}
            for i, p in enumerate(prompts)]}
    parent = traj([100, 200, 300], continued_trajectory_ref="trajectory.cont-1.json")
    parent["steps"][0]["observation"] = {"results": [{"subagent_trajectory_ref": [
        {"trajectory_path": "trajectory.sub.json"}, {"trajectory_path": "../outside.json"},
        {"trajectory_path": "/etc/passwd"}, {"trajectory_path": "missing.json"}]}]}
    _write(tmp_path, traj([50, 60]), "trajectory.sub.json")
    _write(tmp_path, traj([80, 90]), "trajectory.cont-1.json")  # the rest after a summarization
    _write(tmp_path.parent, traj([1]), "outside.json")
    trace = convert(_write(tmp_path, parent, "trajectory.json"))
    root, sub = trace.sessions
    assert [t.prompt_tokens for t in root.turns] == [100, 200, 300, 80, 90]
    assert root.turns[3].reuse == "none"  # the summarized prompt shrank: nothing reused
    assert (sub.parent, sub.fork_after_turn, sub.rejoin_before_turn) == ("s0", 0, 1)
    assert [t.prompt_tokens for t in sub.turns] == [50, 60]
    said = " | ".join(trace.notes)
    assert "'../outside.json': not a file beside" in said and "'/etc/passwd': not a file beside" in said
    assert "'missing.json': no such file" in said


def test_an_unreferenced_embedded_subagent_is_a_session_of_its_own(tmp_path: Path) -> None:
    data = json.loads(CLAUDE.read_text())
    data["steps"][2]["observation"]["results"][0].pop("subagent_trajectory_ref")
    trace = convert(_write(tmp_path, data))
    assert [s.parent for s in trace.sessions] == [None, None]
    assert any("'agent-explore-1': no step delegates to it" in n for n in trace.notes)


def test_sniff_tells_atif_by_content_not_name(tmp_path: Path) -> None:
    renamed = tmp_path / "wire.jsonl"
    renamed.write_text(CLAUDE.read_text())
    assert sniff(renamed) and sniff(BARE)
    wire = tmp_path / "t.json"
    wire.write_text(json.dumps({"path": "/v1/chat/completions", "note": "ATIF"}) + "\n")
    assert not sniff(wire) and not sniff(tmp_path / "absent.json")


@pytest.mark.parametrize("change,field", [
    (lambda d: d["steps"][1].update(step_id=7), "steps"),
    (lambda d: d["steps"][1]["metrics"].update(prompt_tokens="many"), "steps[1].metrics.prompt_tokens"),
    (lambda d: d["steps"][0].update(metrics={"prompt_tokens": 3}), "steps[0]"),  # metrics on a user step
    (lambda d: d.pop("agent"), "agent"),
    (lambda d: d.update(schema_version="ATIF-v2.0"), "schema_version"),
    (lambda d: d["subagent_trajectories"][0].pop("trajectory_id"), "subagent_trajectories"),
])
def test_invalid_input_names_the_file_and_the_field(tmp_path: Path, change, field: str) -> None:
    data = copy.deepcopy(json.loads(CLAUDE.read_text()))
    change(data)
    path = _write(tmp_path, data)
    with pytest.raises(UserError) as caught:
        read(path)
    assert caught.value.field is not None and caught.value.field.startswith(field)
    assert str(path) in str(caught.value) and caught.value.fix


def test_hostile_files_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    link = tmp_path / "link.json"
    os.symlink(CLAUDE, link)
    with pytest.raises(UserError, match="symbolic link"):
        read(link)
    monkeypatch.setattr(atif_in, "MAX_BYTES", 1000)
    with pytest.raises(UserError, match="over the 1000"):
        read(CLAUDE)
    monkeypatch.undo()
    (tmp_path / "bad.json").write_text('{"schema_version": "ATIF-v1.7", ')
    with pytest.raises(UserError, match="not JSON"):
        read(tmp_path / "bad.json")
    only_user = {"schema_version": "ATIF-v1.7", "agent": {"name": "x", "version": "1"},
                 "steps": [{"step_id": 1, "source": "user", "message": "hi"}]}
    with pytest.raises(UserError, match="no agent step"):
        convert(_write(tmp_path, only_user))


def test_notes_survive_the_trace_file_and_files_without_them_are_unchanged(tmp_path: Path) -> None:
    trace = convert(BARE)
    dump(trace, tmp_path / "x.trace.jsonl")
    assert load(tmp_path / "x.trace.jsonl").notes == trace.notes
    plain = AgentTrace(sessions=trace.sessions)
    dump(plain, tmp_path / "p.trace.jsonl")
    assert "notes" not in (tmp_path / "p.trace.jsonl").read_text().splitlines()[0]


# ---------------------------------------------------------------- the command line

def test_cli_load_trace_reads_atif_says_what_it_assumed_and_bad_input_is_one_error(tmp_path: Path) -> None:
    from test_load_agents import cli

    made = cli("load-trace", str(BARE), "--out", str(tmp_path / "x.trace.jsonl"), "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    printed = json.loads(made.stdout)
    assert printed["turns"] == 4 and len(printed["notes"]) == 3
    assert "assumed" in made.stderr and "metrics.prompt_tokens" in made.stderr
    assert load(tmp_path / "x.trace.jsonl").notes == printed["notes"]
    broken = json.loads(CLAUDE.read_text())
    broken["steps"][1]["metrics"]["completion_tokens"] = [1]
    bad = cli("load-trace", str(_write(tmp_path, broken, "bad.json")), "--out", str(tmp_path / "y.trace.jsonl"),
              cwd=tmp_path)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "bad.json" in bad.stderr and "steps[1].metrics.completion_tokens" in bad.stderr


def test_cli_load_agents_replays_an_atif_trajectory_converted_or_direct(make_timed, tmp_path: Path) -> None:  # noqa: F811
    from test_load_agents import cli

    # the subagent's trajectory, its times shortened (the replay keeps recorded think times)
    data = json.loads(CLAUDE.read_text())
    for steps in (data["steps"], data["subagent_trajectories"][0]["steps"]):
        for s in steps:
            s.pop("timestamp", None)
    src = _write(tmp_path, data, "claude.json")
    made = cli("load-trace", str(src), "--out", str(tmp_path / "c.trace.jsonl"), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    server = make_timed("--ttft", "0.01", "--itl", "0.0005")
    expected = sorted(t.prompt_tokens for s in convert(src).sessions for t in s.turns)
    for given in (tmp_path / "c.trace.jsonl", src):
        before = len(server.log())
        swept = cli("load-agents", str(given), "--base-url", server.url, "--copies", "1", "--ttft-p99", "5",
                    "--turn-p99", "30", "--duration", "0", "--warmup", "0", "--repeats", "1", "--no-bisect",
                    "--out-dir", str(tmp_path / "out"), "--json", cwd=tmp_path)
        assert swept.returncode == 0, swept.stderr
        assert json.loads(swept.stdout)["sustained"] == 1
        rows = server.log(at_least=before + len(expected))[before:]
        assert sorted(r["usage"]["prompt_tokens"] for r in rows) == expected
        assert "assumed" in swept.stderr  # the notes travel in the trace file too
