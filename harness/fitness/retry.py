"""What one phase's requests to the served model met, counted in a `Tally` (the runner gives
each phase a fresh one): every retry the one policy made (harness/wire/retry.py), the
requests it gave up on, and the answers and empty answers the phase received (the
empty-completion guard).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Tally:
    """What one phase's requests to the served model met."""

    retries: int = 0
    waited_s: float = 0.0
    by_status: dict[str, int] = field(default_factory=dict)  # "429", "503", "connect" -> retries
    gave_up: int = 0  # requests that still failed after the last attempt (or the wait budget)
    answers: int = 0  # completions received (chat, stream)
    empty: int = 0  # ... with no content and no tool call

    def retried(self, why: str, wait: float) -> None:
        self.retries += 1
        self.waited_s += wait
        self.by_status[why] = self.by_status.get(why, 0) + 1

    def answered(self, empty: bool) -> None:
        self.answers += 1
        self.empty += bool(empty)

    def doc(self) -> dict[str, Any]:
        return {"retries": self.retries, "waited_s": round(self.waited_s, 3), "by_status": dict(self.by_status),
                "gave_up": self.gave_up, "answers": self.answers, "empty": self.empty}

    def given_up(self) -> None:
        self.gave_up += 1
