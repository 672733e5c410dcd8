"""The seed's retry policy for requests to the served model: a 429 or a transient 5xx (the
answers llama-swap gives while it swaps a model in) is asked again after the wait its
Retry-After says (seconds or an HTTP date), clamped to [min, max]; the default when it says
nothing usable; at most `attempts` tries and `budget_s` seconds of waiting per request.

Every retry is counted in a `Tally` (per phase: the runner gives each phase a fresh one),
with the answers and the empty answers the same phase received (the empty-completion guard).
The sleep is injectable so that tests can bound it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Any, Protocol


class Policy(Protocol):
    attempts: int
    retry_after_min_s: float
    retry_after_max_s: float
    retry_after_default_s: float


def retry_after(header: str | None, cfg: Policy) -> float:
    """Seconds to wait: Retry-After as seconds or an HTTP date, clamped; the default otherwise."""
    wait = None
    if header:
        try:
            wait = float(header)
        except ValueError:
            try:
                wait = parsedate_to_datetime(header).timestamp() - time.time()
            except (TypeError, ValueError):
                wait = None
    if wait is None or wait != wait:  # NaN is not a wait
        wait = cfg.retry_after_default_s
    return min(max(wait, cfg.retry_after_min_s), cfg.retry_after_max_s)


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


class Retrier:
    """Waits between the attempts of one request, within the policy's bounds, counting each."""

    def __init__(self, cfg: Policy, tally: Tally, sleep: Callable[[float], None], budget_s: float) -> None:
        self.cfg, self.tally, self.sleep, self.budget_s = cfg, tally, sleep, budget_s
        self.attempt, self.waited = 1, 0.0

    def again(self, why: str, header: str | None = None) -> bool:
        """Whether to try once more (after sleeping); False once attempts or the budget are spent."""
        wait = retry_after(header, self.cfg)
        if self.attempt >= self.cfg.attempts or self.waited + wait > self.budget_s:
            self.tally.gave_up += 1
            return False
        self.sleep(wait)
        self.waited += wait
        self.attempt += 1
        self.tally.retried(why, wait)
        return True
