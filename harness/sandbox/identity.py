"""Who the agent is on the host: never the launcher's root.

Launched by root (CI, most GPU boxes), the harness starts the sandbox as an unprivileged
host user (`LLMS_BENCHMARK_AGENT_UID`/`_GID`, default 65534, nobody/nogroup): bwrap then
runs unprivileged, in a user namespace of its own, with every capability dropped. So a
breakout through the kernel's file-handle or mount interfaces meets the rights of nobody,
not of root. Launched by an ordinary user, the agent keeps that user's uid, in the same
kind of namespace with no capability.

The folders the agent must write (its workspace, its opencode data, its TMPDIR, the
network bridge's sockets) are handed to that user before the run and taken back after it,
links never followed: the run folder stays the launcher's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from harness.errors import PreflightError
from harness.sandbox import agentfs

NOBODY = 65534
UID_VAR, GID_VAR = "LLMS_BENCHMARK_AGENT_UID", "LLMS_BENCHMARK_AGENT_GID"


@dataclass(frozen=True)
class AgentIdentity:
    """The host uid/gid the sandbox runs as; `drop` when that is not the launcher's own."""

    uid: int
    gid: int
    drop: bool

    @property
    def describe(self) -> str:
        how = "dropped from root" if self.drop else "the launcher's own"
        return f"uid {self.uid} gid {self.gid} ({how}), own user namespace, no capabilities"


def _id_from(var: str, default: int) -> int:
    raw = os.environ.get(var)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value <= 0 or value >= 2**32 - 1:
        raise PreflightError(f"{var}={raw!r} is not an unprivileged numeric id", field=var,
                             fix=f"set {var} to a numeric id other than 0 (default {NOBODY}), or unset it")
    return value


def agent_identity() -> AgentIdentity:
    if os.geteuid() != 0:
        return AgentIdentity(os.geteuid(), os.getegid(), drop=False)
    return AgentIdentity(_id_from(UID_VAR, NOBODY), _id_from(GID_VAR, NOBODY), drop=True)


def hand_over(paths: Iterable[Path], who: AgentIdentity) -> None:
    """The agent's writable folders become the agent user's (nothing to do without a drop)."""
    if who.drop:
        for path in paths:
            if os.path.lexists(path):
                agentfs.chown_tree(Path(path), who.uid, who.gid)


def take_back(paths: Iterable[Path], who: AgentIdentity) -> dict[Path, str]:
    """After the run (every agent process gone): the folders are the launcher's again, walked by
    descriptor (no link followed, any path length). The folders that could not be walked whole
    (too deep, too many entries), each with why: the caller fails closed on them."""
    unclean: dict[Path, str] = {}
    if who.drop:
        for path in map(Path, paths):
            if not os.path.lexists(path):
                continue
            try:
                agentfs.chown_tree(path, os.geteuid(), os.getegid())
            except agentfs.Unclean as exc:
                unclean[path] = str(exc)
            except OSError as exc:  # its text would name the agent's file (the raw key in a name): its kind only
                unclean[path] = f"its hand-back failed ({exc.strerror})"
    return unclean
