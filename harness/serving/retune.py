"""Choose llama.cpp's threads again while the mission runs, when the box changes under it.

Fed each pace reading (harness/serving/pace.py). When the threads the free cores call for
differ from those serving for `confirm` readings in a row (longer before adding threads than
before removing them: a collapse costs more than a slower idle), and the server holds no
request, the stack serves again with the new threads, its slot's KV cache saved and
restored (LlamaCppStack.retune). Bounded: at most `max_retunes` per run.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.serving.pace import Reading
from harness.stacks import cpu_threads


class Retuner:
    def __init__(self, stack, unit, env, preset, say: Callable[[str], None], *,
                 confirm_down: int = 2, confirm_up: int = 6, max_retunes: int = 4) -> None:
        self.stack, self.unit, self.env, self.preset, self.say = stack, unit, env, preset, say
        self.confirm_down, self.confirm_up, self.max_retunes = confirm_down, confirm_up, max_retunes
        self.streak = 0
        self.done: list[dict] = []

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
        needed = self.confirm_down if choice.threads < current.threads else self.confirm_up
        if self.streak < needed or (reading.running or 0) > 0:
            return
        self.streak = 0
        try:
            new = self.stack.retune(self.unit, self.env, self.preset, choice)
        except Exception as exc:  # noqa: BLE001 - the unit-death watch reports a server that did not come back
            self.say(f"server: serving again with {choice.threads} threads failed: {exc}")
            return
        if new is not None:
            self.done.append(new.as_record())
            self.say(f"server: threads {current.threads} -> {new.threads}: {new.why}")
