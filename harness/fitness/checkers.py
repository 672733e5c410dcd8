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

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.errors import UserError

# Exact versions, installed with --no-deps: the whole closure the checkers import.
REQUIREMENTS = (
    "bfcl-eval==2026.3.23",
    "if-verifiable==0.1.2",
    "nltk==3.10.4", "click==8.5.1", "joblib==1.6.0", "regex==2026.11.19", "tqdm==4.70.1", "defusedxml==0.7.1",
    "emoji==2.16.0", "syllapy==0.8.0",
)
DRIVER = Path(__file__).with_name("checker_driver.py")
STAMP = ".llms-benchmark-checkers.json"
SETUP_TIMEOUT_S = 600


def default_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "llms-benchmark" / "fitness-checkers"


def _pin_hash() -> str:
    return hashlib.sha256("\n".join(REQUIREMENTS).encode()).hexdigest()


def _python(venv: Path) -> Path:
    return Path(venv) / "bin" / "python"


def ready(venv: Path) -> bool:
    stamp = Path(venv) / STAMP
    try:
        return _python(venv).is_file() and json.loads(stamp.read_text()).get("pins") == _pin_hash()
    except (OSError, ValueError):
        return False


def require(venv: Path, field: str) -> Path:
    """The venv's python, or one UserError naming the command that makes it."""
    if not ready(venv):
        raise UserError(f"the checkers' venv is missing or out of date ({venv})", field=field,
                        fix=f"run `llms-benchmark fitness data` once (makes it from PyPI: {', '.join(REQUIREMENTS[:2])}, "
                            "--no-deps), or turn the part off")
    return _python(venv)


def prepare(venv: Path, say=print) -> dict[str, Any]:
    """Make the venv (idempotent: a venv with the same pins is kept)."""
    venv = Path(venv)
    if ready(venv):
        say(f"checkers: {venv} (ready)")
        return versions(venv)
    if venv.exists():
        if not (venv / "pyvenv.cfg").is_file() and any(venv.iterdir()):
            raise UserError("exists and is not a venv: refusing to replace it", file=venv, field="checkers_venv",
                            fix="point checkers_venv at a new folder (or delete this one yourself)")
        shutil.rmtree(venv)  # an older or broken venv of ours
    venv.parent.mkdir(parents=True, exist_ok=True)
    steps = [[sys.executable, "-m", "venv", str(venv)],
             [str(_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
              "--only-binary=:all:", *REQUIREMENTS]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=SETUP_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise UserError(f"making the checkers' venv failed ({cmd[2] if cmd[1] == '-m' else cmd[0]}): "
                            f"{(proc.stderr or proc.stdout).strip()[-500:]}", field="checkers",
                            fix="check that PyPI is reachable (pip's own configuration applies), then run it again")
    info = call(_python(venv), "versions", {}, timeout_s=60)
    (venv / STAMP).write_text(json.dumps({"pins": _pin_hash(), "requirements": list(REQUIREMENTS), **info}) + "\n")
    say(f"checkers: {venv} (bfcl-eval {info['bfcl-eval']}, if-verifiable {info['if-verifiable']})")
    return info


def versions(venv: Path) -> dict[str, Any]:
    try:
        doc = json.loads((Path(venv) / STAMP).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in doc.items() if k != "pins"}


def call(python: Path, op: str, payload: dict[str, Any], timeout_s: float = 300) -> dict[str, Any]:
    """Run one driver operation in the venv: JSON in on stdin, JSON out on stdout."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "NLTK_DATA": "/nonexistent"}  # no secrets, no network data
    try:
        proc = subprocess.run([str(python), "-I", str(DRIVER), op], input=json.dumps(payload), capture_output=True,
                              text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the checker ({op}) ran past {timeout_s:.0f}s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"the checker ({op}) failed: {proc.stderr.strip()[-800:]}")
    return json.loads(proc.stdout)
