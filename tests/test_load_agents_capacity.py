"""A capacity figure a reader can trust (issue 52): faults apart from overload, one SLO, steady
state with repeats and an interval, and AIPerf's per-level metrics — against loopback servers
that speak the OpenAI stream (the timed replay server, killed mid-sweep; the fake that answers
503 or 429)."""

from __future__ import annotations

import inspect
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from timed_replay import MODEL, make_timed  # noqa: F401 - the fixture

sys.path.insert(0, str(Path(__file__).parent / "fakes"))
from openai_server import FakeOpenAI  # noqa: E402

from harness.load.agents.replay import ReplayOptions, ReplayResult, TurnResult, replay  # noqa: E402
from harness.load.agents.run import run_agents, server_gone  # noqa: E402
from harness.load.agents.slo import PRODUCT_SLO, Measure, Slo, min_turns  # noqa: E402
from harness.load.agents.sweep import T95, LevelStats, is_fault  # noqa: E402
from harness.load.agents.trace import AgentTrace, Session, Turn  # noqa: E402


def turn(start: float, prompt: int, reused: int, out: int, think: float | None, dur: float = 0.1) -> Turn:
    return Turn(start_s=start, prompt_tokens=prompt, reused_blocks=reused, output_tokens=out, think_s=think,
                duration_s=dur)


# one session of two turns: 2 requests a copy
TWO = AgentTrace(block_size=16, sessions=[Session(id="s0", turns=[turn(0.0, 64, 0, 6, None),
                                                                  turn(0.2, 100, 4, 6, 0.05)])])
EASY = Slo(ttft_p99_s=30, turn_p99_s=60)


def sweep_on(url: str, tmp_path: Path, levels: list[int], **kw):
    return run_agents(TWO, base_url=url, model=MODEL, levels=levels, slo=kw.pop("slo", EASY), stagger_s=0,
                      limit_s=30, out_root=tmp_path, folder=tmp_path / "out", sample_interval_s=0.2, **kw)


# ---------------------------------------------------------------- faults apart from overload

def test_a_server_killed_mid_sweep_ends_it_saying_so_never_as_capacity(make_timed, tmp_path: Path) -> None:  # noqa: F811
    """The issue's case: level 1 passes, the server dies, level 2's turns are refused. Before, that
    read as "1 agents sustained" (a found limit); now level 2 is invalid, the sweep ends there with
    the cause, and 1 is only a lower bound."""
    server = make_timed("--ttft", "0.01", "--itl", "0.002")

    def kill_after_first(level: LevelStats) -> None:
        if level.copies == 1:
            server.stop()
    outcome, path = sweep_on(server.url, tmp_path, [1, 2, 4], on_level=kill_after_first)
    assert [lv.copies for lv in outcome.levels] == [1, 2]  # 4 is never run on a dead server
    assert [lv.verdict for lv in outcome.levels] == ["pass", "invalid"]
    dead = outcome.levels[1]
    assert dead.faults == dead.failed == 4 and not dead.passed
    assert dead.errors == {"ConnectionRefusedError": 4} and "neither a pass nor a fail" in dead.why
    assert outcome.ended_by.startswith("the server died at 2 agents: GET /v1/models: ConnectError")
    assert outcome.sustained == 1 and outcome.figure == 1 and not outcome.limit_found
    assert "a lower bound" in outcome.headline() and "the server died" in outcome.headline()
    saved = json.loads(path.read_text())
    assert saved["ended_by"] == outcome.ended_by and saved["levels"][1]["verdict"] == "invalid"


def test_a_5xx_makes_its_level_invalid_not_a_fail_and_ends_the_sweep(tmp_path: Path) -> None:
    # every chat from the fifth on answers 503: level 1 (2 turns) and level 2's first... are served
    def refuse(_seen, n):
        return (503, {}) if n >= 2 else None
    with FakeOpenAI(refuse=refuse) as fake:
        outcome, _ = sweep_on(fake.url, tmp_path, [1, 2, 4])
    assert [lv.verdict for lv in outcome.levels] == ["pass", "invalid"]
    assert outcome.levels[1].errors == {"HTTP 503": outcome.levels[1].faults}
    # the server still lists its model: not dead, but the level's faults end the sweep
    assert outcome.ended_by.startswith("2 agents invalid") and "died" not in outcome.ended_by
    assert outcome.sustained == 1 and not outcome.limit_found


def test_a_fault_at_the_first_level_gives_no_figure_at_all(tmp_path: Path) -> None:
    with FakeOpenAI(refuse=lambda _seen, _n: (500, {})) as fake:
        outcome, _ = sweep_on(fake.url, tmp_path, [1, 2])
    assert outcome.figure is None and outcome.headline().startswith("no capacity figure")
    assert [lv.verdict for lv in outcome.levels] == ["invalid"]


