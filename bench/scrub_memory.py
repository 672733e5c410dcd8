"""The post-run secrets scrub's peak memory and time on a run folder with a large agent file.

The agent can leave gigabytes in its workspace; the scrub reads every file of the run
folder. It streams (harness/sandbox/secrets.py: CHUNK bytes at a time), so its peak RSS
should not grow with the file. This makes a run-like folder in a scratch directory on the
same disk as the checkout: a workspace file of `--gib` GiB of text with the key in several
forms near its start, middle and end, plus a small report, then runs `scrub_tree` in a child
process and prints its peak RSS (ru_maxrss), wall time and what it changed.

    .venv/bin/python bench/scrub_memory.py [--gib 1] [--repeats 1]
"""

from __future__ import annotations

import argparse
import base64
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from harness.sandbox.secrets import scrub_tree
t = time.monotonic()
changed, left = scrub_tree({folder!r}, [{key!r}])
print(json.dumps({{"changed": changed, "left": left, "seconds": round(time.monotonic() - t, 1),
                  "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}}))
"""


def make_folder(base: Path, gib: float, key: str) -> Path:
    run = base / "run"
    (run / "workspace").mkdir(parents=True)
    k = key.encode()
    leaks = b" ".join([k, k.hex().encode(), base64.b64encode(b"a" + k), base64.b32encode(k), k[::-1]]) + b"\n"
    line = b"2026-12-02T00:00:00Z INFO shop-api GET /products 200 12ms trace=0af7651916cd43dd8448eb211c80319c\n"
    block = line * ((8 << 20) // len(line))
    blocks = max(1, int(gib * (1 << 30) // len(block)))
    with open(run / "workspace" / "big.log", "wb") as f:
        for i in range(blocks):
            f.write(block)
            if i in (0, blocks // 2, blocks - 1):
                f.write(leaks)
    (run / "report.md").write_bytes(b"| 1 | a finding | " + leaks)
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    key = "sk-bench-" + "7f3a9c2e" * 4
    base = Path(tempfile.mkdtemp(prefix="scrub-bench-", dir=ROOT / ".llms-benchmark"))
    try:
        started = time.monotonic()
        folder = make_folder(base, args.gib, key)
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"run folder: {size / (1 << 30):.2f} GiB written in {time.monotonic() - started:.0f}s")
        for n in range(args.repeats):
            if n:  # the first pass redacted everything: put the leaks back
                shutil.rmtree(folder)
                folder = make_folder(base, args.gib, key)
            done = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), folder=str(folder), key=key)],
                                  capture_output=True, text=True, check=True)
            print(f"scrub: {done.stdout.strip()}")
        print(f"this process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
