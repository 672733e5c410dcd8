"""What the sandbox refused the agent, for the record: counted from the run's own opencode
events (a tool call that failed on a hidden path, a read-only one, a privileged call, a cap
or the network) and from the caps' own counters (the cgroup's, the disk watcher's).

A hidden path is judged from the sandbox's own view alone: a failed call naming an absolute
path outside what the sandbox shows. The host is never asked whether the agent's paths exist
there (the record would list which hidden host paths exist: 8 of 318 probed, once); so a
path the model made up counts as well, as the sandbox hid it just the same. The names come
from the agent: escaped, cut short and few per call before they reach the record."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from harness.sandbox.confine import View
from harness.sandbox.untrusted import escape_name

_DENIED_TEXT = re.compile(r"Read-only file system|Operation not permitted|Permission denied", re.I)
_NET_DENIED = re.compile(r"Connection refused|Network is unreachable|No route to host|Could not resolve host|"
                         r"Name or service not known|Temporary failure in name resolution|ECONNREFUSED|"
                         r"ENETUNREACH|EHOSTUNREACH|Couldn't connect to server|Failed to connect", re.I)
# The caps and the missing privileges, by what a shell or Python says when they refuse.
_CAPS = [(re.compile(p, re.I), label) for p, label in (
    (r"must be superuser|permission denied \(are you root\?\)|mount\(2\) system call failed", "mount refused"),
    (r"File too large|File size limit exceeded|EFBIG", "file size cap"),
    (r"Resource temporarily unavailable|fork: retry|Cannot fork|EAGAIN", "process cap"),
    (r"No space left on device|ENOSPC", "tmp cap"),
    (r"Invalid cross-device link|EXDEV", "link refused"),
    (r"Cannot allocate memory|MemoryError|ENOMEM|out of memory", "memory cap"),
)]
_FAILED_TEXT = re.compile(r"No such file|not found|does not exist|ENOENT|cannot access|can't open|" +
                          _DENIED_TEXT.pattern + "|" + "|".join(c.pattern for c, _ in _CAPS), re.I)
# An absolute path: not inside a word, nor a URL's `//host/...` (a hidden path is judged by
# name alone, so a URL's host must not read as one).
_ABS_PATH = re.compile(r"(?<![\w.~$:/-])(/[A-Za-z0-9._@+-][^\s'\"|;&<>()`]*)")


_TEXT_CAP = 64 << 10  # characters of a tool's output or command read for what it names
_NAME_CAP, _NAMES_PER_CALL = 160, 3


def _shown(text: str, cap: int) -> str:
    """The agent's text as the record may hold it: control characters escaped, cut at `cap`."""
    return escape_name(text[:cap]) + ("…" if len(text) > cap else "")


# -- denials ------------------------------------------------------------------------------
def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def _named_paths(tool: str, state_input: dict, cwd: Path) -> list[Path]:
    found = []
    for key in ("filePath", "path", "file_path"):
        value = state_input.get(key)
        if isinstance(value, str) and value:
            found.append(Path(value) if value.startswith("/") else cwd / value)
    command = state_input.get("command")
    if tool == "bash" and isinstance(command, str):
        found += [Path(m) for m in _ABS_PATH.findall(command[:_TEXT_CAP])]
    return found


def _lines(events: Path, cap: int = 64 << 20):
    """The events file's lines, streamed, no more than `cap` bytes of it."""
    try:
        with open(events, "rb") as f:
            read = 0
            for raw in f:
                read += len(raw)
                if read > cap:
                    return
                yield raw.decode("utf-8", "replace")
    except OSError:
        return


def count_denials(events: Path, view: View, cwd: Path, hits: list[str] | tuple = ()) -> tuple[int, list[str]]:
    """(denials, what was denied): tool calls that failed on a path hidden by the sandbox
    (it exists outside), on a write the read-only system refused, on a missing privilege or
    a cap; then each cap the kernel or the watcher enforced (`hits`)."""
    visible = [p.resolve() if p.exists() else p for p in view.visible()]
    denied: list[str] = []
    for line in _lines(events):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("type") != "tool_use":
            continue
        part = event.get("part") or {}
        state = part.get("state") or {}
        text = " ".join(str(state.get(k) or "")[:_TEXT_CAP] for k in ("output", "error"))
        failed = state.get("status") == "error" or bool(_FAILED_TEXT.search(text) or _NET_DENIED.search(text))
        if not failed:
            continue
        tool = part.get("tool")
        named = _named_paths(str(tool), state.get("input") or {}, cwd)
        named += [Path(m) for m in _ABS_PATH.findall(text)]  # a script's failures name what it tried
        hidden = []
        for path in named:
            absolute = str(Path(os.path.normpath(path))).rstrip(":")
            if absolute not in hidden and not _inside(Path(absolute), visible):
                hidden.append(absolute)
        tool = _shown(str(tool), 40)
        shown = [_shown(p, _NAME_CAP) for p in hidden[:_NAMES_PER_CALL]]
        more = f" and {len(hidden) - _NAMES_PER_CALL} more" if len(hidden) > _NAMES_PER_CALL else ""
        found = [f"{tool}: {', '.join(shown)}{more}"] if hidden else []
        found += [f"{tool}: {label}: {m.group(0)}" for c, label in _CAPS if (m := c.search(text))]
        if not hidden:
            found += [f"{tool}: {m}" for m in dict.fromkeys(x.group(0) for x in _DENIED_TEXT.finditer(text))]
        if not found and view.net is not None and (net := _NET_DENIED.search(text)):
            found.append(f"{tool}: network: {net.group(0)}")
        denied += found
    denied += [f"sandbox: {hit}" for hit in hits]
    return len(denied), denied
