"""The SQLite scrub by bytes (issue 53) against the SQL scrub it replaced, on an opencode-like
store holding the key (tool outputs, a third of them longer than a page), and on the same
store carrying an UPDATE trigger: wall time, and what the scrub's TMPDIR held when it ended.

The "before" is harness/sandbox/secrets.py as of BEFORE_REV, loaded from git; each scrub runs in
a child process on a fresh copy, bounded by --timeout (the trigger makes the old one run the
agent's SQL: it is stopped there and reported as such).

    .venv/bin/python bench/scrub_sqlite.py [--rows 20000] [--timeout 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BEFORE_REV = "de6c2a4"
KEY = "sk-bench-" + "7f3a9c2e" * 4

CHILD = """
import importlib.util, sys, types
sys.path.insert(0, {root!r})
which, folder, key = sys.argv[1], sys.argv[2], sys.argv[3]
if which == "before":
    import subprocess
    src = subprocess.run(["git", "-C", {root!r}, "show", "{rev}:harness/sandbox/secrets.py"],
                         capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType("old_secrets")
    sys.modules["old_secrets"] = mod
    exec(compile(src, "old_secrets.py", "exec"), mod.__dict__)
else:
    from harness.sandbox import secrets as mod
print(mod.scrub_tree(folder, [key]))
"""


def make_store(path: Path, rows: int, trigger: bool) -> None:
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, session_id TEXT, data TEXT)")
        if trigger:
            con.execute("CREATE TABLE boom (x BLOB)")
            con.execute("CREATE TRIGGER grow AFTER UPDATE ON part BEGIN "
                        "INSERT INTO boom SELECT zeroblob(1048576) FROM part LIMIT 64; END")
        data = []
        for i in range(rows):
            body = f"output {i}: " + ("x" * 80 + "\n") * (60 if i % 3 == 0 else 5)
            if i % 10 == 0:
                body += f"VOT_API_KEY={KEY}\n"
            data.append((f"ses_{i % 7}", body))
        con.executemany("INSERT INTO part (session_id, data) VALUES (?, ?)", data)


def _du(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def run(which: str, folder: Path, timeout: float) -> tuple[str, float, int]:
    """(what it said, wall seconds, bytes its TMPDIR held at the end): its TMPDIR is a folder of
    the bench's own, so what a killed child leaves there is removed with it."""
    spill = folder.with_name(folder.name + "-tmp")
    spill.mkdir()
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), rev=BEFORE_REV), which,
                               str(folder), KEY], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "TMPDIR": str(spill)})
        out = done.stdout.strip() or done.stderr.strip()[-200:]
    except subprocess.TimeoutExpired:
        out = f"stopped after {timeout:.0f} s"
    wall, held = time.monotonic() - started, _du(spill)
    shutil.rmtree(spill, ignore_errors=True)
    return out, wall, held


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--timeout", type=float, default=20)  # the old scrub filled 48 GiB of TMPDIR in 120 s
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-scrub-") as tmp:
        for trigger in (False, True):
            master = Path(tmp) / "master.db"
            master.unlink(missing_ok=True)
            make_store(master, args.rows, trigger)
            size = master.stat().st_size
            for which in ("before", "after"):
                folder = Path(tmp) / f"{which}-{trigger}"
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                shutil.copy(master, folder / "opencode.db")
                out, wall, held = run(which, folder, args.timeout)
                print(f"{'trigger' if trigger else 'plain':7} {which:6} store {size / 2**20:6.1f} MiB, "
                      f"TMPDIR held {held / 2**20:9.1f} MiB  {wall:6.2f} s  {out}")


if __name__ == "__main__":
    main()