def test_429_is_overload_a_fail_that_finds_the_limit(tmp_path: Path) -> None:
    def refuse(_seen, n):  # the server sheds load from the third request on
        return (429, {"Retry-After": "1"}) if n >= 2 else None
    with FakeOpenAI(refuse=refuse) as fake:
        outcome, _ = sweep_on(fake.url, tmp_path, [1, 2, 4])
    assert [lv.verdict for lv in outcome.levels] == ["pass", "fail"]
    assert outcome.levels[1].faults == 0 and outcome.levels[1].failed == 4
    assert outcome.ended_by is None and outcome.limit_found and outcome.sustained == 1


def test_which_errors_are_faults() -> None:
    assert not is_fault("timeout") and not is_fault("HTTP 429")
    for error in ("ConnectionRefusedError", "connect timeout", "HTTP 500", "HTTP 503", "HTTP 400",
                  "incomplete response", "no output tokens received", None):
        assert is_fault(error), error


def test_a_dead_unit_is_a_dead_server_even_while_its_port_answers() -> None:
    with FakeOpenAI() as fake:
        assert server_gone(fake.url, None) is None
        assert server_gone(fake.url, None, lambda: True) is None
        assert server_gone(fake.url, None, lambda: False) == "its unit is no longer running"
    assert server_gone(fake.url, None).startswith("GET /v1/models: ")  # stopped: nothing listens


# ---------------------------------------------------------------- one SLO

def test_both_entry_points_default_to_the_products_slo_and_write_it_on_the_record(tmp_path: Path) -> None:
    from harness.cli.launch import launch_local_cmd
    from harness.cli.load import load_agents
    from harness.stages.capacity import CapacityOptions

    def default(fn, name: str) -> float:
        return inspect.signature(fn).parameters[name].default
    assert default(launch_local_cmd, "capacity_ttft_p99") == default(load_agents, "ttft_p99") == 10.0
    assert default(launch_local_cmd, "capacity_turn_p99") == default(load_agents, "turn_p99") == 120.0
    assert (CapacityOptions().ttft_p99_s, CapacityOptions().turn_p99_s) == (10.0, 120.0)
    assert PRODUCT_SLO.product and not Slo(2, 60).product
    assert "(the product's SLO)" in PRODUCT_SLO.describe() and "not the product's" in Slo(2, 60).describe()
    with FakeOpenAI() as fake:
        outcome, path = sweep_on(fake.url, tmp_path, [1], slo=PRODUCT_SLO)
    saved = json.loads(path.read_text())
    assert saved["slo_def"] == {"ttft_p99_s": 10.0, "turn_p99_s": 120.0, "percentile": 99.0, "product": True,
                                "text": PRODUCT_SLO.describe()}
    assert saved["measure"]["repeats"] == 1 and "no interval" in saved["measure"]["text"]
    # fit to commit: nothing of this machine's (the server's address) in it
    assert "127.0.0.1" not in path.read_text() and "base_url" not in saved


# ---------------------------------------------------------------- the statistic and its interval

def results(ttfts_by_repeat: list[list[float]], *, window: float = 10.0, tokens: int = 11) -> list[ReplayResult]:
    """Repeats of one copy whose turns took these TTFTs, each turn 1 s + TTFT long."""
    out = []
    for ttfts in ttfts_by_repeat:
        r = ReplayResult(copies=1, window_s=window)
        r.turns = [TurnResult(copy=0, session="s0", turn=i, ok=True, start_s=float(i), end_s=i + 1 + v, ttft_s=v,
                              turn_s=1.0 + v, completion_tokens=tokens) for i, v in enumerate(ttfts)]
        out.append(r)
    return out


def test_too_few_turns_for_a_p99_report_and_judge_the_max_and_say_so() -> None:
    assert min_turns(99) == 100 and min_turns(95) == 20
    few = LevelStats.of(results([[0.1] * 11 + [9.0]]), EASY).judge(Slo(ttft_p99_s=5, turn_p99_s=60))
    # numpy's p99 of 12 values would be 8.1; too few turns: it is the max, 9.0, that is judged
    assert few.stat == "max" and few.ttft_p99_s == 9.0 and few.verdict == "fail"
    assert "TTFT max 9.00 s > 5 s" in few.why and "too few for a p99" in few.why
    many = LevelStats.of(results([[0.1] * 99 + [9.0]]), EASY).judge(Slo(ttft_p99_s=5, turn_p99_s=60))
    assert many.stat == "p99" and many.ttft_p99_s == pytest.approx(0.1 + 0.01 * 8.9) and many.passed


