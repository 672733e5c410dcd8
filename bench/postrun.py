"""The post-run's time and peak memory on a run folder with a 1 GiB agent workspace, before and
after the post-run was rebuilt to walk by directory descriptors (issue 33).

The folder is what an agent can leave: a 1 GiB log with the key in several forms at its start,
middle and end, 2,000 small text files (a node_modules-like tree, 6 deep), an opencode-like
SQLite store holding the key, and the report. Each implementation runs in a child process on
a fresh copy: the scrub of the whole run folder, then the hand-back walk (chown to the
launcher, as `take_back` does as root), then (after only) the removal of the workspace.
"Before" is harness/sandbox/secrets.py and identity.py as of BEFORE_REV, loaded from git.

    .venv/bin/python bench/postrun.py [--gib 1] [--repeats 3] [--out bench/results/postrun.md]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.markdown_table import table  # noqa: E402

BEFORE_REV = "01ca42d"  # main before the descriptor-walking post-run
KEY = "sk-bench-" + "7f3a9c2e" * 4

CHILD = """
import importlib.util, json, os, resource, sys, time
sys.path.insert(0, {root!r})
which, folder, key, old = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod
if which == "before":
    secrets = load("old_secrets", os.path.join(old, "secrets.py"))
    identity = load("old_identity", os.path.join(old, "identity.py"))
    chown = lambda p: identity._chown_tree(p, os.geteuid(), os.getegid())
else:
    from harness.sandbox import secrets, agentfs
    chown = lambda p: agentfs.chown_tree(p, os.geteuid(), os.getegid())
from pathlib import Path
t = time.monotonic()
changed, left = secrets.scrub_tree(Path(folder), [key])
scrub_s = time.monotonic() - t
t = time.monotonic()
chown(Path(folder) / "workspace")
chown_s = time.monotonic() - t
remove_s = None
if which == "after":
    t = time.monotonic()
    agentfs.remove(Path(folder) / "workspace")
    remove_s = time.monotonic() - t
print(json.dumps({{"changed": changed, "left": len(left), "scrub_s": round(scrub_s, 2), "chown_s": round(chown_s, 2),
                  "remove_s": None if remove_s is None else round(remove_s, 2),
                  "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}}))
"""


def make_folder(base: Path, gib: float) -> Path:
    run = base / "run"
    ws = run / "workspace"
    ws.mkdir(parents=True)
    k = KEY.encode()
    leaks = b" ".join([k, k.hex().encode(), base64.b64encode(b"a" + k), base64.b32encode(k), k[::-1]]) + b"\n"
    line = b"2026-12-02T00:00:00Z INFO shop-api GET /products 200 12ms trace=0af7651916cd43dd8448eb211c80319c\n"
    block = line * ((8 << 20) // len(line))
    blocks = max(1, int(gib * (1 << 30) // len(block)))
    with open(ws / "big.log", "wb") as f:
        for i in range(blocks):
            f.write(block)
            if i in (0, blocks // 2, blocks - 1):
                f.write(leaks)
    for i in range(2000):
        folder = ws / "node_modules" / f"p{i % 40}" / "lib" / "a" / "b" / "c"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i}.js").write_bytes(b"module.exports = 1;\n" * 50 + (leaks if i % 500 == 0 else b""))
    store = run / "opencode" / "opencode.db"
    store.parent.mkdir(parents=True)
    with sqlite3.connect(store) as con:
        con.execute("CREATE TABLE part (id INTEGER, data TEXT)")
        con.executemany("INSERT INTO part VALUES (?, ?)", [(i, f"output {KEY} {i}" * 20) for i in range(2000)])
    (run / "report.md").write_bytes(b"| 1 | a finding | " + leaks)
    return run


def old_modules(dest: Path) -> Path:
    for name in ("secrets.py", "identity.py"):
        text = subprocess.run(["git", "show", f"{BEFORE_REV}:harness/sandbox/{name}"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
        (dest / name).write_text(text)
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "postrun.md")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="postrun-bench-", dir=ROOT / ".llms-benchmark"))
    results: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        template = make_folder(base / "template", args.gib)
        old = old_modules(Path(tempfile.mkdtemp(dir=base)))
        for n in range(args.repeats):
            for which in ("before", "after"):
                copy = base / f"{which}-{n}"
                shutil.copytree(template, copy)
                done = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT)), which, str(copy), KEY,
                                       str(old)], capture_output=True, text=True)
                if done.returncode:
                    raise SystemExit(f"{which}: {done.stderr[-2000:]}")
                results[which].append(json.loads(done.stdout))
                shutil.rmtree(copy, ignore_errors=True)
                print(which, results[which][-1], flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    rows = []
    for which, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in ("scrub_s", "chown_s", "peak_rss_mib")}
        removal = statistics.median(r["remove_s"] for r in runs) if which == "after" else None
        rows.append([which, f"{med['scrub_s']:.2f}", f"{med['chown_s']:.2f}", "" if removal is None else f"{removal:.2f}",
                     f"{med['peak_rss_mib']:.0f}", runs[0]["changed"], runs[0]["left"]])
    text = "\n".join([
        "# Post-run on a run folder with a 1 GiB workspace", "",
        f"`.venv/bin/python bench/postrun.py --gib {args.gib:g} --repeats {args.repeats}` — "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {platform.machine()} {os.cpu_count()} cores, "
        f"median of {args.repeats}. \"before\" is {BEFORE_REV}'s scrub and hand-back, loaded from git.", "",
        table(["post-run", "scrub s", "hand-back walk s", "removal s", "peak RSS MiB", "files changed", "left"], rows),
        ""])
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
