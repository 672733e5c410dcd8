"""`fitness run` as a 3 a.m. cron job meets it: the endpoint down, a 429 storm, a 5xx, empty
completions, Ctrl-C and SIGTERM mid-phase, a config that does not load — each leaves a report and
results.json, tells the webhook, and exits with the contract's code. The served model is a
loopback stand-in speaking the OpenAI HTTP protocol (`StandIn`); the webhook a loopback receiver."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import REPO
from test_fitness import CLI, SEED_KEYS, Receiver, Replay, bars, fitness, results

from harness.fitness.config import HistoryCfg, RetryCfg
from harness.fitness.endpoint import Endpoint, PhaseError
from harness.fitness.history import cross_due, regressions
from harness.fitness.retry import Tally

BASH_CALL = [{"name": "bash", "arguments": json.dumps({"command": "ls -la", "description": "list the files"})}]


class StandIn:
    """An OpenAI-compatible server on loopback. Each chat request takes the next action of `script`
    (then `default`): ("ok", content), ("calls", calls), ("empty",), (status, {headers}, body),
    ("stall", seconds). Records when each chat request came."""

    def __init__(self, script: list | None = None, default: tuple = ("ok", "ready")) -> None:
        self.script, self.default, self.times = list(script or []), default, []
        self.release = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, status: int, body: bytes, headers: dict | None = None, ctype="application/json"):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path == "/v1/models":
                    self._send(200, json.dumps({"object": "list", "data": [
                        {"id": "stand-in", "object": "model", "owned_by": "stand-in"}]}).encode())
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": "not found"}')
                owner.times.append(time.monotonic())
                action = owner.script.pop(0) if owner.script else owner.default
                if action[0] == "stall":
                    owner.release.wait(timeout=action[1])
                    action = owner.default
                if isinstance(action[0], int):
                    return self._send(action[0], action[2].encode(), action[1])
                content = action[1] if action[0] == "ok" else ""
                calls = action[1] if action[0] == "calls" else []
                tool_calls = [{"index": i, "id": f"call_{i}", "type": "function",
                               "function": {"name": c["name"], "arguments": c["arguments"]}} for i, c in enumerate(calls)]
                if body.get("stream"):
                    delta = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if calls else {})}
                    chunks = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
                              {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}]}]
                    text = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
                    return self._send(200, text.encode(), ctype="text/event-stream")
                msg = {"role": "assistant", "content": content, **({"tool_calls": tool_calls} if calls else {})}
                self._send(200, json.dumps({"object": "chat.completion", "choices": [
                    {"index": 0, "message": msg, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 1}}).encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    receiver = Receiver([])
    yield receiver
    receiver.close()


def config(tmp: Path, text: str = "") -> Path:
    path = tmp / "fitness.yaml"
    path.write_text("webhook: {url_env: FIT_HOOK_URL, attempts: 1}\n"
                    "retry: {attempts: 3, retry_after_min_s: 0, retry_after_default_s: 0.05}\n" + text)
    return path


def run(tmp: Path, url: str, phases: str, hook: Receiver, extra: list[str] | None = None, cfg_text: str = ""):
    out = tmp / "report"
    r = fitness(["run", url, "--phases", phases, "--config", str(config(tmp, cfg_text)), "--report-dir", str(out),
                 *(extra or [])], tmp, env={"FIT_HOOK_URL": hook.url})
    return r, out


def assert_record(out: Path, hook: Receiver, code: int) -> dict:
    """results.json, summary.json and report.md are there; the webhook got the same verdict."""
    doc = results(out)
    assert doc["exit_code"] == code and (out / "report.md").is_file() and (out / "summary.json").is_file()
    assert len(hook.bodies) == 1 and hook.bodies[0]["exit_code"] == code
    assert hook.bodies[0]["verdict_per_model"] == doc["verdict_per_model"]
    assert SEED_KEYS <= set(hook.bodies[0])
    return doc


# -- always a record -----------------------------------------------------------------------------
def test_endpoint_down_leaves_a_record_and_tells_the_webhook(tmp_path: Path, hook: Receiver) -> None:
    dead = StandIn()
    url = dead.url
    dead.close()  # nothing listens there now
    r, out = run(tmp_path, url, "warmup,tooluse", hook)
    assert r.returncode == 3, r.stderr
    doc = assert_record(out, hook, 3)
    assert doc["verdict"] == "ERROR" and "cannot reach" in doc["errors"][0] and "after 3 attempts" in doc["errors"][0]
    assert [(p["name"], p["status"]) for p in doc["phases"]] == [("warmup", "not_run"), ("tooluse", "not_run")]
    assert all("cannot reach" in p["reason"] for p in doc["phases"])
    assert doc["retries"]["discovery"]["by_status"] == {"connect": 2}  # 3 attempts: 2 retries
    assert "not_run" in (out / "report.md").read_text() and hook.bodies[0]["phases"]["warmup"]["status"] == "not_run"
    assert "Traceback" not in r.stderr


def test_a_config_error_leaves_a_record_and_tells_the_webhook(tmp_path: Path, hook: Receiver) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("webhook: {url_env: FIT_HOOK_URL}\ncapacity: {level: [1, 2]}\n")
    out = tmp_path / "report"
    r = fitness(["run", "http://127.0.0.1:9", "--config", str(cfg), "--report-dir", str(out)], tmp_path,
                env={"FIT_HOOK_URL": hook.url})
    assert r.returncode == 3 and "Traceback" not in r.stderr and r.stderr.count("error:") == 1
    assert "field 'capacity.level'" in " ".join(r.stderr.split())
    doc = assert_record(out, hook, 3)
    assert "unknown setting" in doc["errors"][0] and {p["status"] for p in doc["phases"]} == {"not_run"}


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_phase_leaves_a_record(tmp_path: Path, hook: Receiver, sig: int) -> None:
    """Ctrl-C (or an API cancel's SIGTERM) while the warm-up request hangs: the phase is recorded as
    cancelled, the rest as not run, the webhook told, exit 3."""
    server = StandIn([("stall", 30)])
    out = tmp_path / "report"
    import os

    proc = subprocess.Popen([str(CLI), "fitness", "run", server.url, "--phases", "warmup,tooluse", "--config",
                             str(config(tmp_path)), "--report-dir", str(out)], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FIT_HOOK_URL": hook.url, "COLUMNS": "300"})
    try:
        deadline = time.monotonic() + 60
        while not server.times and time.monotonic() < deadline:
            time.sleep(0.1)
        assert server.times, "the warm-up request never came"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        server.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err
    doc = assert_record(out, hook, 3)
    assert [(p["name"], p["status"]) for p in doc["phases"]] == [("warmup", "cancelled"), ("tooluse", "not_run")]
    assert doc["phases"][1]["reason"] == "cancelled before it started" and "cancelled" in doc["errors"][0]


# -- retries on the served model ------------------------------------------------------------------
def test_a_429_storm_is_waited_out_as_retry_after_says(tmp_path: Path, hook: Receiver) -> None:
    server = StandIn([(429, {"Retry-After": "1"}, '{"error": "swapping"}')] * 2)
    try:
        r, out = run(tmp_path, server.url, "warmup", hook, cfg_text="")
    finally:
        server.close()
    assert r.returncode == 0, r.stderr
    gaps = [b - a for a, b in zip(server.times, server.times[1:])]
    assert len(server.times) == 3 and all(g >= 0.95 for g in gaps), gaps  # Retry-After: 1 honoured
    doc = assert_record(out, hook, 0)
    warm = doc["phases"][0]
    assert warm["status"] == "ran" and warm["requests"]["retries"] == 2 and warm["requests"]["by_status"] == {"429": 2}
    assert warm["requests"]["waited_s"] >= 2
    assert any("needed 2 retries" in w for w in doc["warnings"])
    report = (out / "report.md").read_text()
    assert "429×2" in report and "needed 2 retries" in report and hook.bodies[0]["retries"] == 2


def test_retries_spent_is_a_phase_error_with_a_record(tmp_path: Path, hook: Receiver) -> None:
    server = StandIn(default=(503, {}, '{"error": "model loading"}'))
    try:
        r, out = run(tmp_path, server.url, "warmup", hook)
    finally:
        server.close()
    assert r.returncode == 3, r.stderr
    doc = assert_record(out, hook, 3)
    warm = doc["phases"][0]
    assert len(server.times) == 3 and warm["status"] == "error"  # the policy's 3 attempts, no more
    assert "HTTP 503 (after 3 attempts" in warm["reason"] and "model loading" in warm["reason"]
    assert warm["requests"]["gave_up"] == 1


def test_a_500_is_not_asked_again_and_is_recorded(tmp_path: Path, hook: Receiver) -> None:
    server = StandIn(default=(500, {}, '{"error": "tool parser not loaded"}'))
    try:
        r, out = run(tmp_path, server.url, "warmup", hook)
    finally:
        server.close()
    assert r.returncode == 3 and len(server.times) == 1
    doc = assert_record(out, hook, 3)
    assert "tool parser not loaded" in doc["phases"][0]["reason"]


def test_the_retry_policy_defaults_are_the_seeds(tmp_path: Path) -> None:
    """Clamped 1-120 s, default 15, 8 attempts; the sleep is injected, so nothing waits here."""
    server = StandIn([(429, {"Retry-After": "100000"}, "{}"), (429, {"Retry-After": "0"}, "{}"), (429, {}, "{}")]
                     + [(503, {"Retry-After": "soon"}, "{}")] * 10)
    waits: list[float] = []
    ep = Endpoint(server.url, "stand-in", retry=RetryCfg(), tally=Tally(), sleep=waits.append)
    try:
        with pytest.raises(PhaseError, match="HTTP 503 .after 8 attempts"):
            ep.chat([{"role": "user", "content": "hi"}])
    finally:
        server.close()
    assert waits == [120, 1, 15, 15, 15, 15, 15] and len(server.times) == 8
    assert ep.tally.by_status == {"429": 3, "503": 4} and ep.tally.gave_up == 1


# -- the empty-completion guard ---------------------------------------------------------------------
@pytest.mark.parametrize("empty_asks, code", [(6, 3), (1, 1)])
def test_empty_completions_fail_the_phase_naming_the_count(tmp_path: Path, hook: Receiver, empty_asks: int,
                                                           code: int) -> None:
    """All six asks empty (12 of 12 answers): the phase fails loudly, exit 3. One of six (2 of 12,
    17 % ≤ 25 %): the phase stands and the shipped tool-call bars judge it (5/6 well formed: WARN, exit 1)."""
    script = [("empty",)] * (2 * empty_asks)  # each ask is asked streamed and whole
    server = StandIn(script, default=("calls", BASH_CALL))
    try:
        r, out = run(tmp_path, server.url, "tooluse", hook)
    finally:
        server.close()
    assert r.returncode == code, r.stderr
    doc = assert_record(out, hook, code)
    phase = doc["phases"][0]
    assert phase["requests"]["answers"] == 12 and phase["requests"]["empty"] == 2 * empty_asks
    if code == 3:
        assert phase["status"] == "error" and "12 of 12 completions were empty" in phase["reason"]
        assert "12 of 12 completions were empty" in r.stderr.replace("\n", " ")
    else:
        assert phase["status"] == "ran"


# -- history ------------------------------------------------------------------------------------------
def test_three_runs_make_a_history_a_plot_and_flag_a_planted_regression(tmp_path: Path, hook: Receiver) -> None:
    server = StandIn(default=("calls", BASH_CALL))
    log = tmp_path / "pipeline.log"
    folders = []
    try:
        for n in range(3):
            if n == 2:
                server.default = ("ok", "I would run ls -la for you.")  # planted: no tool call any more
            out = tmp_path / f"run{n}"
            r = fitness(["run", server.url, "--phases", "tooluse", "--config",
                         str(config(tmp_path, f"history: {{log: {log}}}\n")), "--report-dir", str(out)], tmp_path,
                        env={"FIT_HOOK_URL": hook.url})
            assert r.returncode in (0, 2), r.stderr
            folders.append(out)
    finally:
        server.close()
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["run_id"] for x in lines] == [results(f)["run_id"] for f in folders]
    assert lines[1]["regressions"] == []  # the same answers: nothing flagged
    flagged = {f["metric"]: f for f in lines[2]["regressions"]}
    assert flagged["tooluse.wellformed_rate"]["kind"] == "regression" and flagged["tooluse.wellformed_rate"]["value"] == 0
    doc = results(folders[2])
    assert doc["history"]["run_number"] == 3 and doc["history"]["previous_run"] == lines[1]["run_id"]
    assert any(w.startswith("REGRESSION: tooluse.wellformed_rate") for w in doc["warnings"])
    assert (folders[1] / "trend.png").read_bytes()[:4] == b"\x89PNG" and not (folders[0] / "trend.png").exists()
    assert hook.bodies[-1]["regressions"][0]["metric"] in flagged
    # the command: a table of runs, the trend of a metric, the plot
    h = subprocess.run([str(CLI), "fitness", "history", "--log", str(log), "--metric", "tooluse.wellformed_rate",
                        "--out", str(tmp_path / "plots")], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin"})
    assert h.returncode == 0, h.stderr
    assert all(x["run_id"] in h.stdout for x in lines) and "REGRESSION" in h.stdout
    assert (tmp_path / "plots" / "stand-in.png").read_bytes()[:4] == b"\x89PNG"


def test_regressions_use_two_se_and_drift_where_no_se() -> None:
    cfg = HistoryCfg()
    earlier = [{"run_id": "a", "metrics": {"capability.gsm8k_accuracy": 0.70, "throughput.decode_tps@512": 100.0},
                "se": {"capability.gsm8k_accuracy": 0.046}}]
    within = {"metrics": {"capability.gsm8k_accuracy": 0.60, "throughput.decode_tps@512": 95.0},
              "se": {"capability.gsm8k_accuracy": 0.049}}  # 0.10 < 2·0.067; 5 % < 10 %
    assert regressions(earlier, within, cfg) == []
    beyond = {"metrics": {"capability.gsm8k_accuracy": 0.50, "throughput.decode_tps@512": 80.0},
              "se": {"capability.gsm8k_accuracy": 0.05}}
    kinds = {f["metric"]: f["kind"] for f in regressions(earlier, beyond, cfg)}
    assert kinds == {"capability.gsm8k_accuracy": "regression", "throughput.decode_tps@512": "drift"}
    better = {"metrics": {"capability.gsm8k_accuracy": 0.95, "throughput.decode_tps@512": 300.0}, "se": {}}
    assert regressions(earlier, better, cfg) == []  # improvements are never flagged


def test_the_cross_judge_runs_on_the_first_run_then_every_n() -> None:
    due = [cross_due([{}] * i, 3)[0] for i in range(7)]
    assert due == [True, False, False, True, False, False, True]
    assert "next on run 4" in cross_due([{}], 3)[1] and all(cross_due([{}] * i, 1)[0] for i in range(4))


# -- the seed's contract, and the smaller points ------------------------------------------------------
def seed_client(report: dict) -> list:
    """What a client written from the seed's webhook JSON example reads (KeyError if absent)."""
    model = next(iter(report["verdict_per_model"]))
    row = report["summary"][0]
    got = [report["run_id"], report["tag"], report["finished_utc"], report["verdict_per_model"][model],
           report["exit_code"], row["model"], report["report_path"], report["kl_divergence"], report["vram_baseline"]]
    for ctx in row["throughput_by_ctx"].values():
        got += [ctx["gen_tps"], ctx["prefill_tps"], ctx["ttft_any_s"], ctx["vram_peak_gib"]]
    cap = row["capacity"]
    got += [cap["peak_aggregate_tps"], cap["best_n"]]
    for lv in cap["levels"]:
        got += [lv["n"], lv["aggregate_tps"], lv["ttft_ms_p95"], lv["itl_ms_p95"]]
    got += [row["lmeval"], row["judge_checklist_rate"]]
    return got


def test_a_client_written_from_the_seed_reads_every_field(tmp_path: Path, hook: Receiver) -> None:
    server = Replay(tmp_path, REPO / "replay" / "fitness.yaml")
    try:
        r, out = run(tmp_path, server.url, "telemetry,warmup,throughput,capacity", hook,
                     ["--contexts", "256", "--levels", "1,2"],
                     cfg_text="capacity: {input_tokens: 64, output_tokens: 8, requests_per_level: 2}\n")
    finally:
        server.stop()
    assert r.returncode == 0, r.stderr
    doc = results(out)
    for report in (hook.bodies[0], json.loads((out / "summary.json").read_text()), doc):
        seed_client(report)
    assert "text" in hook.bodies[0] and doc["summary"][0]["throughput_by_ctx"]["256"]["gen_tps"] > 0
    # no bar active on these phases: the seed's null, ours beside it
    assert doc["verdict_per_model"] == {"fit-model": None} and doc["verdict"] == "PASS"
    # the replay server exposes no GPU gauge: null, with the reason
    assert doc["vram_baseline"] is None and "no GPU memory gauge" in doc["vram_baseline_reason"]
    assert doc["summary"][0]["throughput_by_ctx"]["256"]["vram_peak_gib"] is None
    # a replay endpoint reached by URL is scripted, as its engine line says
    assert doc["reproducibility"]["scripted"] is True and "Scripted replay" in (out / "report.md").read_text()
    assert doc["reproducibility"]["thresholds"]["path"] == "harness/fitness/thresholds.yaml"  # no checkout path


def test_no_target_names_fitness_run(tmp_path: Path) -> None:
    r = fitness(["run", "--report-dir", str(tmp_path / "report")], tmp_path)
    flat = " ".join(r.stderr.split())
    assert r.returncode == 3 and "llms-benchmark fitness run http://" in flat and "llms-benchmark load" not in flat


def test_advisory_is_said_once(tmp_path: Path) -> None:
    r = subprocess.run([str(CLI), "fitness", "metrics"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={"COLUMNS": "300", "PATH": "/usr/bin:/bin"})
    judge = [line for line in r.stdout.splitlines() if "judge.checklist_rate" in line]
    assert len(judge) == 1 and judge[0].count("advisory") == 1, judge


def test_a_bar_on_kl_gates_like_any_other(tmp_path: Path, hook: Receiver) -> None:
    """kl with no reference is skipped; a bar set on it is then WARN (a bar you set went unchecked)."""
    server = StandIn()
    try:
        r, out = run(tmp_path, server.url, "warmup,kl", hook,
                     ["--thresholds", str(bars(tmp_path, "kl.sym_kl_mean: {fail_above: 0.1}\n"))])
    finally:
        server.close()
    assert r.returncode == 1, r.stderr
    kl = next(p for p in results(out)["phases"] if p["name"] == "kl")
    assert kl["status"] == "skipped" and "kl.reference.url" in kl["reason"]


def test_vram_comes_from_a_gpu_gauge_where_one_is_served() -> None:
    """A DCGM exporter's framebuffer gauge (MiB per GPU, summed) is read as GiB; vLLM's own gauges are not
    memory, so without an exporter the reading is null with the reason."""
    from harness.fitness.vram import used_gib
    from harness.load.metrics import parse

    dcgm = ('# TYPE DCGM_FI_DEV_FB_USED gauge\nDCGM_FI_DEV_FB_USED{gpu="0"} 20480\nDCGM_FI_DEV_FB_USED{gpu="1"} 1024\n'
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n")
    assert used_gib(parse(dcgm).raw) == (21.0, "DCGM_FI_DEV_FB_USED")
    vllm_only = ("# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.2\n"
                 "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes 4e9\n")
    gib, why = used_gib(parse(vllm_only).raw)
    assert gib is None and "no GPU memory gauge" in why
