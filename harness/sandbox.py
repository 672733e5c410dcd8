"""The agent's sandbox: opencode, and every tool it runs, see what the sandbox lists
and nothing else: the system's program folders and a few files of /etc read-only, their
own workspace and private HOME/XDG/TMPDIR read-write, a /tmp of their own.

Hidden: the project checkout (the mission's key, other runs' reports and rulings), the
user's real HOME (cloud credentials, opencode's own auth.json, SSH keys), /opt, /srv,
the rest of /etc, every other path. Readable besides the system: what the agent must
execute (the opencode binary, the Python that runs the mission's tools and the harness
package those tools import), and the provider file. `prove_view` checks this from
outside before anything is served: statically, then by looking from inside.

The network is a namespace of its own (`sandbox_net`): only the served endpoint and the
mission's own loopback ports are forwarded into it; the internet, the cloud metadata
address and every other host port are unreachable.

Linux: bubblewrap (`bwrap`). macOS: `sandbox-exec` with an SBPL profile that denies by
default and allows the same view (see the README for what is and is not enforced
there). Elsewhere, or without the tool, the launch refuses unless `--no-sandbox`.

Denials are counted from the run's own opencode events: a tool call that named a path
hidden from the sandbox (one that exists outside it) and failed, a write the read-only
system refused, or a connection the namespace refused or could not route.
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
from harness.sandbox_net import INSIDE_DIR, Bridge, PortsOnly, forward_argv

# System folders shown read-only (those that exist; a symlink such as /bin → usr/bin
# on merged-/usr systems is recreated as the same symlink). Not /etc or /opt whole: a
# checkout there would show its key; /etc contributes only the files programs need.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = ("/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/hosts",
       "/etc/host.conf", "/etc/nsswitch.conf", "/etc/gai.conf", "/etc/passwd", "/etc/group", "/etc/localtime",
       "/etc/timezone", "/etc/ssl", "/etc/ca-certificates", "/etc/pki", "/etc/protocols", "/etc/services",
       "/etc/mime.types", "/etc/bash.bashrc", "/etc/profile", "/etc/inputrc", "/etc/terminfo", "/etc/os-release",
       "/etc/debian_version", "/etc/locale.alias", "/etc/magic", "/etc/resolv.conf")
SANDBOX_EXEC = "/usr/bin/sandbox-exec"
_DENIED_TEXT = re.compile(r"Read-only file system|Operation not permitted|Permission denied", re.I)
_NET_DENIED = re.compile(r"Connection refused|Network is unreachable|No route to host|Could not resolve host|"
                         r"Name or service not known|Temporary failure in name resolution|ECONNREFUSED|"
                         r"ENETUNREACH|EHOSTUNREACH|Couldn't connect to server|Failed to connect", re.I)
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
    net: Bridge | PortsOnly | None = None  # the agent's own network (its allowed ports); None: the host's

    def visible(self) -> list[Path]:
        # Not /tmp: the sandbox gets an empty one of its own.
        return [Path(p) for p in (*SYSTEM, *ETC, "/dev", "/proc")] + self.writable + self.readable

    def binds(self) -> list[Path]:
        """Every host path the sandbox shows (and the symlinks it recreates)."""
        return [Path(p) for p in (*SYSTEM, *ETC) if os.path.lexists(p)] + self.writable + self.readable


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
                                "--unshare-net", "true"], capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            raise PreflightError(
                f"bubblewrap cannot create a sandbox with its own network here: {probe.stderr.strip()[:200]}",
                field="sandbox",
                fix="allow unprivileged user and network namespaces (sysctl kernel.unprivileged_userns_clone=1; "
                    "in a container, run it with namespaces allowed), or pass --no-sandbox (the run and its "
                    "row are then marked unsandboxed)")
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
    # bwrap starts from an empty tmpfs root: only what is listed here exists inside.
    argv = [tool, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    bridged = isinstance(view.net, Bridge)
    if bridged:
        argv += ["--unshare-net", "--ro-bind", str(view.net.folder), INSIDE_DIR]
    for top in (*SYSTEM, *ETC):
        path = Path(top)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), top]
        elif path.exists():
            argv += ["--ro-bind", top, top]
    for p in view.readable:
        argv += ["--ro-bind", str(p), str(p)]
    for p in view.writable:
        argv += ["--bind", str(p), str(p)]
    return [*argv, "--chdir", str(cwd), "--", *(forward_argv(view.net) if bridged else [])]


def _sbpl_quote(path: Path) -> str:
    return json.dumps(str(path))


# macOS: the system paths a process needs to start and run tools (dyld, frameworks, the
# shells), read-only; everything else is denied by default.
MAC_SYSTEM = ("/usr", "/bin", "/sbin", "/System", "/Library/Apple", "/private/var/db/dyld",
              "/private/var/db/timezone", "/private/etc/hosts", "/private/etc/passwd", "/private/etc/group",
              "/private/etc/ssl", "/private/etc/localtime", "/dev", "/Library/Preferences/Logging")


def sbpl_profile(view: View, home: Path, ports: list[int] | None = None) -> str:
    """macOS: deny by default; read the system paths and the view's readable paths, write
    only the writable ones (and /dev's terminals); no network but loopback on `ports`."""
    lines = ["(version 1)", "(deny default)",
             "(allow process-fork)", "(allow process-exec)", "(allow signal (target same-sandbox))",
             "(allow sysctl-read)", "(allow mach-lookup)", "(allow ipc-posix-shm)", "(allow file-read-metadata)",
             '(allow file-read* (literal "/") (literal "/etc") (literal "/var") (literal "/tmp"))',  # the links
             f"(deny file-read* file-write* (subpath {_sbpl_quote(home)}))"]
    for p in MAC_SYSTEM:
        lines.append(f"(allow file-read* (subpath {_sbpl_quote(Path(p))}))")
    for p in view.readable:
        lines.append(f"(allow file-read* (subpath {_sbpl_quote(p)}))")
    for p in view.writable:
        lines.append(f"(allow file-read* file-write* (subpath {_sbpl_quote(p)}))")
    lines.append('(allow file-write* (literal "/dev/null") (literal "/dev/tty") (regex #"^/dev/ttys[0-9]+$"))')
    if ports is None:
        lines.append("(allow network*)")  # the host's network (a unit not on loopback): on the record
    for port in ports or []:
        lines.append(f'(allow network-outbound (remote tcp "localhost:{port}"))')
    return "\n".join(lines) + "\n"


def wrap(sandbox: Sandbox, argv: list[str], view: View, cwd: Path, profile_dir: Path) -> list[str]:
    """`argv` run inside the sandbox (unchanged with none)."""
    if sandbox.kind == "bwrap":
        return [*_bwrap_argv(sandbox.tool, view, cwd), str(Path(argv[0]).resolve()), *argv[1:]]
    if sandbox.kind == "sandbox-exec":
        profile = profile_dir / "sandbox.sb"
        profile.write_text(sbpl_profile(view, Path.home(), view.net.ports if view.net is not None else None))
        return [sandbox.tool, "-f", str(profile), *argv]
    return argv


# -- the view, proven from outside ---------------------------------------------------------
CREDENTIALS = (".ssh", ".azure", ".aws", ".config", ".local/share/opencode", ".kube", ".docker", ".netrc",
               ".git-credentials", ".gnupg")
_MAX_SIBLINGS = 200  # host entries looked at per folder on the way to a bind
_OWN_MOUNTS = ("/proc", "/dev", "/tmp", "/run")  # the sandbox's own (fresh) mounts, not the host's


def must_stay_hidden(root: Path, run_dir: Path, home: Path) -> dict[str, list[Path]]:
    """What no agent may see, by why: the project root, each mission's key, other runs, the real HOME."""
    runs = run_dir.parent
    others = sorted(p for p in runs.iterdir() if p != run_dir)[:50] if runs.is_dir() else []
    return {
        "the project root": [root],
        "a mission's hidden key": sorted((root / "missions").glob("*/key")),
        "another run": others,
        "the real HOME": [home, *(home / c for c in CREDENTIALS)],
    }


def _exposed_statically(binds: list[Path], hidden: dict[str, list[Path]]) -> list[str]:
    found = []
    for why, paths in hidden.items():
        for path in paths:
            for bind in binds:
                inside_bind = bind == path or bind in path.parents
                bind_inside = why == "a mission's hidden key" and path in bind.parents
                if inside_bind or bind_inside:
                    found.append(f"{why} ({path}) through the bound {bind}")
    return found


def _siblings_of_the_way(binds: list[Path]) -> list[Path]:
    """Host entries in the folders bwrap creates on the way to each bind (/, /work, the
    checkout ...) that lead to no bind: from inside, none of them may exist."""
    on_way = {a for b in binds for a in (b, *b.parents)} | {Path(p) for p in _OWN_MOUNTS}
    out: list[Path] = []
    def shown(path: Path) -> bool:
        return any(b == path or b in path.parents for b in binds)

    for folder in sorted({a for b in binds for a in b.parents}):
        if shown(folder):
            continue  # bound whole: everything in it is meant to be seen
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)[:_MAX_SIBLINGS]
        except OSError:
            continue
        out += [Path(e.path) for e in entries if Path(e.path) not in on_way]
    return out


