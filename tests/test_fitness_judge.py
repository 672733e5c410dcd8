"""The judge phase against real OpenAI-compatible servers on loopback: the served model and
both judges are replay servers (the judges require a bearer key, as a hosted judge does);
a plain loopback server plays the 429s. Judge metrics never gate; the key never shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from test_fitness import Replay, bars, fitness, results

from harness.fitness.config import JudgeCfg
from harness.fitness.phases.judge import MARK, TASKS, ask_judge, parse_verdicts

KEY = "sk-test-SENTINEL-7f3a9c"  # must never appear in any output or file
TASK_LIST = [json.loads(x) for x in TASKS.read_text().splitlines() if x.strip()]


class Judge:
    """A replay server as a judge: it requires `Bearer $JUDGE_KEY` and answers each task's
    grading prompt with the verdicts scripted here (or an error step)."""

    def __init__(self, folder: Path, name: str, verdicts: dict[str, list[bool] | int], model: str = "") -> None:
        scenarios = []
        for tid, v in verdicts.items():
            step = ({"error": {"status": v, "message": f"judge overloaded on {tid}"}} if isinstance(v, int)
                    else {"text": json.dumps({"verdicts": v, "notes": f"{name} on {tid}"})})
            scenarios.append({"name": tid, "match": f"{MARK} {tid}\n", "steps": [step]})
        path = folder / f"{name}.yaml"
        path.write_text(yaml.safe_dump({"trajectories": scenarios}))
        self.log = folder / f"{name}-served.jsonl"
        self.model = model or f"{name}-model"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "harness.replay.server", "--trajectory", str(path), "--port", "0",
             "--served-model-name", self.model, "--max-model-len", "32768", "--served-log", str(self.log),
             "--api-key-env", "JUDGE_KEY"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            env={**os.environ, "JUDGE_KEY": KEY})
        self.url = re.search(r"http://\S+", self.proc.stdout.readline()).group(0)

    def requests(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.is_file() else 0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=15)


def all_true() -> dict[str, list[bool]]:
    return {t["id"]: [True] * len(t["checklist"]) for t in TASK_LIST}


def half_flipped() -> dict[str, list[bool]]:
    return {t["id"]: [i % 2 == 0 for i in range(len(t["checklist"]))] for t in TASK_LIST}


@pytest.fixture()
def served(tmp_path: Path):
    server = Replay(tmp_path, REPO / "replay" / "fitness.yaml")
    yield server
    server.stop()


def run_judge(served: Replay, tmp: Path, judge: Judge, cross: Judge | None = None, out: Path | None = None,
              key: str = KEY, extra: dict | None = None):
    cfg = {"judge": {"url": judge.url, "model": judge.model, "key_env": "JUDGE_KEY", "answer_max_tokens": 16,
                     "attempts": 2, "retry_after_min_s": 0, "retry_after_default_s": 0, **(extra or {})}}
    if cross:
        cfg["judge"]["cross"] = {"url": cross.url, "model": cross.model, "key_env": "JUDGE_KEY"}
    path = tmp / "fitness.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = out or tmp / "report"
    r = fitness(["run", served.url, "--phases", "judge", "--config", str(path), "--report-dir", str(out),
                 "--thresholds", str(bars(tmp, "judge.checklist_rate: {fail_below: 0.99}\n"
                                               "judge.cross_agreement: {fail_below: 0.99}\n"))],
                tmp, env={"JUDGE_KEY": key})
    return r, out


def no_key_anywhere(r, out: Path) -> None:
    assert KEY not in r.stdout + r.stderr
    for f in out.rglob("*"):
        if f.is_file():
            assert KEY not in f.read_text(errors="replace"), f


def test_judge_and_an_agreeing_cross_judge(served: Replay, tmp_path: Path) -> None:
    judge, cross = Judge(tmp_path, "judge", all_true()), Judge(tmp_path, "cross", all_true())
    try:
        r, out = run_judge(served, tmp_path, judge, cross)
    finally:
        judge.stop(), cross.stop()
    assert r.returncode == 0, r.stdout + r.stderr
    doc = results(out)
    phase = doc["phases"][0]
    assert phase["status"] == "ran" and phase["details"]["cross"]["trusted"] is True
    assert doc["metrics"]["judge.checklist_rate"] == 1.0 and doc["metrics"]["judge.cross_agreement"] == 1.0
    assert doc["warnings"] == [] and "WARNING" not in r.stderr
    assert judge.requests() == cross.requests() == len(TASK_LIST)
    assert doc["reproducibility"]["data_manifest"]["judge"]["items"] == len(TASK_LIST)
    assert "trusted." in (out / "report.md").read_text()
    no_key_anywhere(r, out)


def test_a_disagreeing_cross_judge_is_a_loud_warning_that_never_gates(served: Replay, tmp_path: Path) -> None:
    judge, cross = Judge(tmp_path, "judge", all_true()), Judge(tmp_path, "cross", half_flipped())
    try:
        r, out = run_judge(served, tmp_path, judge, cross)
    finally:
        judge.stop(), cross.stop()
    # the judge bars are failed (rate 1.0 passes, agreement 0.5 < 0.99) yet the exit code stays 0
    assert r.returncode == 0, r.stdout + r.stderr
    doc = results(out)
    assert doc["metrics"]["judge.cross_agreement"] == 0.5
    rows = {v["metric"]: v for v in doc["verdicts"]}
    assert rows["judge.cross_agreement"]["verdict"] == "FAIL" and rows["judge.cross_agreement"]["gates"] is False
    assert "JUDGE NOT TRUSTED" in " ".join(r.stderr.split()) and "JUDGE NOT TRUSTED" in doc["warnings"][0]
    report = (out / "report.md").read_text()
    assert "> **WARNING:** JUDGE NOT TRUSTED" in report and "**NOT TRUSTED**" in report
    divergent = doc["phases"][0]["details"]["cross"]["divergent"]
    assert len(divergent) == sum(len(t["checklist"]) // 2 for t in TASK_LIST)
    assert "warnings: JUDGE NOT TRUSTED" in json.loads((out / "summary.json").read_text())["text"]
    no_key_anywhere(r, out)


def test_a_failing_judge_is_checkpointed_and_a_rerun_resumes(served: Replay, tmp_path: Path) -> None:
    verdicts = all_true()
    broken = dict(verdicts, t05=503)
    judge = Judge(tmp_path, "judge", broken)
    try:
        r, out = run_judge(served, tmp_path, judge)
    finally:
        judge.stop()
    # advisory, but here the only phase: nothing was measured, which is never a PASS (issue 47)
    assert r.returncode == 3 and "no phase measured anything" in " ".join(r.stderr.split()), r.stdout + r.stderr
    phase = results(out)["phases"][0]
    assert phase["status"] == "skipped" and "after 4 of 8 items" in phase["reason"]
    assert "HTTP 503" in phase["reason"] and "judge overloaded on t05" in phase["reason"]  # the body, quoted
    assert judge.requests() == 4 + 2  # t01-t04, then t05 twice (attempts: 2)
    generated = len(served.served())
    # the same report folder, a healthy judge: only t05-t08 are graded, no answer is asked again
    judge2 = Judge(tmp_path, "judge2", verdicts, model=judge.model)  # the same judge model, restarted
    try:
        r2, _ = run_judge(served, tmp_path, judge2, out=out)
    finally:
        judge2.stop()
    doc = results(out)
    assert r2.returncode == 0 and doc["phases"][0]["status"] == "ran", r2.stdout + r2.stderr
    assert doc["phases"][0]["details"]["reused"]["answers"] == 8 and len(served.served()) == generated
    assert judge2.requests() == 4 and doc["phases"][0]["details"]["reused"]["judge"] == 4
    assert doc["metrics"]["judge.checklist_rate"] == 1.0


def test_a_wrong_key_is_one_quoted_reason_and_the_key_is_not_shown(served: Replay, tmp_path: Path) -> None:
    judge = Judge(tmp_path, "judge", all_true())
    try:
        r, out = run_judge(served, tmp_path, judge, key="sk-wrong-key")
    finally:
        judge.stop()
    assert r.returncode == 3  # the only phase skipped: nothing measured (issue 47), never PASS
    phase = results(out)["phases"][0]
    assert phase["status"] == "skipped" and "HTTP 401" in phase["reason"] and "Unauthorized" in phase["reason"]
    assert "sk-wrong-key" not in r.stdout + r.stderr + (out / "results.json").read_text()


def test_judge_config_errors_are_one_clear_error(tmp_path: Path) -> None:
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({"judge": {"url": "http://127.0.0.1:9", "model": "m", "key_env": "NO_SUCH_KEY_VAR"}}))
    r = fitness(["run", "http://127.0.0.1:9", "--phases", "judge", "--config", str(cfg), "--dry-run"], tmp_path)
    assert r.returncode == 3 and "Traceback" not in r.stderr
    assert "$NO_SUCH_KEY_VAR is not set" in r.stderr and "judge.key_env" in r.stderr
    cfg.write_text(yaml.safe_dump({"judge": {"url": "http://127.0.0.1:9", "model": "m", "key_env": "HOME",
                                             "cross": {"url": "http://127.0.0.1:9"}}}))
    r = fitness(["run", "http://127.0.0.1:9", "--phases", "judge", "--config", str(cfg), "--dry-run"], tmp_path)
    assert r.returncode == 3 and "judge.cross" in r.stderr and "url, model and key_env together" in r.stderr


def test_verdict_parsing_on_known_replies() -> None:
    assert parse_verdicts('{"verdicts": [true, false, true], "notes": "ok"}', 3) == ([True, False, True], "ok")
    assert parse_verdicts('Sure.\n```json\n{"verdicts": [false, false]}\n```', 2)[0] == [False, False]
    assert parse_verdicts('<think>{"verdicts": [true]}</think>{"verdicts": [false]}', 1)[0] == [False]
    assert parse_verdicts('{"verdicts": [true, false]}', 3)[0] is None  # wrong count
    assert parse_verdicts('{"verdicts": ["yes", "no"]}', 2)[0] is None  # not booleans
    assert parse_verdicts("All items are met.", 2)[0] is None


class _RateLimited(BaseHTTPRequestHandler):
    """First POST: 429 with the server's Retry-After; then a verdict."""

    hits: list[float] = []
    retry_after = "1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).hits.append(time.monotonic())
        if len(self.hits) == 1:
            body, status = b'{"error": "slow down"}', 429
        else:
            body = json.dumps({"choices": [{"message": {"content": '{"verdicts": [true]}'}}]}).encode()
            status = 200
        self.send_response(status)
        if status == 429:
            self.send_header("Retry-After", type(self).retry_after)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.mark.parametrize("header, cfg_max, low, high", [("1", 120.0, 0.9, 5.0), ("999", 1.5, 1.4, 6.0)])
