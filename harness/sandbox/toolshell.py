"""The shell opencode runs the agent's tools with, inside the sandbox (its `shell` setting): it
puts the tool in a Landlock domain of its own, nested in opencode's, then runs `/bin/sh` with
the arguments opencode gave.

Why (issue 60): a tool runs as opencode's user, in opencode's PID namespace, so the kernel's
same-user rules let it open `/proc/<opencode>/mem` read-write and patch opencode's code (a
forged `text` event on opencode's own stdout), read its descriptors through `/proc/<pid>/fd`, or
signal it. Landlock forbids a process to ptrace, or reach through /proc, any process outside its
own domain or a domain nested in it (every ptrace access check: mem, fd, environ, maps), and
from ABI 6 to signal one: opencode sits outside the tools' domain, so no tool, nor anything it
starts (a domain is inherited and never left), can touch it. Nothing else changes for the tool:
the domain handles one filesystem right no tool needs (making a block device).

Standard library only, run by the sandbox's own Python with -I from its shebang (written per
launch: `script(python)`), never imported by the harness's code paths inside the sandbox.
"""

from __future__ import annotations

import ctypes
import os
import sys

SHELL = "/bin/sh"  # the last resort, as opencode's own
_CREATE, _ADD_RULE, _RESTRICT = 444, 445, 446  # landlock_* syscall numbers (the same on x86_64 and aarch64)
_VERSION = 1  # LANDLOCK_CREATE_RULESET_VERSION
_MAKE_BLOCK = 1 << 11  # LANDLOCK_ACCESS_FS_MAKE_BLOCK, handled and granted nowhere
_SCOPE_SIGNAL = 1 << 1  # LANDLOCK_SCOPE_SIGNAL (ABI 6): no signal to a process outside the domain
_PR_SET_NO_NEW_PRIVS = 38


def abi(libc=None) -> int:
    """The kernel's Landlock ABI version (0: none: not built, not enabled, or not this OS)."""
    libc = libc or ctypes.CDLL(None, use_errno=True)
    try:
        got = libc.syscall(_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(_VERSION))
    except (AttributeError, OSError):
        return 0
    return max(int(got), 0)


def enter_own_domain() -> int:
    """Restrict this process (and all it starts) to a Landlock domain of its own; the ABI used.
    Raises OSError where the kernel refuses it."""
    libc = ctypes.CDLL(None, use_errno=True)
    version = abi(libc)
    if version < 1:
        raise OSError("this kernel has no Landlock")
    scoped = _SCOPE_SIGNAL if version >= 6 else 0
    fields = [_MAKE_BLOCK, 0, scoped] if version >= 6 else [_MAKE_BLOCK, 0] if version >= 4 else [_MAKE_BLOCK]
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    fd = libc.syscall(_CREATE, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    try:
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "no_new_privs refused")
        if libc.syscall(_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
    return version


def script(python: str) -> str:
    """This file as the executable opencode runs as its shell: the sandbox's Python, isolated."""
    with open(__file__, encoding="utf-8") as f:
        return f"#!{python} -I\n" + f.read()


def main(argv: list[str]) -> None:
    try:
        enter_own_domain()
    except OSError as exc:
        # Fail closed: a tool never runs beside opencode unconfined.
        sys.stderr.write(f"llms-benchmark: the tool was not run: its sandbox refused it ({exc})\n")
        raise SystemExit(126) from None
    import shutil
    import signal

    # Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec: the tools
    # get the dispositions a shell started by opencode gives them (a write past RLIMIT_FSIZE kills).
    for name in ("SIGPIPE", "SIGXFSZ"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_DFL)
    # The shell opencode picks without a `shell` setting: bash where there is one, else /bin/sh.
    shell = shutil.which("bash") or SHELL
    os.execv(shell, [shell, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
