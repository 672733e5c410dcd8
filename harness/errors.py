"""Errors that carry their fix.

A `UserError` is a mistake in something the user wrote or typed (a preset, an
environment, a mission, a CLI argument) or a missing prerequisite on the machine.
The CLI prints it as one clear message and exits 2; nothing has been served.
Anything else that escapes a launch is a harness fault (exit 3).
"""

from __future__ import annotations

from pathlib import Path


class UserError(Exception):
    """A clear, actionable refusal: which file, which field, what to do."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        field: str | None = None,
        fix: str | None = None,
        line: int | None = None,
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.field = field
        self.fix = fix
        self.line = line
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.file:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
            where += ": "
        field = f"field '{self.field}': " if self.field else ""
        text = f"{where}{field}{self.message}"
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class PreflightError(UserError):
    """Something checked before billing does not hold (missing tool, no GPU, ...)."""


class StackError(Exception):
    """A stack could not serve, answer or destroy its unit (a harness-side failure)."""


class FatalUnitLog(StackError):
    """The unit's log shows a fatal start (EngineCore failed, model load failure)."""

    def __init__(self, line: str) -> None:
        self.line = line
        super().__init__(f"fatal line in the unit log: {line.strip()}")


class Interrupted(KeyboardInterrupt):
    """SIGINT/SIGTERM while a unit lives: unwinds to the `finally` that destroys
    (`harness.run.units` routes the signals here). A KeyboardInterrupt, because that is what
    libraries let through where they catch everything else: asyncio logs and drops any other
    exception raised in a callback, and a launch whose SIGINT landed in the probe's socket
    callback went on to run its mission (CI, stop 57)."""

    def __init__(self, signum: int) -> None:
        import signal

        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
