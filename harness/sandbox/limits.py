"""What bounds the agent: processes, disk, /tmp and memory, and what was hit.

Measured on a 2-core Linux box (kernel 6.x, cgroup v1 in a container) as root and as an
ordinary user; each cap uses what works without privilege, and a cgroup only on top:

- processes: RLIMIT_NPROC, set inside the sandbox's own user namespace (`inside.py`).
  Since Linux 5.14 that count is per (user namespace, uid), so it bounds this sandbox's
  processes alone, whoever launched it; a fork past it fails with EAGAIN.
- one file's size: RLIMIT_FSIZE (a write past it fails with EFBIG / SIGXFSZ).
- /tmp: a tmpfs of `tmp_bytes` (bwrap --size), so it cannot fill the host's memory; /dev/shm
  one of `shm_bytes`; bwrap's root and /dev tmpfs (unsized) remounted read-only.
- the host folders it writes (workspace, opencode data, TMPDIR): no unprivileged quota
  exists for a bind, so a watcher totals their allocated blocks every second and ends the
  run past `disk_bytes`; RLIMIT_FSIZE bounds how far one write can go in between.
- memory: a cgroup where the kernel offers one to us (root with a writable cgroup v1
  memory hierarchy, or a writable cgroup v2 subtree): `memory_bytes` for the whole
  sandbox, its pids controller too. Elsewhere RLIMIT_AS per process (opencode's runtime
  reserves address space lazily: measured fine at 4 GiB); the record says which.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.sandbox import agentfs
from harness.sandbox.peers import pids_in

GiB = 1 << 30
MiB = 1 << 20


@dataclass(frozen=True)
class Caps:
    pids: int = 512
    file_bytes: int = 1 * GiB
    tmp_bytes: int = 512 * MiB
    shm_bytes: int = 64 * MiB  # /dev/shm: a sized tmpfs of its own (bwrap's /dev is otherwise unsized memory)
    disk_bytes: int = 2 * GiB
    memory_bytes: int = 8 * GiB

    def rlimits(self, with_memory: bool) -> str:
        """The inside shim's `--rlimit` argument."""
        parts = [f"nproc={self.pids}", f"fsize={self.file_bytes}"]
        if with_memory:
            parts.append(f"as={self.memory_bytes}")
        return ",".join(parts)


DEFAULT_CAPS = Caps()


# -- cgroups ------------------------------------------------------------------------------
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_path(controller: str) -> str | None:
    """This process's cgroup path in `controller`'s v1 hierarchy ('' for v2's unified one)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, names, path = line.split(":", 2)
        if controller in names.split(",") or (controller == "" and names == ""):
            return path
    return None


@dataclass
class Cgroup:
    """A cgroup (one folder per hierarchy) the sandbox is attached to by `enter.py`."""

    kind: str  # "cgroup v1" or "cgroup v2"
    folders: list[Path] = field(default_factory=list)
    procs: list[Path] = field(default_factory=list)  # the cgroup.procs files enter.py writes its pid to

    def hits(self) -> list[str]:
        """The caps the kernel enforced during the run, for the record's denials."""
        out = []
        for folder in self.folders:
            for name, what in (("memory.failcnt", "memory cap reached"), ("pids.events", "process cap reached"),
                               ("memory.events", "memory cap reached")):
                text = _read(folder / name)
                if not text:
                    continue
                if name == "memory.failcnt" and text.strip() not in ("", "0"):
                    out.append(f"{what} ({self.kind}: {text.strip()} times)")
                elif name.endswith(".events"):
                    counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2)
                    hit = int(counts.get("max", 0)) + int(counts.get("oom_kill", 0))
                    if hit:
                        out.append(f"{what} ({self.kind}: {hit} times)")
        return out

    def remove(self) -> None:
        for folder in reversed(self.folders):
            for _ in range(50):  # bounded: the last processes may take a moment to leave
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    _kill_all(folder)
                    time.sleep(0.1)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _kill_all(folder: Path) -> None:
    import signal

    for pid in _read(folder / "cgroup.procs").split():
        with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


PREFIX = "llms-benchmark-"


def cgroup_name(run: str) -> str:
    """One run's cgroup, named after the launching process so a leftover can be told dead."""
    return f"{PREFIX}{run}-{os.getpid()}"


def _sweep(parent: Path) -> None:
    """A launch that was SIGKILLed leaves its (empty) cgroup behind: removed by the next one."""
    try:
        entries = list(parent.glob(f"{PREFIX}*"))
    except OSError:
        return
    for folder in entries:
        pid = folder.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists() and not _read(folder / "cgroup.procs").split():
            with contextlib.suppress(OSError):
                folder.rmdir()


