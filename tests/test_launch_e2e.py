"""`llms-benchmark launch local` end to end: the real console script, the real opencode
CLI (node_modules/.bin/opencode), the replay stack as the model.

Each test builds its own project root (see conftest.py) and checks the run record,
the ledger and the process table against what the replay server says it served.
The `slow` marker only selects: `pytest -m "not slow"` runs the preflight refusals alone.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import time
from pathlib import Path

import atif
import httpx
import psutil
import pytest
import yaml

from conftest import TEST_TRAJECTORIES, Project, describe, marker_processes_under, stop
from test_serving_launch import check_serving_section

MISSION_PROMPT_MATCH = "This directory holds two Python scripts"
SMALL_PROBE = ["--probe-long-tokens", "2000"]  # the long probe is not what these tests are about


def wait_for(what: str, check, timeout_s: float, proc: subprocess.Popen | None = None, poll_s: float = 0.2):
    """Poll `check()` until it returns something truthy; fail (naming `what`) after timeout_s,
    or at once if `proc` has exited meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the launch exited {proc.returncode} before {what}\n--- stdout\n{out}\n--- stderr\n{err}")
        time.sleep(poll_s)
    if proc is not None:
        out, err = stop(proc)
        pytest.fail(f"no {what} within {timeout_s:.0f}s\n--- stdout\n{out}\n--- stderr\n{err}")
    pytest.fail(f"no {what} within {timeout_s:.0f}s")


