"""Run inside the sandbox: try what a privileged agent would, print what happened (JSON).

    python -I privcheck.py WRITABLE_DIR READONLY_DIR

Standard library only (ctypes for the calls Python does not wrap). Each probe prints
"refused: <errno name>", "ALLOWED" or "error: ..."; preflight launches only when all are refused, and the
escape tests run the same probes as a scripted agent. What it tries:

- capabilities: CapEff, CapPrm and CapBnd in /proc/self/status must all be zero;
- uid 0: the process must not be root in its namespace, and setuid(0) must fail;
- remount: mount(MS_REMOUNT|MS_BIND) of the read-only folder as read-write;
- file handles: open_by_handle_at on a handle of the writable folder (with
  CAP_DAC_READ_SEARCH a handle reaches any inode of that filesystem, the host's `/` too);
- device nodes: mknod of a character device (a /dev/mem or a disk would follow);
- a nested user namespace (where capabilities would come back).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import sys

MS_REMOUNT, MS_BIND = 32, 4096
CLONE_NEWUSER = 0x10000000
AT_FDCWD = -100


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _result(ret: int) -> str:
    if ret == 0 or ret > 0:
        return "ALLOWED"
    err = ctypes.get_errno()
    return f"refused: {errno.errorcode.get(err, err)}"


def caps() -> str:
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f if line.startswith("Cap"))
    held = {k: v.strip() for k, v in fields.items() if k in ("CapEff", "CapPrm", "CapBnd") and int(v, 16)}
    return f"ALLOWED: {held}" if held else "refused: none held"


def uid0() -> str:
    if os.getuid() == 0 or os.geteuid() == 0:
        return "ALLOWED: uid 0"
    try:
        os.setuid(0)
    except OSError as exc:
        return f"refused: {errno.errorcode.get(exc.errno, exc.errno)}"
    return "ALLOWED: setuid(0)"


def remount(path: str) -> str:
    libc = _libc()
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    return _result(libc.mount(None, path.encode(), None, MS_REMOUNT | MS_BIND, None))


class _Handle(ctypes.Structure):
    _fields_ = [("handle_bytes", ctypes.c_uint), ("handle_type", ctypes.c_int), ("f_handle", ctypes.c_ubyte * 128)]


def file_handle(path: str) -> str:
    libc = _libc()
    handle, mount_id = _Handle(handle_bytes=128), ctypes.c_int()
    if libc.name_to_handle_at(AT_FDCWD, path.encode(), ctypes.byref(handle), ctypes.byref(mount_id), 0) != 0:
        return _result(-1)
    mount_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = libc.open_by_handle_at(mount_fd, ctypes.byref(handle), os.O_RDONLY)
        out = _result(fd)
        if fd >= 0:
            os.close(fd)
        return out
    finally:
        os.close(mount_fd)


def device_node(folder: str) -> str:
    target = os.path.join(folder, ".privcheck-node")
    try:
        os.mknod(target, 0o600 | 0o020000, os.makedev(1, 3))
    except OSError as exc:
        return f"refused: {errno.errorcode.get(exc.errno, exc.errno)}"
    os.unlink(target)
    return "ALLOWED"


def nested_userns() -> str:
    libc = _libc()
    pid = os.fork()
    if pid == 0:  # in a child: a success must not change this process
        os._exit(0 if libc.unshare(CLONE_NEWUSER) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return "ALLOWED" if os.waitstatus_to_exitcode(status) == 0 else "refused: unshare failed"


def probes(writable: str, readonly: str) -> dict[str, str]:
    out = {}
    for name, call in (("capabilities", caps), ("uid 0", uid0), ("remount", lambda: remount(readonly)),
                       ("open_by_handle_at", lambda: file_handle(writable)),
                       ("mknod", lambda: device_node(writable)), ("nested user namespace", nested_userns)):
        try:
            out[name] = call()
        except Exception as exc:  # noqa: BLE001 - a probe that cannot run proves nothing: preflight refuses it
            out[name] = f"error: {type(exc).__name__}: {exc}"
    return out


if __name__ == "__main__":
    print(json.dumps(probes(sys.argv[1], sys.argv[2])))
