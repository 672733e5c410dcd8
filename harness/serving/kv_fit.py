"""KV fit before billing: do the weights and one full `--max-model-len` sequence of KV cache
fit in the GPU memory the server may use (`memory × --gpu-memory-utilization`)?

vLLM refuses to start when its KV cache cannot hold one request of max_model_len tokens
("To serve at least one request with the models's max seq len ..., GiB KV cache is needed,
which is larger than the available KV cache memory"); this finds that before a unit bills.

KV bytes per token = 2 (K and V) × attention layers × KV heads × head dim × KV dtype bytes,
split over tensor-parallel ranks. Hybrid models (Qwen3.5/3.6/3.8: `full_attention_interval`
or `layer_types`) keep KV only in their full-attention layers; their linear-attention layers
hold a fixed state per sequence. Config from the HF `config.json` in the local HF cache, or
the GGUF metadata for llama.cpp. Weights: the checkpoint's file sizes when present, else the
parameter count in the model's name × bytes per parameter of its quantization.

Checked against vLLM's own log for Qwen3-235B-A22B-FP8 at TP 4 (vllm-project/vllm#21348:
"Available KV cache memory: 8.11 GiB", "GPU KV cache size: 178,880 tokens"): this module
gives 180,935 tokens for 8.11 GiB, 1.2 % off (tests/test_kv_fit.py).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1024**3
# vLLM's CUDA graphs, activations and allocator slack beyond weights + KV: a floor, not a profile.
OVERHEAD_GIB = 2.0
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "auto": 2}


@dataclass
class ModelShape:
    source: str  # where the figures came from
    attention_layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int  # the model's own dtype (the KV dtype unless --kv-cache-dtype says otherwise)
    linear_layers: int = 0
    linear_state_bytes: int = 0  # per linear-attention layer per sequence
    weights_bytes: int | None = None
    weights_source: str = ""


@dataclass
class Fit:
    known: bool
    fits: bool = True
    lines: list[str] = field(default_factory=list)
    need_gib: float | None = None
    budget_gib: float | None = None
    weights_gib: float | None = None
    kv_gib: float | None = None
    kv_tokens_budget: int | None = None  # how many tokens of KV the budget holds after the weights


# -- reading a model's shape ----------------------------------------------------------------
def hf_hub_dir() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    return home / "hub"


def hf_snapshot(model: str) -> Path | None:
    """The newest snapshot folder of `model` in the local HF cache that has a config.json."""
    repo = hf_hub_dir() / f"models--{model.replace('/', '--')}" / "snapshots"
    if not repo.is_dir():
        return None
    snaps = sorted((p for p in repo.iterdir() if (p / "config.json").is_file()), key=lambda p: p.stat().st_mtime)
    return snaps[-1] if snaps else None


def _params_from_name(model: str) -> float | None:
    """`Qwen3.8-27B-FP8` → 27e9; an MoE's total (`35B-A3B` → 35e9): every expert is resident."""
    m = re.search(r"(?<![\w.])(\d+(?:\.\d+)?)[Bb](?![a-zA-Z])", model.split("/")[-1])
    return float(m.group(1)) * 1e9 if m else None


def _quant_bytes(config: dict[str, Any], model: str) -> float:
    q = config.get("quantization_config") or {}
    method = str(q.get("quant_method") or "").lower()
    bits = q.get("bits") or q.get("w_bit")
    if bits:
        return float(bits) / 8
    if "fp8" in method or "fp8" in model.lower():
        return 1.0
    if method in ("awq", "gptq") or re.search(r"awq|gptq|int4|nvfp4|mxfp4", model.lower()):
        return 0.5
    return float(DTYPE_BYTES.get(str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), 2))


def shape_from_config(config: dict[str, Any], model: str, source: str) -> ModelShape:
    text = config.get("text_config") or config  # multimodal wrappers keep the LM's figures there
    layers = int(text["num_hidden_layers"])
    heads = int(text.get("num_attention_heads") or 1)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or int(text["hidden_size"]) // heads)
    dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or "bfloat16")
    types = text.get("layer_types")
    interval = text.get("full_attention_interval")
    if isinstance(types, list) and any(t == "linear_attention" for t in types):
        attention = sum(1 for t in types if t == "full_attention")
    elif interval:
        attention = layers // int(interval)
    else:
        attention = layers
    linear = layers - attention
    state = 0
    if linear and text.get("linear_num_value_heads"):
        # Gated DeltaNet's recurrent state, float32: value heads × key dim × value dim.
        state = int(text["linear_num_value_heads"]) * int(text.get("linear_key_head_dim") or 128) \
            * int(text.get("linear_value_head_dim") or 128) * 4
    shape = ModelShape(source, attention, kv_heads, head_dim, DTYPE_BYTES.get(dtype, 2), linear, state)
    params = _params_from_name(model)
    if params:
        shape.weights_bytes = int(params * _quant_bytes(config, model))
        shape.weights_source = f"{params / 1e9:g}B parameters (from the name) × {_quant_bytes(config, model):g} bytes"
    return shape


