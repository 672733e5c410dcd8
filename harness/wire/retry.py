"""The harness's one retry policy for an HTTP request (to a served model, a judge, a webhook,
an address lookup): a retried answer (429, a transient 5xx: what llama-swap says while it
swaps a model in) or a transient failure (a refused connection) is asked again after the
wait its Retry-After says (read by harness/wire/retry_after.py), clamped to [min, max]; the
default when it says nothing usable; at most `attempts` tries and `budget_s` seconds of
waiting. tenacity runs the attempts; this module says the policy. The sleep is injectable
so that tests can bound it; each retry and each give-up can be counted (fitness's `Tally`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import tenacity

from harness.wire.retry_after import seconds


class Policy(Protocol):
    attempts: int
    retry_after_min_s: float
    retry_after_max_s: float
    retry_after_default_s: float


@dataclass(frozen=True)
class Steady:
    """A policy for a server that sends no Retry-After: `attempts` tries, `wait_s` apart."""

    attempts: int
    wait_s: float

    @property
    def retry_after_min_s(self) -> float:
        return self.wait_s

    retry_after_max_s = retry_after_default_s = retry_after_min_s


class Counts(Protocol):
    def retried(self, why: str, wait: float) -> None: ...

    def given_up(self) -> None: ...


def retry_after(header: str | None, cfg: Policy) -> float:
    """Seconds to wait: Retry-After as seconds or an HTTP date, clamped; the default otherwise."""
    wait = seconds(header)
    if wait is None:
        wait = cfg.retry_after_default_s
    return min(max(wait, cfg.retry_after_min_s), cfg.retry_after_max_s)


class Busy(Exception):
    """An answer whose status the policy asks again (429, a transient 5xx); raised inside an
    attempt, and out of the last one with the answer attached."""

    def __init__(self, status: int, header: str | None = None, response: Any = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.header, self.response = status, header, response


class _Retried:
    """429 and every 5xx: what a judge or a webhook asks again (a served model's list is its config's)."""

    def __contains__(self, status: object) -> bool:
        return status == 429 or isinstance(status, int) and status >= 500


RETRIED = _Retried()


class _NotOk:
    """Every status but 200: what a plain lookup (a public-IP service) asks again."""

    def __contains__(self, status: object) -> bool:
        return status != 200


NOT_OK = _NotOk()


def busy(resp: Any, statuses: Container[int]) -> Any:
    """`resp`, unless its status is one the policy asks again: then `Busy`, with its Retry-After."""
    if resp.status_code in statuses:
        raise Busy(resp.status_code, resp.headers.get("Retry-After"), resp)
    return resp


class Retrier:
    """The attempts of one request, within the policy's bounds:

        for attempt in retrier:
            with attempt:
                ...  # raise Busy(status, Retry-After) on a retried status: `busy(resp, statuses)`

    A `Busy`, or an exception `transient` names (it returns the label a retry is counted
    under, e.g. "connect", or None), is asked again; past the last attempt or the wait budget
    it is raised as it was. Anything else is raised at once."""

    def __init__(self, cfg: Policy, sleep: Callable[[float], None], budget_s: float = math.inf, *,
                 transient: Callable[[BaseException], str | None] = lambda exc: None,
                 tally: Counts | None = None) -> None:
        self.cfg, self.budget_s, self.transient, self.tally = cfg, budget_s, transient, tally
        self.attempt, self.waited = 1, 0.0  # the attempt under way; the seconds slept so far
        self._retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda exc: self._why(exc) is not None), wait=self._wait,
            stop=self._stop, sleep=sleep, before_sleep=self._count, retry_error_callback=self._give_up)

    def __iter__(self) -> Iterator[tenacity.AttemptManager]:
        return iter(self._retrying)

    def _why(self, exc: BaseException | None) -> str | None:
        return str(exc.status) if isinstance(exc, Busy) else self.transient(exc)

    def _wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception()
        return retry_after(exc.header if isinstance(exc, Busy) else None, self.cfg)

    def _stop(self, state: tenacity.RetryCallState) -> bool:
        return state.attempt_number >= self.cfg.attempts or self.waited + state.upcoming_sleep > self.budget_s

    def _count(self, state: tenacity.RetryCallState) -> None:
        self.attempt, self.waited = state.attempt_number + 1, self.waited + state.upcoming_sleep
        if self.tally is not None:
            self.tally.retried(self._why(state.outcome.exception()) or "", state.upcoming_sleep)

    def _give_up(self, state: tenacity.RetryCallState) -> Any:
        if self.tally is not None:
            self.tally.given_up()
        return state.outcome.result()  # raises what the last attempt raised
