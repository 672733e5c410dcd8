"""Collect a unit's log into the run folder from its creation, and watch it.

A background thread copies new log text as it appears and flags a fatal start
line (vLLM's `EngineCore failed to start`, a llama.cpp load failure) or the unit
dying on its own, so the launch can destroy at once instead of waiting.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from harness.errors import FatalUnitLog, StackError
from harness.stacks.base import Stack, Unit
from harness.records.unit_death import UnitDeath, explain
from harness.wire.openai import bearer, model_ids, models_url
from harness.wire.tls import tls

TAIL_BYTES = 64 * 1024


class UnitLogCollector(threading.Thread):
    def __init__(self, stack: Stack, unit: Unit, dest: Path, interval_s: float = 1.0) -> None:
        super().__init__(name=f"unit-log-{unit.name}", daemon=True)
        self.stack, self.unit, self.dest, self.interval_s = stack, unit, dest, interval_s
        self.offset = 0
        self.problem = threading.Event()  # fatal line or unit died
        self.reason: list[str] = []
        self.death: UnitDeath | None = None  # set when the unit died on its own
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._partial = ""

    def drain(self) -> None:
        with self._lock:
            text, self.offset = self.stack.logs(self.unit, self.offset)
            if not text:
                return
            with open(self.dest, "a", encoding="utf-8") as out:
                out.write(text)
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
            for line in lines:
                if any(p in line for p in self.stack.fatal_patterns()) and not self.problem.is_set():
                    self.reason.append(f"fatal start in the unit log: {line.strip()[:300]}")
                    self.problem.set()

    def run(self) -> None:
        while not self._halt.wait(self.interval_s):
            self.drain()
            if not self.problem.is_set() and not self.stack.alive(self.unit):
                self.drain()
                if not self.problem.is_set():
                    self.death = self._explain_death()
                    self.reason.append(f"the unit {self.unit.name} exited on its own, {self.death.summary()}")
                    self.problem.set()

    def _explain_death(self) -> UnitDeath:
        # Optional stack member: the exit status of a unit this process started (local stacks).
        exit_status = getattr(self.stack, "exit_status", None)
        returncode = exit_status(self.unit) if exit_status else None
        try:
            with open(self.dest, "rb") as fh:
                fh.seek(max(0, fh.seek(0, 2) - TAIL_BYTES))
                tail = fh.read().decode("utf-8", "replace")
        except OSError:
            tail = ""
        return explain(returncode, tail)

    def stop(self) -> None:
        self._halt.set()
        if self.is_alive():
            self.join(timeout=10)
        self.drain()

    def raise_if_problem(self) -> None:
        if self.problem.is_set():
            raise FatalUnitLog(self.reason[0]) if "fatal" in self.reason[0] else StackError(self.reason[0])


def wait_ready(unit: Unit, timeout_s: float, collector: UnitLogCollector, *, api_key: str | None = None,
               poll_s: float = 1.0, on_wait=None) -> None:
    """Ready when GET /v1/models lists the served name; stop early on a fatal line or death.
    The pause between asks doubles from 0.1 s up to `poll_s`: a local server up in a fraction
    of a second is seen then, not a whole `poll_s` later, and a slow one is asked once a `poll_s`."""
    import time

    headers = bearer(api_key)
    deadline = time.monotonic() + timeout_s
    pause = min(0.1, poll_s)
    with httpx.Client(timeout=httpx.Timeout(10, connect=5), headers=headers, verify=tls()) as client:
        while True:
            collector.raise_if_problem()
            try:
                resp = client.get(models_url(unit.base_url))
                if resp.status_code == 200:
                    ids = set(model_ids(resp.json()))
                    if unit.served_name in ids:
                        return
            except (httpx.HTTPError, ValueError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise StackError(f"{unit.name} did not list '{unit.served_name}' on /v1/models within {timeout_s:.0f}s")
            if on_wait:
                on_wait()
            time.sleep(pause)
            pause = min(pause * 2, poll_s)