def run_json(project: Project) -> dict | None:
    dirs = project.run_dirs()
    if len(dirs) != 1:
        return None
    try:
        return json.loads((dirs[0] / "run.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def assert_destroyed(project: Project, rec: dict) -> None:
    assert rec["times"]["destroyed"], "the unit was never recorded as destroyed"
    assert project.ledger() == {}, f"the ledger still holds {project.ledger()}"
    left = project.survivors()
    assert not left, f"processes survive the launch: {describe(left)}"


def dump(out: str, err: str) -> str:
    return f"\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"


# -- 1. the acceptance test -------------------------------------------------------------------
def served_median_of(served: list[dict]) -> float:
    return statistics.median(s["finished"] - s["started"] for s in served)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_replay_hello_records_what_was_served(project: Project):
    # replay-hello plays replay/hello.yaml of the project root: here, the timed test copy.
    project.add_trajectory("hello", TEST_TRAJECTORIES / "hello-timed.yaml")

    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "hello", "--json"],
                                     timeout=240)
    assert code == 0, dump(out, err)
    assert "Traceback" not in err
    run_dir, rec = project.only_run()
    assert json.loads(out)["run_id"] == rec["run_id"] == run_dir.name

    assert rec["status"] == "ok" and rec["reason"] is None and rec["stopped_at"] is None
    assert rec["scripted"] is True
    assert rec["stack"] == "replay" and rec["unit"] == "vot-replay-hello"
    assert rec["engine"]["name"] == "replay" and rec["versions"]["opencode"] == "1.18.33"
    assert rec["smoke"].startswith("passed")
    assert rec["run"]["exit_code"] == 0 and rec["run"]["ended_by"] is None and rec["run"]["report_found"]
    report = run_dir / "report.md"
    # Files of the run are named relative to its folder: the record is committed and read elsewhere.
    assert report.is_file() and rec["artifacts"]["agent_output"] == "report.md"
    assert report.read_text() == (run_dir / "workspace" / "REPORT.md").read_text()
    assert "numbers.py: 55" in report.read_text()
    assert_destroyed(project, rec)
    times = rec["times"]
    order = ["serve_start", "ready", "mission_start", "mission_end", "destroyed", "collected", "end"]
    assert all(_seconds(times[a], times[b]) >= 0 for a, b in zip(order, order[1:])), times

    # What the replay server served for the mission is the ground truth of the figures.
    served = Project.served(run_dir, "hello")
    assert [s["step"] for s in served] == [0, 1, 2], served
    assert all(s["status"] == 200 and s["usage"] for s in served), served
    session = rec["session"]
    assert session is not None, "collect found no session"
    assert session["tokens"]["input"] == sum(s["usage"]["prompt_tokens"] for s in served)
    assert session["tokens"]["output"] == sum(s["usage"]["completion_tokens"] for s in served)
    assert session["tokens"]["cache"] == sum(s["usage"]["prompt_tokens_details"]["cached_tokens"] for s in served)
    assert session["turns"] == len(served) == 3
    assert session["sessions"] == 1 and session["compactions"] == 0
    # The sandbox's bridge saw the same calls on the wire: the row's figures are the wire's,
    # and an honest store agrees with them to the token.
    wire = rec["wire"]
    assert rec["artifacts"]["wire_log"] == "wire.jsonl" and (run_dir / "wire.jsonl").is_file()
    assert wire["tokens"] == {k: session["tokens"][k] for k in ("input", "output", "cache", "reasoning")}
    assert wire["turns"] == len(served) and wire["failed"] == 0 and wire["without_usage"] == 0
    assert wire["store_disagrees"] == [] and wire["tool_calls"] == {"bash": 1, "write": 1}
    assert served_median_of(served) <= wire["median_turn_s"] <= served_median_of(served) + 1.0, wire

    # opencode times a turn from message created to completed: the scripted stream plus its
    # own overhead and the tool's run, so never less than served and (steps 0.5/3/6 s far
    # apart) the same middle turn.
    served_median = statistics.median(s["finished"] - s["started"] for s in served)
    assert 2.9 <= served_median <= 3.5, served
    recorded = session["median_turn_s"]
    assert served_median <= recorded <= served_median + 2.0, (recorded, served_median)

    # The provider file opencode ran with.
    provider_file = run_dir / rec["artifacts"]["provider_file"]
    assert provider_file == run_dir / "opencode-provider.json"
    config = json.loads(provider_file.read_text())
    assert list(config["provider"]) == ["vot"]
    vot = config["provider"]["vot"]
    assert vot["npm"] == "@ai-sdk/openai-compatible"
    assert vot["options"]["baseURL"].endswith("/v1")
    assert vot["options"]["baseURL"].startswith("http://127.0.0.1:")
    assert vot["options"]["apiKey"] == "{env:VOT_API_KEY}"
    preset = yaml.safe_load((project.root / ".vot/presets/replay-hello.yaml").read_text())
    model = vot["models"]["replay-hello"]
    assert model["limit"] == {"output": 32768, "context": preset["vllm_args"]["--max-model-len"]}
    assert rec["max_model_len"] == preset["vllm_args"]["--max-model-len"]
    bash = config["permission"]["bash"]
    assert bash["opencode"] == "deny" and bash["opencode *"] == "deny"
    assert config["model"] == "vot/replay-hello"

    # The serving timeline and the per-turn join against what was served (one launch, its checks).
    check_serving_section(run_dir, rec, "hello")

    # The trajectory in ATIF (issue 50): written by the launch, validated by the atif models, its
    # steps the served turns from opencode's store, their tokens the wire's, no host path in it.
    assert rec["artifacts"]["trajectory"] == "trajectory.json" and rec["notes"] == []
    text = (run_dir / "trajectory.json").read_text()
    traj = atif.Trajectory.model_validate(json.loads(text))
    assert traj.steps[0].source == "user" and MISSION_PROMPT_MATCH in traj.steps[0].message
    agent = [s for s in traj.steps if s.source == "agent"]
    assert len(agent) == len(served) == 3 and "opencode.db" in traj.notes
    assert [s.metrics.prompt_tokens for s in agent] == [s["usage"]["prompt_tokens"] for s in served]
    assert traj.final_metrics.total_prompt_tokens == wire["tokens"]["input"]
    assert sorted(c.function_name for s in agent for c in s.tool_calls or []) == ["bash", "write"]
    assert traj.agent.version == "1.18.33" and traj.agent.extra["engine"]["name"] == "replay"
    assert str(project.root) not in text and str(Path.home()) + "/" not in text


