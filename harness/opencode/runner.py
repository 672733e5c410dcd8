"""Run `opencode run` headless under a wall-clock cap and a watchdog.

The prompt goes on stdin from a file, byte-exact (positional arguments get wrapped
in quotes, and an inherited open stdin hangs opencode forever). opencode runs in
its own process group and is ended by that group only, never by name. The
watchdog ends a run that emits no event for `stall_s`, that meets the same provider
error three times in a row (opencode retries a failing stream on its own), or whose agent
makes the same failing tool call three times in a row (oddyssey's rule: "three identical
failures of one turn → stop"). The last is a model at a fixed point: measured on the
embedded 1.5B model, served greedy, the identical rejected `task` call 43 times in 5.4 min
and nothing else; on a GPU such a run would bill its whole time cap for nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

POLL_S = 0.2
_VOLATILE = re.compile(r"\b(?:[0-9a-f]{8,}|\d+(?:\.\d+)?(?:ms|s)?)\b|\b(?:ses|msg|prt|call)_[A-Za-z0-9]+")
_SIGNED_CHARS = 1000  # of an error's text: _VOLATILE backtracks on long runs (quadratic in what it is given)
# What is read from opencode's side (the agent's tools write into both streams): one line,
# and each stream in all. A longer line is dropped (counted); past a stream's cap nothing more
# is kept and the run ends (a 1.6 GB events file once, the launcher at 3.1 GiB).
LINE_CAP = 8 << 20
EVENTS_CAP, STDERR_CAP = 512 << 20, 256 << 20


@dataclass
class Limits:
    time_cap_s: float
    stall_s: float
    same_error_limit: int = 3
    same_failed_call_limit: int = 3


@dataclass
class RunResult:
    exit_code: int | None = None
    ended_by: str | None = None
    events: int = 0
    session_id: str | None = None
    tool_uses: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    stopped_at: float | None = None  # wall clock when the harness ended it (ended_by), None if it ended itself


def error_signature(text: str) -> str:
    """Ids, counters and durations vary between identical failures: strip them."""
    return _VOLATILE.sub("#", text.strip()[:_SIGNED_CHARS])[:300]


def provider_error(line: str) -> str | None:
    """The cause a stderr log line (--print-logs) gives for a failed provider call: what follows
    the last `error=` (at a word's start) or `message=` after `level=ERROR`. String searches
    only, linear in the line (its regex once froze the launcher 49.7 s on a 240 KB command)."""
    start = line.find("level=ERROR")
    if start < 0:
        return None
    rest = line[start:].rstrip("\n")
    cut = None
    end = len(rest)
    while (at := rest.rfind("error=", 0, end)) >= 0:  # each step looks only left of the last: linear
        if at == 0 or not (rest[at - 1].isalnum() or rest[at - 1] == "_"):
            cut = at + len("error=")
            break
        end = at
    at = rest.rfind("message=")
    if at >= 0 and (cut is None or at + len("message=") > cut):
        cut = at + len("message=")
    msg = rest[cut:] if cut is not None else ""
    return msg if msg.strip() else None


def _bounded_lines(stream, cap: int):
    """The stream's lines of at most `cap` bytes; a longer one is drained and yields None."""
    while True:
        raw = stream.readline(cap + 1)
        if not raw:
            return
        if len(raw) > cap and not raw.endswith(b"\n"):
            while (rest := stream.readline(cap)) and not rest.endswith(b"\n"):
                pass
            yield None
            continue
        yield raw


class _Streak:
    """The same signature `limit` times in a row; None (a success) breaks the streak."""

    def __init__(self, limit: int) -> None:
        self.recent: deque[str | None] = deque(maxlen=limit)
        self.limit = limit

    def add(self, signature: str | None) -> None:
        self.recent.append(signature)

    def repeated(self) -> str | None:
        first = self.recent[0] if self.recent else None
        if len(self.recent) == self.limit and first is not None and self.recent.count(first) == self.limit:
            return first
        return None


class _Watch:
    """State shared by the reader threads and the watchdog loop."""

    def __init__(self, limit: int, call_limit: int) -> None:
        self.lock = threading.Lock()
        self.overflow: str | None = None  # a stream past its cap: the reason the run ends
        self.dropped = 0  # lines past LINE_CAP, never parsed nor kept
        self.last_activity = time.monotonic()
        self.errors = _Streak(limit)  # provider errors, by signature
        self.failed_calls = _Streak(call_limit)  # tool calls: a failed one by its signature, a success as None

    def past_cap(self, stream: str, raw: bytes | None) -> None:
        """A line past LINE_CAP (`raw` None) is dropped; a stream past its cap ends the run."""
        with self.lock:
            if raw is None:
                self.dropped += 1
            elif self.overflow is None:
                cap = EVENTS_CAP if stream == "events" else STDERR_CAP
                self.overflow = f"opencode's {stream} passed {cap >> 20} MiB: nothing more was kept"

    def overflowed(self) -> str | None:
        with self.lock:
            return self.overflow

    def activity(self) -> None:
        with self.lock:
            self.last_activity = time.monotonic()

    def error(self, text: str) -> None:
        with self.lock:
            self.errors.add(error_signature(text))

    def tool_call(self, signature: str | None) -> None:
        with self.lock:
            self.failed_calls.add(signature)

    def repeated_error(self) -> str | None:
        with self.lock:
            return self.errors.repeated()

    def repeated_failed_call(self) -> str | None:
        with self.lock:
            return self.failed_calls.repeated()


def failed_call_signature(part: dict) -> str | None:
    """A failed tool call as its tool, its exact input and its error; None for one that did not fail."""
    state = part.get("state") or {}
    if not isinstance(state, dict) or state.get("status") != "error":
        return None
    arguments = json.dumps(state.get("input"), sort_keys=True, default=str)
    return f"{part.get('tool')}: {error_signature(str(state.get('error', '')))}; input {arguments[:160]}"


def _read_events(stream, events_path: Path, result: RunResult, watch: _Watch,
                 on_event: Callable[[dict], None] | None = None) -> None:
    kept = 0
    with open(events_path, "ab") as out:
        for raw in _bounded_lines(stream, LINE_CAP):
            watch.activity()
            if raw is None or kept + len(raw) > EVENTS_CAP:
                watch.past_cap("events", raw)
                continue
            kept += len(raw)
            out.write(raw)
            out.flush()
            result.events += 1
            try:
                event = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if not isinstance(event, dict):
                continue
            if on_event is not None:
                on_event(event)  # e.g. the serving timeline reads /metrics as a step finishes
            result.session_id = result.session_id or event.get("sessionID")
            part = event.get("part") or {}
            kind = event.get("type")
            if kind == "tool_use":
                result.tool_uses.append(str(part.get("tool")))
                watch.tool_call(failed_call_signature(part))
            elif kind == "text":
                result.texts.append(str(part.get("text", "")))
            elif kind == "error":
                err = event.get("error") or {}
                msg = f"{err.get('name')}: {(err.get('data') or {}).get('message', '')}"
                result.errors.append(msg)
                watch.error(msg)


def _read_stderr(stream, stderr_path: Path, result: RunResult, watch: _Watch) -> None:
    kept = 0
    with open(stderr_path, "ab") as out:
        for raw in _bounded_lines(stream, LINE_CAP):
            if raw is None or kept + len(raw) > STDERR_CAP:
                watch.past_cap("stderr", raw)
                continue
            kept += len(raw)
            out.write(raw)
            out.flush()
            line = raw.decode("utf-8", "replace")
            msg = provider_error(line)
            if msg and ("stream" in line or "provider" in line or "APIError" in line or "status" in line):
                result.errors.append(msg.strip())
                watch.error(msg)


def _end_group(proc: subprocess.Popen, grace_s: float = 3.0) -> None:
    """SIGTERM the run's process group, then SIGKILL what is left of it.

    opencode 1.18.33 ignores SIGTERM, SIGINT and SIGHUP while a model stream is open
    (measured: still alive 15 s later), so the grace is short; its store is SQLite in
    WAL mode, so what it committed survives the SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            # The leader is gone; tools it started may linger in the group.
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


def run_opencode(
    argv: list[str],
    *,
    prompt: str,
    env: dict[str, str],
    cwd: Path,
    events_path: Path,
    stderr_path: Path,
    limits: Limits,
    abort: threading.Event | None = None,
    abort_reason: list[str] | None = None,
    on_event: Callable[[dict], None] | None = None,
    guards: list[Callable[[], str | None]] | tuple = (),
    explain_stall: Callable[[float], str] | None = None,
) -> RunResult:
    """Run opencode to completion or until the cap/watchdog/abort/a guard ends it.
    `explain_stall(window_s)` says what the server did while opencode was silent (the
    stall's cause, from the server's own progress), appended to the watchdog's reason."""
    prompt_file = events_path.parent / f".{events_path.stem}.prompt"
    prompt_file.write_bytes(prompt.encode("utf-8"))
    result = RunResult(started=time.time())
    watch = _Watch(limits.same_error_limit, limits.same_failed_call_limit)
    guards = [*guards, watch.overflowed]  # a stream past its cap ends the run like any guard
    # stdout and stderr are socketpairs, not pipes: a pipe can be opened again through
    # /proc/<opencode's pid>/fd/1 by a tool running as the same user, and whatever it writes
    # there would read as opencode's own events; a socket cannot be reopened that way (ENXIO).
    (out_ours, out_theirs), (err_ours, err_theirs) = socket.socketpair(), socket.socketpair()
    try:
        with open(prompt_file, "rb") as stdin:
            proc = subprocess.Popen(argv, stdin=stdin, stdout=out_theirs.fileno(), stderr=err_theirs.fileno(),
                                    env=env, cwd=cwd, start_new_session=True)
    finally:
        out_theirs.close()
        err_theirs.close()
        out_ours.shutdown(socket.SHUT_WR)
        err_ours.shutdown(socket.SHUT_WR)
    streams = [out_ours.makefile("rb"), err_ours.makefile("rb")]
    readers = [
        threading.Thread(target=_read_events, args=(streams[0], events_path, result, watch, on_event),
                         daemon=True),
        threading.Thread(target=_read_stderr, args=(streams[1], stderr_path, result, watch), daemon=True),
    ]
    for thread in readers:
        thread.start()
    started = time.monotonic()
    try:
        while proc.poll() is None:
            now = time.monotonic()
            repeated, stuck = watch.repeated_error(), watch.repeated_failed_call()
            if repeated:
                result.ended_by = f"watchdog: the same provider error {limits.same_error_limit} times in a row ({repeated[:120]})"
            elif stuck:
                result.ended_by = (f"watchdog: the same tool call failed {limits.same_failed_call_limit} times in a row "
                                   f"({stuck[:320]})")
            elif now - watch.last_activity > limits.stall_s:
                result.ended_by = f"watchdog: no new opencode event for {limits.stall_s:.0f}s"
                if explain_stall is not None:
                    try:
                        result.ended_by += f"; {explain_stall(limits.stall_s)}"
                    except Exception as exc:  # noqa: BLE001 - the stall ends the run all the same
                        result.ended_by += f"; the server's progress was not readable ({type(exc).__name__})"
            elif now - started > limits.time_cap_s:
                result.ended_by = f"time cap of {limits.time_cap_s:.0f}s reached"
            elif abort is not None and abort.is_set():
                result.ended_by = (abort_reason or ["aborted"])[0]
            else:  # e.g. the sandbox's disk cap: the reason it gives ends the run
                result.ended_by = next((why for guard in guards if (why := guard())), None)
            if result.ended_by:
                result.stopped_at = time.time()
                _end_group(proc)
                break
            time.sleep(POLL_S)
    finally:
        # Ctrl-C, SIGTERM or a crash in here: the run's process group never outlives us.
        if proc.poll() is None:
            result.ended_by = result.ended_by or "interrupted"
            result.stopped_at = result.stopped_at or time.time()
            _end_group(proc)
        else:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # tools the agent left behind
            except ProcessLookupError:
                pass
        for thread in readers:
            thread.join(timeout=5)
        for stream, sock in zip(streams, (out_ours, err_ours)):
            stream.close()
            sock.close()
        prompt_file.unlink(missing_ok=True)
    result.exit_code = proc.returncode
    result.ended = time.time()
    return result
