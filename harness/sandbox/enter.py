"""Outside the sandbox, the last step before bwrap: join the run's cgroup, drop root, exec.

    python -I enter.py [--cgroup PROCS_FILE]... [--uid UID --gid GID [--stage DIR]] -- bwrap ARGS...

Standard library only (ctypes for mount), run by file path, as the launcher. It writes
its own pid into each cgroup.procs file while it is still root, so bwrap and everything
the agent starts are born inside the cgroup (no window where a fork escapes it); then it
sheds every supplementary group, the gid and the uid, and execs bwrap as that
unprivileged user, which makes its own user namespace with no capability.

`--stage DIR`: bwrap, now unprivileged, must walk to each folder it binds, and a checkout
or a Python under /root (0700) is out of an unprivileged user's reach. So, still root and
in a mount namespace of its own (nothing is seen on the host), enter.py mounts a tmpfs on
DIR and bind-mounts there each bound source the agent user could not reach, then points
bwrap's `--bind`/`--ro-bind` at those; what the agent sees inside is unchanged.
"""

from __future__ import annotations

import ctypes
import os
import stat
import sys

CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV = 4096, 16384, 1 << 18, 2, 4
_BINDS = ("--bind", "--ro-bind")


def _reachable(path: str, uid: int, gid: int) -> bool:
    """Can `uid`/`gid` (no supplementary group) search every folder above `path`?"""
    parent = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            info = os.stat(parent)
        except OSError:
            return False
        bit = stat.S_IXUSR if info.st_uid == uid else stat.S_IXGRP if info.st_gid == gid else stat.S_IXOTH
        if not info.st_mode & bit:
            return False
        if parent == "/":
            return True
        parent = os.path.dirname(parent)


def _mount(libc, source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    if libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)) != 0:
        err = ctypes.get_errno()
        raise SystemExit(f"enter.py: mount {source} on {target}: {os.strerror(err)}")


def stage(bwrap: list[str], folder: str, uid: int, gid: int) -> list[str]:
    """`bwrap` with every bind source `uid` cannot reach replaced by a staged bind of it."""
    end = bwrap.index("--", 1) if "--" in bwrap[1:] else len(bwrap)  # bwrap's own options only
    todo = [i for i, arg in enumerate(bwrap[:end - 2]) if arg in _BINDS and not _reachable(bwrap[i + 1], uid, gid)]
    if not todo:
        return bwrap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    if libc.unshare(CLONE_NEWNS) != 0:
        raise SystemExit(f"enter.py: unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}")
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None)  # nothing below propagates to the host
    _mount(libc, "tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    out = list(bwrap)
    for n, i in enumerate(todo):
        source = bwrap[i + 1]
        point = os.path.join(folder, str(n))
        if os.path.isdir(source):
            os.mkdir(point, 0o755)
        else:
            os.close(os.open(point, os.O_CREAT | os.O_WRONLY, 0o644))
        _mount(libc, source, point, None, MS_BIND | MS_REC, None)
        out[i + 1] = point
    return out


def main(argv: list[str]) -> None:
    procs: list[str] = []
    uid = gid = folder = None
    while argv and argv[0] != "--":
        flag, value, *argv = argv
        if flag == "--cgroup":
            procs.append(value)
        elif flag == "--uid":
            uid = int(value)
        elif flag == "--gid":
            gid = int(value)
        elif flag == "--stage":
            folder = value
        else:
            raise SystemExit(f"enter.py: unknown flag {flag}")
    if not argv or argv[0] != "--" or len(argv) < 2:
        raise SystemExit("usage: enter.py [--cgroup FILE]... [--uid UID --gid GID [--stage DIR]] -- COMMAND...")
    command = argv[1:]
    for path in procs:
        with open(path, "w") as f:
            f.write(str(os.getpid()))
    if uid is not None:
        gid = uid if gid is None else gid
        if folder is not None:
            command = stage(command, folder, uid, gid)
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        if 0 in (os.getuid(), os.geteuid(), *os.getresuid()):
            raise SystemExit("enter.py: root could not be dropped")
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
