"""The agent's sandbox: opencode, and every tool it runs, see the system read-only, their
own workspace and private HOME/XDG/TMPDIR read-write, and nothing else.

Hidden: the project checkout (the mission's key, other runs' reports and rulings), the
user's real HOME (cloud credentials, opencode's own auth.json, SSH keys), every other
path. Readable besides the system: what the agent must execute (the opencode binary,
the Python that runs the mission's tools and the harness package those tools import),
and the provider file. The network namespace is shared, so the served endpoint and the
mission's stack stay reachable on loopback.

Linux: bubblewrap (`bwrap`). macOS: `sandbox-exec` with the same rules as an SBPL
profile. Elsewhere, or without the tool, the launch refuses unless `--no-sandbox`.

Denials are counted from the run's own opencode events: a tool call that named a path
hidden from the sandbox (one that exists outside it) and failed, or any write the
read-only system refused.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import PreflightError

# System folders shown read-only (those that exist; a symlink such as /bin → usr/bin
# on merged-/usr systems is recreated as the same symlink).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
SANDBOX_EXEC = "/usr/bin/sandbox-exec"
_DENIED_TEXT = re.compile(r"Read-only file system|Operation not permitted|Permission denied", re.I)
_FAILED_TEXT = re.compile(r"No such file|not found|does not exist|ENOENT|cannot access|can't open|" +
                          _DENIED_TEXT.pattern, re.I)
_ABS_PATH = re.compile(r"(?<![\w.~$-])(/[A-Za-z0-9._@+-][^\s'\"|;&<>()`]*)")


@dataclass(frozen=True)
class Sandbox:
    kind: str  # "bwrap", "sandbox-exec" or "none"
    tool: str | None = None

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


@dataclass
class View:
    """What a sandboxed agent sees besides the system."""

    writable: list[Path]
    readable: list[Path] = field(default_factory=list)

    def visible(self) -> list[Path]:
        # Not /tmp: the sandbox gets an empty one of its own.
        return [Path(p) for p in (*SYSTEM, "/dev", "/proc")] + self.writable + self.readable


def detect(no_sandbox: bool, system: str | None = None) -> Sandbox:
    """The sandbox this machine offers, checked before anything bills."""
    if no_sandbox:
        return Sandbox("none")
    system = system or platform.system()
    if system == "Linux":
        tool = shutil.which("bwrap")
        if tool is None:
            raise PreflightError(
                "bubblewrap (bwrap) is not installed: the agent cannot be sandboxed",
                field="sandbox",
                fix="install it (Debian/Ubuntu: apt-get install bubblewrap), or pass --no-sandbox "
                    "(the run record and its results row are then marked unsandboxed)")
        probe = subprocess.run([tool, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--unshare-pid",
                                "true"], capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            raise PreflightError(
                f"bubblewrap cannot create a sandbox here: {probe.stderr.strip()[:200]}",
                field="sandbox",
                fix="allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1), "
                    "or pass --no-sandbox (the run and its row are then marked unsandboxed)")
        return Sandbox("bwrap", tool)
    if system == "Darwin":
        if not Path(SANDBOX_EXEC).is_file():
            raise PreflightError("sandbox-exec is missing: the agent cannot be sandboxed", field="sandbox",
                                 fix="pass --no-sandbox (the run and its row are then marked unsandboxed)")
        return Sandbox("sandbox-exec", SANDBOX_EXEC)
    raise PreflightError(f"no sandbox for the agent on {system}", field="sandbox",
                         fix="pass --no-sandbox (the run and its row are then marked unsandboxed)")


def agent_view(writable: list[Path], binary: Path, extra_readable: list[Path]) -> View:
    """The agent's view: its writable folders; the opencode binary's folder, this Python
    (the mission's tools run on it) and the harness package they import, read-only."""
    import harness

    readable = [Path(binary).resolve().parent, Path(sys.base_prefix).resolve(), Path(sys.prefix),
                Path(harness.__file__).resolve().parent, *extra_readable]
    out: list[Path] = []
    for p in readable:
        p = Path(p)
        if p.exists() and p not in out and not any(p == w or w in p.parents for w in writable):
            out.append(p)
    return View(writable=[Path(w) for w in writable], readable=out)


def _bwrap_argv(tool: str, view: View, cwd: Path) -> list[str]:
    argv = [tool, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for top in SYSTEM:
        path = Path(top)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            argv += ["--ro-bind", top, top]
    for p in view.readable:
        argv += ["--ro-bind", str(p), str(p)]
    for p in view.writable:
        argv += ["--bind", str(p), str(p)]
    return [*argv, "--chdir", str(cwd), "--"]


def _sbpl_quote(path: Path) -> str:
    return json.dumps(str(path))


def sbpl_profile(view: View, home: Path) -> str:
    """macOS: read the system and the readable paths, write only the writable ones; the
    user's real HOME and everything else is denied (network allowed, for loopback)."""
    lines = ["(version 1)", "(allow default)",
             f"(deny file-read* file-write* (subpath {_sbpl_quote(home)}))",
             '(deny file-write* (subpath "/"))']
    for p in view.readable:
        lines.append(f"(allow file-read* (subpath {_sbpl_quote(p)}))")
    for p in view.writable:
        lines.append(f"(allow file-read* file-write* (subpath {_sbpl_quote(p)}))")
    lines.append('(allow file-write* (subpath "/dev"))')
    return "\n".join(lines) + "\n"


def wrap(sandbox: Sandbox, argv: list[str], view: View, cwd: Path, profile_dir: Path) -> list[str]:
    """`argv` run inside the sandbox (unchanged with none)."""
    if sandbox.kind == "bwrap":
        return [*_bwrap_argv(sandbox.tool, view, cwd), str(Path(argv[0]).resolve()), *argv[1:]]
    if sandbox.kind == "sandbox-exec":
        profile = profile_dir / "sandbox.sb"
        profile.write_text(sbpl_profile(view, Path.home()))
        return [sandbox.tool, "-f", str(profile), *argv]
    return argv


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
        found += [Path(m) for m in _ABS_PATH.findall(command)]
    return found


def count_denials(events: Path, view: View, cwd: Path) -> tuple[int, list[str]]:
    """(denials, what was denied): tool calls that failed on a path hidden by the sandbox
    (it exists outside) or on a write the read-only system refused."""
    visible = [p.resolve() if p.exists() else p for p in view.visible()]
    denied: list[str] = []
    try:
        lines = events.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return 0, []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or event.get("type") != "tool_use":
            continue
        part = event.get("part") or {}
        state = part.get("state") or {}
        text = " ".join(str(state.get(k) or "") for k in ("output", "error"))
        failed = state.get("status") == "error" or bool(_FAILED_TEXT.search(text))
        if not failed:
            continue
        hidden = []
        for path in _named_paths(str(part.get("tool")), state.get("input") or {}, cwd):
            absolute = Path(os.path.normpath(path))
            if not _inside(absolute, visible) and os.path.lexists(absolute):
                hidden.append(str(absolute))
        if hidden:
            denied.append(f"{part.get('tool')}: {', '.join(hidden)}")
        elif _DENIED_TEXT.search(text):
            denied.append(f"{part.get('tool')}: {_DENIED_TEXT.search(text).group(0)}")
    return len(denied), denied