def hf_shape(model: str) -> ModelShape | None:
    snap = hf_snapshot(model)
    if snap is None:
        return None
    config = json.loads((snap / "config.json").read_text())
    shape = shape_from_config(config, model, f"{snap / 'config.json'}")
    files = list(snap.glob("*.safetensors")) + list(snap.glob("*.bin"))
    if files:
        shape.weights_bytes = sum(f.stat().st_size for f in files)  # links resolve to the blobs
        shape.weights_source = f"{len(files)} checkpoint file(s) in the HF cache"
    return shape


def gguf_shape(path: Path) -> ModelShape:
    from gguf import GGUFReader  # a heavy import, only for llama.cpp presets

    reader = GGUFReader(str(path))

    def get(key: str) -> Any:
        item = reader.get_field(key)
        return item.contents() if item is not None else None

    arch = get("general.architecture")
    layers = int(get(f"{arch}.block_count"))
    heads = int(get(f"{arch}.attention.head_count"))
    kv_heads = int(get(f"{arch}.attention.head_count_kv") or heads)
    head_dim = int(get(f"{arch}.attention.key_length") or int(get(f"{arch}.embedding_length")) // heads)
    # llama.cpp's KV cache is f16 unless told otherwise (the embedded stack serves it so).
    return ModelShape(f"GGUF metadata of {path.name}", layers, kv_heads, head_dim, 2,
                      weights_bytes=path.stat().st_size, weights_source=f"{path.name} size")


# -- the check ------------------------------------------------------------------------------
def kv_bytes_per_token(shape: ModelShape, kv_dtype: str = "auto", tp: int = 1) -> float:
    per = 1 if kv_dtype.startswith("fp8") else shape.dtype_bytes
    return 2 * shape.attention_layers * shape.kv_heads * shape.head_dim * per / tp


def kv_tokens(shape: ModelShape, available_gib: float, kv_dtype: str = "auto", tp: int = 1) -> int:
    """Tokens of KV a given memory holds (the figure vLLM logs as `GPU KV cache size`)."""
    return int(available_gib * GIB / kv_bytes_per_token(shape, kv_dtype, tp))


def check_fit(shape: ModelShape | None, *, max_model_len: int, gpu_memory_gib: float, utilization: float,
              kv_dtype: str = "auto", tp: int = 1, gpus: int = 1, overhead_gib: float = OVERHEAD_GIB) -> Fit:
    if shape is None:
        return Fit(known=False, lines=["model config unknown (not in the local HF cache): KV fit not checked"])
    if shape.weights_bytes is None:
        return Fit(known=False, lines=[f"weights size unknown for {shape.source}: KV fit not checked"])
    budget = gpu_memory_gib * utilization * gpus
    weights = shape.weights_bytes / GIB
    kv = kv_bytes_per_token(shape, kv_dtype, 1) * max_model_len / GIB
    state = shape.linear_layers * shape.linear_state_bytes / GIB
    need = weights + kv + state + overhead_gib * gpus
    left = budget - weights - state - overhead_gib * gpus
    fit = Fit(known=True, fits=need <= budget, need_gib=round(need, 2), budget_gib=round(budget, 2),
              weights_gib=round(weights, 2), kv_gib=round(kv, 2),
              kv_tokens_budget=max(0, int(left * GIB / kv_bytes_per_token(shape, kv_dtype, 1))))
    fit.lines.append(
        f"{shape.source}: weights {weights:.1f} GiB ({shape.weights_source}) + KV {kv:.1f} GiB for {max_model_len:,} tokens "
        f"({shape.attention_layers} attention layers × {shape.kv_heads} KV heads × {shape.head_dim} head dim × "
        f"{1 if kv_dtype.startswith('fp8') else shape.dtype_bytes} B, K and V)"
        + (f" + linear-attention state {state:.2f} GiB" if state else "")
        + f" + {overhead_gib * gpus:g} GiB overhead = {need:.1f} GiB of {budget:.1f} GiB "
        f"({gpus} × {gpu_memory_gib:.1f} GiB × {utilization:g}); the KV budget holds {fit.kv_tokens_budget:,} tokens"
    )
    return fit