def test_a_level_passes_only_when_its_interval_does() -> None:
    # three repeats of 100 turns whose p99s are 7, 8 and 9.5 s: pooled and mean within 10 s, but the
    # 95 % interval of the mean reaches past it
    reps = [[top] * 100 for top in (7.0, 8.0, 9.5)]
    stats = LevelStats.of(results(reps), PRODUCT_SLO)
    by = stats.ttft_by_repeat_s
    half = T95[2] * statistics.stdev(by) / math.sqrt(3)
    assert stats.repeats == 3 and stats.ttft_interval_s == pytest.approx([statistics.fmean(by) - half,
                                                                          statistics.fmean(by) + half])
    assert stats.ttft_p99_s < 10 and stats.ttft_interval_s[1] > 10
    stats.judge(PRODUCT_SLO)
    assert stats.verdict == "fail" and "95 % interval" in stats.why
    tight = LevelStats.of(results([[top] * 100 for top in (7.0, 7.2, 7.4)]), PRODUCT_SLO).judge(PRODUCT_SLO)
    assert tight.passed and tight.ttft_interval_s[1] < 10
    from harness.load.agents.sweep import interval
    assert interval([0.1, 0.1, 5.0])[0] == 0.0  # a time's interval never reaches below zero
    one = LevelStats.of(results([[9.5] * 100]), PRODUCT_SLO).judge(PRODUCT_SLO)
    assert one.passed and one.ttft_interval_s is None  # one repeat: judged on its point, and it says no interval


def test_goodput_itl_and_throughput_as_aiperf_names_them() -> None:
    # 4 turns in a 2 s window, TTFT 0.5 / 0.5 / 3 / 3 s, 11 tokens each: ITL (turn - TTFT) / 10 = 0.1 s
    stats = LevelStats.of(results([[0.5, 0.5, 3.0, 3.0]], window=2.0), Slo(ttft_p99_s=1, turn_p99_s=60))
    assert stats.inter_token_latency_p50_s == pytest.approx(0.1)
    assert stats.request_throughput_per_s == pytest.approx(2.0)
    assert stats.output_token_throughput_per_s == pytest.approx(22.0)
    assert stats.goodput_per_s == pytest.approx(1.0)  # the two turns within TTFT 1 s
    assert stats.window_s == 2.0


# ---------------------------------------------------------------- steady state

def test_steady_state_recycles_copies_with_new_words_measures_after_the_warmup_and_stops_on_time(
        make_timed) -> None:  # noqa: F811
    server = make_timed("--ttft", "0.01", "--itl", "0.002")
    warmup, duration = 0.4, 1.2
    result = replay(TWO, ReplayOptions(base_url=server.url, model=MODEL, copies=2, stagger_s=0.05, limit_s=30,
                                       duration_s=duration, warmup_s=warmup))
    assert not result.timed_out and all(t.ok for t in result.turns)
    assert result.window_s == duration and result.warmup_s == warmup
    laps = {c: {t.lap for t in result.turns if t.copy == c} for c in (0, 1)}
    assert all(len(v) >= 3 for v in laps.values()), laps  # a pass takes ~0.1 s: the copies recycled
    start, end = 0.05 + warmup, 0.05 + warmup + duration  # the run starts 0.05 s after t0
    for t in result.turns:
        assert t.start_s >= start - 1e-3 if t.measured else t.start_s < start + 0.01
        assert t.start_s < end + 0.05  # nothing starts after the window closes (a send's own slack)
    assert any(not t.measured for t in result.turns) and any(t.measured for t in result.turns)
    # every lap its own words: no first prompt repeats across laps (no lap reads an earlier one's cache)
    firsts = defaultdict(list)
    for row in server.log(at_least=len(result.turns)):
        if row["usage"]["prompt_tokens"] == 64:
            firsts[row["tag"]].append(row["messages"][0][2])
    assert all(len(v) == len(set(v)) >= 3 for v in firsts.values()), firsts
    stats = LevelStats.of(result, EASY)
    assert stats.turns == sum(t.measured for t in result.turns) and stats.warmup_turns > 0
    assert stats.request_throughput_per_s == pytest.approx(stats.turns / duration)


