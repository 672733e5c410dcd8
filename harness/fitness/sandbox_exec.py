"""Run untrusted Python (a model's HumanEval completion and its tests) confined.

Linux with bubblewrap: a read-only view of the system with HOME and the project
checkout hidden, a private /tmp, no network (every namespace unshared), dying with
its parent; plus rlimits (address space, CPU seconds, file size) and a wall timeout
that kills the whole process group. Without bwrap the caller refuses (or, only when
told, runs with the rlimits alone and says so).
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MEMORY_BYTES = 2 << 30
FILE_BYTES = 16 << 20


@dataclass(frozen=True)
class Outcome:
    passed: bool
    status: str  # passed | failed | timeout
    detail: str = ""


def confinement() -> str | None:
    """'bwrap' when bubblewrap can run here, else None."""
    return "bwrap" if sys.platform == "linux" and shutil.which("bwrap") else None


def _argv() -> list[str]:
    python = os.path.realpath(sys.executable)
    base = os.path.realpath(sys.base_prefix)
    argv = [shutil.which("bwrap"), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    project = Path(__file__).resolve().parents[2]
    for hidden in {str(Path.home()), str(project)}:
        if hidden and hidden != "/" and os.path.isdir(hidden):
            argv += ["--tmpfs", hidden]
    argv += ["--ro-bind", base, base, "--unshare-all", "--die-with-parent", "--new-session", "--chdir", "/tmp",
             "--setenv", "HOME", "/tmp", python, "-I", "-S", "-"]
    return argv


# Set in a tiny exec shim, never in `preexec_fn`: a forked child of a threaded process (the
# fitness API, a test worker with servers on threads) that runs Python before exec can crash
# on a lock another thread held. Seen: a full parallel test run where every confined item
# exited -11 (SIGSEGV) while the same test alone passed.
_LIMITS_SHIM = ("import os, resource, sys\n"
                "m, c, f = (int(v) for v in sys.argv[1:4])\n"
                "for name, limit in ((resource.RLIMIT_AS, m), (resource.RLIMIT_CPU, c), "
                "(resource.RLIMIT_FSIZE, f), (resource.RLIMIT_CORE, 0)):\n"
                "    resource.setrlimit(name, (limit, limit + 1 if name == resource.RLIMIT_CPU else limit))\n"
                "os.execv(sys.argv[5], sys.argv[5:])\n")


def _limited(argv: list[str], cpu_s: int) -> list[str]:
    """`argv` run under the memory, CPU, file-size and core limits."""
    return [os.path.realpath(sys.executable), "-I", "-S", "-c", _LIMITS_SHIM, str(MEMORY_BYTES), str(cpu_s),
            str(FILE_BYTES), "--", *argv]


def run_python(code: str, timeout_s: float, *, confined: bool = True) -> Outcome:
    """Exit status 0 within the timeout is a pass."""
    if confined:
        argv = _argv()
    else:
        argv = [os.path.realpath(sys.executable), "-I", "-S", "-"]
    cpu = max(1, int(timeout_s) + 1)
    proc = subprocess.Popen(_limited(argv, cpu), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True, env={"PATH": "/usr/bin:/bin"})
    try:
        _, err = proc.communicate(code.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return Outcome(False, "timeout", f"over {timeout_s:g}s")
    if proc.returncode == 0:
        return Outcome(True, "passed")
    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit {proc.returncode}"]
    return Outcome(False, "failed", tail[0][:300])