def prove_view(sandbox: Sandbox, view: View, hidden: dict[str, list[Path]]) -> None:
    """Refuse (PreflightError) unless every hidden path is invisible from inside the sandbox:
    no bind shows it, and looking from inside finds neither it nor anything off the view."""
    if sandbox.kind != "bwrap":
        return  # sandbox-exec: see the README for what is and is not enforced on macOS
    binds = [b.resolve() if b.exists() else b for b in view.binds()] + view.binds()
    fix = ("move the checkout (or the agent's Python, or opencode) out of the system folders the sandbox shows "
           f"({', '.join(SYSTEM)}), or pass --no-sandbox (the run is then marked unsandboxed)")
    if found := _exposed_statically(binds, hidden):
        raise PreflightError(f"the sandbox would show {'; '.join(list(dict.fromkeys(found))[:5])}",
                             field="sandbox", fix=fix)
    # A folder on the way to a bind exists inside as an empty skeleton: its other entries are looked for.
    on_way = {a for b in view.binds() for a in b.parents}
    looked = [*(p for paths in hidden.values() for p in paths if p not in on_way), *_siblings_of_the_way(view.binds())]
    script = 'for p do if [ -e "$p" ] || [ -L "$p" ]; then echo "$p"; fi; done'
    argv = wrap(sandbox, ["/bin/sh", "-c", script, "sh", *map(str, looked)], view, view.writable[0], view.writable[0])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    seen = [line for line in done.stdout.splitlines() if line]
    if done.returncode != 0 or seen:
        what = f"it shows {', '.join(seen[:8])}" if seen else f"the check failed: {done.stderr.strip()[:200]}"
        raise PreflightError(f"the agent's sandbox is not tight: {what}", field="sandbox", fix=fix)


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
        failed = state.get("status") == "error" or bool(_FAILED_TEXT.search(text) or _NET_DENIED.search(text))
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
        elif view.net is not None and (net := _NET_DENIED.search(text)):
            denied.append(f"{part.get('tool')}: network: {net.group(0)}")
    return len(denied), denied
