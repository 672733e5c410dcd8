"""`llms-benchmark fitness` against the replay stack: phases, verdicts and the exit-code
contract (0/1/2/3), the report folder, tool calls answered as text, bad config, the
webhook sink on a loopback receiver, and repeats. Every server is a real process on loopback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TEST_TRAJECTORIES

from harness.fitness.config import WebhookCfg
from harness.fitness.phases import PhaseResult
from harness.fitness.runner import merge
from harness.fitness.thresholds import Bar, Thresholds, exit_code, verdicts
from harness.fitness.webhook import post
from harness.wire.retry import retry_after

CLI = REPO / ".venv" / "bin" / "llms-benchmark"
# the seed's webhook schema, then ours beside it
SEED_KEYS = {"run_id", "tag", "finished_utc", "verdict_per_model", "exit_code", "summary", "report_path",
             "kl_divergence", "vram_baseline", "text"}
SUMMARY_KEYS = SEED_KEYS | {"verdict", "vram_baseline_reason", "phases", "errors", "retries", "regressions"}


# -- helpers -------------------------------------------------------------------------------
class Replay:
    """A replay server started here (`python -m harness.replay.server`), stopped by its pid."""

    def __init__(self, folder: Path, trajectory: Path, max_model_len: int = 40960) -> None:
        self.log = folder / "served.jsonl"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.replay.server", "--trajectory", str(trajectory), "--host", "127.0.0.1",
             "--port", "0", "--served-model-name", "fit-model", "--max-model-len", str(max_model_len),
             "--served-log", str(self.log)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        self.url = re.search(r"http://\S+", line).group(0)

    def served(self) -> list[dict]:
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    server = Replay(tmp_path_factory.mktemp("replay"), REPO / "replay" / "fitness.yaml")
    yield server
    server.stop()


def fitness(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    import os

    full = {**os.environ, "COLUMNS": "300", **(env or {})}
    return subprocess.run([str(CLI), "fitness", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=full, cwd=cwd)


def bars(tmp: Path, text: str) -> Path:
    path = tmp / f"thresholds-{abs(hash(text))}.yaml"
    path.write_text(text)
    return path


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


# -- the whole pipeline on the replay stack ------------------------------------------------------
def test_every_phase_runs_or_is_skipped_with_a_reason(project, tmp_path: Path) -> None:
    """ENV PRESET served once, every phase, a served context of 16384: 32k is null and the run
    goes on; the measured speeds are the script's; the unit is destroyed after."""
    project.add_trajectory("fitness", REPO / "replay" / "fitness.yaml")
    project.add_preset("replay-fitness", trajectory="fitness",
                       vllm_args={"--max-model-len": 16384, "--enable-auto-tool-choice": True,
                                  "--tool-call-parser": "hermes"})
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({
        "throughput": {"contexts": [512, 8192, 32768], "output_tokens": 40},
        "capacity": {"levels": [1, 3], "input_tokens": 200, "output_tokens": 12, "requests_per_level": 6},
    }))
    out = tmp_path / "report"
    r = fitness(["run", "replay", "replay-fitness", "--config", str(cfg), "--skip", "capability",
                 "--report-dir", str(out), "--json"], project.root, project.env)
    assert r.returncode == 0, r.stderr
    doc = results(out)
    phases = {p["name"]: p for p in doc["phases"]}
    assert list(phases) == ["telemetry", "warmup", "tooluse", "throughput", "capacity", "kl", "judge"]
    for p in phases.values():
        assert p["status"] == "ran" or (p["status"] == "skipped" and p["reason"]), p
        assert p["wall_s"] >= 0
    assert phases["judge"]["status"] == "skipped" and "judge" in phases["judge"]["reason"]
    assert phases["kl"]["status"] == "skipped" and "kl.reference.url" in phases["kl"]["reason"]
    # telemetry saw an idle server before any load
    assert doc["metrics"]["telemetry.busy_requests"] == 0
    # tooluse: all six streamed calls well formed, streamed == whole
    assert doc["metrics"]["tooluse.wellformed_rate"] == 1.0 and doc["metrics"]["tooluse.stream_agreement_rate"] == 1.0
    # throughput: the script prefills 40000 tok/s and decodes 400 tok/s; 32k + 40 > 16384 is null
    tp = phases["throughput"]["details"]["by_context"]
    assert tp["32768"]["ttft_s"] is None and "exceed the served context (16384)" in tp["32768"]["reason"]
    assert doc["metrics"]["throughput.decode_tps@32768"] is None
    assert abs(tp["8192"]["prompt_tokens"] - 8192) < 8192 * 0.1
    assert 25_000 < tp["8192"]["prefill_tps"] < 42_000
    for size in ("512", "8192"):
        # A late first token on a loaded box shortens the client's decode window: read high, never low.
        assert 300 < tp[size]["decode_tps"] < 500
    # capacity: the load runner's levels, percentiles from its rows
    levels = phases["capacity"]["details"]["levels"]
    assert [lv["n"] for lv in levels] == [1, 3] and all(lv["requests"] == 6 and lv["failed"] == 0 for lv in levels)
    assert doc["metrics"]["capacity.carried_concurrency"] == 3
    assert doc["metrics"]["capacity.peak_output_tps"] == max(lv["aggregate_tps"] for lv in levels)
    # reproducibility tuple
    repro = doc["reproducibility"]
    assert repro["endpoint"].startswith("http://127.0.0.1:") and repro["preset"] == "replay-fitness"
    assert len(repro["preset_sha256"]) == 64 and repro["engine"].startswith("replay")
    assert repro["seed"] == 20260929 and repro["repeats"] == 1 and len(repro["thresholds"]["sha256"]) == 64
    # sinks: the report folder; the printed summary is the webhook schema
    assert set(json.loads(r.stdout)) == SUMMARY_KEYS
    report = (out / "report.md").read_text()
    assert "| 32768 |" in report and "exceed the served context" in report and "PASS" in report
    # destroyed: the ledger is empty (the fixture checks no process survived)
    assert project.ledger() == {}


