"""The test suite's time: `make test`'s pytest run (or JUnit files of earlier runs), its wall time,
the slowest files and the top 30 tests, each run beside the first (issue 64: "bench/ keeps the
suite's time with the top 30 tests before and after").

    .venv/bin/python bench/suite_time.py --run after            # runs the suite (~25-30 min on 2 cores)
    .venv/bin/python bench/suite_time.py before=/tmp/before.xml after=/tmp/after.xml \
        --out bench/results/suite-time.md

A run's wall time is pytest's own (the JUnit `time` of the whole session); a test's is its call
with its setup and teardown (pytest's JUnit `time`), so a module fixture's build lands on the first
test that asks for it. Timings on a shared 2-core box move with whatever else runs: say what ran.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOP = 30


@dataclass
class Run:
    label: str
    wall_s: float
    tests: int
    failed: int
    times: dict[str, float]  # test id -> seconds

    @property
    def files(self) -> collections.Counter:
        out: collections.Counter = collections.Counter()
        for test, s in self.times.items():
            out[test.split("::", 1)[0]] += s
        return out


def load(label: str, path: Path) -> Run:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    times: dict[str, float] = {}
    for case in root.iter("testcase"):
        module = case.get("classname", "")
        parts = module.split(".")
        file = "/".join(parts[:2]) + ".py" if parts[0] == "tests" else module
        klass = "::".join(parts[2:])
        test = f"{file}::{klass + '::' if klass else ''}{case.get('name')}"
        times[test] = times.get(test, 0.0) + float(case.get("time") or 0)
    failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    return Run(label, float(suite.get("time", 0)), int(suite.get("tests", 0)), failed, times)


def _m(s: float) -> str:
    return f"{int(s // 60)}m{int(round(s % 60)):02d}s"


def render(runs: list[Run], notes: str = "") -> str:
    first = runs[0]
    lines = ["# The test suite's time", "",
             "`make test`'s pytest (`-n auto --dist loadgroup`: 2 workers on this 2-core machine); made by "
             "`bench/suite_time.py`.", ""]
    if notes:
        lines += [notes, ""]
    lines += ["| run | wall | tests | failed | sum of test times |", "|---|---|---|---|---|"]
    lines += [f"| {r.label} | {_m(r.wall_s)} | {r.tests} | {r.failed} | {_m(sum(r.times.values()))} |" for r in runs]
    lines += ["", "## Slowest files (sum of their tests' times, s)", "",
              "| file | " + " | ".join(r.label for r in runs) + " |", "|---|" + "---|" * len(runs)]
    order = sorted(set().union(*(r.files for r in runs)), key=lambda f: -max(r.files[f] for r in runs))
    for file in order[:15]:
        lines.append(f"| `{file}` | " + " | ".join(f"{r.files[file]:.0f}" for r in runs) + " |")
    for run in runs:
        lines += ["", f"## Top {TOP} tests: {run.label} (s)", "",
                  "| # | test | " + " | ".join(r.label for r in runs) + " |", "|---|---|" + "---|" * len(runs)]
        top = sorted(run.times.items(), key=lambda kv: -kv[1])[:TOP]
        for i, (test, _) in enumerate(top, 1):
            cells = [f"{r.times[test]:.1f}" if test in r.times else "-" for r in runs]
            lines.append(f"| {i} | `{test}` | " + " | ".join(cells) + " |")
        if run is first and len(runs) == 1:
            break
    return "\n".join(lines) + "\n"


def run_suite(label: str) -> Path:
    xml = Path(tempfile.gettempdir()) / f"suite-time-{label}.xml"
    subprocess.run([str(REPO / ".venv" / "bin" / "pytest"), "-q", "-n", "auto", "--dist", "loadgroup",
                    f"--junitxml={xml}"], cwd=REPO, check=False)
    return xml


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="label=path/to/junit.xml, first is the reference")
    parser.add_argument("--run", metavar="LABEL", help="run the suite now and add it as LABEL")
    parser.add_argument("--out", type=Path, help="write the table here (default: print it)")
    parser.add_argument("--notes", default="", help="a paragraph under the title: the machine, what else ran")
    args = parser.parse_args(argv)
    runs = []
    for item in args.runs:
        label, _, path = item.partition("=")
        if not path:
            parser.error(f"{item!r}: give label=path")
        runs.append(load(label, Path(path)))
    if args.run:
        runs.append(load(args.run, run_suite(args.run)))
    if not runs:
        parser.error("nothing to show: give label=path runs or --run LABEL")
    text = render(runs, args.notes)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
