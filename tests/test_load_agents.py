"""`load agents` against the timed replay server (a real process speaking the OpenAI stream):
think times kept, turn order, child sessions forked and rejoined, distinct copies, and the
sweep's stopping rule. Timing bounds here are generous (a loaded 2-core machine); the tight
figures are measured by bench/agents_think.py."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from timed_replay import MODEL, REPO, make_timed  # noqa: F401 - the fixture

from harness.load.agents.replay import ReplayOptions, replay
from harness.load.agents.sweep import LevelStats, Slo, default_levels, sweep
from harness.load.agents.trace import AgentTrace, Session, Turn, dump


def turn(start: float, prompt: int, reused: int, out: int, think: float | None, dur: float = 0.1) -> Turn:
    return Turn(start_s=start, prompt_tokens=prompt, reused_blocks=reused, output_tokens=out, think_s=think,
                duration_s=dur)


# a parent of three turns; after its first a child of two turns runs, and the parent's third waits for it
TRACE = AgentTrace(block_size=16, sessions=[
    Session(id="s0", turns=[turn(0.0, 200, 0, 8, None), turn(0.3, 260, 12, 8, 0.2), turn(1.0, 300, 16, 4, 0.1)]),
    # the child outlasts the parent's second turn: the parent's third must wait for it, not its own think
    Session(id="s1", parent="s0", fork_after_turn=0, rejoin_before_turn=2,
            turns=[turn(0.15, 80, 0, 6, None), turn(0.9, 120, 5, 6, 0.5, dur=0.05)]),
])


def first_turn_cached(trace: AgentTrace, tokens: int) -> AgentTrace:
    """`trace` with its first session's first turn recorded as `tokens` read from the server's cache."""
    s0 = trace.sessions[0]
    first = s0.turns[0].model_copy(update={"cached_tokens": tokens})
    return trace.model_copy(update={"sessions": [s0.model_copy(update={"turns": [first, *s0.turns[1:]]}),
                                                 *trace.sessions[1:]]})


def test_copies_keep_think_times_order_forks_and_distinct_content(make_timed) -> None:  # noqa: F811
    server = make_timed("--ttft", "0.02", "--itl", "0.002")
    result = replay(TRACE, ReplayOptions(base_url=server.url, model=MODEL, copies=3, stagger_s=0.05, limit_s=60))
    assert not result.timed_out and len(result.turns) == 3 * 5 and all(t.ok for t in result.turns)
    by = {(t.copy, t.session, t.turn): t for t in result.turns}
    # staggered starts: copy c's first request never before its slot, c x 0.05 s after the run's
    # first (0.05 s after the run's start); late is allowed (a busy loop), early never
    assert all(by[(c, "s0", 0)].start_s >= 0.05 + c * 0.05 - 1e-3 for c in range(3))
    for c in range(3):
        # turn order within each session, and each request waited at least its think time
        for sid, n in (("s0", 3), ("s1", 2)):
            starts = [by[(c, sid, i)].start_s for i in range(n)]
            assert starts == sorted(starts)
        for t in (by[(c, "s0", 1)], by[(c, "s1", 1)]):
            assert t.think_s >= t.think_target_s - 1e-4 and t.think_s - t.think_target_s < 1.0
        # the child starts after the parent's fork turn ends; the parent's third turn after the child ends
        assert by[(c, "s1", 0)].start_s >= by[(c, "s0", 0)].end_s
        assert by[(c, "s0", 2)].start_s >= by[(c, "s1", 1)].end_s
        # the third turn's wait is the recorded gap after the child's end (1.0 - (0.9 + 0.05))
        assert by[(c, "s0", 2)].think_target_s == pytest.approx(0.05)
    errors = sorted(abs(t.think_s - t.think_target_s) for t in result.turns if t.think_target_s is not None)
    assert errors[len(errors) // 2] < 0.1  # p50; bench/agents_think.py measures the real figure (< 1 ms)
    # the server saw every copy's prompts at the trace's lengths, each copy under its own tag
    seen: dict[str, list[int]] = defaultdict(list)
    for row in server.log(at_least=3 * 5):
        seen[row["tag"]].append(row["usage"]["prompt_tokens"])
        assert row["skip_special_tokens"] is None  # asked for only when answers are fed
    assert {tag: sorted(v) for tag, v in seen.items()} == {
        f"a{c}-{sid}": sorted(t.prompt_tokens for t in TRACE.session(sid).turns)
        for c in range(3) for sid in ("s0", "s1")}
    assert [t.completion_tokens for t in result.turns if t.copy == 0 and t.session == "s0"] == [8, 8, 4]


def fake_level(ttft_per_copy: float):
    """A server whose TTFT grows with concurrency: n copies -> TTFT n * ttft_per_copy."""
    ran: list[int] = []

    def run(n: int) -> LevelStats:
        ran.append(n)
        return LevelStats(copies=n, turns=10, failed=0, ttft_p50_s=n * ttft_per_copy, ttft_p99_s=n * ttft_per_copy,
                          turn_p50_s=1.0, turn_p99_s=1.0, decode_p50_tok_s=10.0, think_error_p50_s=0.0)
    return run, ran


def test_sweep_stops_at_the_first_failure_and_bisects() -> None:
    run, ran = fake_level(0.01)
    out = sweep(run, default_levels(16), Slo(ttft_p99_s=0.055, turn_p99_s=2.0))
    assert ran == [1, 2, 4, 8, 6, 5] and out.sustained == 5  # 16 is never run
    run, ran = fake_level(1.0)
    out = sweep(run, [1, 2, 4], Slo(ttft_p99_s=0.5, turn_p99_s=2.0))
    assert ran == [1] and out.sustained == 0 and "TTFT p99" in out.levels[0].why
    run, ran = fake_level(0.01)
    everything = sweep(run, [1, 2, 4], Slo(ttft_p99_s=1, turn_p99_s=2.0))
    assert everything.sustained == 4 and ran == [1, 2, 4] and not everything.limit_found
    assert "the most tried" in everything.headline()
    assert out.limit_found and "the most tried" not in out.headline()


def test_a_failed_turn_fails_its_level() -> None:
    stats = LevelStats(copies=2, turns=4, failed=1, ttft_p50_s=0.01, ttft_p99_s=0.01, turn_p50_s=0.1,
                       turn_p99_s=0.1, decode_p50_tok_s=1.0, think_error_p50_s=0.0)
    assert not stats.judge(Slo(1, 1)).passed and "1 failed" in stats.why


def test_sweep_against_a_server_that_queues(make_timed) -> None:  # noqa: F811
    # one request at a time: a second agent's request waits a whole answer (~0.83 s) for its first token,
    # so 2 agents miss a 0.45 s TTFT p99 that 1 meets (each side has ~0.4 s to spare on a loaded machine)
    server = make_timed("--ttft", "0.03", "--itl", "0.02", "--max-running", "1")
    one = AgentTrace(block_size=16, sessions=[Session(id="s0", turns=[turn(0, 64, 0, 40, None),
                                                                      turn(0.5, 120, 4, 40, 0.05)])])

    def level(n: int) -> LevelStats:
        return LevelStats.of(replay(one, ReplayOptions(base_url=server.url, model=MODEL, copies=n, stagger_s=0,
                                                       limit_s=60)))
    out = sweep(level, [1, 2, 4], Slo(ttft_p99_s=0.45, turn_p99_s=5.0))
    assert [lv.copies for lv in out.levels] == [1, 2] and out.sustained == 1
    assert out.levels[1].ttft_p99_s > out.levels[0].ttft_p99_s


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / ".venv" / "bin" / "llms-benchmark"), *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=cwd, env={**os.environ, "COLUMNS": "250"})


def test_cli_trace_then_sweep(make_timed, tmp_path: Path) -> None:  # noqa: F811
    run = tmp_path / "run"
    run.mkdir()
    t0 = datetime(2026, 12, 3, tzinfo=UTC)
    rows = [(0.0, 0.2, 100, 6), (0.4, 0.6, 130, 6)]
    (run / "wire.jsonl").write_text("".join(json.dumps({
        "started": (t0 + timedelta(seconds=a)).isoformat(), "ended": (t0 + timedelta(seconds=b)).isoformat(),
        "path": "/v1/chat/completions", "status": 200, "messages": 2,
        "usage": {"prompt_tokens": p, "completion_tokens": o}}) + "\n" for a, b, p, o in rows))
    made = cli("load-trace", str(run), "--out", str(tmp_path / "t.trace.jsonl"), "--mooncake",
               str(tmp_path / "m.jsonl"), "--weka", str(tmp_path / "weka"), "--json", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["turns"] == 2 and (tmp_path / "m.jsonl").is_file()
    server = make_timed("--ttft", "0.02", "--itl", "0.002", "--preempt-every", "2", "--kv-tokens", "1000")
    swept = cli("load-agents", str(tmp_path / "t.trace.jsonl"), "--base-url", server.url, "--copies", "1,2",
                "--stagger", "0.05", "--ttft-p99", "5", "--turn-p99", "10", "--out-dir", str(tmp_path / "out"),
                "--sample-interval", "0.05", "--json", cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr
    printed = json.loads(swept.stdout)
    assert printed["sustained"] == 2 and [lv["copies"] for lv in printed["levels"]] == [1, 2]
    # the server's /metrics over each level: every other request preempted (2 of 2 copies x 2 turns);
    # KV usage is read (its peak depends on when a reading falls, so only its presence is asserted)
    two = printed["levels"][1]["server"]
    assert two["preemptions"] == 2 and two["readings"] >= 2 and two["kv_usage_peak"] is not None
    saved = json.loads(Path(printed["results"]).read_text())
    assert saved["model"] == MODEL and len(saved["turns_by_level"]["2"]) == 4
    # two traces at once: each copy replays both
    both = cli("load-agents", str(tmp_path / "t.trace.jsonl"), str(tmp_path / "t.trace.jsonl"), "--base-url",
               server.url, "--copies", "2", "--out-dir", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    assert len(json.loads(Path(json.loads(both.stdout)["results"]).read_text())["turns_by_level"]["2"]) == 8
    # the Mooncake export drives the same sweep
    again = cli("load-agents", str(tmp_path / "m.jsonl"), "--mooncake-block-size", "16", "--base-url", server.url,
                "--copies", "1", "--out-dir", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    # and so does the Weka export
    weka = cli("load-agents", str(tmp_path / "weka"), "--weka", "--base-url", server.url, "--copies", "1",
               "--out-dir", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert weka.returncode == 0, weka.stderr
    assert json.loads(weka.stdout)["sustained"] == 1
    # --warm-prefixes: a first turn the recorded server answered partly from its cache is warmed first
    dump(first_turn_cached(TRACE, 40), tmp_path / "cached.trace.jsonl")
    before = len(server.log())
    warmed = cli("load-agents", str(tmp_path / "cached.trace.jsonl"), "--base-url", server.url, "--copies", "1",
                 "--warm-prefixes", "--out-dir", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert warmed.returncode == 0, warmed.stderr
    assert json.loads(Path(json.loads(warmed.stdout)["results"]).read_text())["warm_prefixes"] is True
    new_rows = server.log(at_least=before + 1 + 5)[before:]
    assert [r["usage"]["prompt_tokens"] for r in new_rows if r["usage"]["completion_tokens"] == 1] == [32]
    # --feed-answers: the appending turns carry the previous answer, and the results say it was on
    before = len(server.log(at_least=before + 1 + 5))
    dump(TRACE, tmp_path / "plain.trace.jsonl")
    fed = cli("load-agents", str(tmp_path / "plain.trace.jsonl"), "--base-url", server.url, "--copies", "1",
              "--feed-answers", "--exact-tokens", "--out-dir", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert fed.returncode == 0, fed.stderr
    record = json.loads(Path(json.loads(fed.stdout)["results"]).read_text())
    assert record["feed_answers"] is True
    # --exact-tokens asked; this server offers no tokenizer, so the level says so and the words stand
    assert record["exact_tokens"] is True and record["exact_tokens_by_level"] == {"1": False}
    assert sum(t["fed"] for t in record["turns_by_level"]["1"]) == 3
    assert sorted(len(r["messages"]) for r in server.log(at_least=before + 5)[before:]) == [1, 1, 3, 3, 5]


@pytest.mark.parametrize("args,field", [
    (["--copies", "a,b"], "--copies"),
    (["--copies", "0"], "--copies"),
    (["--stagger", "-1"], "--stagger"),
])
def test_cli_bad_input_is_one_clear_error(tmp_path: Path, args: list[str], field: str) -> None:
    trace = tmp_path / "t.trace.jsonl"
    dump(TRACE, trace)
    out = cli("load-agents", str(trace), "--base-url", "http://127.0.0.1:9", *args, cwd=tmp_path)
    assert out.returncode == 2 and field in out.stderr and "Traceback" not in out.stderr


def test_cli_missing_trace_is_one_clear_error(tmp_path: Path) -> None:
    out = cli("load-agents", str(tmp_path / "none.trace.jsonl"), "--base-url", "http://127.0.0.1:9", cwd=tmp_path)
    assert out.returncode == 2 and "no trace file" in out.stderr and "Traceback" not in out.stderr


def test_a_level_past_its_limit_is_cut_and_fails(make_timed) -> None:  # noqa: F811
    server = make_timed("--ttft", "0.02", "--itl", "0.002")
    result = replay(TRACE, ReplayOptions(base_url=server.url, model=MODEL, copies=2, stagger_s=0, limit_s=0.4))
    assert result.timed_out and len(result.turns) < 2 * 5 and result.wall_s < 5
    stats = LevelStats.of(result).judge(Slo(ttft_p99_s=10, turn_p99_s=10))
    assert not stats.passed and "timed out" in stats.why


def test_a_dead_server_fails_the_level_by_error_type(tmp_path: Path) -> None:
    # port 9 (discard) on loopback: nothing listens, every turn is refused
    result = replay(TRACE, ReplayOptions(base_url="http://127.0.0.1:9", model=MODEL, copies=1, limit_s=30))
    stats = LevelStats.of(result).judge(Slo(ttft_p99_s=10, turn_p99_s=10))
    assert stats.failed == stats.turns == 5 and stats.errors == {"ConnectionRefusedError": 5}
    assert not stats.passed and "ConnectionRefusedError: 5" in stats.why


def test_a_rejoin_waits_for_the_later_of_its_own_think_and_the_child(make_timed) -> None:  # noqa: F811
    # the child ends early; the parent's own think (0.7 s) outlasts the gap after the child (0.6 s)
    trace = AgentTrace(block_size=16, sessions=[
        Session(id="s0", turns=[turn(0.0, 100, 0, 4, None), turn(0.8, 140, 6, 4, 0.7)]),
        Session(id="s1", parent="s0", fork_after_turn=0, rejoin_before_turn=1,
                turns=[turn(0.15, 40, 0, 4, None, dur=0.05)])])
    server = make_timed("--ttft", "0.01", "--itl", "0.002")
    result = replay(trace, ReplayOptions(base_url=server.url, model=MODEL, copies=1, limit_s=30))
    by = {(t.session, t.turn): t for t in result.turns}
    rejoin = by[("s0", 1)]
    assert rejoin.think_target_s == pytest.approx(0.7) and rejoin.think_s >= 0.7 - 1e-4
    assert rejoin.start_s >= by[("s0", 0)].end_s + 0.7 - 1e-4 and rejoin.start_s >= by[("s1", 0)].end_s


def test_a_prefix_another_session_cached_is_warmed_before_the_run_and_never_reported(make_timed) -> None:  # noqa: F811
    """The original's first turn read 40 of its 200 prompt tokens from the server's cache (a prefix
    another session left there): with warm_prefixes each copy sends that prefix once, in whole blocks
    (32 tokens at block size 16), one token asked, before its run starts; the turns are as without."""
    server = make_timed("--ttft", "0.01", "--itl", "0.002")
    warm_trace = first_turn_cached(TRACE, 40)
    result = replay(warm_trace, ReplayOptions(base_url=server.url, model=MODEL, copies=2, stagger_s=0.05,
                                              limit_s=60, warm_prefixes=True))
    assert result.warmed == 2 and result.warm_errors == [] and all(t.ok for t in result.turns)
    assert len(result.turns) == 2 * 5  # the warm-ups are not turns
    rows = server.log(at_least=2 + 2 * 5)
    warm = [r for r in rows if r["usage"]["completion_tokens"] == 1]
    assert sorted(r["tag"] for r in warm) == ["a0-s0", "a1-s0"]  # each copy its own words: no shared cache
    assert {r["usage"]["prompt_tokens"] for r in warm} == {32}
    # Both sent before either copy's first timed request.
    first_turn = min(r["started"] for r in rows if r["usage"]["completion_tokens"] != 1)
    assert max(r["started"] for r in warm) < first_turn
    # Without the option, or with nothing cached, nothing is sent ahead.
    plain = replay(warm_trace, ReplayOptions(base_url=server.url, model=MODEL, copies=1, limit_s=60))
    assert plain.warmed == 0
    none = replay(TRACE, ReplayOptions(base_url=server.url, model=MODEL, copies=1, limit_s=60, warm_prefixes=True))
    assert none.warmed == 0


def answer_digest(tokens: int) -> list:
    """The log's digest of the assistant message that carries the timed server's answer of `tokens`
    tokens (it streams WORDS in turn)."""
    from harness.replay.timed import WORDS
    from harness.replay.timed_wire import messages_digest

    text = "".join(WORDS[k % len(WORDS)] for k in range(tokens))
    return messages_digest({"messages": [{"role": "assistant", "content": text}]})[0]


def test_feed_answers_carries_each_copys_own_previous_answer_at_the_recorded_length(make_timed) -> None:  # noqa: F811
    """With feed_answers, an appending turn is the previous request's messages, the answer the
    server streamed for it, and new words to the recorded count; copies still share nothing."""
    server = make_timed("--ttft", "0.01", "--itl", "0.002")
    result = replay(TRACE, ReplayOptions(base_url=server.url, model=MODEL, copies=2, stagger_s=0.05, limit_s=60,
                                         feed_answers=True))
    assert not result.timed_out and all(t.ok for t in result.turns) and len(result.turns) == 2 * 5
    # every turn but each session's first appends in TRACE, so all of those are fed
    assert {(t.session, t.turn) for t in result.turns if t.fed} == {("s0", 1), ("s0", 2), ("s1", 1)}
    rows = server.log(at_least=2 * 5)
    by_tag: dict[str, list[dict]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: r["index"]):
        by_tag[row["tag"]].append(row)
    assert sorted(by_tag) == ["a0-s0", "a0-s1", "a1-s0", "a1-s1"]
    # every answer asked with its special tokens in the text, so it tokenises back to what was cached
    assert all(row["skip_special_tokens"] is False for row in rows)
    for tag, session_rows in by_tag.items():
        trace_turns = TRACE.session(tag.split("-")[1]).turns
        assert [r["usage"]["prompt_tokens"] for r in session_rows] == [t.prompt_tokens for t in trace_turns]
        assert [r["messages"][0][0] for r in session_rows] == ["user"] * len(trace_turns)
        for i in range(1, len(session_rows)):
            before, now = session_rows[i - 1]["messages"], session_rows[i]["messages"]
            # the previous request whole, then its answer as the server wrote it, then one new user message
            assert now[:len(before)] == before
            assert now[len(before)] == answer_digest(trace_turns[i - 1].output_tokens)
            assert [m[0] for m in now[len(before) + 1:]] == ["user"]
    # the copies' words differ: no message a copy wrote appears in the other's requests
    words = {c: {m[2] for tag, rs in by_tag.items() if tag.startswith(f"a{c}-") for r in rs for m in r["messages"]
                 if m[0] == "user"} for c in (0, 1)}
    assert words[0] and not words[0] & words[1]


def test_feed_answers_sends_a_turn_that_does_not_append_as_its_own_message(make_timed) -> None:  # noqa: F811
    """A shrink (a compaction: nothing reused) or growth too small for the previous answer cannot
    hold that answer: those turns go as a single user message at the recorded length."""
    trace = AgentTrace(block_size=16, sessions=[Session(id="s0", turns=[
        turn(0.0, 200, 0, 8, None), turn(0.2, 120, 0, 8, 0.1),  # shrank: a new context
        turn(0.4, 125, 7, 8, 0.1),  # grew by 5 after an 8-token answer: no room for it
        turn(0.6, 180, 7, 4, 0.1)])])  # appends again: fed
    server = make_timed("--ttft", "0.01", "--itl", "0.002")
    result = replay(trace, ReplayOptions(base_url=server.url, model=MODEL, copies=1, limit_s=60, feed_answers=True))
    assert all(t.ok for t in result.turns) and [t.fed for t in result.turns] == [False, False, False, True]
    rows = sorted(server.log(at_least=4), key=lambda r: r["index"])
    assert [r["usage"]["prompt_tokens"] for r in rows] == [200, 120, 125, 180]
    assert [len(r["messages"]) for r in rows] == [1, 1, 1, 3]
    assert rows[3]["messages"][:2] == [rows[2]["messages"][0], answer_digest(8)]
