"""The embedded GGUFs (harness/embedded/models.py) as Hugging Face folders vLLM serves.

vLLM 0.32 does not load GGUF. `gguf_to_hf.py` runs in the vLLM venv (transformers 5.19 + gguf
0.19 + accelerate 1.15): dequantized to bf16, the quantizer dropped, save_pretrained. Keyed by
the GGUF's sha256, the converter's own text and the venv's key; the stamp records the sha256 of
every file written (and of their list), so the record can name exactly what was served.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from harness.embedded import models as embedded
from harness.vllm_cpu import STAMP, cache_dir, venv_dir
from harness.vllm_cpu.install import key as venv_key

SCRIPT = Path(__file__).with_name("gguf_to_hf.py")
DTYPE = "bfloat16"


def key(model: embedded.EmbeddedModel) -> str:
    text = "\n".join([model.sha256, SCRIPT.read_text(), venv_key(), DTYPE])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def folder(model: embedded.EmbeddedModel) -> Path:
    return cache_dir() / "models" / f"{model.hf_id.replace('/', '--')}-{key(model)}"


def _file_sha256(path: Path) -> str:
    return embedded.sha256_of(path)


def tree_sha256(files: dict[str, str]) -> str:
    return hashlib.sha256("".join(f"{n} {h}\n" for n, h in sorted(files.items())).encode()).hexdigest()


def convert(model: embedded.EmbeddedModel, say=print) -> dict:
    out = folder(model)
    stamp_path = out / STAMP
    if stamp_path.is_file():
        stamp = json.loads(stamp_path.read_text())
        if all((out / n).is_file() for n in stamp["files"]):
            say(f"{model.hf_id}: converted already ({out.name}, sha256 {stamp['sha256'][:12]})")
            return stamp
    gguf = embedded.installed(model)
    if gguf is None:
        raise FileNotFoundError(f"{embedded.model_path(model)} is missing: run `make setup` first "
                                "(python -m harness.embedded assembles the GGUFs)")
    say(f"{model.hf_id}: converting {gguf.name} to a {DTYPE} HF folder")
    started = time.monotonic()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    proc = subprocess.run([str(venv_dir() / "bin" / "python"), str(SCRIPT), str(gguf.parent), gguf.name, str(tmp),
                           DTYPE], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RuntimeError(f"converting {gguf.name} failed: {proc.stderr[-1500:]}")
    files = {}
    for path in sorted(tmp.iterdir()):
        path.chmod(0o644)  # save_pretrained writes the weights 0600
        files[path.name] = _file_sha256(path)
    stamp = {"hf_id": model.hf_id, "gguf": gguf.name, "gguf_sha256": model.sha256, "dtype": DTYPE,
             "key": key(model), "files": files, "sha256": tree_sha256(files),
             "seconds": round(time.monotonic() - started, 1)}
    (tmp / STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)
    say(f"{model.hf_id}: {out} in {stamp['seconds']:.0f}s, sha256 {stamp['sha256'][:12]}")
    return stamp


def convert_all(say=print) -> list[dict]:
    return [convert(m, say) for m in embedded.MODELS.values()]
