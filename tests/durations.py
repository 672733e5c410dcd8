"""The suite's measured test durations, for scheduling (`tests/durations.json`).

xdist hands tests to its workers one at a time in collection order, so a long test that starts
last runs alone on one core while the other idles. tests/conftest.py orders the collection
longest first (LPT scheduling) from these figures; a test not listed counts as short. They come
from a `make test` run's JUnit report and only steer the order, never a result:

    .venv/bin/pytest -n auto --dist loadgroup --junitxml=/tmp/junit.xml
    .venv/bin/python tests/durations.py /tmp/junit.xml
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

FILE = Path(__file__).with_name("durations.json")
KEEP_FROM_S = 1.0  # shorter tests keep their collection order, after the listed ones


def nodeid(case: ET.Element) -> str:
    """The pytest node id of a JUnit <testcase> (classname `tests.test_x.TestY`, name `test_z[p]`)."""
    parts = case.get("classname", "").split(".")
    cls = [parts.pop()] if parts and parts[-1][:1].isupper() else []
    return "::".join(["/".join(parts) + ".py", *cls, case.get("name", "")])


def load() -> dict[str, float]:
    try:
        data = json.loads(FILE.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def main(junit: str) -> None:
    cases = ET.parse(junit).getroot().iter("testcase")
    found = {nodeid(c): round(float(c.get("time", 0)), 1) for c in cases}
    kept = dict(sorted(((k, v) for k, v in found.items() if v >= KEEP_FROM_S), key=lambda kv: -kv[1]))
    FILE.write_text(json.dumps(kept, indent=0) + "\n")
    print(f"{FILE}: {len(kept)} of {len(found)} tests at {KEEP_FROM_S} s or more")


if __name__ == "__main__":
    main(sys.argv[1])
