"""Find the pinned opencode CLI (npm package `opencode-ai`, installed by `make setup`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from harness.errors import PreflightError

PINNED_VERSION = "1.18.33"


def find_opencode(root: Path) -> Path:
    """LLMS_BENCHMARK_OPENCODE, else the project's node_modules, else PATH."""
    candidates = [os.environ.get("LLMS_BENCHMARK_OPENCODE"), root / "node_modules" / ".bin" / "opencode",
                  Path(__file__).resolve().parents[2] / "node_modules" / ".bin" / "opencode",
                  shutil.which("opencode")]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise PreflightError(
        "the opencode CLI is not installed",
        fix=f"run `make setup` (npm installs opencode-ai@{PINNED_VERSION} into node_modules/)",
    )


def opencode_version(binary: Path) -> str:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, env={**os.environ, "OPENCODE_DISABLE_AUTOUPDATE": "1"})
    except (OSError, subprocess.SubprocessError) as exc:
        raise PreflightError(f"{binary} --version failed: {exc}", fix="reinstall with `make setup`") from exc
    version = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not version:
        raise PreflightError(f"{binary} --version failed: {out.stderr.strip()[:200]}", fix="reinstall with `make setup`")
    if version.removeprefix("v") != PINNED_VERSION:
        # Every figure is read from this version's session store and event stream: another one
        # would be measured with readers written for a different schema.
        raise PreflightError(
            f"{binary} is opencode {version}, not the pinned {PINNED_VERSION}",
            fix=f"run `make setup` (npm installs opencode-ai@{PINNED_VERSION} into node_modules/), or point "
                f"LLMS_BENCHMARK_OPENCODE at an opencode {PINNED_VERSION}")
    return version