# -- 2. the watchdog: a model call that never answers -------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_watchdog_ends_a_stalled_run(project: Project):
    project.add_trajectory("stall")
    project.add_preset("replay-stall", trajectory="stall")
    project.add_mission("stall", stall_minutes=0.25, time_cap_minutes=3)

    code, out, err = project.run_cli(["launch", "local", "replay", "replay-stall", "--mission", "stall",
                                      *SMALL_PROBE], timeout=240)
    assert code == 1, dump(out, err)
    assert "Traceback" not in err
    run_dir, rec = project.only_run()
    assert rec["status"] == "void" and rec["stopped_at"] == "run"
    assert rec["smoke"].startswith("passed")
    assert rec["run"]["ended_by"].startswith("watchdog: no new opencode event"), rec["run"]
    assert "watchdog: no new opencode event for 15s" in rec["reason"]
    assert rec["run"]["report_found"] is False
    assert_destroyed(project, rec)
    # The stall was cut off by the destroy, never answered.
    served = Project.served(run_dir, "hello")
    assert all(s["kind"] == "stall" and s["usage"] is None for s in served), served
    mission_s = _seconds(rec["times"]["mission_start"], rec["times"]["mission_end"])
    assert 15 <= mission_s <= 90, mission_s


# -- 3. the watchdog: the same provider error forever --------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_watchdog_ends_a_run_that_errors_forever(project: Project):
    project.add_trajectory("error")
    project.add_preset("replay-error", trajectory="error")

    code, out, err = project.run_cli(["launch", "local", "replay", "replay-error", "--mission", "hello",
                                      *SMALL_PROBE], timeout=240)
    assert code == 1, dump(out, err)
    assert "Traceback" not in err
    run_dir, rec = project.only_run()
    assert rec["status"] == "void" and rec["stopped_at"] == "run"
    ended_by = rec["run"]["ended_by"]
    # opencode 1.18.33 logs each failed attempt on stderr as
    #   level=ERROR ... message="stream error" ... error.error="AI_APICallError: <message>"
    # and retries with backoff (~2, 4, 9, 19, 39 s) before giving up: the watchdog ends it
    # at the third identical line, and names the provider's message.
    assert ended_by.startswith("watchdog: the same provider error 3 times in a row"), rec["run"]
    assert "replay says the upstream exploded" in ended_by
    assert ended_by in rec["reason"]
    assert_destroyed(project, rec)

    stderr_log = (run_dir / "opencode-stderr.log").read_text()
    failures = [line for line in stderr_log.splitlines()
                if "level=ERROR" in line and "replay says the upstream exploded" in line]
    assert len(failures) >= 3, stderr_log[-3000:]
    served = Project.served(run_dir, "hello")
    assert len(served) >= 3 and all(s["kind"] == "error" and s["status"] == 500 for s in served), served
    mission_s = _seconds(rec["times"]["mission_start"], rec["times"]["mission_end"])
    assert mission_s <= 90, mission_s


# -- 3b. a model that answers the smoke in prose --------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_smoke_in_prose_refuses_and_destroys(project: Project):
    project.add_trajectory("prose")
    project.add_preset("replay-prose", trajectory="prose")
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-prose", "--mission", "hello",
                                      *SMALL_PROBE], timeout=200)
    assert code == 2, dump(out, err)
    assert "Traceback" not in err
    _, rec = project.only_run()
    assert rec["status"] == "refused" and rec["stopped_at"] == "smoke", rec
    assert rec["smoke"].startswith("failed: no bash tool_use event; opencode exited 0")
    assert "the server generated 16 tokens meanwhile" in rec["smoke"]  # read from the unit's /metrics
    assert rec["run"] is None and rec["session"] is None  # the mission never ran
    assert_destroyed(project, rec)


