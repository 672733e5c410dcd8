"""An asyncio loop whose timers fire to the microsecond, for the timed replay server's
token schedule: epoll's own timeout is whole milliseconds."""

from __future__ import annotations

import asyncio
import select
import selectors


class PreciseEpollSelector(selectors.EpollSelector):
    """epoll for readiness, select() on the epoll fd for a microsecond-precise timeout.

    epoll_wait() takes whole milliseconds (Python rounds up), so asyncio timers on the
    default selector fire up to 1 ms late; select() takes microseconds, and an epoll
    fd is itself pollable, so waiting on it and then harvesting with a zero timeout
    keeps epoll's scaling and gains a precise wake-up.
    """

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None or timeout > 0:
            select.select([self._selector.fileno()], [], [], timeout)
        return super().select(0)


def precise_loop() -> asyncio.AbstractEventLoop:
    return asyncio.SelectorEventLoop(PreciseEpollSelector())


async def sleep_until(loop: asyncio.AbstractEventLoop, deadline: float) -> None:
    """Sleep until the loop's clock reads `deadline` (an absolute time, not a delay)."""
    if deadline <= loop.time():
        return
    fut = loop.create_future()
    handle = loop.call_at(deadline, _wake, fut)
    try:
        await fut
    finally:
        handle.cancel()


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)
