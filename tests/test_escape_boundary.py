"""Issue 60, item 2: one escape at the boundary. Whatever the agent's side puts in a reason, an
`ended_by`, a smoke verdict or a terminal line (escape sequences that clear the screen or set the
title, OSC...ST, a C1 CSI, a newline forging a "run ok" line, bidi overrides), run.json and the
launcher's terminal never carry it raw: one line, every control character shown as its escape."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

from harness.escape import escape_name
from harness.launcher.launch import _escaping
from harness.records.record import RowKey, RunOutcome, RunRecord, Status, Timestamps

HOSTILE = ["\x1b[2J\x1b[H", "\x1b]0;pwned\x07", "\x1b]52;c;ZXZpbA==\x1b\\", "\x9b31m", "\nrun ok, row added\n",
           "\r\x08\x08\x08ok", "\u202edelif", "\x00nul", "\udcff"]
RAW = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def _record(**fields) -> RunRecord:
    return RunRecord(run_id="r", key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="g"),
                     environment="cpu", stack="replay", mission="hello", status=Status.void,
                     times=Timestamps(launch=datetime.now(UTC)), **fields)


def _strings(value) -> list[str]:
    """Every string a parsed JSON value holds (decoded: a `\\u001b` escape in the file is ESC here)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


@pytest.mark.parametrize("bad", HOSTILE)
def test_a_record_never_holds_a_raw_control_byte(bad: str, tmp_path):
    built = _record(reason=f"the agent's {bad} file", smoke=f"failed {bad}", run=RunOutcome(ended_by=f"watchdog {bad}"))
    assigned = _record()
    assigned.reason, assigned.stopped_at = f"post-run: {bad}", f"collect {bad}"
    assigned.run = RunOutcome()
    assigned.run.ended_by = f"stall: {bad}"
    for rec in (built, assigned):
        rec.save(tmp_path / rec.run_id)
        saved = json.loads((tmp_path / rec.run_id / "run.json").read_text(encoding="utf-8"))
        assert not [s for s in _strings(saved) if RAW.search(s)], saved
        back = RunRecord.load(tmp_path / rec.run_id / "run.json")
        assert not RAW.search(back.reason or "") and not RAW.search(back.run.ended_by or "")


@pytest.mark.parametrize("bad", HOSTILE)
def test_a_terminal_line_is_one_line_with_nothing_raw(bad: str):
    lines = []
    say = _escaping(lines.append, lambda: [])
    say(f"run void: the agent's {bad} was refused")
    (line,) = lines
    assert not RAW.search(line) and "\n" not in line


def test_escaping_twice_changes_nothing():
    for bad in HOSTILE:
        once = escape_name(bad)
        assert escape_name(once) == once and not RAW.search(once)