def test_repeats_on_the_command_line_give_an_interval_and_every_turn_its_repeat(make_timed, tmp_path: Path) -> None:  # noqa: F811
    from test_load_agents import cli

    from harness.load.agents.trace import dump

    server = make_timed("--ttft", "0.01", "--itl", "0.002")
    dump(TWO, tmp_path / "t.trace.jsonl")
    out = cli("load-agents", str(tmp_path / "t.trace.jsonl"), "--base-url", server.url, "--copies", "1",
              "--repeats", "3", "--duration", "0.5", "--warmup", "0.1", "--limit", "20", "--out-dir",
              str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    level = printed["levels"][0]
    assert level["repeats"] == 3 and len(level["ttft_by_repeat_s"]) == 3 and level["ttft_interval_s"] is not None
    assert level["stat"] == "max" and level["goodput_per_s"] > 0 and level["verdict"] == "pass"
    assert printed["slo_def"]["product"] and printed["measure"]["duration_s"] == 0.5
    saved = json.loads(Path(printed["results"]).read_text())
    assert {t["repeat"] for t in saved["turns_by_level"]["1"]} == {0, 1, 2}


@pytest.mark.parametrize("args,field", [
    (["--repeats", "0"], "--repeats"),
    (["--warmup", "5"], "--warmup"),
    (["--duration", "-1"], "--duration"),
    (["--duration", "60", "--limit", "30"], "--limit"),
])
def test_bad_steady_state_options_are_one_clear_error(tmp_path: Path, args: list[str], field: str) -> None:
    from test_load_agents import TRACE, cli

    from harness.load.agents.trace import dump

    dump(TRACE, tmp_path / "t.trace.jsonl")
    out = cli("load-agents", str(tmp_path / "t.trace.jsonl"), "--base-url", "http://127.0.0.1:9", *args, cwd=tmp_path)
    assert out.returncode == 2 and field in out.stderr and "Traceback" not in out.stderr


def test_a_dead_server_on_the_command_line_exits_non_zero_with_its_cause(tmp_path: Path) -> None:
    from test_load_agents import cli

    from harness.load.agents.trace import dump

    dump(TWO, tmp_path / "t.trace.jsonl")
    out = cli("load-agents", str(tmp_path / "t.trace.jsonl"), "--base-url", "http://127.0.0.1:9", "--model", "m",
              "--copies", "1,2", "--out-dir", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    printed = json.loads(out.stdout)
    assert printed["ended_by"].startswith("the server died at 1 agents") and printed["levels"][0]["verdict"] == "invalid"
    assert "the sweep ended" in out.stderr


def test_measure_describes_itself() -> None:
    assert "one pass" in Measure().describe() and "no interval" in Measure().describe()
    text = Measure(duration_s=900, warmup_s=60, repeats=3).describe()
    assert "900 s of steady state after 60 s of warm-up" in text and "95 % interval" in text


def test_a_level_that_failed_on_a_server_gone_quiet_is_invalid_not_overload() -> None:
    """Turns that timed out read as overload, unless the server no longer answers at all: then the
    level is invalid and the sweep ends saying the server died (a hung or dead unit is no limit)."""
    from harness.load.agents.sweep import sweep

    def timed_out(n: int) -> LevelStats:
        return LevelStats(copies=n, turns=4, failed=4, ttft_p50_s=None, ttft_p99_s=None, turn_p50_s=None,
                          turn_p99_s=None, decode_p50_tok_s=None, think_error_p50_s=None, errors={"timeout": 4})

    def ok(n: int) -> LevelStats:
        return LevelStats(copies=n, turns=4, failed=0, ttft_p50_s=0.1, ttft_p99_s=0.1, turn_p50_s=1, turn_p99_s=1,
                          decode_p50_tok_s=10, think_error_p50_s=0)
    asked = []

    def gone() -> str:
        asked.append(1)
        return "its unit is no longer running"
    out = sweep(lambda n: ok(n) if n == 1 else timed_out(n), [1, 2, 4], EASY, alive=gone)
    assert [lv.verdict for lv in out.levels] == ["pass", "invalid"] and len(asked) == 1  # asked after 2 only
    assert out.ended_by.startswith("the server died at 2 agents: its unit is no longer running")
    assert out.sustained == 1 and not out.limit_found
    # the same timeouts with the server answering: overload, a fail that finds the limit
    out = sweep(lambda n: ok(n) if n == 1 else timed_out(n), [1, 2, 4], EASY, alive=lambda: None)
    assert [lv.verdict for lv in out.levels] == ["pass", "fail"] and out.limit_found and out.ended_by is None


def test_rebuild_keeps_a_dead_servers_level_invalid() -> None:
    """Issue 61: a level the sweep made invalid because the server no longer answered (its turns
    alone read as overload: timeouts) is rebuilt invalid, never a fail that would read as a limit."""
    from harness.load.agents.rebuild import levels

    turns = [{"copy": c, "session": f"s{c}", "turn": 0, "ok": False, "error": "timeout", "repeat": 0} for c in range(2)]
    record = {"levels": [{"copies": 2, "verdict": "invalid", "why": "invalid: the server no longer answers (x)"}],
              "turns_by_level": {"2": turns}, "runs_by_level": {"2": [{"timed_out": True, "wall_s": 30.0}]}}
    (rebuilt,) = levels(record)
    assert rebuilt.verdict == "invalid" and not rebuilt.passed and "no longer answers" in rebuilt.why
    # Without the sweep's word for it, the same turns are overload: a fail.
    record["levels"][0]["verdict"] = "fail"
    (rebuilt,) = levels(record)
    assert rebuilt.verdict == "fail"
