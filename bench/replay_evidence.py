"""Does every planted defect show in every run? N consecutive `replay-observability` launches
(the real opencode, sandbox, stack, store and the harness's drive), each planted defect's key
evidence re-run on each run's own store, beside the mission's control stores.

    .venv/bin/python bench/replay_evidence.py [--runs 5] [--burn] [--out bench/results/replay-evidence.md]

--burn keeps one busy process per core beside the launches ("another job on the cores"),
unless another job already runs there. Writes a Markdown table: per defect, whether its key
evidence held in each run, the first key query's reading per run, on both baselines and on
its own control store (that defect fixed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MISSION = REPO / "missions" / "observability"
CLI = REPO / ".venv" / "bin" / "llms-benchmark"


def _burn() -> None:
    while True:
        pass


def project(root: Path) -> Path:
    for folder in (".vot/environments", ".vot/presets", "missions", "replay"):
        (root / folder).mkdir(parents=True)
    shutil.copy2(REPO / ".vot" / "environments" / "replay.yaml", root / ".vot" / "environments")
    shutil.copy2(REPO / ".vot" / "presets" / "replay-observability.yaml", root / ".vot" / "presets")
    shutil.copytree(MISSION, root / "missions" / "observability",
                    ignore=shutil.ignore_patterns("__pycache__", "drive.json", ".obs"))
    shutil.copy2(REPO / "replay" / "observability.yaml", root / "replay")
    return root


def launch(root: Path) -> tuple[dict, Path, float]:
    env = {**os.environ, "LLMS_BENCHMARK_ROOT": str(root), "COLUMNS": "400",
           "LLMS_BENCHMARK_OPENCODE": str(REPO / "node_modules" / ".bin" / "opencode")}
    t0 = time.monotonic()
    done = subprocess.run([str(CLI), "launch", "local", "replay", "replay-observability", "--mission", "observability",
                           "--probe-long-tokens", "2000"], env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - t0
    runs = sorted((root / ".llms-benchmark" / "runs").iterdir())
    if done.returncode not in (0, 1) or not runs:
        raise SystemExit(f"launch failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads((runs[-1] / "run.json").read_text()), runs[-1], wall


def main() -> None:
    from harness.markdown_table import table
    from harness.verdicts import controls as ctl
    from harness.verdicts.key import load_key
    from harness.verdicts.rerun_store import Store

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--burn", action="store_true")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "replay-evidence.md")
    args = parser.parse_args()
    burners = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(os.cpu_count() or 1)] \
        if args.burn else []
    for b in burners:
        b.start()
    defects = load_key(MISSION / "key" / "defects.yaml")
    results: list[dict] = []
    try:
        for i in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="bench-replay-evidence-") as tmp:
                rec, run_dir, wall = launch(project(Path(tmp) / "project"))
                store = Store(run_dir / "telemetry.duckdb")
                try:
                    holds = {d.id: all(r.holds for r in runs) and bool(runs)
                             for d in defects for runs in [store.rerun(d)]}
                finally:
                    store.close()
                readings = {(r["defect"], r["query"]): r for r in ctl.table(MISSION, run_dir / "telemetry.duckdb")}
                drive = rec.get("drive") or {}
                results.append({"run": i + 1, "status": rec["status"], "reason": rec.get("reason"), "wall_s": wall,
                                "drive": {k: drive.get(k) for k in ("tagged_by", "requests", "own_requests")},
                                "holds": holds, "readings": readings})
                print(f"run {i + 1}: {rec['status']} in {wall:.0f} s, drive {drive.get('requests')} tagged traces, "
                      f"own {drive.get('own_requests')}; key evidence holds for "
                      f"{sum(holds.values())}/{len(holds)}: missing {[d for d, h in holds.items() if not h]}",
                      flush=True)
    finally:
        for b in burners:
            b.terminate()
    lines = [f"# Planted defects' key evidence over {args.runs} consecutive replay-observability runs", "",
             f"`{' '.join(['bench/replay_evidence.py', *(['--burn'] if args.burn else []), '--runs', str(args.runs)])}`"
             f" on {os.cpu_count()} cores{', one busy process per core beside the launches' if args.burn else ''}; "
             f"each run's status: {', '.join(r['status'] for r in results)}; wall "
             f"{', '.join(str(round(r['wall_s'])) + ' s' for r in results)}.", "",
             ]
    rows = []
    for d in defects:
        first = [r["readings"].get((d.id, 1)) or {} for r in results]
        ref = first[0] if first else {}
        rows.append([d.id, f"{sum(r['holds'][d.id] for r in results)}/{len(results)}",
                     ", ".join(str(f.get("run")) for f in first), ref.get("baseline-1"), ref.get("baseline-2"),
                     ref.get("control")])
    lines.append(table(["defect", "holds in runs", "key query 1 per run", "baseline-1", "baseline-2",
                        "control (fixed)"], rows))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
