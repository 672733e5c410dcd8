"""Failpoints: stop a launch at a named stage, on purpose, to test that every way out
destroys what it served.

    LLMS_BENCHMARK_FAILPOINT=<stage>[#<trial>]:<raise|sigint|sigterm|sigkill>[@<delay seconds>]

`#<trial>` (2 or more) aims at that trial of `launch --trials K` (the stages a later trial
runs again); without it the failpoint fires where the stage first runs. `raise` raises a harness fault where the stage begins; the signals are sent to the
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
_SPEC = re.compile(r"^(?P<stage>[a-z-]+)(?:#(?P<trial>[1-9]\d*))?:(?P<action>[a-z]+)(?:@(?P<delay>\d+(?:\.\d+)?))?$")


class FailpointHit(RuntimeError):
    """The injected fault: a harness fault like any other."""


def parse(value: str | None, stages: tuple[str, ...]) -> tuple[str, int, str, float] | None:
    """(stage, trial, action, delay); trial 1 where the value names none."""
    if not value:
        return None
    m = _SPEC.match(value.strip())
    if not m or m["stage"] not in stages or m["action"] not in ACTIONS:
        raise UserError(f"{VAR}={value!r} is not <stage>[#trial]:<action>[@seconds]", field=VAR,
                        fix=f"stage one of {', '.join(stages)}; action one of {', '.join(ACTIONS)}")
    return m["stage"], int(m["trial"] or 1), m["action"], float(m["delay"] or 0)


def check(stages: tuple[str, ...], repeated: tuple[str, ...] = (), trials: int = 1) -> None:
    """Refuse a malformed value; `stages` is the launch's own list (`harness.launcher.launch.FAILPOINT_STAGES`),
    `repeated` those a later trial runs again, `trials` how many the launch runs."""
    spec = parse(os.environ.get(VAR), stages)
    if spec is None or spec[1] == 1:
        return
    stage, trial = spec[0], spec[1]
    if stage not in repeated or trial > trials:
        raise UserError(f"{VAR}={os.environ[VAR]!r} names trial {trial} of stage {stage}, which never runs",
                        field=VAR, fix=f"a later trial runs only {', '.join(repeated) or 'nothing'}, "
                                       f"and this launch runs {trials} trial(s)")


_fired: set[str] = set()


def hit(stage: str, trial: int = 1) -> None:
    """Fire once per process: a retried stage (destroy) meets the fault only the first time.
    A value `check` would refuse never fires (the launch checks it before serving anything)."""
    try:
        spec = parse(os.environ.get(VAR), (stage,))
    except UserError:
        return  # another stage's failpoint, or a malformed one
    if spec is None or stage in _fired or spec[1] != trial:
        return
    _fired.add(stage)
    _, _, action, delay = spec
    if action == "raise":
        raise FailpointHit(f"failpoint {stage}:raise")
    sig = ACTIONS[action]
    if delay:
        timer = threading.Timer(delay, os.kill, (os.getpid(), sig))
        timer.daemon = True
        timer.start()
    else:
        os.kill(os.getpid(), sig)
