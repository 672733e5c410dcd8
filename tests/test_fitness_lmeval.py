"""Seed 003's lm-eval lane (`capability.lmeval`): the real lm-eval[api] in the tools venv `make
setup` made (`llms-benchmark fitness tools`), over the frozen GSM8K file, asked through
`/v1/completions` of a loopback server that answers a known share right — the figure lm-eval
reports is that share, and the request is the seed's (raw prompt, greedy, the stop list, the key)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from conftest import REPO, fitness_data_dir

CLI = REPO / ".venv" / "bin" / "llms-benchmark"
RIGHT = 3  # of the first LIMIT items, the first RIGHT are answered right
LIMIT = 4


def tools_venv() -> Path:
    from harness.fitness import lmeval

    venv = lmeval.default_dir()
    if not lmeval.ready(venv):
        pytest.fail(f"the fitness tools' venv {venv} is missing - run `make setup` (it runs `llms-benchmark fitness tools`)")
    return venv


class _Server:
    """/v1/models, /v1/chat/completions (the harness's own scorer) and /v1/completions (lm-eval's)."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.seen = answers, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _send(self, doc: dict) -> None:
                data = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/v1/models":
                    return self._send({"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 8192}]})
                self.send_error(404)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.seen.append((self.path, self.headers.get("Authorization"), body))
                text = body["prompt"] if self.path == "/v1/completions" else body["messages"][-1]["content"]
                got = next((a for q, a in outer.answers.items() if q in text), "0")
                if self.path == "/v1/completions":
                    return self._send({"id": "c", "object": "text_completion", "model": "m", "choices": [
                        {"index": 0, "text": f" Step by step, the total is {got}.\n\nQuestion: next", "finish_reason": "stop"}]})
                if self.path == "/v1/chat/completions":
                    return self._send({"id": "c", "object": "chat.completion", "model": "m", "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": f"#### {got}"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}})
                self.send_error(404)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


def test_task_definitions_over_the_frozen_files(tmp_path: Path):
    from harness.fitness import lmeval

    data_dir = fitness_data_dir(["gsm8k"])
    names = lmeval.write_tasks(data_dir, tmp_path, ["humaneval", "gsm8k", "ifbench"])
    assert names == {"gsm8k": "fitness_gsm8k"}  # the others: OFFLINE_WHY
    spec = yaml.safe_load((tmp_path / "fitness_gsm8k.yaml").read_text())
    assert spec["dataset_path"] == "json" and spec["output_type"] == "generate_until"
    assert spec["dataset_kwargs"]["data_files"]["test"] == str(data_dir / "gsm8k" / "cases.jsonl")
    assert set(lmeval.OFFLINE_WHY) == {"humaneval", "ifbench"}


def test_lm_eval_scores_the_frozen_gsm8k_through_v1_completions(tmp_path: Path):
    """The whole lane through `fitness run`: lm-eval's exact match is the share answered right,
    beside the harness's own GSM8K score, in results.json, the report and the seed's summary."""
    venv = tools_venv()
    data_dir = fitness_data_dir(["gsm8k"])
    from harness.fitness import data

    items = data.load_items(data_dir, "gsm8k")[:LIMIT]
    answers = {it["prompt"]: (it["expected"] if i < RIGHT else "99999") for i, it in enumerate(items)}
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({"tools_venv": str(venv), "capability": {
        "data_dir": str(data_dir), "suites": ["gsm8k"], "lmeval": True,
        "max_tokens": 64}}))
    with _Server(answers) as server:
        r = subprocess.run([str(CLI), "fitness", "run", server.url, "--phases", "capability", "--limit", str(LIMIT),
                            "--config", str(cfg), "--report-dir", str(tmp_path / "out"), "--api-key-env", "FIT_KEY"],
                           capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=tmp_path,
                           env={**os.environ, "COLUMNS": "300", "FIT_KEY": "sk-lmeval"})
        seen = list(server.seen)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["metrics"]["capability.gsm8k_accuracy"] == RIGHT / LIMIT
    assert doc["metrics"]["capability.lmeval_gsm8k_accuracy"] == RIGHT / LIMIT
    lme = doc["phases"][0]["details"]["lmeval"]
    assert lme["versions"]["lm_eval"] == "0.4.13" and lme["suites"]["gsm8k"]["n"] == LIMIT
    assert lme["suites"]["gsm8k"]["se"] == round(((0.75 * 0.25) / LIMIT) ** 0.5, 4)
    from harness.fitness.history import errors_of

    assert errors_of(doc)["capability.lmeval_gsm8k_accuracy"] == lme["suites"]["gsm8k"]["se"]  # regressions: 2·SE
    completions = [(key, body) for path, key, body in seen if path == "/v1/completions"]
    assert len(completions) == LIMIT and all(key == "Bearer sk-lmeval" for key, _ in completions)
    body = completions[0][1]
    assert body["prompt"].startswith("Question: ") and body["prompt"].endswith("\nAnswer:")
    assert body["temperature"] == 0 and body["max_tokens"] == 64 and "Question:" in body["stop"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "lm-eval 0.4.13 over the same frozen files" in report and "| gsm8k | fitness_gsm8k | 4 | 0.75" in report
    row = json.loads((tmp_path / "out" / "summary.json").read_text())["summary"][0]
    assert row["lmeval"] == {"gsm8k": 0.75} and row["lmeval_scored_by"] == {"gsm8k": "lm-eval 0.4.13"}
    samples = (tmp_path / "out" / "capability" / "lmeval" / "fitness_gsm8k.samples.jsonl").read_text().splitlines()
    assert [json.loads(s)["exact_match"] for s in samples] == [1.0, 1.0, 1.0, 0.0]
    assert "sk-lmeval" not in json.dumps(doc) and "sk-lmeval" not in report


def test_without_the_tools_venv_the_dry_run_names_the_command(tmp_path: Path):
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({"tools_venv": str(tmp_path / "none"), "capability": {
        "data_dir": str(fitness_data_dir(["gsm8k"])), "suites": ["gsm8k"], "lmeval": True}}))
    r = subprocess.run([str(CLI), "fitness", "run", "--phases", "capability", "--config", str(cfg), "--dry-run"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path,
                       env={**os.environ, "COLUMNS": "300"})
    flat = " ".join(r.stderr.split())
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "the fitness tools' venv (lm-eval) is missing" in flat and "llms-benchmark fitness tools" in flat, flat


def test_the_tools_are_pinned_without_torch_and_the_image_and_make_setup_install_them():
    import re

    from harness.fitness import lmeval

    assert lmeval.REQUIREMENTS == ("lm-eval[api]==0.4.13",)
    assert not [r for r in lmeval.REQUIREMENTS if re.match(r"torch\b", r)]
    assert "llms-benchmark fitness tools" in (REPO / "Dockerfile.fitness").read_text()
    make = (REPO / "Makefile").read_text()
    assert re.search(r"^setup:.*\bfitness-tools\b", make, re.M) and "fitness tools" in make


def test_fitness_tools_refuses_to_replace_a_folder_that_is_not_a_venv(tmp_path: Path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    r = subprocess.run([str(CLI), "fitness", "tools", "--tools-venv", str(tmp_path / "mine")], capture_output=True,
                       text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path, env={**os.environ, "COLUMNS": "300"})
    flat = " ".join(r.stderr.split())
    assert r.returncode == 3 and "exists and is not a venv: refusing to replace it" in flat and "Traceback" not in flat
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_the_dry_run_names_the_pinned_tool(tmp_path: Path):
    cfg = tmp_path / "fitness.yaml"
    cfg.write_text(yaml.safe_dump({"tools_venv": str(tools_venv()), "capability": {
        "data_dir": str(fitness_data_dir(["gsm8k"])), "suites": ["gsm8k"], "lmeval": True}}))
    r = subprocess.run([str(CLI), "fitness", "run", "--phases", "capability", "--config", str(cfg), "--dry-run"],
                       capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path,
                       env={**os.environ, "COLUMNS": "300"})
    assert r.returncode == 0 and "lm-eval[api]==0.4.13: gsm8k" in " ".join(r.stdout.split()), r.stdout + r.stderr
