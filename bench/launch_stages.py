"""Where does a launch spend its time? Runs the fastest full launch (the replay
stack on the `hello` mission, real opencode) in a scratch copy of the project and
prints each stage's wall time from the run record.

    .venv/bin/python bench/launch_stages.py [--runs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
STAGES = [("preflight", "launch", "serve_start"), ("serve → ready", "serve_start", "ready"),
          ("probe", "ready", "probed"), ("configure + smoke", "probed", "smoked"),
          ("mission", "mission_start", "mission_end"), ("collect + destroy", "mission_end", "destroyed"),
          ("total", "launch", "end")]


def one_launch(root: Path) -> dict:
    env = {**os.environ, "LLMS_BENCHMARK_ROOT": str(root), "LLMS_BENCHMARK_OPENCODE": str(REPO / "node_modules/.bin/opencode")}
    cli = Path(sys.executable).parent / "llms-benchmark"
    out = subprocess.run([str(cli), "launch", "local", "replay", "replay-hello", "--mission", "hello", "--json",
                          "--probe-long-tokens", "8000"], env=env, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise SystemExit(f"launch failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {name: [] for name, _, _ in STAGES}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for folder in (".vot/environments", ".vot/presets", "missions", "replay"):
            shutil.copytree(REPO / folder, root / folder)
        for _ in range(args.runs):
            times = one_launch(root)["times"]
            for name, start, end in STAGES:
                a, b = datetime.fromisoformat(times[start]), datetime.fromisoformat(times[end])
                seconds[name].append((b - a).total_seconds())
    print(f"{'stage':<20} {'median s':>9} {'min s':>7} {'max s':>7}   ({args.runs} replay launches)")
    for name, values in seconds.items():
        print(f"{name:<20} {np.median(values):>9.1f} {min(values):>7.1f} {max(values):>7.1f}")


if __name__ == "__main__":
    main()
