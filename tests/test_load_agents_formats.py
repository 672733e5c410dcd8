"""Our agent trace through AIPerf's formats and back without loss (issue 52): ours -> Weka/AgentX
-> ours and ours -> Mooncake -> ours keep every field the replay uses (cached tokens, tool
names, TTFT, think, reuse, the session tree); a foreign Weka file keeps its stop reasons and
its first think through ours; what a file carries in our own keys is checked like any input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UserError
from harness.load.agents import aiperf, weka
from harness.load.agents.trace import AgentTrace, Session, Turn, dump, load


def t(start, prompt, reused, out, think, *, dur=0.25, ttft=0.031, cached=None, tools=(), reuse="append") -> Turn:
    return Turn(start_s=start, prompt_tokens=prompt, reused_blocks=reused, output_tokens=out, think_s=think,
                duration_s=dur, ttft_s=ttft, cached_tokens=cached, tool_calls=list(tools), reuse=reuse)


# Two roots; s0 forks s1 (rejoins at the next turn) and s2 (never rejoins); the sessions listed by
# start, so the second root sits between its neighbour's children.
RICH = AgentTrace(source="run-x", block_size=16, sessions=[
    Session(id="s0", turns=[t(0.0, 300, 0, 20, None, cached=288, tools=["read", "task"], reuse="none"),
                            t(1.123456, 420, 18, 12, 0.5, tools=["task"]),
                            t(2.5, 200, 0, 7, 0.75, cached=0, reuse="none", ttft=None)]),
    Session(id="s1", parent="s0", fork_after_turn=0, rejoin_before_turn=1,
            turns=[t(0.3, 90, 0, 5, None, tools=["grep"]), t(0.6, 130, 5, 5, 0.1, cached=80)]),
    Session(id="s3", turns=[t(0.4, 64, 0, 4, None, dur=None, ttft=None)]),
    Session(id="s2", parent="s0", fork_after_turn=1, turns=[t(1.7, 50, 0, 3, None)]),
])


def same(a: AgentTrace, b: AgentTrace) -> None:
    assert a.model_dump(exclude={"source"}) == b.model_dump(exclude={"source"})


def test_ours_to_weka_and_back_keeps_every_field(tmp_path: Path) -> None:
    paths = weka.export(RICH, tmp_path / "weka")
    assert sorted(p.name for p in paths) == ["s0.json", "s3.json"]
    files = {p.stem: json.loads(p.read_text()) for p in paths}
    # AIPerf's WekaTrace forbids keys it does not declare: ours travel in its opaque `totals` only
    assert set(files["s0"]) == {"id", "models", "block_size", "hash_id_scope", "requests", "totals"}
    assert set(files["s0"]["requests"][0]) == {"t", "type", "model", "in", "out", "hash_ids", "stop", "api_time",
                                               "think_time", "ttft"}
    # tool_tokens / system_tokens are not known, so not claimed (0 would say there are none)
    assert "tool_tokens" not in files["s0"] and "system_tokens" not in files["s0"]
    same(weka.import_paths([tmp_path / "weka"]), RICH)


def test_ours_to_mooncake_and_back_keeps_every_field(tmp_path: Path) -> None:
    aiperf.export(RICH, tmp_path / "m.jsonl")
    back = aiperf.import_file(tmp_path / "m.jsonl", block_size=16)
    same(back, RICH)
    rows = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert set(rows[0]) - {"timestamp", "input_length", "output_length", "hash_ids"} <= set(aiperf.EXTRA)


def test_our_trace_file_keeps_a_stop_reason_and_writes_none_where_there_is_none(tmp_path: Path) -> None:
    dump(RICH, tmp_path / "a.trace.jsonl")
    assert '"stop"' not in (tmp_path / "a.trace.jsonl").read_text()  # files as before the field
    stopped = RICH.model_copy(deep=True)
    stopped.sessions[0].turns[0].stop = "max_tokens"
    dump(stopped, tmp_path / "b.trace.jsonl")
    same(load(tmp_path / "b.trace.jsonl"), stopped)
    same(weka.from_objects(list(weka.to_files(stopped).values())), stopped)


FOREIGN = {  # as the Weka corpus writes them: stop reasons, a first think, hash ids for the cached prefix only
    "id": "trace_1", "models": ["claude"], "block_size": 16, "hash_id_scope": "local", "tool_tokens": 900,
    "system_tokens": 3000,
    "requests": [
        {"t": 0.0, "type": "s", "model": "claude", "in": 100, "out": 10, "hash_ids": [1, 2, 3, 4, 5, 6, 7],
         "stop": "tool_use", "api_time": 1.5, "think_time": 0.2, "ttft": 0.4},
        {"t": 2.0, "type": "s", "model": "claude", "in": 140, "out": 10, "hash_ids": [1, 2, 3, 4, 5, 6],
         "stop": "end_turn", "api_time": 1.0, "think_time": 0.5, "ttft": 0.3},
        {"t": 4.0, "type": "s", "model": "claude", "in": 150, "out": 3, "hash_ids": [9], "stop": "",
         "api_time": 0.5, "think_time": 1.0},
    ]}


def test_a_foreign_weka_trace_through_ours_keeps_what_the_replay_uses_and_names_the_rest() -> None:
    ours = weka.from_objects([FOREIGN])
    assert [x.stop for x in ours.sessions[0].turns] == ["tool_use", "end_turn", ""]
    assert [x.think_s for x in ours.sessions[0].turns] == [0.2, 0.5, 1.0]
    assert [x.reused_blocks for x in ours.sessions[0].turns] == [0, 6, 0]
    again = weka.to_files(ours)["trace_1"]["requests"]
    for mine, theirs in zip(again, FOREIGN["requests"], strict=True):
        for key in ("t", "type", "in", "out", "stop", "api_time", "think_time"):
            assert mine[key] == theirs[key], key
        assert mine.get("ttft") == theirs.get("ttft")
    # what is not kept is named
    assert "tool_tokens" in weka.NOT_KEPT and "hash_ids values (renumbered)" in weka.NOT_KEPT
    # and from there on the round trip is a fixed point
    assert weka.to_files(weka.from_objects([weka.to_files(ours)["trace_1"]])) == weka.to_files(ours)


@pytest.mark.parametrize("change,field", [
    (lambda f: f["totals"]["llmsb"]["turns"]["s0"].pop(), "totals.llmsb"),
    (lambda f: f["totals"]["llmsb"]["turns"]["s0"][0].update(tool_calls=[{"x": 1}]), "tool_calls"),
    (lambda f: f["totals"]["llmsb"]["turns"]["s0"][0].update(cached_tokens=-5), "cached_tokens"),
    (lambda f: f["totals"]["llmsb"]["turns"]["s0"][0].update(reuse="stolen"), "reuse"),
    (lambda f: f["totals"]["llmsb"]["turns"]["s0"][0].update(path="/etc/passwd"), "totals.llmsb"),
    (lambda f: f["totals"]["llmsb"].update(order="all"), "totals.llmsb"),
    (lambda f: f["totals"]["llmsb"].update(order=[0]), "totals.llmsb"),
])
def test_our_keys_in_a_weka_file_are_checked_like_any_input(change, field: str) -> None:
    files = weka.to_files(RICH)
    change(files["s0"])
    with pytest.raises(UserError) as exc:
        weka.from_objects(list(files.values()))
    assert field in str(exc.value.render())


@pytest.mark.parametrize("key,value", [("llmsb_tools", "read"), ("llmsb_cached_tokens", -1),
                                       ("llmsb_reuse", "x"), ("llmsb_ttft_ms", -3)])
def test_our_keys_in_a_mooncake_file_are_checked_like_any_input(key: str, value) -> None:
    rows = aiperf.to_rows(RICH)
    rows[0][key] = value
    with pytest.raises(UserError) as exc:
        aiperf.from_rows(rows, block_size=16)
    assert key in exc.value.render()
