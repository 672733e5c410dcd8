"""`rule` timing (issue 34, item 4): the key-matcher's draft of a normal 30-finding report and of
the worst adversarial report, against a real run store and the mission's real control stores.

- normal: the 15 honest findings of tests/test_claim_adversarial.py (numbers as the store reads
  them) and 15 more rows of the kinds a model writes (restatements, plain counts, code reading);
- worst: what the bounds are built against: 1,000 rows (only MAX_RULED are ruled), each a 4,000-
  character cell citing MAX_CITED queries, a third of them cross joins that run until their
  budget stops them (QUERY_BUDGET_S per query across every store, RULE_BUDGET_S per rule).

Wall time and the process's peak RSS for each, written to bench/results/rule-timing-<drive>.json
and .md (`-120x5`: the prompt's default drive, controls compared per request; `-10x2`: drive-matched). The run store is the prompt's default drive (120 s x 5 users) when the test cache has one
(tests/test_claim_adversarial.py makes it), else a fresh 10 s x 2 drive.

Issue 59 adds one record citing 10 string-building queries and a reading in words (both made
`rule` exit 1 before). Issue 48 adds the worst cases of its review, each ruled in a process of its own under the rule's
memory cap (`harness.verdicts.bounds.cap_memory`, as `llms-benchmark rule` sets it), its wall time
and peak RSS measured there: a findings.json of 150,000 empty records; one of 1.998 MB (1,000
records of long prose); 100 records of 4,000 characters of prose each (the regexes on agent text);
100 records citing cross joins; 100 citing string-building queries; 100 markdown rows of long prose.

    .venv/bin/python bench/rule_timing.py [--store RUN.duckdb] [--duration 10 --vus 2]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from harness.markdown_table import table  # noqa: E402
from harness.verdicts import controls as ctl  # noqa: E402
from harness.verdicts import discriminate, keymatch, rerun_store  # noqa: E402
from harness.verdicts.keymatch import draft_rulings  # noqa: E402
from harness.verdicts.rule import finish  # noqa: E402
from test_claim_adversarial import FALSE, FALSE_CLAIMS, GAP_A, HEAD, HONEST_A, as_read, stated  # noqa: E402

MISSION = ROOT / "missions" / "observability"
KEY = MISSION / "key" / "defects.yaml"
RESULTS = ROOT / "bench" / "results"


def normal_report(store: Path) -> str:
    rows = [f"| {i} | {text} {stated(d)} | {kind} | high | {ev} |" for i, (d, kind, text, ev) in enumerate(HONEST_A, 1)]
    extra = list(FALSE.items())[:15]
    rows += [f"| {i} | {FALSE_CLAIMS[case]} {text} | Telemetry | medium | {ev} |"
             for i, (case, (text, ev)) in enumerate(extra, len(rows) + 1)]
    return as_read(f"{HEAD}" + "\n".join(rows) + f"\n\n## Telemetry gaps\n\n{GAP_A[1]}\n", store)


def worst_report() -> str:
    slow = ("`SELECT count(*) FROM spans a, spans b, spans c, spans d WHERE a.name LIKE '%s%' AND b.name <> c.name`"
            " → 5")
    quick = "`SELECT count(*) FROM spans WHERE service = 'shop-mcp' AND attributes->>'$.\"http.method\"' IS NOT NULL` → 40"
    evidence = "; ".join([slow, quick, quick.replace("40", "41")] * 3 + [slow])
    pad = " ".join(["place_order in src/shop_api/app.py stats() call() `x_y` 12 spans 404 or 409"] * 60)
    text = (f"[claim: wrong-signal, present, shop-mcp] shop-mcp client spans carry the retired http.method "
            f"(src/shop_mcp/api.py call) {pad}")[:3990]
    rows = [f"| {i} | {text} | Telemetry | high | {evidence[:3990]} |" for i in range(1, 1001)]
    return f"{HEAD}" + "\n".join(rows) + "\n\n## Telemetry gaps\n"


def _record(i: int, claim: str, query: str) -> dict:
    return {"number": str(i), "claim": claim, "kind": "wrong-signal", "direction": "present", "scope": "shop-mcp",
            "queries": [{"query": query, "read": 5}] * 10, "code": {"file": "src/shop_mcp/api.py", "function": "call"}}


PROSE = ("shop-mcp client spans are not lower and no more than the healthy ones, higher or lower under-reports "
         "12 spans 404 or 409 → 40 place_order in src/shop_api/app.py stats() call() `x_y` ")


def _under(size: int, records: list[dict]) -> str:
    """As many of `records` as a file of at most `size` bytes holds, valid JSON."""
    text = json.dumps({"findings": records})
    while len(text) > size:
        records = records[:int(len(records) * size / len(text)) - 1]
        text = json.dumps({"findings": records})
    return text


def worst_records() -> dict[str, str]:
    """The issue 48 review's worst findings.json files, as text."""
    cross = "SELECT count(*) FROM spans a, spans b, spans c WHERE a.name <> b.name AND b.name <> c.name"
    strings = "SELECT length(string_agg(repeat(name, 200000), '')) FROM spans"
    prose = (PROSE * 40)[:3990]
    return {
        "records_150k_empty": '{"findings": [' + ",".join(["{}"] * 150_000) + "]}",
        "records_1998kb": _under(1_998_000, [_record(i, (PROSE * 20)[:1700], "SELECT 1") for i in range(1, 1001)]),
        "records_long_prose": json.dumps({"findings": [_record(i, prose, "SELECT count(*) FROM spans")
                                                       for i in range(1, 101)]}),
        "records_cross_joins": json.dumps({"findings": [_record(i, "cross joins of every span", cross)
                                                        for i in range(1, 101)]}),
        "records_string_building": json.dumps({"findings": [_record(i, "a gigabyte of span names", strings)
                                                            for i in range(1, 101)]}),
        # Issue 59's review: one record citing 10 string-building queries (MemoryError, exit 1, before),
        # and a reading in words (`obs finding add --read "72 rows"`: exit 1 before).
        "record_10_string_building": json.dumps({"findings": [_record(1, "a gigabyte of span names", strings)]}),
        "record_text_read": json.dumps({"findings": [{**_record(1, "the spans, counted", "SELECT count(*) FROM spans"),
                                                      "queries": [{"query": "SELECT count(*) FROM spans",
                                                                   "read": "72 rows"}]}]}),
    }


