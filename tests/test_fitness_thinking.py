"""Seed 003's opt-in thinking lane: HumanEval asked again in thinking mode (chat with
`chat_template_kwargs.enable_thinking`, temperature 1.0, top_p 0.95, its own budget), the
reasoning read apart from the answer (only the answer's code runs), and more than a quarter of
empty answers (the budget spent thinking) failing the phase loudly. Against a loopback server
speaking the OpenAI chat wire with `reasoning_content`, as vLLM's reasoning parsers do."""

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

from harness.fitness import data
from harness.fitness.sandbox_exec import confinement

CLI = REPO / ".venv" / "bin" / "llms-benchmark"
pytestmark = pytest.mark.skipif(confinement() is None, reason="bubblewrap is not installed (make sandbox)")


class ThinkingModel:
    """Greedy asks get the canonical solution; thinking asks get reasoning, then the answer
    `thinking_answers` gives for the problem (None: the budget ran out thinking, no answer)."""

    def __init__(self, problems: list[dict], thinking_answers: list[str | None]) -> None:
        self.by_prompt = {p["prompt"]: (p, a) for p, a in zip(problems, thinking_answers)}
        self.asked: list[dict] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                self._json({"object": "list", "data": [{"id": "thinker", "object": "model", "max_model_len": 32768}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.asked.append(body)
                text = body["messages"][-1]["content"]
                problem, answer = next(v for k, v in model.by_prompt.items() if k in text)
                thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking")
                if not thinking:
                    msg = {"role": "assistant", "content": f"```python\n{problem['prompt']}{problem['canonical_solution']}```"}
                    finish = "stop"
                elif answer is None:
                    msg, finish = {"role": "assistant", "content": "", "reasoning_content": "Let me think... " * 50}, "length"
                else:
                    msg = {"role": "assistant", "reasoning_content": "The tests call it with lists; loop once.",
                           "content": f"Here it is:\n```python\n{problem['prompt']}{answer}```"}
                    finish = "stop"
                self._json({"id": "c1", "object": "chat.completion", "model": "thinker",
                            "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                            "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}})

            def _json(self, doc: dict) -> None:
                raw = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ThinkingModel:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def _run(tmp_path: Path, url: str, name: str, extra_cfg: dict) -> tuple[int, dict, str]:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump({"capability": {"data_dir": str(fitness_data_dir()), "suites": ["humaneval"],
                                                  "thinking": True, **extra_cfg}}))
    out = tmp_path / name
    r = subprocess.run([str(CLI), "fitness", "run", url, "--phases", "capability", "--limit", "4", "--config", str(cfg),
                        "--report-dir", str(out)], capture_output=True, text=True, timeout=180,
                       stdin=subprocess.DEVNULL, cwd=tmp_path, env={**os.environ, "COLUMNS": "300"})
    return r.returncode, json.loads((out / "results.json").read_text()), r.stdout + r.stderr


def test_the_thinking_lane_asks_in_thinking_mode_and_scores_the_answer_apart_from_the_reasoning(tmp_path: Path):
    problems = data.load_items(fitness_data_dir(), "humaneval")[:4]
    wrong = "    return None\n"
    answers = [problems[0]["canonical_solution"], problems[1]["canonical_solution"], wrong, None]
    with ThinkingModel(problems, answers) as model:
        code, doc, said = _run(tmp_path, model.url, "ok", {})
    assert code == 0, said
    phase = doc["phases"][0]
    assert phase["status"] == "ran", phase
    lane = phase["details"]["thinking"]
    assert (lane["n"], lane["correct"], lane["empty"], lane["with_reasoning"]) == (4, 2, 1, 4)
    assert doc["metrics"]["capability.humaneval_thinking_accuracy"] == 0.5
    assert doc["metrics"]["capability.humaneval_accuracy"] == 1.0  # the canonical lane: greedy, no thinking
    thinking = [b for b in model.asked if (b.get("chat_template_kwargs") or {}).get("enable_thinking")]
    greedy = [b for b in model.asked if b not in thinking]
    assert len(thinking) == 4 and len(greedy) == 4
    assert {(b["temperature"], b["top_p"], b["max_tokens"]) for b in thinking} == {(1.0, 0.95, 8192)}
    assert {b["temperature"] for b in greedy} == {0}
    rows = [json.loads(x) for x in Path(lane["transcripts"]).read_text().splitlines()]
    assert [r["correct"] for r in rows] == [True, True, False, False] and rows[3]["finish"] == "length"
    assert all("Let me think" not in r["answer"] for r in rows)  # the reasoning is never scored as the answer
    assert "Thinking lane" in (tmp_path / "ok" / "report.md").read_text()


def test_a_thinking_budget_spent_before_any_answer_fails_the_phase_loudly(tmp_path: Path):
    problems = data.load_items(fitness_data_dir(), "humaneval")[:4]
    answers = [problems[0]["canonical_solution"], None, None, problems[3]["canonical_solution"]]
    with ThinkingModel(problems, answers) as model:
        code, doc, said = _run(tmp_path, model.url, "empty", {"thinking_max_tokens": 1024})
    phase = doc["phases"][0]
    assert phase["status"] == "error" and code != 0, said
    assert "2 of 4 answers were empty" in phase["reason"] and "capability.thinking_max_tokens" in phase["reason"]
    assert {b["max_tokens"] for b in model.asked if b.get("chat_template_kwargs")} == {1024}
