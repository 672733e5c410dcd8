"""The serving timeline and the per-turn join, end to end: the real console script, the
real opencode CLI, the replay stack as the model. The replay server's own log
(`served.jsonl`) is the ground truth of every call: the join's store tokens and the
server-counter deltas it attributes to each call must equal what was served for it.
A whole, well-behaved run's section is checked on test_launch_e2e's acceptance launch
(`check_serving_section`): one launch for both sets of checks."""

from __future__ import annotations

import json
import shutil
from datetime import datetime

import pytest

from conftest import REPO, Project

SMALL_PROBE = ["--probe-long-tokens", "2000"]


def check_join_against_served(run_dir, rec: dict, trajectory: str) -> list[dict]:
    served = Project.served(run_dir, trajectory)
    table = [json.loads(line) for line in (run_dir / "serving.jsonl").read_text().splitlines()]
    assert rec["artifacts"]["serving_table"] == "serving.jsonl"
    assert len(table) == len(served) == rec["session"]["turns"], (table, served)
    wants = [(s["usage"]["prompt_tokens"], s["usage"]["prompt_tokens_details"]["cached_tokens"],
              s["usage"]["completion_tokens"]) for s in served]
    for n, (row, s) in enumerate(zip(table, served)):
        want = wants[n]
        # What opencode stored for the call is what the server served for it...
        assert (row["prompt_tokens"], row["cached_tokens"], row["output_tokens"]) == want, (row, s)
        # The call's window in the store holds what the server timed for it.
        start, end = (datetime.fromisoformat(row[k]).timestamp() for k in ("start", "end"))
        assert start <= s["started"] + 0.05 and s["finished"] <= end + 0.05, (row, s)
        # ...and so are the server's own counters over the call's bracket of the timeline.
        server = row["server"]
        got = (server["prompt_tokens"], server["prefix_cache_hits"], server["generation_tokens"])
        if server["attribution"] == "exact":
            assert got == want, (row, s)
            assert server["queue_s"] == 0 and server["prefill_s"] > 0 and server["preemptions"] == 0
        elif server["attribution"] == "shared":
            # A loaded box: the reading asked for at a step's end was answered after the next call
            # had been served. The deltas then hold exactly this call and its `shared_with`
            # neighbours, as served.
            k = server["shared_with"]
            windows = [wants[i:i + k + 1] for i in range(max(0, n - k), n + 1) if i + k < len(wants)]
            assert k >= 1 and any(got == tuple(map(sum, zip(*w))) for w in windows), (row, wants)
        else:
            # No reading fits it: the late reading before it already held its whole call.
            assert server["attribution"] == "none" and n and table[n - 1]["server"]["attribution"] == "shared", row
    return table


def check_timeline_window(run_dir, rec: dict) -> list[dict]:
    readings = [json.loads(line) for line in (run_dir / "serving-timeline.jsonl").read_text().splitlines()]
    start = datetime.fromisoformat(rec["times"]["mission_start"]).timestamp()
    end = datetime.fromisoformat(rec["times"]["mission_end"]).timestamp()
    assert readings and all(start - 0.01 <= r["t"] <= end + 0.01 for r in readings), "sampled outside the run"
    assert readings[0]["reason"] == "start" and readings[-1]["reason"] == "end"
    assert {r["server"] for r in readings} == {"vllm"}  # the replay server speaks vLLM's names
    return readings


def check_serving_section(run_dir, rec: dict, trajectory: str) -> None:
    """A whole, well-behaved run's serving section (test_launch_e2e's acceptance launch checks it:
    one launch, both sets of checks)."""
    readings = check_timeline_window(run_dir, rec)
    table = check_join_against_served(run_dir, rec, trajectory)
    served = Project.served(run_dir, trajectory)
    sec = rec["serving"]
    exact = [r for r in table if r["server"]["attribution"] == "exact"]
    assert sec["server"] == "vllm" and sec["turns"] == len(served) and sec["turns_exact"] == len(exact) >= 1
    assert sec["readings"] == len(readings)
    cached = sum(s["usage"]["prompt_tokens_details"]["cached_tokens"] for s in served)
    prompt = sum(s["usage"]["prompt_tokens"] for s in served)
    assert sec["prefix_cache_source"] == "server" and sec["prefix_cache_hit"] == round(cached / prompt, 4)
    assert sec["preemptions"] == 0 and sec["queue_wait_p95_s"] == 0
    assert sec["store_check"] == []
    assert sec["tool_calls"]["leaked"] == 0 and sec["tool_calls"]["malformed"] == 0
    assert sec["tool_calls"]["finish_reasons"] == {"stop": 1, "tool-calls": len(served) - 1}
    # KV use is read by the timeline's readings: present, though short calls may fall between them.
    assert sec["decode_tps_p50_context"] is not None and sec["kv_peak"] is not None
    assert [r["turn"] for r in table] == list(range(1, len(served) + 1))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_tool_call_answered_as_text_is_leaked_on_the_record(project: Project):
    project.add_trajectory("hello-leaky")
    project.add_preset("replay-leaky", trajectory="hello-leaky")
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-leaky", "--mission", "hello",
                                      *SMALL_PROBE], timeout=240)
    assert code == 0, err[-3000:]
    run_dir, rec = project.only_run()
    served = Project.served(run_dir, "hello")
    assert [s["step"] for s in served] == [0, 1, 2, 3]
    health = rec["serving"]["tool_calls"]
    # The hermes block the model wrote as its last answer, and the call whose arguments were cut off.
    assert health["leaked"] == 1 and len(health["leaked_turns"]) == 1
    assert health["malformed"] == 1 and health["malformed_examples"], health
    assert health["finish_reasons"] == {"stop": 1, "tool-calls": 3}
    table = check_join_against_served(run_dir, rec, "hello")
    assert table[-1]["message"] == health["leaked_turns"][0] and table[-1]["finish"] == "stop"
