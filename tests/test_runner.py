"""The opencode runner's watchdog and process-group handling, driven by a stand-in
process that writes opencode-shaped JSON events (the real CLI is covered end to end
in test_launch_e2e.py)."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from harness.opencode.runner import Limits, error_signature, run_opencode


def _script(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "fake_opencode.py"
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def _run(tmp_path, argv, **limits):
    return run_opencode(argv, prompt="the prompt\nwith two lines", env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path,
                        events_path=tmp_path / "events.jsonl", stderr_path=tmp_path / "stderr.log",
                        limits=Limits(**{"time_cap_s": 30, "stall_s": 30, **limits}))


def test_prompt_arrives_byte_exact_on_stdin_and_events_are_kept(tmp_path):
    argv = _script(tmp_path, """
        import json, sys
        data = sys.stdin.read()
        print(json.dumps({"type": "text", "sessionID": "ses_1", "part": {"type": "text", "text": data}}))
        print(json.dumps({"type": "tool_use", "sessionID": "ses_1", "part": {"tool": "bash"}}))
    """)
    result = _run(tmp_path, argv)
    assert result.exit_code == 0 and result.ended_by is None
    assert result.texts == ["the prompt\nwith two lines"]
    assert result.tool_uses == ["bash"] and result.session_id == "ses_1"
    assert len((tmp_path / "events.jsonl").read_text().splitlines()) == 2


def test_stall_ends_the_run_and_its_whole_process_group(tmp_path):
    argv = _script(tmp_path, """
        import json, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        print(json.dumps({"type": "step_start", "child": child.pid}), flush=True)
        time.sleep(120)
    """)
    started = time.monotonic()
    result = _run(tmp_path, argv, stall_s=1.5)
    assert result.ended_by.startswith("watchdog: no new opencode event")
    assert time.monotonic() - started < 20
    child = json.loads((tmp_path / "events.jsonl").read_text().splitlines()[0])["child"]
    time.sleep(0.3)
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


def test_three_identical_provider_errors_end_the_run(tmp_path):
    argv = _script(tmp_path, """
        import json, time
        for i in range(10):
            err = {"name": "APIError", "data": {"message": f"upstream idle timeout (request {i}, 3.{i}s)"}}
            print(json.dumps({"type": "error", "sessionID": "ses_1", "error": err}), flush=True)
            time.sleep(0.3)
        time.sleep(60)
    """)
    result = _run(tmp_path, argv)
    assert result.ended_by.startswith("watchdog: the same provider error 3 times in a row")
    assert len(result.errors) >= 3


def test_different_errors_do_not_trip_the_watchdog(tmp_path):
    argv = _script(tmp_path, """
        import json
        for msg in ("rate limited", "bad gateway", "rate limited", "context overflow"):
            print(json.dumps({"type": "error", "error": {"name": "APIError", "data": {"message": msg}}}))
    """)
    result = _run(tmp_path, argv)
    assert result.ended_by is None and result.exit_code == 0 and len(result.errors) == 4


# The shape opencode 1.18 writes for a tool call its schema rejected (captured from a real run).
_REJECTED_TASK = """
def call(i, status, task_id="analyze_telemetry", tool="task"):
    state = {"status": status, "input": {"description": "Analyze the telemetry", "prompt": "Analyze",
                                         "subagent_type": "general", "task_id": task_id},
             "time": {"start": 1000 + i, "end": 1003 + i}}
    if status == "error":
        state["error"] = f'Expected a string starting with "ses", got "{task_id}"'
    else:
        state["output"] = "ok"
    return json.dumps({"type": "tool_use", "timestamp": 1796151838566 + i, "sessionID": "ses_1",
                       "part": {"type": "tool", "tool": tool, "callID": f"call{i}x", "state": state}})
"""


def test_the_same_failing_tool_call_three_times_ends_the_run(tmp_path):
    argv = _script(tmp_path, "import json, time\n" + _REJECTED_TASK + """
for i in range(50):
    print(call(i, "error"), flush=True)
    time.sleep(0.2)
time.sleep(60)
""")
    started = time.monotonic()
    result = _run(tmp_path, argv)
    assert result.ended_by.startswith("watchdog: the same tool call failed 3 times in a row (task: "), result.ended_by
    assert 'Expected a string starting with "ses", got "analyze_telemetry"; input {' in result.ended_by
    assert 3 <= len(result.tool_uses) < 10 and time.monotonic() - started < 20


def test_failing_calls_that_differ_or_are_broken_by_a_success_go_on(tmp_path):
    argv = _script(tmp_path, "import json\n" + _REJECTED_TASK + """
