"""GGUF → Hugging Face folder (safetensors + config + tokenizer), run by the vLLM venv's Python.

vLLM 0.32 does not load GGUF; transformers does, dequantized (`GgufConfig(dequantize=True)`),
and writes it back as a plain checkpoint vLLM serves. The quantizer is dropped before saving
(otherwise the folder claims a GGUF quantization vLLM cannot load). Deliberately standalone:
it imports only what the vLLM venv has, never the harness (a different venv).

    python gguf_to_hf.py GGUF_DIR GGUF_NAME OUT_DIR DTYPE
"""

from __future__ import annotations

import sys


def main(gguf_dir: str, gguf_name: str, out: str, dtype: str) -> int:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils.quantization_config import GgufConfig  # noqa: F401 - the loader's own path

    torch_dtype = getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch_dtype)
    for attr in ("hf_quantizer",):
        if hasattr(model, attr):
            setattr(model, attr, None)
    for attr in ("quantization_config",):
        if hasattr(model.config, attr):
            delattr(model.config, attr)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
