"""Choose llama.cpp's threads again while the mission runs, when the box changes under it.

Fed each pace reading (harness/serving/pace.py), whose `busy_others` is what other processes
*want* (run-queue demand, harness/stacks/cpu_threads.py), not what our spinning threads leave
them. When the threads the free cores call for differ from those serving for `confirm`
readings in a row (longer before adding threads than before removing them: a collapse costs
more than a slower idle), the stack serves again with the new threads, its slot's KV cache
saved and restored (LlamaCppStack.retune).

A request in flight does not wait it out (issue 62: a request decoding at 0.4 tok/s holds the
slot for minutes, so the idle moment never came): going down, the sandbox's bridge holds new
model connections, cuts the one in flight (the server cancels it and its slot's cache, prompt
and answer so far, is saved), the server is served again, and the bridge lets the connections
through; opencode sends the cut call again on its own (it retries a dropped stream), and the
restored cache spares its prefill. Going up (the box freed) is never worth a cut: it waits for
an idle slot. Without a bridge (`--no-sandbox`) there is nothing to cut: it waits, and the
timeline says it was held. Bounded: at most `max_retunes` a run, `min_gap_s` apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from harness.serving.pace import Reading
from harness.stacks import cpu_threads

IDLE_WAIT_S = 15.0  # after a cut, the longest wait for the server to let the request go


class Retuner:
    def __init__(self, stack, unit, env, preset, say: Callable[[str], None], *,
                 confirm_down: int = 2, confirm_up: int = 6, max_retunes: int = 4, min_gap_s: float = 60.0,
                 net=None, running: Callable[[], float | None] | None = None) -> None:
        self.stack, self.unit, self.env, self.preset, self.say = stack, unit, env, preset, say
        self.confirm_down, self.confirm_up, self.max_retunes = confirm_down, confirm_up, max_retunes
        self.min_gap_s = min_gap_s
        self.net = net  # the sandbox's Bridge (hold, cut, release), or None
        self.running = running  # requests the server holds now (its /metrics), for the wait after a cut
        self.pace = None  # the PaceMonitor, for the timeline's notes (set once both exist)
        self.streak = 0
        self.done: list[dict] = []
        self.cuts = 0
        self._last = float("-inf")
        self._held_said = False

    def _note(self, event: dict) -> None:
        if self.pace is not None:
            self.pace.note(event)

    def __call__(self, reading: Reading) -> None:
        current = getattr(self.stack, "threads_now", None)
        if current is None or reading.busy_others is None or len(self.done) >= self.max_retunes:
            return
        usable, source = cpu_threads.usable_cores()
        choice = cpu_threads.choose(usable, reading.busy_others, source)
        if choice.threads == current.threads:
            self.streak = 0
            return
        self.streak += 1
        down = choice.threads < current.threads
        if self.streak < (self.confirm_down if down else self.confirm_up):
            return
        if time.monotonic() - self._last < self.min_gap_s:
            return
        busy = (reading.running or 0) > 0
        if busy and (not down or self.net is None):
            if down and not self._held_said:
                self._held_said = True
                self._note({"held": f"{current.threads} -> {choice.threads} waits for an idle slot: no bridge to cut "
                                    "the request in flight (--no-sandbox)"})
            return
        self.streak = 0
        self._serve_again(current, choice, cut=busy)

    def _serve_again(self, current, choice, cut: bool) -> None:
        self._last = time.monotonic()
        if cut:
            self.net.hold()
        try:
            if cut:
                self.cuts += self.net.cut()
                self._wait_idle()
            try:
                new = self.stack.retune(self.unit, self.env, self.preset, choice)
            except Exception as exc:  # noqa: BLE001 - the unit-death watch reports a server that did not come back
                self.say(f"server: serving again with {choice.threads} threads failed: {exc}")
                self._note({"retune_failed": f"{current.threads} -> {choice.threads}: {type(exc).__name__}"})
                return
        finally:
            if cut:
                self.net.release()
        if new is not None:
            self.done.append(new.as_record())
            how = " (the request in flight cut and sent again)" if cut else ""
            self.say(f"server: threads {current.threads} -> {new.threads}{how}: {new.why}")
            self._note({"retune": f"{current.threads} -> {new.threads}", "cut": cut, "why": new.why})

    def _wait_idle(self) -> None:
        """The server cancels a request whose connection closed at its next token: its slot is
        free (and its cache saveable) once /metrics shows nothing running."""
        if self.running is None:
            return
        deadline = time.monotonic() + IDLE_WAIT_S
        while time.monotonic() < deadline:
            try:
                if not (self.running() or 0):
                    return
            except Exception:  # noqa: BLE001 - a server that does not answer: the retune restarts it anyway
                return
            time.sleep(0.2)
