"""A venv of the harness's own for an external tool it never imports (the checkers, lm-eval).

Made once from PyPI with exact pins and stamped with their hash, so a changed pin remakes it;
its driver runs in it by path, in isolated mode, with a bare environment: JSON in on stdin,
JSON out on stdout, under a wall-clock limit. No secret and no host data reach it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UserError

_BARE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class PinnedVenv:
    name: str  # how messages name it: "the checkers' venv"
    tool: str  # how a driver failure names the tool: "the checker", "lm-eval"
    requirements: tuple[str, ...]
    stamp: str  # the file in the venv that records its pins and the tools' versions
    cache_name: str  # its folder under ~/.cache/llms-benchmark
    driver: Path
    make: str  # what makes it, for the fix: "run `llms-benchmark fitness data` once (...)"
    turn_off: str  # the other way out, for the fix: "turn the part off"
    prepare_field: str  # the field a failed or refused make names
    pip_options: tuple[str, ...] = ()
    guard: bool = False  # run the torch guardrail over the venv once installed
    env: dict[str, str] = field(default_factory=dict)  # the driver's environment beyond _BARE_ENV
    setup_timeout_s: float = 600
    versions_timeout_s: float = 60

    def default_dir(self) -> Path:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return base / "llms-benchmark" / self.cache_name

    def pin_hash(self) -> str:
        return hashlib.sha256("\n".join(self.requirements).encode()).hexdigest()

    @staticmethod
    def python(venv: Path) -> Path:
        return Path(venv) / "bin" / "python"

    def ready(self, venv: Path) -> bool:
        try:
            stamp = json.loads((Path(venv) / self.stamp).read_text())
            return self.python(venv).is_file() and stamp.get("pins") == self.pin_hash()
        except (OSError, ValueError, AttributeError):
            return False

    def require(self, venv: Path, field: str) -> Path:
        """The venv's python, or one UserError naming the command that makes it."""
        if not self.ready(venv):
            raise UserError(f"{self.name} is missing or out of date ({venv})", field=field,
                            fix=f"{self.make}, or {self.turn_off}")
        return self.python(venv)

    def versions(self, venv: Path) -> dict[str, Any]:
        try:
            doc = json.loads((Path(venv) / self.stamp).read_text())
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in doc.items() if k != "pins"} if isinstance(doc, dict) else {}

    def prepare(self, venv: Path, say: Callable[[str], None] = print) -> dict[str, Any] | None:
        """Make the venv (idempotent: one with the same pins is kept); None when it was ready."""
        venv = Path(venv)
        if self.ready(venv):
            return None
        if venv.exists():
            if not (venv / "pyvenv.cfg").is_file() and any(venv.iterdir()):
                raise UserError("exists and is not a venv: refusing to replace it", file=venv,
                                field=self.prepare_field, fix="point it at a new folder (or delete this one yourself)")
            shutil.rmtree(venv)  # an older or broken venv of ours
        venv.parent.mkdir(parents=True, exist_ok=True)
        python = str(self.python(venv))
        steps = [[sys.executable, "-m", "venv", str(venv)],
                 [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *self.pip_options,
                  *self.requirements]]
        if self.guard:
            steps.append([sys.executable, "-m", "harness.fitness.guard", "--python", python])
        for cmd in steps:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.setup_timeout_s,
                                  stdin=subprocess.DEVNULL)
            if proc.returncode != 0:
                said = [ln for ln in (proc.stderr or proc.stdout).splitlines() if "ignored: it is neither" not in ln]
                raise UserError(f"making {self.name} failed ({' '.join(cmd[1:4])}): {' '.join(said).strip()[-500:]}",
                                field=self.prepare_field,
                                fix="check that PyPI is reachable (pip's own configuration applies), then run it again")
        info = self.call(self.python(venv), "versions", {}, timeout_s=self.versions_timeout_s)
        (venv / self.stamp).write_text(
            json.dumps({"pins": self.pin_hash(), "requirements": list(self.requirements), **info}) + "\n")
        return info

    def call(self, python: Path, op: str, payload: dict[str, Any], timeout_s: float = 300,
             env: dict[str, str] | None = None) -> dict[str, Any]:
        """Run one driver operation in the venv: JSON in on stdin, JSON out on stdout."""
        try:
            proc = subprocess.run([str(python), "-I", str(self.driver), op], input=json.dumps(payload),
                                  capture_output=True, text=True, timeout=timeout_s,
                                  env={**_BARE_ENV, **self.env, **(env or {})})
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{self.tool} ({op}) ran past {timeout_s:.0f}s") from None
        if proc.returncode != 0:
            raise RuntimeError(f"{self.tool} ({op}) failed: {proc.stderr.strip()[-800:]}")
        return json.loads(proc.stdout)
