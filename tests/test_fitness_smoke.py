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
    """The file copied away from the package (with the judge tasks and KL prompts beside it)."""
    folder = tmp_path / "bare"
    folder.mkdir(exist_ok=True)
    shutil.copy(SMOKE, folder / "smoke.py")
    for name in ("judge_tasks.jsonl", "kl_prompts.jsonl"):
        shutil.copy(SMOKE.with_name(name), folder / name)
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
    (["--base-url", "http://127.0.0.1:1", "--phases", "kl"], "--phases kl without --kl-reference measures nothing"),
])
def test_pipeline_and_usage_errors_exit_3(tmp_path: Path, args: list[str], said: str):
    code, doc, err = _smoke(tmp_path, *args)
    assert code == 3 and said in err and "Traceback" not in err, err
    if doc is not None:
        assert doc["verdict"] is None and doc["exit_code"] == 3


@pytest.mark.parametrize("cand_api, ref_api", [("llamacpp", "vllm"), ("vllm", "llamacpp")])
def test_kl_reads_the_known_divergence(tmp_path: Path, cand_api: str, ref_api: str):
    """The stdlib KL against the KL test's stand-ins (a 4-token vocabulary, known in full): the
    figures computed independently there, and the harness's own divergence.py, agree with it."""
    from test_fitness_kl import PROMPTS, Native, expected

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(PROMPTS)))
    cand, ref = Native(cand_api, shift=0.8), Native(ref_api, shift=0.0)
    try:
        code, doc, err = _smoke(tmp_path, "--base-url", cand.url, "--kl-reference", ref.url, "--phases", "kl",
                                "--kl-prompts", str(prompts), "--kl-positions", "6", "--kl-skip", "2",
                                "--kl-top-k", "4")
    finally:
        cand.close()
        ref.close()
    assert code == 0, err
    got = doc["phases"][0]
    want = expected(0.0, 0.8, positions=6, skip=2)
    assert got["positions"] == want["n"] and got["apis"] == {"served": cand_api, "reference": ref_api}
    assert got["metrics"]["kl.sym_kl_mean"] == pytest.approx(want["sym"], rel=1e-6) and want["sym"] > 0.01
    assert got["metrics"]["kl.js_mean"] == pytest.approx(want["js"], rel=1e-6)
    assert got["metrics"]["kl.top1_agreement"] == pytest.approx(want["top1"])


def test_kl_completes_truncated_lists_as_divergence_py_does():
    import importlib.util

    from harness.fitness.divergence import compare

    spec = importlib.util.spec_from_file_location("smoke_under_test", SMOKE)
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    ref = {1: -0.3, 2: -1.9, 3: -3.0}
    cand = {1: -0.5, 4: -1.2, 2: -2.4}
    sym, js, top1 = smoke.divergence(ref, cand)
    want = compare(ref, cand)
    assert (sym, js, top1) == (pytest.approx(want.sym_kl, rel=1e-12), pytest.approx(want.js, rel=1e-12), want.top1_agree)


def test_kl_refuses_different_tokenizers_and_is_skipped_without_a_reference(tmp_path: Path):
    from test_fitness_kl import Native

    cand, ref = Native("llamacpp"), Native("llamacpp", offset=1)
    try:
        code, doc, err = _smoke(tmp_path, "--base-url", cand.url, "--kl-reference", ref.url, "--phases", "kl")
        assert code == 3 and "tokenize it differently" in err, err
        # Without a reference, kl alone would measure nothing: refused (it read PASS, exit 0, before).
        code, doc, err = _smoke(tmp_path, "--base-url", cand.url, "--phases", "kl")
        assert code == 3 and "without --kl-reference measures nothing" in err, err
    finally:
        cand.close()
        ref.close()


def test_the_harness_runs_the_same_file(tmp_path: Path):
    """`llms-benchmark fitness smoke` is the same code (the seed's two run modes, no branching)."""
    out = tmp_path / "smoke.json"
    with FakeOpenAI(reply=_tool_model) as server:
        done = subprocess.run([str(REPO / ".venv" / "bin" / "llms-benchmark"), "fitness", "smoke", "--base-url",
                               server.url, "--phases", "warmup,tooluse", "--out", str(out)], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert [p["status"] for p in json.loads(out.read_text())["phases"]] == ["ran", "ran"]
    done = subprocess.run([str(REPO / ".venv" / "bin" / "llms-benchmark"), "fitness", "smoke", "--phases", "x"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 3 and "required: --base-url" in done.stderr and "Traceback" not in done.stderr


def test_llama_cpp_without_metrics_is_skipped_with_the_flag_named(tmp_path: Path):
    """llama.cpp answers /metrics with 501 unless started with --metrics (seen on the embedded build)."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            status, doc = (200, {"data": [{"id": "m"}]}) if self.path == "/v1/models" else (501, {"error": {
                "code": 501, "message": "This server does not support metrics endpoint. Start it with `--metrics`"}})
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, doc, err = _smoke(tmp_path, "--base-url", f"http://127.0.0.1:{server.server_address[1]}",
                                "--phases", "telemetry")
    finally:
        server.shutdown()
        server.server_close()
    assert doc["phases"][0]["status"] == "skipped" and "start it with --metrics" in doc["phases"][0]["reason"]
    # Issue 47: the only phase skipped measured nothing: a pipeline error, never PASS (it was exit 0).
    assert code == 3 and doc["verdict"] is None and "no phase measured anything" in err, err

