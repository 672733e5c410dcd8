"""Check the answer key against a run's telemetry, and the workspace against the key.

    python key/selftest.py --store http://127.0.0.1:PORT [--json]

Runs every evidence query of key/defects.yaml through the store's `POST /query` and reports
found / not found per defect; then checks that no distinctive word of the key (ids and
descriptions) nor any generic hint word appears in the workspace files.
Exit 0 only if every defect is found and the workspace is clean.
"""

from __future__ import annotations

import argparse
import json
import operator
import re
import sys
from pathlib import Path

import httpx
import yaml

MISSION = Path(__file__).resolve().parents[1]
KEY = MISSION / "key" / "defects.yaml"
WORKSPACE = MISSION / "workspace"
OPS = {">": operator.gt, ">=": operator.ge, "==": operator.eq, "<": operator.lt, "<=": operator.le, "!=": operator.ne}
EXPECT = re.compile(r"^\s*(value|rows)\s*(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?)\s*$")
# Words that would give a defect away wherever they appear in the workspace.
HINT_WORDS = {
    "bug", "bugs", "buggy", "todo", "fixme", "xxx", "hack", "slow", "slower", "intentional", "intentionally",
    "deliberate", "deliberately", "defect", "defects", "planted", "anomaly", "race",
    "racy", "leak", "wrong", "broken", "inefficient", "n+1", "fanout", "fan-out", "bypass", "bypasses",
    "retired", "deprecated", "mislabelled", "mislabeled", "collision", "mismatch", "blocking",
}
# Domain words that the key's ids share with ordinary code.
DOMAIN_WORDS = {
    "orders", "order", "search", "stats", "product", "products", "client", "call", "calls", "http", "span",
    "spans", "model", "tokens", "token", "output", "input", "label", "category", "quantity", "whole", "table",
    "reads", "payload", "rendered", "detail", "operation", "duration", "declared", "unrecorded", "attribute",
    "names", "logs", "constant", "errors", "client", "constructed", "sync", "loop", "answered", "rejections",
    "retries", "count", "ref", "key", "mcp", "per", "on", "db", "the", "to", "of", "at",
}
SKIP_SUFFIXES = {".pyc", ".db", ".duckdb", ".wal"}


def query(store: str, sql: str) -> dict:
    r = httpx.post(f"{store.rstrip('/')}/query", json={"sql": sql}, timeout=30)
    r.raise_for_status()
    return r.json()


def check_expectation(expect: str, result: dict) -> tuple[bool, object]:
    m = EXPECT.match(expect)
    if not m:
        raise ValueError(f"bad expect: {expect!r}")
    what, op, n = m.group(1), m.group(2), float(m.group(3))
    rows = result.get("rows") or []
    if what == "rows":
        got = len(rows)
    else:
        got = rows[0][0] if rows and rows[0] else None
        if got is None:
            got = 0
    return OPS[op](float(got), n), got


def run_evidence(store: str, defects: list[dict]) -> list[dict]:
    report = []
    for d in defects:
        checks = []
        for ev in d["evidence"]:
            try:
                ok, got = check_expectation(ev["expect"], query(store, ev["sql"]))
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                ok, got = False, f"error: {exc}"
            checks.append({"expect": ev["expect"], "got": got, "ok": ok})
        report.append({"id": d["id"], "kind": d["kind"], "found": all(c["ok"] for c in checks), "checks": checks})
    return report


def key_words(defects: list[dict]) -> set[str]:
    words = set(HINT_WORDS)
    for d in defects:
        for part in re.split(r"[-_]", d["id"].lower())[1:]:
            if len(part) >= 4 and part not in DOMAIN_WORDS:
                words.add(part)
    return words


def scan_workspace(words: set[str]) -> list[str]:
    hits = []
    pattern = re.compile(r"(?<![a-z0-9])(" + "|".join(re.escape(w) for w in sorted(words)) + r")(?![a-z0-9])", re.I)
    for path in sorted(WORKSPACE.rglob("*")):
        if not path.is_file() or path.suffix in SKIP_SUFFIXES or "__pycache__" in path.parts or path.name == "drive.json":
            continue
        text = path.read_text(errors="replace")
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in pattern.finditer(line):
                hits.append(f"{path.relative_to(MISSION)}:{lineno}: {m.group(1)!r}")
    return hits


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", help="telemetry store URL; omit to only scan the workspace")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--short", action="store_true", help="a short run: defects marked short_mode: optional may be missing")
    args = parser.parse_args(argv)
    defects = yaml.safe_load(KEY.read_text())["defects"]
    report = run_evidence(args.store, defects) if args.store else []
    hits = scan_workspace(key_words(defects))
    if args.json:
        print(json.dumps({"defects": report, "workspace_hits": hits}, indent=2))
    else:
        for r in report:
            print(f"{'found    ' if r['found'] else 'NOT FOUND'} {r['kind']:<9} {r['id']}  "
                  + "; ".join(f"{c['expect']} (got {c['got']})" for c in r["checks"]))
        print(f"{sum(r['found'] for r in report)}/{len(report)} defects found")
        print("workspace clean" if not hits else "workspace names the key:\n  " + "\n  ".join(hits))
    optional = {d["id"] for d in defects if args.short and d.get("short_mode") == "optional"}
    return 0 if all(r["found"] or r["id"] in optional for r in report) and not hits else 1


if __name__ == "__main__":
    sys.exit(main())
