"""Start the replay server's timed mode as a real process on loopback, for the load tests."""

from __future__ import annotations

import json
import re
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = "timed-model"


@dataclass
class Timed:
    proc: subprocess.Popen
    url: str
    served_log: Path

    def log(self, at_least: int = 0, within_s: float = 10.0) -> list[dict]:
        """The served log; with `at_least`, waited for (bounded) until it holds that many rows:
        the server writes a row after the answer's last bytes, so a busy box can show the client
        its answer before the row exists."""
        deadline = time.monotonic() + within_s
        while True:
            rows = self._rows()
            if len(rows) >= at_least or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)

    def _rows(self) -> list[dict]:
        if not self.served_log.exists():
            return []
        return [json.loads(line) for line in self.served_log.read_text().splitlines() if line.endswith("}")]

    def script(self, **change) -> dict:
        return httpx.post(f"{self.url}/admin/metrics", json=change, timeout=5).json()

    def stats(self) -> dict:
        return httpx.get(f"{self.url}/admin/stats", timeout=5).json()

    def stop(self) -> str:
        """Terminate; its stderr."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.stderr.read() if self.proc.stderr else ""


def start_timed(folder: Path, *args: str, model: str = MODEL) -> Timed:
    folder.mkdir(parents=True, exist_ok=True)
    served_log = folder / "served.jsonl"
    cmd = [sys.executable, "-m", "harness.replay.server", "--timed", "--host", "127.0.0.1", "--port", "0",
           "--served-model-name", model, "--served-log", str(served_log), *args]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=30):
            proc.kill()
            proc.wait(timeout=5)
            pytest.fail("the timed replay server printed nothing within 30 s")
    line = proc.stdout.readline().strip()
    match = re.search(r"listening on (http://\S+)$", line)
    if not match:
        proc.kill()
        pytest.fail(f"unexpected banner {line!r}: {proc.stderr.read()}")
    return Timed(proc, match.group(1), served_log)


@pytest.fixture
def make_timed(tmp_path: Path) -> Iterator:
    """make_timed(*server args) -> Timed; every server started is stopped after the test."""
    started: list[Timed] = []

    def make(*args: str, model: str = MODEL) -> Timed:
        timed = start_timed(tmp_path / f"timed{len(started)}", *args, model=model)
        started.append(timed)
        return timed

    yield make
    for timed in started:
        timed.stop()
