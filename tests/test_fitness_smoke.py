"""Seed 003's bare-stdlib smoke path (`harness/fitness/smoke.py`): a copy of the one file, run by
`python -I -S` (no site-packages: the standard library alone), against a loopback OpenAI server:
its five phases, its verdicts as the seed's exit codes (0 PASS, 2 FAIL, 3 pipeline error)."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from fakes.openai_server import Answer, FakeOpenAI

SMOKE = REPO / "harness" / "fitness" / "smoke.py"
STDLIB_ONLY = (SMOKE, REPO / "harness" / "fitness" / "host_checks.py", REPO / "harness" / "fitness" / "guard.py")


@pytest.mark.parametrize("path", STDLIB_ONLY, ids=lambda p: p.name)
def test_imports_only_the_standard_library(path: Path):
    tree = ast.parse(path.read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names and not {n for n in names if n not in sys.stdlib_module_names and n != "__future__"}, names


def _tool_model(body: dict) -> Answer:
    if body.get("tools"):
        return Answer(tool_calls=[("read_file", {"path": "src/app.py"})], completion_tokens=12)
    return Answer(text="one two three four five six seven eight", prompt_tokens=480, completion_tokens=8)


def _smoke(tmp_path: Path, *args: str, env: dict | None = None) -> tuple[int, dict | None, str]:
    """The file copied away from the package (with the judge tasks beside it, as the seed ships them)."""
    folder = tmp_path / "bare"
    folder.mkdir(exist_ok=True)
    shutil.copy(SMOKE, folder / "smoke.py")
    shutil.copy(SMOKE.with_name("judge_tasks.jsonl"), folder / "judge_tasks.jsonl")
    out = tmp_path / "smoke.json"
    done = subprocess.run([sys.executable, "-I", "-S", str(folder / "smoke.py"), *args, "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=folder, env=env or {"PATH": "/usr/bin:/bin"})
    return done.returncode, json.loads(out.read_text()) if out.is_file() else None, done.stderr


def test_the_five_phases_pass_against_a_tool_calling_model(tmp_path: Path):
    with FakeOpenAI(reply=_tool_model) as server:
        code, doc, err = _smoke(tmp_path, "--base-url", server.url, "--prompt-tokens", "128", "--judge-items", "2")
        seen = [s.body for s in server.seen]
    assert code == 0 and doc["verdict"] == "PASS", err
    phases = {p["name"]: p for p in doc["phases"]}
    assert list(phases) == ["telemetry", "warmup", "tooluse", "throughput", "judge"]
    assert all(p["status"] == "ran" for p in phases.values()), phases
    assert phases["telemetry"]["gauges"]["vllm:kv_cache_usage_perc"] == 0.25
    assert phases["tooluse"]["calls"] == [{"name": "read_file", "arguments": '{"path": "src/app.py"}'}]
    tp = phases["throughput"]["metrics"]
    assert phases["throughput"]["prompt_tokens"] == 480 and tp["throughput.ttft_s"] > 0 and tp["throughput.prefill_tps"] > 0
    assert phases["judge"]["metrics"]["judge.answers"] == 2
    assert doc["model"] == "fake-model" and all(b["stream"] and b["model"] == "fake-model" for b in seen)
    assert sum(1 for b in seen if b.get("tools")) == 1 and len(seen) == 5  # warmup, tooluse, throughput, 2 judge


def test_prose_instead_of_a_tool_call_fails_with_exit_2(tmp_path: Path):
    with FakeOpenAI() as server:  # never calls a tool
        code, doc, err = _smoke(tmp_path, "--base-url", server.url + "/v1", "--phases", "warmup,tooluse")
    assert code == 2 and doc["verdict"] == "FAIL", err
    tool = doc["phases"][1]
    assert tool["status"] == "fail" and "no structured tool call" in tool["reason"] and "prose" in tool["reason"]


def test_the_key_goes_by_name(tmp_path: Path):
    with FakeOpenAI(reply=_tool_model) as server:
        code, doc, err = _smoke(tmp_path, "--base-url", server.url, "--phases", "warmup", "--api-key-env", "SMOKE_KEY",
                                env={"PATH": "/usr/bin:/bin", "SMOKE_KEY": "sk-smoke"})
        keys = {s.key for s in server.seen}
    assert code == 0 and keys == {"sk-smoke"}, err
    assert "sk-smoke" not in json.dumps(doc)


@pytest.mark.parametrize("args, said", [
    (["--base-url", "http://127.0.0.1:1"], "Connection refused"),
    (["--base-url", "http://127.0.0.1:1", "--phases", "perf"], "unknown phase 'perf'"),
    (["--base-url", "ftp://x"], "is not an http(s) URL"),
    (["--base-url", "http://x", "--api-key-env", "NOT_SET_HERE"], "that variable is not set"),
    (["--base-url", "http://x", "--bogus"], "unrecognized arguments: --bogus"),
    ([], "the following arguments are required: --base-url"),
])
def test_pipeline_and_usage_errors_exit_3(tmp_path: Path, args: list[str], said: str):
    code, doc, err = _smoke(tmp_path, *args)
    assert code == 3 and said in err and "Traceback" not in err, err
    if doc is not None:
        assert doc["verdict"] is None and doc["exit_code"] == 3
