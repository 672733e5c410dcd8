"""Find the pinned opencode CLI (npm package `opencode-ai`, installed by `make setup`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from harness.atomic import write_atomic
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


def _cache_path() -> Path:
    base = os.environ.get("LLMS_BENCHMARK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache"), "llms-benchmark")
    return Path(base) / "opencode-versions.json"


def _identity(binary: Path) -> str | None:
    """The installed file as it is now: its real path and stat. `npm install` of another version
    rewrites it (a new inode or mtime), so a version cached under the old identity is never read."""
    try:
        real = binary.resolve(strict=True)
        st = real.stat()
    except OSError:
        return None
    return f"{real}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def opencode_version(binary: Path) -> str:
    """`opencode --version` (a node and a bun start: ~1.5 s a launch), cached per installed file."""
    identity, cache = _identity(binary), _cache_path()
    try:
        known = json.loads(cache.read_text())
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    cached = known.get(identity) if identity else None
    version = cached if isinstance(cached, str) and cached else _ask_version(binary)
    _check_pinned(binary, version)
    if identity and cached != version:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(cache, json.dumps({identity: version}))  # the one in use: never grows
        except OSError:
            pass  # a read-only cache only costs the next launch the same 1.5 s
    return version


def _ask_version(binary: Path) -> str:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60,
                             stdin=subprocess.DEVNULL, env={**os.environ, "OPENCODE_DISABLE_AUTOUPDATE": "1"})
    except (OSError, subprocess.SubprocessError) as exc:
        raise PreflightError(f"{binary} --version failed: {exc}", fix="reinstall with `make setup`") from exc
    version = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not version:
        raise PreflightError(f"{binary} --version failed: {out.stderr.strip()[:200]}", fix="reinstall with `make setup`")
    return version


def _check_pinned(binary: Path, version: str) -> None:
    if version.removeprefix("v") != PINNED_VERSION:
        # Every figure is read from this version's session store and event stream: another one
        # would be measured with readers written for a different schema.
        raise PreflightError(
            f"{binary} is opencode {version}, not the pinned {PINNED_VERSION}",
            fix=f"run `make setup` (npm installs opencode-ai@{PINNED_VERSION} into node_modules/), or point "
                f"LLMS_BENCHMARK_OPENCODE at an opencode {PINNED_VERSION}")
