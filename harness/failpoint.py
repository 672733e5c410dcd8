"""Failpoints: stop a launch at a named stage, on purpose, to test that every way out
destroys what it served.

    LLMS_BENCHMARK_FAILPOINT=<stage>:<raise|sigint|sigterm|sigkill>[@<delay seconds>]

`raise` raises a harness fault where the stage begins; the signals are sent to the
launch's own process, at once or `delay` seconds into the stage (from a timer, so a
signal can land while opencode is running). Unset, `hit` does nothing. A malformed
value is refused before anything is served.
"""

from __future__ import annotations

import os
import re
import signal
import threading

from harness.errors import UserError

VAR = "LLMS_BENCHMARK_FAILPOINT"
ACTIONS = {"raise": None, "sigint": signal.SIGINT, "sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}
_SPEC = re.compile(r"^(?P<stage>[a-z-]+):(?P<action>[a-z]+)(?:@(?P<delay>\d+(?:\.\d+)?))?$")


class FailpointHit(RuntimeError):
    """The injected fault: a harness fault like any other."""


def parse(value: str | None, stages: tuple[str, ...]) -> tuple[str, str, float] | None:
    if not value:
        return None
    m = _SPEC.match(value.strip())
    if not m or m["stage"] not in stages or m["action"] not in ACTIONS:
        raise UserError(f"{VAR}={value!r} is not <stage>:<action>[@seconds]", field=VAR,
                        fix=f"stage one of {', '.join(stages)}; action one of {', '.join(ACTIONS)}")
    return m["stage"], m["action"], float(m["delay"] or 0)


def check(stages: tuple[str, ...]) -> None:
    """Refuse a malformed value; `stages` is the launch's own list (`harness.launch.FAILPOINT_STAGES`)."""
    parse(os.environ.get(VAR), stages)


_fired: set[str] = set()


def hit(stage: str) -> None:
    """Fire once per process: a retried stage (destroy) meets the fault only the first time.
    A value `check` would refuse never fires (the launch checks it before serving anything)."""
    try:
        spec = parse(os.environ.get(VAR), (stage,))
    except UserError:
        return  # another stage's failpoint, or a malformed one
    if spec is None or stage in _fired:
        return
    _fired.add(stage)
    _, action, delay = spec
    if action == "raise":
        raise FailpointHit(f"failpoint {stage}:raise")
    sig = ACTIONS[action]
    if delay:
        timer = threading.Timer(delay, os.kill, (os.getpid(), sig))
        timer.daemon = True
        timer.start()
    else:
        os.kill(os.getpid(), sig)