print(call(0, "error")); print(call(1, "error")); print(call(2, "completed", tool="bash"))
print(call(3, "error")); print(call(4, "error", task_id="other")); print(call(5, "error"))
print(call(6, "completed")); print(call(7, "error")); print(call(8, "error"))
""")
    result = _run(tmp_path, argv)
    assert result.ended_by is None and result.exit_code == 0 and len(result.tool_uses) == 9


def test_time_cap(tmp_path):
    argv = _script(tmp_path, """
        import json, time
        while True:
            print(json.dumps({"type": "step_start"}), flush=True)
            time.sleep(0.2)
    """)
    result = _run(tmp_path, argv, time_cap_s=1.5)
    assert result.ended_by.startswith("time cap")
    assert result.events >= 3


def test_error_signature_ignores_ids_and_durations():
    a = error_signature("APIError: stream failed for ses_abc123 after 3.2s (request 9f8e7d6c5b4a)")
    b = error_signature("APIError: stream failed for ses_zzz999 after 14s (request 0123456789ab)")
    assert a == b
    assert error_signature("rate limited") != error_signature("bad gateway")


def test_overlong_lines_are_dropped_and_a_stream_past_its_cap_ends_the_run(tmp_path, monkeypatch):
    """What the agent's tools write into opencode's streams is bounded: a 20 MB line is never
    kept nor parsed (an event it forges in there does not count), and past the stream's cap
    nothing more is kept and the run ends (a 1.6 GB events file once)."""
    import harness.opencode.runner as runner

    monkeypatch.setattr(runner, "EVENTS_CAP", 4 << 20)
    argv = _script(tmp_path, """
        import json, sys, time
        forged = json.dumps({"type": "tool_use", "sessionID": "ses_forged", "part": {"tool": "forged",
                             "pad": "x" * (20 << 20)}})
        print(forged, flush=True)
        print(json.dumps({"type": "text", "sessionID": "ses_1", "part": {"text": "kept"}}), flush=True)
        sys.stderr.write("y" * (20 << 20) + "\\n")
        sys.stderr.flush()
        line = json.dumps({"type": "step_start", "pad": "z" * 1000})
        for _ in range(20000):
            print(line)
        sys.stdout.flush()
        time.sleep(60)
    """)
    result = _run(tmp_path, argv)
    assert result.ended_by == "opencode's events passed 4 MiB: nothing more was kept"
    assert result.tool_uses == [] and result.texts == ["kept"] and result.session_id == "ses_1"
    assert (tmp_path / "events.jsonl").stat().st_size <= 4 << 20
    assert (tmp_path / "stderr.log").stat().st_size == 0


@pytest.mark.timeout(30)
def test_a_provider_error_is_found_in_linear_time_on_a_240_kb_line():
    """The stderr log's provider errors: the cause after the last `error=`/`message=`; a 240 KB
    line of `level=ERROR` repeats (a bash command opencode logs) took 49.7 s with the old regex."""
    from harness.opencode.runner import provider_error

    assert provider_error("level=ERROR service=llm error=APIError: stream failed\n") == "APIError: stream failed"
    assert provider_error("level=ERROR message=a myerror=b\n") == "a myerror=b"
    assert provider_error("level=INFO error=x") is None
    hostile = "level=ERROR " * 20000 + "myerror=" * 5000
    assert provider_error(hostile) is None
    assert error_signature("a" * 240_000 + "g") == "#"


def test_the_store_check_reads_events_in_bounded_lines(tmp_path, monkeypatch):
    """The events file is read back line by line, each at most LINE_CAP bytes: a longer one
    (a step_finish a tool forged with a huge pad) is skipped whole, the rest still count."""
    import harness.serving.storecheck as storecheck

    monkeypatch.setattr(storecheck, "LINE_CAP", 1000)
    forged = json.dumps({"type": "step_finish", "part": {"messageID": "m0", "tokens": {"input": 9}, "pad": "x" * 5000}})
    real = json.dumps({"type": "step_finish", "part": {"messageID": "m1", "tokens": {"input": 3, "output": 2}}})
    (tmp_path / "events.jsonl").write_text(f"{forged}\n{real}\n")
    assert storecheck.step_finish_tokens(tmp_path / "events.jsonl") == {"m1": (3, 2)}
