"""KV fit before billing: weights + KV at --max-model-len against GPU memory × utilization.

The formula is checked against vLLM's own log for a known model; the shipped odd-* presets
pass on an A100 80 GB with their models' configs in a (test) HF cache; a preset that cannot
fit is refused by `launch` with exit 2 before anything is served; an unknown config goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, Project
from harness.embedded import models
from harness.serving.kv_fit import check_fit, gguf_shape, kv_tokens, shape_from_config
from harness.serving.preflight_fit import kv_fit, refuse_unless_fits
from harness.errors import PreflightError
from harness.vot.environment import load_environment_file
from harness.vot.preset import load_preset_file

# Qwen/Qwen3-235B-A22B config.json (the fields the formula uses).
QWEN3_235B = {"num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
              "hidden_size": 4096, "torch_dtype": "bfloat16"}
# The configs of Qwen/Qwen3.8-27B and Qwen/Qwen3.6-35B-A3B-FP8 (text_config: hybrid, one
# full-attention layer in four), the fields a KV formula uses.
QWEN38 = {"architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5",
          "text_config": {"num_hidden_layers": 64, "full_attention_interval": 4, "num_attention_heads": 24,
                          "num_key_value_heads": 4, "head_dim": 256, "hidden_size": 5120, "linear_num_key_heads": 16,
                          "linear_num_value_heads": 48, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
                          "torch_dtype": "bfloat16"}}
QWEN36 = {**QWEN38, "text_config": {**QWEN38["text_config"], "num_hidden_layers": 40, "num_key_value_heads": 2,
                                    "linear_num_value_heads": 32}}


def test_kv_tokens_match_what_vllm_logged_for_a_known_model():
    # vllm-project/vllm#21348, Qwen3-235B-A22B-FP8 at --tensor-parallel-size 4 on 4×H100:
    #   "Available KV cache memory: 8.11 GiB" / "GPU KV cache size: 178,880 tokens"
    shape = shape_from_config(QWEN3_235B, "Qwen/Qwen3-235B-A22B-FP8", "config.json")
    tokens = kv_tokens(shape, 8.11, tp=4)
    assert abs(tokens - 178_880) / 178_880 < 0.10, tokens
    assert abs(tokens - 178_880) / 178_880 < 0.02  # what it actually is: 180,935 (1.2 % above)


def _hf_cache(root: Path, model: str, config: dict) -> None:
    snap = root / f"models--{model.replace('/', '--')}" / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(config))


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "hf"
    _hf_cache(cache, "Qwen/Qwen3.8-27B-FP8", QWEN38)
    _hf_cache(cache, "Qwen/Qwen3.6-35B-A3B-FP8", QWEN36)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


@pytest.mark.parametrize("name", ["odd-qwen3-8-27b", "odd-qwen3-6-35b-a3b"])
def test_shipped_presets_fit_an_a100_80gb(hf_cache, name):
    env = load_environment_file(REPO / ".vot" / "environments" / "azure-sweden.yaml")
    preset = load_preset_file(REPO / ".vot" / "presets" / f"{name}.yaml").resolve("azure")
    fit = kv_fit(env, preset)
    assert fit is not None and fit.known and fit.fits, fit.lines
    assert fit.budget_gib == pytest.approx(80 * 0.92)
    assert fit.kv_tokens_budget >= preset.max_model_len  # one full-length request fits, as vLLM demands
    refuse_unless_fits(fit, preset)
    print(name, fit.lines[0])


def test_unknown_config_says_so_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    env = load_environment_file(REPO / ".vot" / "environments" / "azure-sweden.yaml")
    preset = load_preset_file(REPO / ".vot" / "presets" / "odd-qwen3-8-27b.yaml").resolve("azure")
    fit = kv_fit(env, preset)
    assert fit is not None and not fit.known and "unknown" in fit.lines[0]
    refuse_unless_fits(fit, preset)  # no refusal


def test_fp8_kv_halves_the_kv_and_names_the_fix(hf_cache):
    shape = shape_from_config(QWEN38, "Qwen/Qwen3.8-27B-FP8", "config.json")
    auto = check_fit(shape, max_model_len=1_048_576, gpu_memory_gib=80, utilization=0.92)
    fp8 = check_fit(shape, max_model_len=1_048_576, gpu_memory_gib=80, utilization=0.92, kv_dtype="fp8")
    assert auto.kv_gib == 2 * fp8.kv_gib == 64.0  # 16 attention layers × 4 heads × 256 × 2 B × 2 per token
    assert not auto.fits and fp8.fits


def test_embedded_gguf_shape_and_fit():
    model = models.MODELS["HuggingFaceTB/SmolLM2-135M-Instruct"]
    path = models.installed(model)
    if path is None:
        pytest.skip("the embedded SmolLM2 model is not installed")
    shape = gguf_shape(path)
    assert (shape.attention_layers, shape.kv_heads, shape.head_dim) == (30, 3, 64)  # SmolLM2-135M
    env = load_environment_file(REPO / ".vot" / "environments" / "cpu.yaml")
    preset = load_preset_file(REPO / ".vot" / "presets" / "cpu-smollm2-135m.yaml").resolve("local-llamacpp")
    fit = kv_fit(env, preset)
    assert fit.known and fit.fits and "GGUF metadata" in fit.lines[0], fit.lines


def test_launch_refuses_a_preset_that_cannot_fit(project: Project, hf_cache):
    project.add_environment("azure-sweden")
    text = (REPO / ".vot" / "presets" / "odd-qwen3-8-27b.yaml").read_text()
    project.add_preset("odd-too-long", text.replace("name: odd-qwen3-8-27b", "name: odd-too-long")
                       .replace("--max-model-len: 262144", "--max-model-len: 1048576"))
    project.env["HF_HUB_CACHE"] = str(hf_cache)
    code, out, err = project.run_cli(["launch", "local", "azure-sweden", "odd-too-long", "--mission", "hello"],
                                     timeout=120)
    text = " ".join(err.split())
    assert code == 2, text
    assert "does not fit" in text and "64.0 GiB for 1,048,576 tokens" in text and "73.6 GiB" in text
    assert "lower `--max-model-len`" in text and "--kv-cache-dtype: fp8" in text
    assert "Traceback" not in err
    assert project.ledger() == {}  # nothing served