# -- 4. Ctrl-C during the mission -------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigint_during_the_mission_destroys_and_records_a_fault(project: Project):
    project.add_trajectory("stall")
    project.add_preset("replay-stall", trajectory="stall")

    proc = project.popen(["launch", "local", "replay", "replay-stall", "--mission", "hello", *SMALL_PROBE])
    try:
        wait_for("times.mission_start in run.json",
                 lambda: (run_json(project) or {}).get("times", {}).get("mission_start"), 200, proc)
        # Mid-mission: the stalled model call is in flight at the replay server.
        base_url = next(iter(project.ledger().values()))["base_url"]
        wait_for("the mission's model call at the replay server",
                 lambda: _requests_in_flight(base_url) >= 1, 90, proc)
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGINT)  # the launch process only, not its group
        try:
            out, err = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            out, err = stop(proc)
            pytest.fail(f"the launch did not end within 40s of SIGINT{dump(out, err)}")
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            stop(proc)

    assert proc.returncode == 3, dump(out, err)
    assert "Traceback" not in err
    _, rec = project.only_run()
    assert rec["status"] == "fault" and rec["stopped_at"] == "run", rec
    assert "SIGINT" in rec["reason"]
    assert rec["run"] is None  # the mission never finished
    assert rec["times"]["mission_start"] and rec["times"]["end"]
    assert_destroyed(project, rec)
    assert took < 40