def prose_report() -> str:
    text = (PROSE * 40)[:3900] + " [claim: wrong-signal, present, shop-mcp]"
    rows = [f"| {i} | {text} | Telemetry | high | `SELECT count(*) FROM spans` → 5 |" for i in range(1, 101)]
    return f"{HEAD}" + "\n".join(rows) + "\n\n## Telemetry gaps\n"


CHILD = r"""
import json, resource, sys, time
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from harness.verdicts.bounds import cap_memory
cap = cap_memory()
from harness.verdicts import controls as ctl
from harness.verdicts.keymatch import draft_rulings
from harness.verdicts.rule import finish
mission = Path(sys.argv[1]) / "missions" / "observability"
t0 = time.monotonic()
try:
    rulings = finish(draft_rulings(Path(sys.argv[2]), mission / "key" / "defects.yaml",
                                   controls=ctl.Controls.for_mission(mission)), None)
    out = {"findings": len(rulings.findings), "held_up": rulings.confirmed, "controls": rulings.controls.split(":")[0]}
except MemoryError:
    out = {"error": "MemoryError"}
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
out.update(wall_s=round(time.monotonic() - t0, 2), memory_cap_mb=(cap or 0) >> 20, peak_rss_mb=round(hwm / 1024),
           bytes=Path(sys.argv[2], "findings.json").stat().st_size if Path(sys.argv[2], "findings.json").exists() else 0)
print(json.dumps(out))
"""