def test_tool_calls_answered_as_text_are_caught(project, tmp_path: Path) -> None:
    project.add_trajectory("fitness-text")
    project.add_preset("replay-text", trajectory="fitness-text")
    out = tmp_path / "report"
    r = fitness(["run", "replay", "replay-text", "--phases", "tooluse", "--report-dir", str(out)],
                project.root, project.env)
    assert r.returncode == 2, r.stderr  # the shipped thresholds gate tool calls
    doc = results(out)
    assert doc["metrics"]["tooluse.wellformed_rate"] == 0.0 and doc["metrics"]["tooluse.text_answers"] == 6.0
    asks = doc["phases"][0]["details"]["asks"]
    assert all(a["why"] == "answered as text with a tool call in it" and a["streamed"]["calls"] == [] for a in asks)
    failing = {v["metric"] for v in doc["verdicts"] if v["verdict"] == "FAIL"}
    assert failing == {"tooluse.wellformed_rate", "tooluse.text_answers"}


# -- the exit-code contract ----------------------------------------------------------------------
@pytest.mark.parametrize("bar_text, expected", [
    ("tooluse.wellformed_rate: {fail_below: 1.0}\nwarmup.first_answer_s: {warn_above: 30}\n", 0),
    ("tooluse.wellformed_rate: {fail_below: 1.0}\nwarmup.first_answer_s: {warn_above: 0}\n", 1),
    ("tooluse.stream_agreement_rate: {warn_below: 2, fail_below: 1.5}\nwarmup.first_answer_s: {warn_above: 0}\n", 2),
    # judge metrics never gate: a bar on one that cannot be met leaves the exit code
    ("tooluse.wellformed_rate: {fail_below: 1.0}\njudge.checklist_rate: {fail_below: 0.5}\n", 0),
])
def test_exit_codes_follow_the_verdicts(replay, tmp_path: Path, bar_text: str, expected: int) -> None:
    out = tmp_path / "report"
    phases = "warmup,tooluse,judge" if "judge" in bar_text else "warmup,tooluse"
    r = fitness(["run", replay.url, "--phases", phases, "--thresholds", str(bars(tmp_path, bar_text)),
                 "--report-dir", str(out)], tmp_path)
    assert r.returncode == expected, r.stdout + r.stderr
    doc = results(out)
    assert doc["exit_code"] == expected and doc["verdict"] == ["PASS", "WARN", "FAIL"][expected]
    if "judge" in bar_text:
        judge = next(v for v in doc["verdicts"] if v["metric"] == "judge.checklist_rate")
        assert judge["verdict"] == "WARN" and judge["gates"] is False  # not measured (skipped), advisory


