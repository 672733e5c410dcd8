"""State files are replaced atomically (issue #7): a crash mid-write leaves the previous
version, complete and parseable, and the temp file a killed writer leaves is removed by
the next write.

No failpoints: a real child process writes a large payload with `write_atomic` and is
SIGKILLed from outside as soon as its temp file appears beside the target; every state
writer (run.json, the unit ledger, rulings, the results page) is shown to go through
`write_atomic`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

import harness.atomic
from harness.atomic import write_atomic
from harness.records.record import RowKey, RunRecord, Timestamps
from harness.verdicts.rulings import Rulings, load_rulings, save_rulings
from harness.stacks.base import Unit
from harness.stacks.ledger import Ledger

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import sys
from pathlib import Path
from harness.atomic import write_atomic
payload = '{"big": "' + "x" * int(sys.argv[2]) + '"}'
print("ready", flush=True)
write_atomic(Path(sys.argv[1]), payload)
print("written", flush=True)
"""


def _temps(path: Path) -> list[Path]:
    return [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.") and p.name.endswith(".tmp")]


def _kill_mid_write(target: Path, size: int) -> tuple[int, int]:
    """Start a child writing `size` bytes over `target`; SIGKILL it the moment its temp file
    holds part of the payload. Returns (bytes the temp held when the kill was sent, or -1
    when the child finished first; the child's exit code)."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(target), str(size)], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        deadline = time.monotonic() + 60
        seen = -1
        while time.monotonic() < deadline and child.poll() is None:
            temps = _temps(target)
            try:
                seen = temps[0].stat().st_size if temps else 0
            except FileNotFoundError:  # renamed over the target just now: the race was lost
                seen = -1
                break
            if seen > 0:  # the payload is going in: kill it mid-write
                os.kill(child.pid, signal.SIGKILL)
                break
        child.wait(timeout=30)
        return seen, child.returncode
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        child.stdout.close()
        child.stderr.close()


def test_a_writer_killed_mid_write_leaves_the_previous_version(tmp_path: Path):
    target = tmp_path / "run.json"
    previous = RunRecord(run_id="r1", key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="g"),
                         environment="replay", stack="replay", mission="hello",
                         times=Timestamps(launch=datetime(2026, 11, 1, tzinfo=UTC)))
    previous.save(tmp_path)
    before = target.read_bytes()
    # A payload large enough that the kill lands while it is being written; bigger if the
    # child ever wins the race (it renamed before the signal arrived).
    for size in (64 << 20, 256 << 20):
        seen, code = _kill_mid_write(target, size)
        if seen > 0 and code == -signal.SIGKILL:
            break
        target.write_bytes(before)
    assert seen > 0, "the child finished before it could be killed"
    assert code == -signal.SIGKILL
    # The target is the previous version, byte for byte, and still parses.
    assert target.read_bytes() == before
    assert RunRecord.load(target).run_id == "r1"
    # The killed writer's temp file was left behind, torn (part of the payload at most)...
    left = _temps(target)
    assert len(left) == 1 and 0 < left[0].stat().st_size <= size + len('{"big": ""}')
    with pytest.raises(ValueError):  # what an in-place write would have left as run.json
        json.loads(left[0].read_text())
    # ...and the next write removes it (its writer is gone) and replaces the target whole.
    write_atomic(target, json.dumps({"next": True}))
    assert json.loads(target.read_text()) == {"next": True}
    assert _temps(target) == []


def test_a_failed_write_keeps_the_previous_version_and_no_temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    target = tmp_path / "units.json"
    write_atomic(target, '{"a": 1}')

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(harness.atomic.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, '{"a": 2}')
    assert json.loads(target.read_text()) == {"a": 1}
    assert _temps(target) == []


def test_a_live_writers_temp_file_is_left_alone(tmp_path: Path):
    """Only temp files of writers no longer running are removed (a concurrent writer's stays)."""
    target = tmp_path / "README.md"
    live = tmp_path / f".README.md.{os.getpid()}.abcd1234.tmp"
    other_target = tmp_path / ".README.md.5.x1.abcd1234.tmp"  # the temp of `README.md.5`, not ours
    live.write_text("in progress")
    other_target.write_text("in progress")
    write_atomic(target, "page")
    assert live.exists() and other_target.exists()
    assert target.read_text() == "page"


def test_every_state_writer_goes_through_write_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """run.json, the unit ledger, rulings files and the results page are all written by
    write_atomic (temp file + fsync + os.replace), never in place."""
    written: list[Path] = []

    def spy(path: Path, text: str) -> Path:
        written.append(Path(path))
        return write_atomic(path, text)

    import harness.records.record
    import harness.results.render
    import harness.verdicts.rulings
    import harness.stacks.ledger

    for module in (harness.records.record, harness.stacks.ledger, harness.verdicts.rulings, harness.results.render):
        monkeypatch.setattr(module, "write_atomic", spy)

    record = RunRecord(run_id="r1", key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="g"),
                       environment="replay", stack="replay", mission="hello",
                       times=Timestamps(launch=datetime(2026, 11, 1, tzinfo=UTC)))
    record.save(tmp_path / ".llms-benchmark" / "runs" / "r1")
    Ledger(tmp_path).add(Unit(name="vot-p", stack="replay", environment="replay", preset="p",
                              base_url="http://127.0.0.1:1", served_name="p", max_model_len=None))
    rulings_file = tmp_path / "rulings" / "r1.yaml"
    save_rulings(Rulings(run_id="r1", report="report.md", ruled_at=datetime(2026, 11, 1, tzinfo=UTC)), rulings_file)
    page = tmp_path / ".llms-benchmark" / "README.md"
    page.write_text("# Results\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    harness.results.render.render_page(tmp_path, page)

    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        ".llms-benchmark/runs/r1/run.json", ".vot/run/units.json", "rulings/r1.yaml", ".llms-benchmark/README.md"]
    assert load_rulings(rulings_file).run_id == "r1"
    assert all(_temps(p) == [] for p in written)
