"""The observability mission's own goals, measured on the real stack and store:

  * store + stack ready (health on all four processes) in ≤ 10 s;
  * nothing dropped over the 2-minute scenario (the store rejected nothing, and no
    service's OpenTelemetry SDK reported dropping spans, metrics or logs);
  * `obs` p95 latency ≤ 500 ms on that data (a mix of every subcommand family).

    .venv/bin/python bench/observability_mission.py [--duration 120] [--queries 60]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parents[1]
MISSION = REPO / "missions" / "observability"
sys.path.insert(0, str(MISSION / "infra"))
import setup as mission_setup  # noqa: E402

DROP = re.compile(r"drop|queue is full|failed to export|exceeded", re.IGNORECASE)
QUERIES = [
    ["traces", "search", "--limit", "20"],
    ["traces", "search", "--service", "shop-api", "--min-ms", "50"],
    ["traces", "search", "--status", "ERROR"],
    ["metrics", "list"],
    ["metrics", "query", "http.server.request.duration", "--by", "http.route", "--agg", "p95"],
    ["logs", "search", "--severity", "WARN", "--limit", "20"],
    ["logs", "search", "--text", "order"],
    ["profiles", "top", "--by", "self", "--limit", "15"],
    ["sql", "SELECT service, name, count(*), avg(duration_ms) FROM spans GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 20"],
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=120)
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-observability-") as tmp:
        tmp = Path(tmp)
        workspace = tmp / "workspace"
        shutil.copytree(MISSION / "workspace", workspace)
        started = time.monotonic()
        services = mission_setup.start(workspace, tmp)
        ready_s = time.monotonic() - started
        try:
            env = {**os.environ, **{k: v for k, v in services.env.items() if k != "PATH"}}
            drive = subprocess.run([sys.executable, "-m", "scenario", "run", "--duration", str(args.duration)],
                                   cwd=workspace, env=env, capture_output=True, text=True,
                                   timeout=args.duration + 300)
            services.stack.stop()
            stats = httpx.get(f"{services.store_url}/stats", timeout=30).json()
            dropped_lines = [f"{log.name}: {line.strip()[:160]}" for log in (tmp / "stack").glob("*.log")
                             for line in log.read_text(errors="replace").splitlines() if DROP.search(line)]
            obs = [str(Path(sys.executable).parent / "obs")]
            obs_env = {**env, "OBS_LOG": str(tmp / "calls.jsonl"), "OBS_SPILL_DIR": str(tmp / "spill")}
            latencies = []
            for i in range(args.queries):
                t0 = time.monotonic()
                subprocess.run([*obs, *QUERIES[i % len(QUERIES)]], env=obs_env, capture_output=True, timeout=60)
                latencies.append((time.monotonic() - t0) * 1000)
        finally:
            services.stop()
    p50, p95 = np.percentile(latencies, [50, 95])
    print(f"scenario: {args.duration:.0f}s, exit {drive.returncode}")
    print(f"ready (store + 4 processes healthy): {ready_s:.1f} s   (goal ≤ 10 s)")
    print(f"rows stored: {stats['rows']}")
    print(f"store rejected: {stats['rejected']}, dropped: {stats['dropped']}; SDK drop/export-failure lines in "
          f"service logs: {len(dropped_lines)}   (goal 0)")
    for line in dropped_lines[:5]:
        print(f"  {line}")
    print(f"obs latency over {len(latencies)} calls: p50 {p50:.0f} ms, p95 {p95:.0f} ms   (goal p95 ≤ 500 ms)")


if __name__ == "__main__":
    main()
