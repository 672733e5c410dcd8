"""The KV-fit check as preflight runs it: which memory, which config, refuse or go on."""

from __future__ import annotations

import re

import psutil

from harness.errors import PreflightError
from harness.serving.kv_fit import GIB, Fit, ModelShape, check_fit, gguf_shape, hf_shape, kv_tokens
from harness.vot.environment import Environment
from harness.vot.preset import ResolvedPreset

VLLM_STACKS = ("local-vllm", "local-vllm-docker", "local-vllm-metal", "azure")
# What a stack serves on when the environment does not say (azure: one A100 80 GB).
STACK_GPU_GIB = {"azure": 80.0}


def gpu_memory_gib(env: Environment, gpu_label: str | None = None) -> float | None:
    """The environment's `gpu_memory_gb`, the stack's fixed GPU, or the GPU cell's label ('... 80 GB')."""
    if env.gpu_memory_gb:
        return float(env.gpu_memory_gb)
    if env.stack in STACK_GPU_GIB:
        return STACK_GPU_GIB[env.stack]
    m = re.search(r"(\d+(?:\.\d+)?) GB\b", gpu_label or "")
    return float(m.group(1)) if m else None


def _shape(env: Environment, preset: ResolvedPreset) -> ModelShape | None:
    if env.stack == "local-llamacpp":
        from harness.embedded import models

        model = models.MODELS.get(preset.model)
        path = models.installed(model) if model else None
        return gguf_shape(path) if path else None
    return hf_shape(preset.model)


def _arg(preset: ResolvedPreset, name: str, default):
    value = preset.vllm_args.get(name)
    return default if value is None or isinstance(value, bool) else value


def kv_fit(env: Environment, preset: ResolvedPreset, gpu_label: str | None = None) -> Fit | None:
    """None where the check does not apply (the replay stack) or the memory is not known yet."""
    if env.stack not in VLLM_STACKS and env.stack != "local-llamacpp":
        return None
    if preset.max_model_len is None:
        return None
    if env.stack == "local-vllm" and env.config.get("device") == "cpu":
        return _cpu_vllm_fit(env, preset)
    if env.stack == "local-llamacpp":  # CPU: the machine's memory, no CUDA graphs
        memory, utilization, overhead = psutil.virtual_memory().total / GIB, 1.0, 0.5
    else:
        memory = gpu_memory_gib(env, gpu_label)
        if memory is None:
            return None
        utilization, overhead = float(_arg(preset, "--gpu-memory-utilization", 0.9)), 2.0
    tp = int(_arg(preset, "--tensor-parallel-size", 1))
    try:
        shape = _shape(env, preset)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return Fit(known=False, lines=[f"model config unreadable ({exc}): KV fit not checked"])
    return check_fit(shape, max_model_len=preset.max_model_len, gpu_memory_gib=memory, utilization=utilization,
                     kv_dtype=str(_arg(preset, "--kv-cache-dtype", "auto")), gpus=tp, overhead_gib=overhead)


def refuse_unless_fits(fit: Fit | None, preset: ResolvedPreset) -> None:
    if fit is None or not fit.known or fit.fits:
        return
    fp8 = "" if str(preset.vllm_args.get("--kv-cache-dtype", "")).startswith("fp8") else \
        "an fp8 KV cache (`--kv-cache-dtype: fp8`, half the KV), "
    raise PreflightError(
        f"the model does not fit: {fit.lines[0]}",
        file=preset.path, field="vllm_args.--max-model-len",
        fix=f"lower `--max-model-len` (the KV budget left after the weights holds {fit.kv_tokens_budget:,} "
            f"tokens), {fp8}or more GPU memory (a larger GPU, `--tensor-parallel-size`)",
    )


def _cpu_vllm_shape(preset: ResolvedPreset) -> ModelShape | None:
    import json

    from harness.serving.kv_fit import shape_from_config
    from harness.stacks.local_vllm_cpu import model_folder

    found = model_folder(preset)
    if found is None:
        return hf_shape(preset.model)
    return shape_from_config(json.loads((found[0] / "config.json").read_text()), preset.model,
                             f"{found[0].name}/config.json")


def _cpu_vllm_fit(env: Environment, preset: ResolvedPreset) -> Fit:
    """vLLM's CPU backend: the KV cache is its own fixed space (VLLM_CPU_KVCACHE_SPACE GiB), apart
    from the weights, so one max_model_len sequence must fit in exactly that (vLLM refuses otherwise:
    "... GiB KV cache is needed, which is larger than the available KV cache memory")."""
    from harness.stacks.local_vllm_cpu import kv_gib

    shape = _cpu_vllm_shape(preset)
    if shape is not None:
        shape.weights_bytes, shape.weights_source = 0, "weights apart from the CPU KV space"
    return check_fit(shape, max_model_len=preset.max_model_len, gpu_memory_gib=float(kv_gib(env)),
                     utilization=1.0, kv_dtype=str(_arg(preset, "--kv-cache-dtype", "auto")), overhead_gib=0.0)


def estimate_against_log(env: Environment, preset: ResolvedPreset, facts: dict) -> dict[str, str]:
    """The KV formula the fit check uses, against what the engine logged at start: the tokens our
    formula puts in the KV memory vLLM reported, and how far that is from vLLM's own count. On every
    vLLM record, so each real serve (a GPU's included) checks the estimate preflight relies on.
    Empty where the log lacks either line or the model's config is not readable here."""
    if env.stack not in VLLM_STACKS or "kv_cache_tokens" not in facts or "kv_cache_gib" not in facts:
        return {}
    try:
        cpu = env.stack == "local-vllm" and env.config.get("device") == "cpu"
        shape = _cpu_vllm_shape(preset) if cpu else _shape(env, preset)
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    logged = int(facts["kv_cache_tokens"])
    if shape is None or logged <= 0:
        return {}
    estimate = kv_tokens(shape, float(facts["kv_cache_gib"]), str(_arg(preset, "--kv-cache-dtype", "auto")),
                         int(_arg(preset, "--tensor-parallel-size", 1)))
    return {"kv_cache_tokens_estimate": str(estimate),
            "kv_estimate_off_pct": f"{100 * (estimate - logged) / logged:+.1f}"}
