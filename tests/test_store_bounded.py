"""Issue 60, item 3: opencode's store is the agent's to fill (it sits in the sandbox's HOME), so
the post-run reads it row by row, each field it keeps bounded, never a part whole: a 120 MB store
of long parts (text, tool inputs, errors) is collected by a launcher whose peak stays under 256 MiB.
Measured in a process of its own (VmHWM); the figures themselves are checked too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from opencode_store import new_store

ROOT = Path(__file__).resolve().parents[1]
PEAK_MIB = 256


def _fill(data_dir: Path, megabytes: int) -> None:
    conn = new_store(data_dir)
    conn.execute("INSERT INTO session VALUES ('ses_root', NULL, 'llms-benchmark hello', 1000, '1.18.33', 10, 20, 0, "
                 "5, 0)")
    big = "x" * (512 * 1024)  # one part: half a megabyte of text (a model's, or the agent's own rewrite)
    n = megabytes * 2
    for i in range(n):
        message = f"msg_{i:06d}"
        conn.execute("INSERT INTO message VALUES (?, 'ses_root', ?)", (message, json.dumps({
            "role": "assistant", "time": {"created": 1000 + i, "completed": 1500 + i}, "finish": "tool-calls",
            "tokens": {"input": 10, "output": 2, "reasoning": 0, "cache": {"read": 1, "write": 0}}})))
        kind = ("text", "tool", "tool")[i % 3]
        part = {"type": kind, "text": big} if kind == "text" else {
            "type": "tool", "tool": "write", "state": {"status": "error", "error": big,
                                                        "input": {"filePath": "src/shop_api/app.py", "content": big},
                                                        "time": {"start": 1000 + i}}}
        conn.execute("INSERT INTO part VALUES (?, ?, 'ses_root', ?)", (f"prt_{i:06d}", message, json.dumps(part)))
    conn.commit()
    conn.close()


CHILD = r"""
import json, sys
from datetime import datetime, UTC
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from harness.opencode.store import collect
from harness.serving.turns import load_turns
from harness.serving.toolcalls import tool_call_health
from harness.verdicts.phases import files_read_before
data = Path(sys.argv[2])
figures = collect(data, session_id="ses_root")
turns = load_turns(data, "ses_root")
health = tool_call_health(turns)
files = files_read_before(data, ["ses_root"], datetime(2100, 1, 1, tzinfo=UTC))
hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(json.dumps({"turns": figures.turns, "loaded": len(turns), "calls": health.calls, "errors": health.errors,
                  "files": files, "peak_mib": hwm // 1024}))
"""


def test_a_120_mb_store_is_collected_under_256_mib(tmp_path: Path):
    data = tmp_path / "opencode"
    _fill(data, 120)
    assert (data / "opencode.db").stat().st_size > 120e6
    done = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), str(data)], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["turns"] == got["loaded"] == 240 and got["calls"] == 160 and got["errors"] == 160
    assert got["files"] == ["src/shop_api/app.py"]
    assert got["peak_mib"] < PEAK_MIB, got
