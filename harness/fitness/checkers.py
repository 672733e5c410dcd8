"""The external checkers' own lean venv: BFCL's AST checker (`bfcl-eval`) and IFBench's
instruction checkers (`if-verifiable`), each the upstream code, never imported here.

Why a venv of their own: bfcl-eval pins numpy 1.26.4, tree-sitter 0.21, mistralai, cohere,
faiss-cpu, sentence-transformers (and so torch, a CUDA build by default) — pins that clash
with ours and gigabytes we do not need; if-verifiable pulls `datasets` (pyarrow, pandas).
The checkers themselves need none of that, so the venv gets the pinned packages with
`--no-deps` and only what the checkers import (nltk and its four pure dependencies, emoji,
syllapy): about 70 MB, made once by `llms-benchmark fitness data`, offline after that.

The driver (`checker_driver.py`, run by path with the venv's python in isolated mode, a
bare environment, JSON in and out, a wall-clock limit) is the only code that imports them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.fitness.toolvenv import PinnedVenv

# Exact versions, installed with --no-deps: the whole closure the checkers import.
REQUIREMENTS = (
    "bfcl-eval==2026.3.23",
    "if-verifiable==0.1.2",
    "nltk==3.10.4", "click==8.5.1", "joblib==1.6.0", "regex==2026.11.19", "tqdm==4.70.1", "defusedxml==0.7.1",
    "emoji==2.16.0", "syllapy==0.8.0",
)
VENV = PinnedVenv(
    name="the checkers' venv", tool="the checker", requirements=REQUIREMENTS, stamp=".llms-benchmark-checkers.json",
    cache_name="fitness-checkers", driver=Path(__file__).with_name("checker_driver.py"),
    make=f"run `llms-benchmark fitness data` once (makes it from PyPI: {', '.join(REQUIREMENTS[:2])}, --no-deps)",
    turn_off="turn the part off", prepare_field="checkers_venv",
    pip_options=("--no-deps", "--only-binary=:all:"), env={"NLTK_DATA": "/nonexistent"},  # no network data
)
default_dir, ready, require, versions, call = VENV.default_dir, VENV.ready, VENV.require, VENV.versions, VENV.call


def prepare(venv: Path, say=print) -> dict[str, Any]:
    """Make the venv (idempotent: a venv with the same pins is kept)."""
    info = VENV.prepare(venv, say)
    if info is None:
        say(f"checkers: {venv} (ready)")
        return versions(venv)
    say(f"checkers: {venv} (bfcl-eval {info['bfcl-eval']}, if-verifiable {info['if-verifiable']})")
    return info