def make_cgroup(name: str, caps: Caps) -> Cgroup | None:
    """A memory+pids cgroup under this process's own, where the kernel lets us make one; None elsewhere."""
    v1 = _v1(name, caps)
    return v1 if v1 is not None else _v2(name, caps)


def _v1(name: str, caps: Caps) -> Cgroup | None:
    group = Cgroup("cgroup v1")
    limits = {"memory": {"memory.limit_in_bytes": caps.memory_bytes}, "pids": {"pids.max": caps.pids}}
    for controller, files in limits.items():
        own = _own_path(controller)
        base = CGROUP_ROOT / controller
        if own is None or not (base / "cgroup.procs").is_file():
            group.remove()
            return None
        folder = base / own.lstrip("/") / name
        _sweep(folder.parent)
        try:
            folder.mkdir()
            group.folders.append(folder)
            for file, value in files.items():
                (folder / file).write_text(str(value))
        except OSError:
            group.remove()
            return None
        group.procs.append(folder / "cgroup.procs")
    return group


def _v2(name: str, caps: Caps) -> Cgroup | None:
    own = _own_path("")
    if own is None or not (CGROUP_ROOT / "cgroup.controllers").is_file():
        return None
    folder = CGROUP_ROOT / own.lstrip("/") / name
    _sweep(folder.parent)
    group = Cgroup("cgroup v2")
    try:
        folder.mkdir()
        group.folders.append(folder)
        (folder / "memory.max").write_text(str(caps.memory_bytes))
        (folder / "pids.max").write_text(str(caps.pids))
    except OSError:
        group.remove()  # no delegation, or the controllers are not enabled for our subtree
        return None
    group.procs.append(folder / "cgroup.procs")
    return group


# -- the disk watcher ---------------------------------------------------------------------
_MAX_ENTRIES = 200_000
FULL = 1 << 62  # what a tree the watcher cannot total counts as: over any cap


def allocated_bytes(roots: list[Path]) -> int:
    """Blocks allocated under `roots` (a sparse file counts what it holds), walked by directory
    descriptor (links not followed, no PATH_MAX limit); a tree past `_MAX_ENTRIES` entries or
    nested past agentfs's bound counts as full (inodes are disk too)."""
    total = 0
    for root in roots:
        try:
            total += os.lstat(root).st_blocks * 512
            for entry in agentfs.walk(root, max_entries=_MAX_ENTRIES):
                total += entry.st.st_blocks * 512
        except agentfs.Unclean:
            return FULL
        except OSError:
            continue
    return total


def hidden_bytes(netns: int, devices: set[int]) -> int:
    """Blocks held by files no folder names (O_TMPFILE, or deleted while open) on `devices`,
    open in a process of the sandbox's network namespace `netns`: the walk cannot see them."""
    total, seen = 0, set()
    for name in pids_in(netns):
        try:
            fds = os.listdir(f"/proc/{name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                info = os.stat(f"/proc/{name}/fd/{fd}")
            except OSError:
                continue
            key = (info.st_dev, info.st_ino)
            if info.st_nlink == 0 and info.st_dev in devices and key not in seen and stat.S_ISREG(info.st_mode):
                seen.add(key)
                total += info.st_blocks * 512
    return total


class DiskWatch:
    """A guard for the runner: the reason to end the run once the agent's host folders hold
    more than `cap` bytes (checked at most every `every_s`), files open but named nowhere
    included where the sandbox's namespace is known (`netns`: a callable, None until then)."""

    def __init__(self, roots: list[Path], cap: int, every_s: float = 1.0, netns=None) -> None:
        self.roots, self.cap, self.every_s, self.netns = list(roots), cap, every_s, netns
        self._last = 0.0
        self.peak = 0
        self.hit: str | None = None
        self.devices = set()
        for root in self.roots:
            with contextlib.suppress(OSError):
                self.devices.add(os.stat(root).st_dev)

    def __call__(self) -> str | None:
        now = time.monotonic()
        if self.hit or now - self._last < self.every_s:
            return self.hit
        self._last = now
        used = allocated_bytes(self.roots)
        ns = self.netns() if self.netns is not None else None
        if ns is not None and used < FULL:
            used += hidden_bytes(ns, self.devices)
        self.peak = max(self.peak, used)
        if used > self.cap:
            shown = "more than the watcher can total" if used >= FULL else f"{used / GiB:.2f} GiB"
            self.hit = f"disk cap reached: the agent's folders hold {shown}, over the {self.cap / GiB:g} GiB cap"
        return self.hit