def test_a_phase_that_cannot_measure_is_exit_3_quoting_the_body(tmp_path: Path) -> None:
    server = Replay(tmp_path, TEST_TRAJECTORIES / "fitness-broken.yaml")
    try:
        out = tmp_path / "report"
        r = fitness(["run", server.url, "--phases", "telemetry,tooluse", "--report-dir", str(out)], tmp_path)
    finally:
        server.stop()
    assert r.returncode == 3, r.stdout + r.stderr
    doc = results(out)
    tooluse = next(p for p in doc["phases"] if p["name"] == "tooluse")
    assert tooluse["status"] == "error" and "HTTP 500" in tooluse["reason"]
    assert "tool parser 'hermes' is not loaded" in tooluse["reason"]  # the body, quoted
    assert next(p for p in doc["phases"] if p["name"] == "telemetry")["status"] == "ran"  # the others still ran
    assert doc["verdict"] == "ERROR" and "tool parser 'hermes' is not loaded" in (out / "report.md").read_text()


# -- bad config: one clear error, exit 3, no traceback ----------------------------------------------
@pytest.mark.parametrize("case", ["unknown-phase-flag", "unknown-phase-file", "unknown-metric", "missing-data",
                                  "unknown-setting"])
def test_bad_config_is_one_clear_error(tmp_path: Path, case: str) -> None:
    args, expect = {
        "unknown-phase-flag": (["--phases", "warmup,speed"], ["'speed'", "--phases", "fix:"]),
        "unknown-phase-file": (["--config", "CFG"], ["fitness.yaml", "field 'phases'", "unknown phase 'speed'"]),
        "unknown-metric": (["--thresholds", "BARS"], ["field 'tooluse.speed'", "unknown metric", "fix:"]),
        "missing-data": (["--phases", "capability", "--config", "DATA"], ["HumanEval.jsonl.gz",
                                                                          "missing data file", "fitness data"]),
        "unknown-setting": (["--config", "TYPO"], ["field 'capacity.level'", "unknown setting"]),
    }[case]
    (tmp_path / "fitness.yaml").write_text("phases: [warmup, speed]\n")
    (tmp_path / "data.yaml").write_text(f"capability: {{data_dir: {tmp_path / 'empty'}, suites: [humaneval]}}\n")
    (tmp_path / "typo.yaml").write_text("capacity: {level: [1, 2]}\n")
    swap = {"CFG": str(tmp_path / "fitness.yaml"), "DATA": str(tmp_path / "data.yaml"),
            "TYPO": str(tmp_path / "typo.yaml"),
            "BARS": str(bars(tmp_path, "tooluse.speed: {fail_below: 1}\n"))}
    r = fitness(["run", "http://127.0.0.1:9", "--dry-run", *[swap.get(a, a) for a in args]], tmp_path)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and r.stderr.count("error:") == 1
    flat = " ".join(r.stderr.split())
    for needle in expect:
        assert needle in flat, flat


# -- repeats ----------------------------------------------------------------------------------------
def test_repeats_reverse_the_order_and_flag_disagreements(replay, tmp_path: Path) -> None:
    out = tmp_path / "report"
    r = fitness(["run", replay.url, "--phases", "throughput", "--contexts", "256,1024", "--repeats", "2",
                 "--report-dir", str(out)], tmp_path)
    assert r.returncode == 0, r.stderr
    doc = results(out)
    passes = [(p["repeat"], p["details"]["order"]) for p in doc["phases"]]
    assert passes == [(1, [256, 1024]), (2, [1024, 256])]
    assert set(doc["repeats"]["passes"]) >= {"throughput.decode_tps@256", "throughput.ttft_s@1024"}
    for key, values in doc["repeats"]["passes"].items():  # the worse pass counts, never an average
        better_high = "tps" in key
        assert doc["metrics"][key] == (min(values) if better_high else max(values))


