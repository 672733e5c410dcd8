"""Stop after the report: a run ends once the mission's report is persisted, and still counts.

The seed's odd-qwen3-8-27b row is a run its maintainer stopped "after its report was
persisted and committed, when the root session started a post-report code reading that
could no longer change the report". Two ways, both off unless asked for:

- automatically: the report exists and the agent has finished `after_turns` more model
  turns (opencode's `step_finish` events) without changing a byte of it;
- by the maintainer: `llms-benchmark stop <run>` writes the run's stop request; it is
  honoured only once a report exists (before one, the run goes on: Ctrl-C is the way to
  end it, and such a run is void, as before).

The report is read as it stands at the stop (never through a link, capped like the
collected copy) and kept: that snapshot is the run's report, whatever the agent does in
the seconds before opencode's process group is gone. Its sha256 goes on the record.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from harness.sandbox import untrusted

BY_MAINTAINER = "by the maintainer (llms-benchmark stop)"
ENDED_PREFIX = "stopped after its report"


class ReportStop:
    """A guard for `run_opencode` (called each poll) fed with opencode's events."""

    def __init__(self, workspace: Path, relative: str, request: Path, after_turns: int | None = None) -> None:
        self.workspace, self.relative, self.request = workspace, relative, request
        self.after_turns = after_turns
        self.turns = 0  # model turns finished so far
        self.changed_at: int | None = None  # the turn after which the report last changed
        self.digest: str | None = None
        self.snapshot: bytes | None = None  # the report as it stood at the stop
        self.how: str | None = None  # why the run was stopped (None: it was not)
        self.ignored_request = False  # a stop asked for before any report

    def _read(self) -> bytes | None:
        try:
            return untrusted.read_bytes(self.workspace, self.relative, untrusted.REPORT_CAP)
        except (FileNotFoundError, untrusted.Refused, OSError):
            return None  # absent, a link, oversized: not a persisted report (collect says why)

    def _look(self) -> bytes | None:
        data = self._read()
        digest = hashlib.sha256(data).hexdigest() if data else None
        if digest != self.digest:
            self.digest, self.changed_at = digest, self.turns
        return data

    def on_event(self, event: dict) -> None:
        if event.get("type") == "step_finish":
            self.turns += 1
            self._look()

    def __call__(self) -> str | None:
        if self.how is not None:
            return self.how
        if self.request.exists():
            data = self._look()
            if data:
                return self._stop(data, BY_MAINTAINER)
            self.ignored_request = True
        if self.after_turns and self.digest is not None and self.turns - self.changed_at >= self.after_turns:
            data = self._look()  # read again: a change since the last turn restarts the count
            if data and self.turns - self.changed_at >= self.after_turns:
                return self._stop(data, f"{self.after_turns} model turns without changing it")
        return None

    def _stop(self, data: bytes, how: str) -> str:
        self.snapshot, self.digest = data, hashlib.sha256(data).hexdigest()
        self.how = f"{ENDED_PREFIX}: {how}"
        return self.how


def is_stop_after_report(ended_by: str | None) -> bool:
    return bool(ended_by) and ended_by.startswith(ENDED_PREFIX)
