"""A SIGINT/SIGTERM reaches the launch's destroy wherever it lands, even inside a library
that catches every exception but an interrupt (CI at stop 57: the signal landed in the probe's
asyncio socket callback, asyncio logged it as "Exception in callback" and the launch ran on)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import pytest

from harness.errors import Interrupted
from harness.run.units import interruptible, raise_if_interrupted


def _signal_inside_a_reader_callback(signum: int) -> None:
    """An event loop whose reader callback is running when the signal arrives."""
    left, right = socket.socketpair()
    done = asyncio.Event()

    def readable() -> None:
        left.recv(16)
        os.kill(os.getpid(), signum)  # the handler runs here, inside asyncio's Handle._run
        for _ in range(1000):  # bytecodes for the handler to run on
            pass
        done.set()

    async def main() -> None:
        asyncio.get_running_loop().add_reader(left.fileno(), readable)
        right.send(b"x")
        await asyncio.wait_for(done.wait(), 5)

    try:
        asyncio.run(main())
    finally:
        left.close()
        right.close()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_an_asyncio_callback_unwinds_out_of_the_loop(signum, capsys):
    with pytest.raises(Interrupted) as caught, interruptible():
        _signal_inside_a_reader_callback(signum)
    assert caught.value.signum == signum
    assert "Exception in callback" not in capsys.readouterr().err


def test_an_interrupt_something_swallowed_is_raised_again_at_the_next_stage():
    with interruptible():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):
                pass
        except BaseException:  # noqa: BLE001 - a library that drops everything
            pass
        with pytest.raises(Interrupted) as caught:
            raise_if_interrupted()
        assert caught.value.signum == signal.SIGTERM


def test_the_latch_is_empty_outside_an_interruptible_block_and_on_entering_one():
    with pytest.raises(Interrupted), interruptible():
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
    raise_if_interrupted()  # the block that took the signal is over: nothing to raise
    with interruptible():
        raise_if_interrupted()
