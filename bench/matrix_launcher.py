"""What one concurrent mission costs the launcher: CPU and memory of the agent side (the
launch process, opencode, its sandbox, the mission's stack and store) while `llms-benchmark
matrix` runs N cells at once, measured by sampling the matrix's process tree.

Each cell is a real launch of a replay preset on the `hello` mission with the real opencode
(one trial). The replay unit's own processes (they carry the unit marker) are counted apart:
on Azure the model is served elsewhere, so only the agent side stays on the launcher.

    .venv/bin/python bench/matrix_launcher.py [--parallel 1 3] [--mission hello]

Writes bench/results/matrix-launcher.md (never edit it by hand: run this again).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.markdown_table import table  # noqa: E402
from harness.stacks.local_process import MARKER_VAR  # noqa: E402

RESULT = REPO / "bench" / "results" / "matrix-launcher.md"
SAMPLE_S = 0.25


def make_root(root: Path, n: int, mission: str) -> list[str]:
    for folder in (".vot/environments", ".vot/presets", ".vot/matrices", "missions", "replay"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / ".vot" / "environments" / "replay.yaml", root / ".vot" / "environments")
    shutil.copytree(REPO / "missions" / mission, root / "missions" / mission,
                    ignore=shutil.ignore_patterns("__pycache__", "*.db", "drive.json", ".obs"))
    base = yaml.safe_load((REPO / ".vot" / "presets" / f"replay-{mission}.yaml").read_text())
    shutil.copy2(REPO / base["model"], root / base["model"])
    presets = [f"replay-{mission}-{i}" for i in range(1, n + 1)]
    for name in presets:
        (root / ".vot" / "presets" / f"{name}.yaml").write_text(
            yaml.safe_dump({**base, "name": name, "served_model_name": name}, sort_keys=False))
    (root / ".vot" / "matrices" / "bench.yaml").write_text(yaml.safe_dump(
        {"environment": "replay", "presets": presets, "mission": mission, "trials": 1, "parallel": n,
         "probe_long_tokens": 2000}))
    return presets


def is_unit(proc: psutil.Process) -> bool:
    try:
        return MARKER_VAR in proc.environ()
    except (psutil.Error, OSError):
        return False


def measure(n: int, mission: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="matrix-bench-") as tmp:
        root = Path(tmp)
        make_root(root, n, mission)
        env = {**os.environ, "LLMS_BENCHMARK_ROOT": str(root), "PYTHONUNBUFFERED": "1",
               "LLMS_BENCHMARK_OPENCODE": str(REPO / "node_modules" / ".bin" / "opencode")}
        env.pop(MARKER_VAR, None)
        started = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "matrix", "bench", "--json"], cwd=root, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        top = psutil.Process(proc.pid)
        cpu: dict[tuple[int, float], tuple[str, float]] = {}  # (pid, create time) -> (side, CPU seconds so far)
        peak_rss = {"launcher": 0, "unit": 0}
        peak_procs = 0
        side_of: dict[tuple[int, float], str] = {}
        deadline = started + 1800
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                procs = [top, *top.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            rss = {"launcher": 0, "unit": 0}
            for p in procs:
                try:
                    key = (p.pid, p.create_time())
                    side = side_of.setdefault(key, "unit" if is_unit(p) else "launcher")
                    t = p.cpu_times()
                    cpu[key] = (side, t.user + t.system)
                    rss[side] += p.memory_info().rss
                except (psutil.Error, OSError):
                    continue
            for side in rss:
                peak_rss[side] = max(peak_rss[side], rss[side])
            peak_procs = max(peak_procs, len(procs))
            time.sleep(SAMPLE_S)
        out, err = proc.communicate(timeout=60)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise SystemExit(f"the matrix of {n} failed ({proc.returncode}):\n{err[-3000:]}")
        state = json.loads(out)
        records = [json.loads(p.read_text()) for p in (root / ".llms-benchmark" / "runs").glob("*/run.json")]
    launch_s = [(datetime.fromisoformat(r["times"]["end"]) - datetime.fromisoformat(r["times"]["launch"]))
                .total_seconds() for r in records]
    mission_s = [(datetime.fromisoformat(r["times"]["mission_end"]) -
                  datetime.fromisoformat(r["times"]["mission_start"])).total_seconds() for r in records]
    cpu_launcher = sum(v for side, v in cpu.values() if side == "launcher")
    cpu_unit = sum(v for side, v in cpu.values() if side == "unit")
    return {"n": n, "ok": sum(c["status"] == "done" for c in state["cells"]), "wall_s": wall,
            "launch_s": sum(launch_s) / len(launch_s), "mission_s": sum(mission_s) / len(mission_s),
            "cpu_launcher_s": cpu_launcher, "cpu_unit_s": cpu_unit,
            "rss_launcher_mib": peak_rss["launcher"] / 2**20, "rss_unit_mib": peak_rss["unit"] / 2**20,
            "peak_procs": peak_procs}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def write(results: list[dict], mission: str, argv: list[str]) -> None:
    cores = psutil.cpu_count() or 1
    mem_gib = psutil.virtual_memory().total / 2**30
    lines = [
        "# The launcher's cost per concurrent mission (`bench/matrix_launcher.py`)", "",
        f"Written by `.venv/bin/python bench/matrix_launcher.py {' '.join(argv)}` on "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; do not edit by hand.", "",
        f"Machine: {platform.machine()}, {cores} cores ({cpu_model()}), "
        f"{mem_gib:.1f} GiB memory, shared with other work while it ran.", "",
        f"Each cell: a replay preset on the `{mission}` mission with the real opencode in its sandbox, one trial; "
        "N cells at once under `llms-benchmark matrix --parallel N`. *Launcher* = the matrix, each launch, opencode, "
        "its sandbox and the mission's stack; *unit* = the replay server (on Azure the model runs elsewhere). "
        f"Sampled every {SAMPLE_S}s: CPU = user + system seconds of every process seen; memory = the peak of the "
        "summed RSS (shared pages counted in each process: an upper bound).", "",
        table(["N at once", "cells ok", "matrix wall", "launch (mean)", "mission (mean)", "launcher CPU s", "per mission",
               "launcher peak RSS", "per mission", "unit CPU s", "unit peak RSS", "processes (peak)"], (
            [r["n"], f"{r['ok']} / {r['n']}", f"{r['wall_s']:.0f} s", f"{r['launch_s']:.0f} s", f"{r['mission_s']:.0f} s",
             f"{r['cpu_launcher_s']:.1f}", f"{r['cpu_launcher_s'] / r['n']:.1f}", f"{r['rss_launcher_mib']:.0f} MiB",
             f"{r['rss_launcher_mib'] / r['n']:.0f} MiB", f"{r['cpu_unit_s']:.1f}", f"{r['rss_unit_mib']:.0f} MiB",
             r["peak_procs"]] for r in results)),
    ]
    big = max(results, key=lambda r: r["n"])
    small = min(results, key=lambda r: r["n"])
    # The marginal mission: what one more concurrent cell adds (the matrix's own process is paid once).
    if big["n"] > small["n"]:
        mem_each = (big["rss_launcher_mib"] - small["rss_launcher_mib"]) / (big["n"] - small["n"])
        cpu_each = (big["cpu_launcher_s"] - small["cpu_launcher_s"]) / (big["n"] - small["n"])
    else:
        mem_each, cpu_each = big["rss_launcher_mib"] / big["n"], big["cpu_launcher_s"] / big["n"]
    # Cores one launch keeps busy over its life, on average: over the launch alone (N=1, not
    # stretched by the others), at replay's pace (the model answers at once).
    busy = cpu_each / max(small["launch_s"], 1)
    by_mem = int(mem_gib * 1024 * 0.8 / max(mem_each, 1))
    by_cpu = int(cores * 0.8 / max(busy, 1e-3))
    lines += [
        "", "## What it implies", "",
        f"- one more concurrent mission adds about **{mem_each:.0f} MiB** of launcher memory and "
        f"**{cpu_each:.1f} CPU-seconds**: over a {small['launch_s']:.0f} s launch alone, ≈ {busy:.2f} of a core on "
        "average (opencode's start, the sandbox's proofs and the smoke are the bursts).",
        f"- on this machine (80 % of {mem_gib:.1f} GiB, 80 % of {cores} cores): memory allows ≈ {by_mem} missions at "
        f"once, CPU ≈ {by_cpu}; the limit is **{min(by_mem, by_cpu)}** ({'memory' if by_mem < by_cpu else 'CPU'}).",
        "- a real mission waits on a GPU model for most of its 20–150 minutes, so its average CPU is far lower than "
        "this replay's (the same CPU-seconds of start-up and tools, spread over the mission) and memory — opencode's "
        "RSS, plus the mission's own stack where it has one (the observability mission's services and telemetry "
        "store are not in this figure) — is what bounds a launcher; beyond it, the agent side runs as Container "
        "Apps jobs (docs/agents-as-jobs.md).",
    ]
    RESULT.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--mission", default="hello")
    args = parser.parse_args()
    results = []
    for n in args.parallel:
        print(f"measuring {n} cell(s) at once ...", file=sys.stderr)
        results.append(measure(n, args.mission))
        print(json.dumps(results[-1]), file=sys.stderr)
    write(results, args.mission, sys.argv[1:])
    print(RESULT.read_text())


if __name__ == "__main__":
    main()