def timed_apart(store: Path, drive: dict, name: str, records: str | None = None, report: str | None = None) -> dict:
    """One case ruled in a process of its own, under the rule's memory cap."""
    import subprocess

    folder = Path(tempfile.mkdtemp(prefix=f"rule-{name}-")) / name
    folder.mkdir()
    if records is not None:
        (folder / "findings.json").write_text(records)
    (folder / "report.md").write_text(report or f"{HEAD}\n## Telemetry gaps\n")
    os.symlink(store, folder / "telemetry.duckdb")
    (folder / "harness-drive-1.json").write_text(json.dumps({"duration_s": drive["duration"], "vus": drive["vus"]}))
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(folder)], capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1][:300],
                "exit": done.returncode}
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed(store: Path, drive: dict, report: str, name: str) -> dict:
    folder = Path(tempfile.mkdtemp(prefix=f"rule-{name}-")) / name
    folder.mkdir()
    (folder / "report.md").write_text(report)
    os.symlink(store, folder / "telemetry.duckdb")
    (folder / "harness-drive-1.json").write_text(json.dumps({"duration_s": drive["duration"], "vus": drive["vus"]}))
    t0 = time.monotonic()
    rulings = finish(draft_rulings(folder, KEY, controls=ctl.Controls.for_mission(MISSION)), None)
    wall = time.monotonic() - t0
    return {"findings": len(rulings.findings), "held_up": rulings.confirmed, "wall_s": round(wall, 2),
            "controls": rulings.controls.split(":")[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--store", type=Path, help="a run's telemetry.duckdb (default: the cached 120 s x 5 drive)")
    ap.add_argument("--duration", type=float, default=None)
    ap.add_argument("--vus", type=int, default=None)
    a = ap.parse_args()
    ctl.build(MISSION, say=lambda m: print(m, file=sys.stderr))
    cached = ctl.cache_root().parent / "test-stores" / f"observability-{ctl.mission_hash(MISSION)}-120x5.duckdb"
    if a.store:
        store, drive = a.store, {"duration": a.duration or 120, "vus": a.vus or 5}
    elif cached.is_file() and a.duration is None:
        store, drive = cached, {"duration": 120, "vus": 5}
    else:
        drive = {"duration": a.duration or 10, "vus": a.vus or 2}
        store = Path(tempfile.mkdtemp()) / "telemetry.duckdb"
        ctl.drive_one(MISSION, [], store, drive)
    out = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "cpus": len(os.sched_getaffinity(0)),
           "machine": platform.machine(), "drive": drive,
           "bounds": {"query_budget_s": discriminate.QUERY_BUDGET_S, "rule_budget_s": rerun_store.RULE_BUDGET_S,
                      "max_ruled": keymatch.MAX_RULED}}
    out["normal_30"] = timed(store, drive, normal_report(store), "normal")
    out["normal_30"]["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    out["worst"] = timed(store, drive, worst_report(), "worst")
    out["worst"]["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    for name, text in worst_records().items():
        out[name] = timed_apart(store, drive, name, records=text)
        print(name, out[name], file=sys.stderr)
    out["markdown_long_prose"] = timed_apart(store, drive, "markdown_long_prose", report=prose_report())
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = f"rule-timing-{drive['duration']:g}x{drive['vus']}"
    (RESULTS / f"{stem}.json").write_text(json.dumps(out, indent=2) + "\n")
    md = ["# rule timing (bench/rule_timing.py)", "",
          f"{out['when']}, {out['cpus']} CPUs ({out['machine']}), run drive {drive['duration']:g} s × {drive['vus']} "
          f"users, controls {out['normal_30']['controls']}.", "",
          ]
    rows = []
    for name in ("normal_30", "worst", *worst_records(), "markdown_long_prose"):
        r = out[name]
        if "error" in r and "wall_s" not in r:
            rows.append([name, f"error: {r['error']}", "", "", ""])
            continue
        rows.append([name, r.get("findings", r.get("error")), r.get("held_up", ""), f"{r['wall_s']} s",
                     f"{r['peak_rss_mb']} MB"])
    md.append(table(["report", "findings", "held up", "wall", "peak RSS"], rows))
    md += ["", "The issue 48 cases (records_*, markdown_long_prose) each ran in a process of its own under the "
           "rule's memory cap (RLIMIT_DATA, harness/verdicts/bounds.py)."]
    md += ["", f"Bounds: {out['bounds']['query_budget_s']} s per cited query across all stores, "
           f"{out['bounds']['rule_budget_s']} s of queries per rule, {out['bounds']['max_ruled']} findings ruled "
           "on their evidence."]
    (RESULTS / f"{stem}.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