def test_429_honours_retry_after_clamped(monkeypatch, header: str, cfg_max: float, low: float, high: float) -> None:
    _RateLimited.hits, _RateLimited.retry_after = [], header
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RateLimited)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("JUDGE_KEY", KEY)
    cfg = JudgeCfg(url=f"http://127.0.0.1:{server.server_address[1]}", model="m", key_env="JUDGE_KEY",
                   retry_after_max_s=cfg_max, attempts=3)
    try:
        text = ask_judge(cfg, cfg, [{"role": "user", "content": "x"}])
    finally:
        server.shutdown()
    assert json.loads(text) == {"verdicts": [True]} and len(_RateLimited.hits) == 2
    assert low <= _RateLimited.hits[1] - _RateLimited.hits[0] <= high


def test_the_cross_judge_runs_on_its_schedule(served: Replay, tmp_path: Path) -> None:
    """every_n_runs 2: the first judged run of the model, not the second, again the third (the history
    log of this project root counts them); the judge itself grades every run."""
    judge, cross = Judge(tmp_path, "judge", all_true()), Judge(tmp_path, "cross", all_true())
    statuses = []
    try:
        for n in range(3):
            cfg = {"judge": {"url": judge.url, "model": judge.model, "key_env": "JUDGE_KEY", "answer_max_tokens": 16,
                             "cross": {"url": cross.url, "model": cross.model, "key_env": "JUDGE_KEY",
                                       "every_n_runs": 2}}}
            path = tmp_path / "fitness.yaml"
            path.write_text(yaml.safe_dump(cfg))
            out = tmp_path / f"run{n}"
            r = fitness(["run", served.url, "--phases", "judge", "--config", str(path), "--report-dir", str(out)],
                        tmp_path, env={"JUDGE_KEY": KEY})
            assert r.returncode == 0, r.stderr
            statuses.append(results(out)["phases"][0]["details"]["cross"])
    finally:
        judge.stop(), cross.stop()
    assert [s["status"] for s in statuses] == ["ran", "not due", "ran"]
    assert "next on run 3" in statuses[1]["reason"] and "every_n_runs" in statuses[1]["reason"]
    assert judge.requests() == 3 * len(TASK_LIST) and cross.requests() == 2 * len(TASK_LIST)
