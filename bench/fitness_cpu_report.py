"""One full `llms-benchmark fitness run` on the real llama.cpp CPU stack (the embedded SmolLM2-135M,
preset `cpu-smollm2-135m`), every phase, its report copied into bench/results as the harness wrote
it, with the machine and its load before and after beside it. Nothing in the result is edited by
hand: rerun the script to refresh it.

    .venv/bin/python bench/fitness_cpu_report.py [--contexts 512,8192]

Needs `make setup` (llama.cpp, the embedded models, `fitness data`). The config is below (CONFIG):
throughput at the given contexts with 32 output tokens; capacity 1/2/4 in flight; tooluse with
2 BFCL items a category; capability 5 items a suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.fitness import checkers as fitness_checkers  # noqa: E402
from harness.fitness.data import default_dir as default_data_dir  # noqa: E402

OUT = REPO / "bench" / "results" / "fitness-cpu-smollm2-135m.md"
PRESET = "cpu-smollm2-135m"


def config(contexts: list[int], checkers: Path) -> dict:
    return {
        "throughput": {"contexts": contexts, "output_tokens": 32},
        "capacity": {"levels": [1, 2, 4], "input_tokens": 512, "output_tokens": 32, "requests_per_level": 4},
        "tooluse": {"max_tokens": 96, "bfcl": True, "bfcl_per_category": 2},
        "capability": {"data_dir": str(default_data_dir()), "limit": 5, "max_tokens": 192},
        "checkers_venv": str(checkers),
    }


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown CPU")
    return f"{os.cpu_count()} cores, {cpu}, {platform.system()} {platform.release()}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="512,8192")
    args = parser.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    checkers = fitness_checkers.default_dir()
    if not fitness_checkers.ready(checkers):
        raise SystemExit(f"the checkers' venv {checkers} is missing: run `make setup`")
    with tempfile.TemporaryDirectory(prefix="fitness-bench-") as tmp:
        root = Path(tmp)
        # A scratch project: the run folder and the ledger stay out of the checkout.
        (root / ".vot" / "presets").mkdir(parents=True)
        shutil.copytree(REPO / ".vot" / "environments", root / ".vot" / "environments")
        shutil.copy2(REPO / ".vot" / "presets" / f"{PRESET}.yaml", root / ".vot" / "presets")
        cfg = root / "fitness.yaml"
        cfg.write_text(yaml.safe_dump(config(contexts, checkers)))
        report = root / "report"
        env = {**os.environ, "LLMS_BENCHMARK_ROOT": str(root)}
        load_before, t0 = os.getloadavg(), time.monotonic()
        done = subprocess.run([str(Path(sys.executable).parent / "llms-benchmark"), "fitness", "run", "cpu", PRESET,
                               "--config", str(cfg), "--report-dir", str(report)], env=env, cwd=root,
                              capture_output=True, text=True, timeout=3 * 3600)
        wall, load_after = time.monotonic() - t0, os.getloadavg()
        if not (report / "report.md").is_file():
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n")
            return 1
        body = (report / "report.md").read_text()
    header = (f"<!-- written by bench/fitness_cpu_report.py (--contexts {args.contexts}); rerun it, never edit -->\n"
              f"<!-- {machine()}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
              f"wall {wall:.0f} s; exit {done.returncode} -->\n\n")
    OUT.write_text(header + body)
    print(f"{OUT.relative_to(REPO)}: exit {done.returncode}, {wall:.0f} s, load {load_before[0]:.2f} -> {load_after[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
