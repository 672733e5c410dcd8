"""What vLLM logs about its KV cache at start, on every vLLM stack's record (GPU ones included),
and our KV formula checked against it: lines as vLLM 0.32 prints them (prefixes and all), the
CPU build's variant, a log without them (no guess), a later restart's lines not taking over, and
every stack that serves vLLM reading the same lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.serving.preflight_fit import estimate_against_log
from harness.stacks.vllm_log import kv_facts
from harness.stacks.registry import get_stack
from harness.vot.environment import load_environment_file
from harness.vot.preset import load_preset_file

ROOT = Path(__file__).resolve().parents[1]

# A GPU start as vLLM 0.32 logs it (engine-core prefix, file:line tags); the figures are those of
# vllm-project/vllm#21348 (Qwen3-235B-A22B-FP8, --tensor-parallel-size 4).
GPU_LOG = """\
(APIServer pid=1) INFO 12-02 10:00:01 [api_server.py:1885] vLLM API server version 0.32.0
(EngineCore_DP0 pid=220) INFO 12-02 10:01:40 [gpu_worker.py:298] Available KV cache memory: 8.11 GiB
(EngineCore_DP0 pid=220) INFO 12-02 10:01:41 [kv_cache_utils.py:2327] GPU KV cache size: 178,880 tokens, Maximum concurrency for 32,768 tokens per request: 5.46x
(APIServer pid=1) INFO:     Application startup complete.
"""
CPU_LOG = """\
(EngineCore pid=2) INFO 12-02 16:40:51 [cpu_worker.py:258] Explicitly set (2.0/23.47) GiB for KV cache on node 0.
(EngineCore pid=2) INFO 12-02 16:40:51 [kv_cache_utils.py:2327] CPU KV cache size: 74,880 tokens, Maximum concurrency for 65,536 tokens per request: 1.14x
"""
QWEN3_235B = {"num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
              "hidden_size": 4096, "torch_dtype": "bfloat16"}


def test_gpu_lines_are_read_with_their_prefixes():
    assert kv_facts(GPU_LOG) == {"kv_cache_tokens": "178880", "kv_cache_device": "GPU", "kv_cache_gib": "8.11",
                                 "kv_max_concurrency": "5.46x at 32768 tokens per request"}


def test_cpu_build_lines_are_read_too():
    facts = kv_facts(CPU_LOG)
    assert facts["kv_cache_tokens"] == "74880" and facts["kv_cache_device"] == "CPU" and facts["kv_cache_gib"] == "2.0"


def test_a_host_sparse_pool_is_named_as_vllm_names_it():
    line = "INFO [kv_cache_utils.py:2327] GPU + host KV cache size: 1,048,576 tokens, Maximum concurrency for 262,144 tokens per request: 4.00x"
    assert kv_facts(line) == {"kv_cache_tokens": "1048576", "kv_cache_device": "GPU + host",
                              "kv_max_concurrency": "4.00x at 262144 tokens per request"}


def test_a_log_without_the_lines_gives_nothing_not_a_guess():
    assert kv_facts("(APIServer pid=1) INFO vLLM API server version 0.32.0\nKV cache size: 12 tokens\n") == {}
    assert kv_facts("") == {}


def test_the_first_start_counts_not_a_later_restart():
    restarted = GPU_LOG + GPU_LOG.replace("178,880", "9,999").replace("8.11", "0.44")
    assert kv_facts(restarted)["kv_cache_tokens"] == "178880" and kv_facts(restarted)["kv_cache_gib"] == "8.11"


def _project(tmp_path: Path, stack: str, config: str = "") -> tuple:
    env_file = tmp_path / "gpu.yaml"
    env_file.write_text(f"name: gpu\nstack: {stack}\n{config}")
    preset_file = tmp_path / "big.yaml"
    preset_file.write_text("name: big\nmodel: Qwen/Qwen3-235B-A22B-FP8\nserved_model_name: qwen3-235b\n"
                           "vllm_args:\n  --max-model-len: 32768\n  --tensor-parallel-size: 4\n"
                           "  --enable-auto-tool-choice: true\n  --tool-call-parser: hermes\n")
    env = load_environment_file(env_file)
    return env, load_preset_file(preset_file).resolve(env.stack)


@pytest.mark.parametrize("stack", ["local-vllm", "local-vllm-docker", "azure"])
def test_every_gpu_vllm_stack_puts_the_kv_lines_on_the_record(tmp_path, stack):
    env, preset = _project(tmp_path, stack)
    facts = get_stack(stack, tmp_path).describe(None, env, preset, GPU_LOG)
    assert facts["kv_cache_tokens"] == "178880" and facts["kv_cache_gib"] == "8.11", facts


def test_the_formula_is_checked_against_the_logged_kv(tmp_path, monkeypatch):
    cache = tmp_path / "hf"
    snap = cache / "models--Qwen--Qwen3-235B-A22B-FP8" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(QWEN3_235B))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    env, preset = _project(tmp_path, "local-vllm")
    check = estimate_against_log(env, preset, kv_facts(GPU_LOG))
    # 8.11 GiB at TP 4 → 180,935 tokens by our formula, 1.1 % above vLLM's 178,880.
    assert check == {"kv_cache_tokens_estimate": "180935", "kv_estimate_off_pct": "+1.1"}, check


def test_no_check_without_the_config_or_the_lines(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    env, preset = _project(tmp_path, "local-vllm")
    assert estimate_against_log(env, preset, kv_facts(GPU_LOG)) == {}  # config not on this machine
    assert estimate_against_log(env, preset, {"kv_cache_tokens": "178880"}) == {}  # no memory line
