"""Why a served unit died on its own: its exit status or signal, a cause a person can act
on, and the last lines of its log, for the message and the run record."""

from __future__ import annotations

import re
import signal

from pydantic import BaseModel, Field

TAIL_LINES = 15
_MISSING_LIB = re.compile(r"error while loading shared libraries: (?P<lib>\S+?):")
_OOM = re.compile(r"out of memory|failed to allocate|std::bad_alloc|cannot allocate memory", re.I)


class UnitDeath(BaseModel):
    exit_code: int | None = None  # the process's own status (None: killed by a signal, or unknown)
    signal: str | None = None  # e.g. "SIGILL"
    cause: str
    log_tail: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        how = (f"killed by {self.signal}" if self.signal else
               f"exited with status {self.exit_code}" if self.exit_code is not None else "exited")
        return f"{how}: {self.cause}"


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def explain(returncode: int | None, log_text: str) -> UnitDeath:
    """`returncode` as subprocess reports it: negative for a signal, None when unknown."""
    lines = [line for line in log_text.splitlines() if line.strip()]
    tail = lines[-TAIL_LINES:]
    sig = _signal_name(returncode) if returncode is not None and returncode < 0 else None
    code = returncode if returncode is not None and returncode >= 0 else None
    missing = _MISSING_LIB.search(log_text)
    if sig == "SIGILL":
        cause = ("illegal instruction: the server was built for CPU features this machine lacks "
                 "(a -march=native / GGML_NATIVE build from another CPU); rebuild it portable with "
                 "`make setup` (LLMS_BENCHMARK_LLAMA_BUILD=portable or dispatch)")
    elif sig == "SIGKILL":
        cause = ("killed from outside, most often by the kernel's out-of-memory killer (see `dmesg`); "
                 "serve a smaller model or a shorter --max-model-len, or free memory")
    elif missing:
        cause = (f"a shared library is missing: {missing['lib']}; reinstall the server (`make setup`) "
                 "or install the library")
    elif code == 127:
        cause = "the server's binary or one of its libraries was not found; reinstall it (`make setup`)"
    elif sig in ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE"):
        cause = "the server crashed" + (" (out of memory, by its log)" if _OOM.search(log_text) else "") + \
            "; its log's last lines say where"
    elif _OOM.search(log_text):
        cause = "the server ran out of memory, by its log; serve a smaller model or a shorter --max-model-len"
    elif sig:
        cause = f"ended by {sig} from outside the launch"
    elif code == 0:
        cause = "the server exited by itself without an error status; its log's last lines say why"
    else:
        cause = "the server failed; its log's last lines say why"
    return UnitDeath(exit_code=code, signal=sig, cause=cause, log_tail=tail)
