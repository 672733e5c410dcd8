"""Agent traces from a wire log; our file format; AIPerf's Mooncake format and back (issue 37)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.load.agents import aiperf
from harness.load.agents.synth import Synth, block_ids
from harness.load.agents.trace import AgentTrace, Session, Turn, dump, from_wire, load

T0 = datetime(2026, 12, 3, 7, 0, tzinfo=UTC)


def exchange(start: float, end: float, prompt: int, out: int, messages: int, cached: int = 0, **extra) -> dict:
    iso = lambda s: (T0 + timedelta(seconds=s)).isoformat()  # noqa: E731
    return {"started": iso(start), "ended": iso(end), "method": "POST", "path": "/v1/chat/completions",
            "status": 200, "messages": messages, "tool_calls": ["bash"],
            "usage": {"prompt_tokens": prompt, "completion_tokens": out, "cached_tokens": cached,
                      "reasoning_tokens": 0}, **extra}


def write_wire(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "wire.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# a parent of three turns; after its first, a `task` child of two turns runs; the parent rejoins
WIRE = [
    exchange(0.0, 1.0, 1000, 50, 2),
    {"started": T0.isoformat(), "ended": T0.isoformat(), "method": "GET", "path": "/v1/models", "status": 200},
    exchange(1.5, 2.0, 300, 20, 2),           # a child: holds less than the parent's prompt and answer
    exchange(2.25, 2.5, 340, 10, 4),
    exchange(3.0, 4.0, 1400, 60, 4),          # the parent again: holds its last prompt and answer
    exchange(4.5, 5.0, 900, 5, 6),            # the prompt shrank (compaction)
]


def test_turns_think_times_and_reuse_from_a_wire_log(tmp_path: Path) -> None:
    wire = [WIRE[0], WIRE[1], exchange(1.5, 2.0, 300, 20, 1), WIRE[3] | {"messages": 3}, WIRE[4] | {"messages": 5},
            WIRE[5] | {"messages": 7}]
    trace = from_wire(write_wire(tmp_path, wire), block_size=16)
    assert [s.id for s in trace.sessions] == ["s0", "s1", "s2"]
    parent, child, shrunk = trace.sessions
    assert [t.prompt_tokens for t in parent.turns] == [1000, 1400]
    assert [t.prompt_tokens for t in child.turns] == [300, 340]
    assert (child.parent, child.fork_after_turn, child.rejoin_before_turn) == ("s0", 0, 1)
    assert parent.turns[0].think_s is None and parent.turns[1].think_s == pytest.approx(2.0)
    assert child.turns[1].think_s == pytest.approx(0.25)
    assert parent.turns[1].reused_blocks == 1000 // 16 and parent.turns[1].reuse == "append"
    # a prompt that shrank (compaction) holds no session's last prompt: it reads as a child (documented)
    assert (shrunk.parent, shrunk.fork_after_turn, shrunk.turns[0].reused_blocks) == ("s0", 1, 0)
    assert [t.output_tokens for t in parent.turns] == [50, 60]
    assert parent.turns[0].duration_s == pytest.approx(1.0)


def test_a_tools_own_model_calls_are_not_agent_turns(tmp_path: Path) -> None:
    from harness.sandbox.wirelog import TOOL_ORIGIN
    wire = [exchange(0, 1, 100, 5, 2, origin="opencode"), exchange(1.2, 1.5, 50, 5, 1, origin=TOOL_ORIGIN),
            exchange(2, 3, 130, 5, 4, origin="opencode")]
    trace = from_wire(write_wire(tmp_path, wire))
    assert [[t.prompt_tokens for t in s.turns] for s in trace.sessions] == [[100, 130]]


def test_overlapping_exchanges_are_separate_sessions(tmp_path: Path) -> None:
    trace = from_wire(write_wire(tmp_path, [exchange(0, 2, 100, 5, 2), exchange(1, 3, 120, 5, 2)]))
    assert len(trace.sessions) == 2 and trace.sessions[1].parent == "s0"


def test_our_format_round_trips(tmp_path: Path) -> None:
    trace = from_wire(write_wire(tmp_path, WIRE))
    dump(trace, tmp_path / "t.trace.jsonl")
    assert load(tmp_path / "t.trace.jsonl") == trace


def carried(trace: AgentTrace) -> list:
    """What the Mooncake export carries of a trace (everything but the reuse source, cached and tools)."""
    return [(s.id, s.parent, s.fork_after_turn, s.rejoin_before_turn,
             [(round(t.start_s, 3), t.prompt_tokens, t.reused_blocks, t.output_tokens,
               None if t.think_s is None else round(t.think_s, 3),
               None if t.duration_s is None else round(t.duration_s, 3)) for t in s.turns])
            for s in trace.sessions]


def test_aiperf_round_trip(tmp_path: Path) -> None:
    wire = [WIRE[0], exchange(1.5, 2.0, 300, 20, 1), exchange(2.25, 2.5, 340, 10, 3), exchange(3.0, 4.0, 1400, 60, 5)]
    ours = from_wire(write_wire(tmp_path, wire), block_size=16)
    n = aiperf.export(ours, tmp_path / "mooncake.jsonl")
    assert n == 4
    rows = [json.loads(line) for line in (tmp_path / "mooncake.jsonl").read_text().splitlines()]
    for row in rows:  # AIPerf's own check (PromptGenerator._build_token_sequence)
        last = row["input_length"] - (len(row["hash_ids"]) - 1) * 16
        assert 0 < last <= 16
        assert "session_id" not in row  # AIPerf would treat input_length as a delta
    assert [r["timestamp"] for r in rows] == sorted(r["timestamp"] for r in rows)
    back = aiperf.import_file(tmp_path / "mooncake.jsonl", block_size=16)
    assert carried(back) == carried(ours)


def test_a_foreign_mooncake_file_reads_as_one_session_a_row(tmp_path: Path) -> None:
    path = tmp_path / "fast25.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1, 2, 3]}\n'
                    '{"timestamp": 10, "input_length": 50, "output_length": 3, "hash_ids": [1, 2, 4, 5]}\n')
    trace = aiperf.import_file(path, block_size=16)
    assert [len(s.turns) for s in trace.sessions] == [1, 1]


@pytest.mark.parametrize("line,field", [
    ('{"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1]}', "hash_ids"),
    ('{"timestamp": 0, "input_length": -1, "output_length": 3, "hash_ids": []}', "input_length"),
    ('{"timestamp": 0, "input_length": 4, "output_length": 3, "hash_ids": "x"}', "hash_ids"),
    ('not json', None),
])
def test_bad_mooncake_rows_are_one_clear_error(tmp_path: Path, line: str, field: str | None) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(UserError) as exc:
        aiperf.import_file(path, block_size=16)
    assert exc.value.fix and (field is None or exc.value.field == field)


def test_bad_trace_files_name_the_field(tmp_path: Path) -> None:
    trace = from_wire(write_wire(tmp_path, WIRE))
    path = tmp_path / "t.trace.jsonl"
    dump(trace, path)
    lines = path.read_text().splitlines()
    session = json.loads(lines[1])
    session["turns"][1]["reused_blocks"] = 10_000
    path.write_text("\n".join([lines[0], json.dumps(session)]) + "\n")
    with pytest.raises(UserError) as exc:
        load(path)
    assert "reused_blocks" in str(exc.value)
    with pytest.raises(UserError):
        load(tmp_path / "missing.trace.jsonl")
    with pytest.raises(UserError) as exc:
        from_wire(write_wire(tmp_path, [{"path": "/v1/models", "status": 200}]))
    assert "no completed chat exchange" in str(exc.value)


def trace_of(*turns: tuple[int, int]) -> AgentTrace:
    return AgentTrace(block_size=16, sessions=[Session(id="s0", turns=[
        Turn(start_s=i, prompt_tokens=p, reused_blocks=r, output_tokens=4, think_s=None if i == 0 else 0.01)
        for i, (p, r) in enumerate(turns)])])


def test_synthesised_prompts_keep_lengths_and_block_reuse_and_differ_across_copies() -> None:
    trace = trace_of((100, 0), (180, 6), (60, 2))
    a, b = Synth(trace, 0), Synth(trace, 1)
    p = [a.prompt("s0", i).split() for i in range(3)]
    assert [len(x) for x in p] == [100, 180, 60]
    assert p[1][:6 * 16] == p[0][:6 * 16] and p[1][6 * 16:7 * 16] != p[0][6 * 16:7 * 16]
    assert p[2][:32] == p[1][:32] and p[2][32:48] != p[1][32:48]
    q = b.prompt("s0", 0).split()
    assert q[0] != p[0][0] and sum(x == y for x, y in zip(q[1:16], p[0][1:16], strict=True)) < 15
    assert block_ids(trace)[("s0", 1)][:6] == block_ids(trace)[("s0", 0)][:6]


def test_weka_round_trip_with_a_subagent(tmp_path: Path) -> None:
    from harness.load.agents import weka
    wire = [exchange(0.0, 1.0, 1000, 50, 2, first_data=(T0 + timedelta(seconds=0.3)).isoformat()),
            exchange(1.5, 2.0, 300, 20, 1), exchange(2.25, 2.5, 340, 10, 3), exchange(3.0, 4.0, 1400, 60, 5),
            exchange(4.2, 4.5, 1500, 6, 7)]
    ours = from_wire(write_wire(tmp_path, wire), block_size=16)
    assert ours.sessions[0].turns[0].ttft_s == pytest.approx(0.3)
    paths = weka.export(ours, tmp_path / "weka", model="m")
    assert [p.name for p in paths] == ["s0.json"]
    obj = json.loads(paths[0].read_text())
    assert set(obj) == {"id", "models", "block_size", "hash_id_scope", "requests", "totals"}  # totals: ours, opaque to AIPerf
    assert [r["type"] for r in obj["requests"]] == ["s", "subagent", "s", "s"]
    assert obj["requests"][1]["status"] == "completed" and obj["requests"][1]["agent_id"] == "s1"
    back = weka.import_paths([tmp_path / "weka"])
    assert carried(back) == carried(ours)
    assert [t.ttft_s for t in back.sessions[0].turns] == [t.ttft_s for t in ours.sessions[0].turns]


def test_weka_refuses_what_it_cannot_say() -> None:
    from harness.load.agents import weka
    one = [Turn(start_s=0, prompt_tokens=20, reused_blocks=0, output_tokens=2),
           Turn(start_s=1, prompt_tokens=40, reused_blocks=1, output_tokens=2, think_s=0.1),
           Turn(start_s=2, prompt_tokens=60, reused_blocks=2, output_tokens=2, think_s=0.1)]
    late = AgentTrace(sessions=[Session(id="a", turns=one),
                                Session(id="b", parent="a", fork_after_turn=0, rejoin_before_turn=2, turns=one)])
    with pytest.raises(UserError, match="rejoins a at turn 2"):
        weka.to_files(late)
    nested = AgentTrace(sessions=[Session(id="a", turns=one), Session(id="b", parent="a", fork_after_turn=0,
                                                                      turns=one),
                                  Session(id="c", parent="b", fork_after_turn=0, turns=one)])
    with pytest.raises(UserError, match="nests one level"):
        weka.to_files(nested)


@pytest.mark.parametrize("obj,field", [
    ({"id": "x", "block_size": 16, "requests": [{"type": "q"}]}, "type"),
    ({"id": "x", "block_size": 16, "requests": [{"type": "s", "in": 10, "out": 1}]}, "hash_ids"),
    ({"id": "x", "requests": []}, "block_size"),
    ({"id": "x", "block_size": 16, "requests": [{"type": "subagent", "requests": []}]}, "requests"),
])
def test_bad_weka_files_are_one_clear_error(tmp_path: Path, obj: dict, field: str) -> None:
    from harness.load.agents import weka
    path = tmp_path / "w.json"
    path.write_text(json.dumps(obj))
    with pytest.raises(UserError) as exc:
        weka.import_paths([path])
    assert exc.value.field == field and exc.value.fix


def make_store(data_dir: Path, sessions: dict[str, str | None], messages: list[tuple[str, float, float]]) -> None:
    """An opencode store with the tables and columns harness/opencode/store.py reads."""
    from opencode_store import new_store

    conn = new_store(data_dir)
    for sid, parent in sessions.items():
        conn.execute("INSERT INTO session (id, parent_id, title, time_created) VALUES (?, ?, 't', 0)", (sid, parent))
    for n, (sid, created, completed) in enumerate(messages):
        data = {"role": "assistant", "time": {"created": int((T0.timestamp() + created) * 1000),
                                              "completed": int((T0.timestamp() + completed) * 1000)}}
        conn.execute("INSERT INTO message VALUES (?, ?, ?)", (f"m{n}", sid, json.dumps(data)))
    conn.commit()
    conn.close()


def test_the_store_names_sessions_where_growth_would_guess_wrong(tmp_path: Path) -> None:
    # a child whose first prompt is larger than its parent's last prompt and answer: growth alone
    # would read it as the parent going on; the store says it is the child
    wire = [exchange(0.0, 1.0, 500, 20, 2), exchange(1.2, 2.0, 800, 20, 2), exchange(2.2, 2.6, 900, 10, 4),
            exchange(3.0, 3.5, 1200, 10, 4)]
    run = tmp_path / "run"
    run.mkdir()
    write_wire(run, wire)
    guessed = from_wire(run / "wire.jsonl")
    assert len(guessed.sessions) == 1
    make_store(run / "opencode" / "xdg" / "data" / "opencode", {"ses_root": None, "ses_task": "ses_root"},
               [("ses_root", -0.1, 1.05), ("ses_task", 1.15, 2.05), ("ses_task", 2.15, 2.65),
                ("ses_root", 2.9, 3.6)])
    from harness.load.agents.trace import from_run
    trace = from_run(run)
    root, task = trace.sessions
    assert (root.id, task.id) == ("ses_root", "ses_task")
    assert [t.prompt_tokens for t in root.turns] == [500, 1200]
    assert (task.parent, task.fork_after_turn, task.rejoin_before_turn) == ("ses_root", 0, 1)
    assert root.turns[1].think_s == pytest.approx(2.0)


@pytest.mark.parametrize("fork,rejoin,message", [(3, None, "fork_after_turn 3"), (1, 1, "rejoin_before_turn 1"),
                                                 (0, 3, "rejoin_before_turn 3")])
def test_fork_and_rejoin_must_be_within_the_parent(fork: int, rejoin: int | None, message: str) -> None:
    turns = [Turn(start_s=i, prompt_tokens=20, reused_blocks=0, output_tokens=2) for i in range(3)]
    with pytest.raises(ValueError, match=message):  # a replay would wait on a turn that never comes
        AgentTrace(sessions=[Session(id="a", turns=turns),
                             Session(id="b", parent="a", fork_after_turn=fork, rejoin_before_turn=rejoin,
                                     turns=turns)])


def test_merged_traces_keep_their_sessions_apart() -> None:
    from harness.load.agents.trace import merge
    a = trace_of((100, 0), (180, 6))
    child = AgentTrace(block_size=16, sessions=[a.sessions[0], Session(id="c", parent="s0", fork_after_turn=0,
                                                                        turns=a.sessions[0].turns)])
    merged = merge([a, child])
    assert [(s.id, s.parent) for s in merged.sessions] == [("t0.s0", None), ("t1.s0", None), ("t1.c", "t1.s0")]
    ids = block_ids(merged)
    assert not set(ids[("t0.s0", 0)]) & set(ids[("t1.s0", 0)])  # no shared blocks across traces in a copy
    with pytest.raises(UserError, match="block sizes differ"):
        merge([a, AgentTrace(block_size=32, sessions=trace_of((100, 0), (180, 2)).sessions)])