def test_merge_flags_passes_more_than_ten_percent_apart() -> None:
    a = PhaseResult("throughput", "ran", metrics={"throughput.decode_tps@512": 100.0, "throughput.ttft_s@512": 1.0})
    b = PhaseResult("throughput", "ran", metrics={"throughput.decode_tps@512": 80.0, "throughput.ttft_s@512": 1.05},
                    repeat=2)
    metrics, passes, flagged = merge([a, b])
    assert metrics == {"throughput.decode_tps@512": 80.0, "throughput.ttft_s@512": 1.05}
    assert [f["metric"] for f in flagged] == ["throughput.decode_tps@512"] and flagged[0]["difference"] == 0.2


def test_verdicts_and_exit_code_logic() -> None:
    t = Thresholds(Path("t.yaml"), "0" * 64, {
        "capacity.worst_ttft_p95_s": Bar("capacity.worst_ttft_p95_s", warn_above=5, fail_above=30),
        "judge.cross_agreement": Bar("judge.cross_agreement", fail_below=0.75)})
    rows = verdicts(t, {"capacity.worst_ttft_p95_s": 6.0, "judge.cross_agreement": 0.1})
    assert [(r["verdict"], r["gates"]) for r in rows] == [("WARN", True), ("FAIL", False)]
    assert exit_code(rows, pipeline_error=False) == 1 and exit_code(rows, pipeline_error=True) == 3
    rows = verdicts(t, {"capacity.worst_ttft_p95_s": 31.0})
    assert rows[0]["verdict"] == "FAIL" and exit_code(rows, False) == 2
    assert verdicts(t, {"capacity.worst_ttft_p95_s": 5.0})[0]["verdict"] == "PASS"
    assert verdicts(t, {}, enabled=["capacity"])[0]["verdict"] == "WARN"  # on, but not measured
    off = verdicts(t, {}, enabled=["warmup"])[0]
    assert (off["verdict"], off["gates"]) == ("OFF", False) and exit_code([off], False) == 0


# -- the webhook sink ---------------------------------------------------------------------------------
class Receiver:
    """A loopback webhook receiver: answers each POST from a script of (status, headers), records bodies."""

    def __init__(self, script: list[tuple[int, dict]]) -> None:
        self.script, self.bodies, self.times = list(script), [], []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.bodies.append(json.loads(body))
                owner.times.append(time.monotonic())
                status, headers = owner.script.pop(0) if owner.script else (200, {})
                text = b'{"error": "slow down, receiver is busy"}' if status >= 400 else b"ok"
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_webhook_receives_the_summary_after_a_429(replay, tmp_path: Path) -> None:
    hook = Receiver([(429, {"Retry-After": "0"})])
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text("webhook: {url_env: FIT_HOOK_URL, retry_after_min_s: 0.3}\n")
    out = tmp_path / "report"
    try:
        r = fitness(["run", replay.url, "--phases", "warmup,tooluse", "--config", str(cfg),
                     "--thresholds", str(bars(tmp_path, "warmup.first_answer_s: {warn_above: 0}\n")),
                     "--report-dir", str(out)], tmp_path, env={"FIT_HOOK_URL": hook.url})
    finally:
        hook.close()
    assert r.returncode == 1, r.stderr  # WARN, whatever the webhook did
    assert len(hook.bodies) == 2 and hook.bodies[0] == hook.bodies[1]
    assert hook.times[1] - hook.times[0] >= 0.3  # Retry-After 0, clamped up to the minimum
    body = hook.bodies[1]
    assert set(body) == SUMMARY_KEYS and body["exit_code"] == 1 and body["verdict_per_model"] == {"fit-model": "PASS"}
    assert body["verdict"] == "WARN"  # ours beside the seed's PASS|FAIL|null
    assert body["summary"][0]["tooluse"]["wellformed_rate"] == 1.0 and "WARN" in body["text"]
    assert body["report_path"] == str((out / "report.md").resolve())
    assert hook.url not in r.stderr + r.stdout  # the URL is a secret: never printed