# -- 5. a SIGKILLed launch, then the next one ---------------------------------------------------
def _agents_of(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("LLMS_BENCHMARK_AGENT_OF") == marker and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_sigkilled_launch_leftover_is_destroyed_by_the_next(project: Project):
    """SIGKILL mid-mission: the unit and the agent are orphaned; the next launch ends both
    before serving anything, and closes the dead launch's record."""
    project.add_trajectory("stall")
    project.add_preset("replay-stall", trajectory="stall")
    # Unsandboxed: a sandboxed agent dies with its launch (bubblewrap --die-with-parent);
    # without the sandbox it is orphaned, and the next launch must end it.
    first = project.popen(["launch", "local", "replay", "replay-stall", "--mission", "hello", "--no-sandbox",
                           *SMALL_PROBE])
    try:
        wait_for("times.mission_start in run.json",
                 lambda: (run_json(project) or {}).get("times", {}).get("mission_start"), 200, first)
        unit = next(iter(project.ledger().values()))
        wait_for("the mission's model call at the replay server",
                 lambda: _requests_in_flight(unit["base_url"]) >= 1, 90, first)
        first.kill()
        first.communicate(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate(timeout=30)

    # Nothing destroyed it: the replay server and opencode outlive their launch.
    server = psutil.Process(unit["pid"])
    server_started = server.create_time()
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE
    orphans = marker_processes_under(project.root)
    assert unit["pid"] in {p.pid for p in orphans}
    agents = _agents_of(unit["extra"]["marker"])
    assert agents, "the mission's opencode should still be running after its launch was SIGKILLed"
    assert list(project.ledger()) == ["replay/vot-replay-stall"]

    args = ["launch", "local", "replay", "replay-hello", "--mission", "hello"]
    code, out, err = project.run_cli(args, timeout=240)
    assert code == 0, dump(out, err)
    flat = " ".join(err.split())
    assert (f"leftover unit vot-replay-stall on replay from a launch that died (pid {first.pid}): "
            "destroying it first") in flat, err
    assert "vot-replay-stall destroyed; removed from the ledger; ended its orphaned opencode" in flat, err
    assert flat.index("destroying it first") < flat.index("serving vot-replay-hello")
    assert not _same_process_alive(unit["pid"], server_started), "the orphaned replay server survived"
    assert _agents_of(unit["extra"]["marker"]) == [], "the orphaned opencode survived"

    records = {r["key"]["preset"]: r for r in project.records()}
    assert set(records) == {"replay-stall", "replay-hello"}
    dead = records["replay-stall"]
    assert dead["status"] == "fault" and dead["stopped_at"] == "killed", dead
    assert "died without finishing" in dead["reason"] and dead["times"]["destroyed"]
    assert records["replay-hello"]["status"] == "ok"
    assert_destroyed(project, records["replay-hello"])


# -- 6. preflight refusals: nothing served --------------------------------------------------------
def _write_case(project: Project, case: str) -> tuple[list[str], Path, str, str]:
    """Set up one refusal; return (launch args, file named, field named, phrase)."""
    presets = project.root / ".vot" / "presets"
    hello = (presets / "replay-hello.yaml").read_text()
    if case == "vllm_arg":
        path = project.add_preset("bad", hello.replace("replay-hello", "bad").replace("vllm_args:", "vllm_arg:"))
        return ["replay", "bad"], path, "vllm_arg", "unknown key 'vllm_arg'"
    if case == "kubernetes":
        path = project.add_environment("kube", "name: kube\nstack: kubernetes\n")
        return ["kube", "replay-hello"], path, "stack", "stack 'kubernetes' is planned in vllm-on-tap but not supported"
    if case == "no-model":
        path = project.add_preset("bad", trajectory="hello", model=None)
        return ["replay", "bad"], path, "model", "missing required key 'model'"
    if case == "gpu-memory-0":
        path = project.add_preset("bad", trajectory="hello", gpu_memory_gb=0)
        return ["replay", "bad"], path, "gpu_memory_gb", "must be greater than 0"
    if case == "no-tool-calling":
        args = yaml.safe_load(hello)["vllm_args"]
        del args["--enable-auto-tool-choice"]
        path = project.add_preset("bad", trajectory="hello", vllm_args=args)
        return ["replay", "bad"], path, "vllm_args", "does not enable tool calling"
    if case == "short-context":
        args = {**yaml.safe_load(hello)["vllm_args"], "--max-model-len": 8192}
        path = project.add_preset("bad", trajectory="hello", vllm_args=args)
        return ["replay", "bad"], path, "vllm_args.--max-model-len", "--max-model-len is 8192, below the 16384 tokens"
    if case == "local-gpu":
        path = project.add_environment("local-gpu")
        return ["local-gpu", "replay-hello"], path, "stack", "`vllm` is not installed"
    if case == "azure-sweden":
        path = project.add_environment("azure-sweden")
        # Only the environment link of DefaultAzureCredential, with no AZURE_CLIENT_* set: no
        # login is found, and nothing beyond loopback is asked (no az, no managed identity).
        project.env["AZURE_TOKEN_CREDENTIALS"] = "EnvironmentCredential"
        for var in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH"):
            project.env.pop(var, None)
        return ["azure-sweden", "replay-hello"], path, "stack", "no working Azure credential"
    raise AssertionError(case)


REFUSALS = ["vllm_arg", "kubernetes", "no-model", "gpu-memory-0", "no-tool-calling", "short-context",
            "local-gpu", "azure-sweden"]


@pytest.mark.parametrize("case", REFUSALS)
@pytest.mark.timeout(120)
def test_preflight_refuses_before_serving(project: Project, case: str):
    if case == "local-gpu" and any((Path(d) / "vllm").exists() for d in project.env["PATH"].split(os.pathsep) if d):
        pytest.skip("vllm is installed here: the refusal under test needs a machine without it")
    args, path, field, phrase = _write_case(project, case)

    code, out, err = project.run_cli(["launch", "local", *args, "--mission", "hello"], timeout=90)
    assert code == 2, dump(out, err)
    assert "Traceback" not in err and "Traceback" not in out
    shown = out + err
    assert str(path) in shown and f"field '{field}'" in shown and phrase in shown, dump(out, err)

    # The record says so, kept out of git (under .llms-benchmark/refused/), and nothing was served.
    assert project.run_dirs() == [], "a refused launch leaves nothing under .llms-benchmark/runs/"
    refused = sorted((project.root / ".llms-benchmark" / "refused").glob("*/run.json"))
    assert len(refused) == 1, refused
    rec = json.loads(refused[0].read_text())
    assert rec["status"] == "refused" and rec["stopped_at"] == "preflight"
    assert rec["reason"].startswith(f"{path}") and f"field '{field}': " in rec["reason"] and phrase in rec["reason"]
    assert rec["times"]["serve_start"] is None and rec["unit"] is None
    assert project.ledger() == {}
    assert not (project.root / ".vot" / "run").exists() or not any((project.root / ".vot" / "run").glob("*.log"))
    assert not project.survivors(timeout_s=2)


# -- helpers ---------------------------------------------------------------------------------------
def _seconds(start: str, end: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _requests_in_flight(base_url: str) -> float:
    """Chat requests the replay server holds (waiting + running), from its /metrics."""
    try:
        text = httpx.get(f"{base_url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return 0
    total = 0.0
    for name in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
        match = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M)
        total += float(match.group(1)) if match else 0
    return total


def _same_process_alive(pid: int, created: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