def test_a_dead_webhook_leaves_the_exit_code(replay, tmp_path: Path) -> None:
    hook = Receiver([])
    dead = hook.url
    hook.close()  # nothing listens there any more
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text("webhook: {url_env: FIT_HOOK_URL, attempts: 2, retry_after_default_s: 0.1}\n")
    r = fitness(["run", replay.url, "--phases", "tooluse", "--config", str(cfg),
                 "--thresholds", str(bars(tmp_path, "tooluse.stream_agreement_rate: {fail_below: 1.5}\n")),
                 "--report-dir", str(tmp_path / "report")], tmp_path, env={"FIT_HOOK_URL": dead})
    assert r.returncode == 2, r.stderr  # the FAIL stands; the webhook's failure is only a warning
    assert "warning: webhook POST failed after 2 attempt(s)" in " ".join(r.stderr.split())


def test_retry_after_is_clamped_and_errors_quote_the_body() -> None:
    cfg = WebhookCfg(retry_after_min_s=1, retry_after_max_s=120, retry_after_default_s=15)
    assert retry_after("100000", cfg) == 120 and retry_after("0", cfg) == 1 and retry_after("7", cfg) == 7
    assert retry_after("soon", cfg) == 15 and retry_after(None, cfg) == 15
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT", cfg) == 1  # a date in the past
    hook = Receiver([(429, {"Retry-After": "100000"}), (429, {}), (400, {})])
    waits: list[float] = []
    try:
        warning = post(hook.url, {"x": 1}, WebhookCfg(attempts=5), sleep=waits.append)
    finally:
        hook.close()
    assert waits == [120, 15]  # clamped; then the default; a 400 is not retried
    assert "HTTP 400" in warning and "slow down, receiver is busy" in warning and "3 attempt" in warning


# -- issue 35, item 5: a usage error of `fitness` is a pipeline error (3), never the seed's FAIL (2) ----------
@pytest.mark.parametrize("argv", [["run", "--bogus"], ["nope"], ["run", "--repeats", "x"], ["history", "--last", "0"],
                                  ["run", "http://127.0.0.1:9", "--phase", "warmup"],
                                  ["serve", "--port", "99999"], ["serve", "--port", "-1"]])
def test_a_fitness_usage_error_exits_3(argv: list[str]) -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    result = CliRunner().invoke(app, ["fitness", *argv], catch_exceptions=False)
    assert result.exit_code == 3, result.output
    assert "Traceback" not in result.output and ("No such" in result.output or "Invalid value" in result.output)
    # The main CLI keeps its own code for a usage error.
    assert CliRunner().invoke(app, ["launch", "--bogus"]).exit_code == 2


# -- issue 47, item 5: a run that measured no phase is never PASS -----------------------------------
@pytest.mark.parametrize("args", [["--phases", "warmup", "--skip", "warmup"], ["--phases", "kl,judge"]])
def test_a_run_that_would_measure_nothing_is_refused_up_front(replay, tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "report"
    r = fitness(["run", replay.url, *args, "--report-dir", str(out)], tmp_path)
    assert r.returncode == 3 and "fitness PASS" not in r.stdout, r.stdout + r.stderr
    assert "field '--phases'" in " ".join(r.stderr.split()) and not out.exists()


def test_a_run_whose_phases_all_skip_is_an_error_not_a_pass(replay, tmp_path: Path) -> None:
    """The pipeline's own guard, for what the CLI's check cannot see (the API, a config whose only
    phase skips at run time): every phase skipped measured nothing, so exit 3, ERROR."""
    from harness.fitness.config import FitnessConfig
    from harness.fitness.runner import resolve_target, run_fitness

    cfg = FitnessConfig(phases=["kl"], history={"log": str(tmp_path / "pipeline.log")})
    outcome = run_fitness(tmp_path, resolve_target([replay.url], None, None, None), cfg, say=lambda m: None,
                          report_dir=tmp_path / "report")
    doc = outcome.results
    assert [p["status"] for p in doc["phases"]] == ["skipped"], doc["phases"]
    assert outcome.exit_code == 3 and doc["verdict"] == "ERROR", doc
    assert any("no phase measured anything" in e and "kl.reference.url" in e for e in doc["errors"]), doc["errors"]


def test_metrics_takes_json() -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    result = CliRunner().invoke(app, ["fitness", "metrics", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    names = {m["metric"] for m in json.loads(result.stdout)}
    assert {"warmup.first_answer_s", "throughput.decode_tps"} <= names and len(names) == len(set(names)), names
