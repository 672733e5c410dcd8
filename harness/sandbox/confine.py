"""The agent's sandbox: opencode, and every tool it runs, see what the sandbox lists
and nothing else: the system's program folders and a few files of /etc read-only, their
own workspace and private HOME/XDG/TMPDIR read-write, a /tmp of their own.

Hidden: the project checkout (the mission's key, other runs' reports and rulings), the
user's real HOME (cloud credentials, opencode's own auth.json, SSH keys), /opt, /srv,
the rest of /etc, every other path. Readable besides the system: what the agent must
execute (the opencode binary, the Python that runs the mission's tools and the harness
package those tools import), and the provider file. `prove_view` checks this from
outside before anything is served: statically, then by looking from inside.

The network is a namespace of its own (`net.py`): only the served endpoint and the
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
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import PreflightError
from harness.sandbox.identity import AgentIdentity, agent_identity
from harness.sandbox.limits import DEFAULT_CAPS, Caps, Cgroup
from harness.sandbox.net import INSIDE_DIR, Bridge, PortsOnly

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
    who: AgentIdentity = field(default_factory=agent_identity)  # the host user the sandbox runs as
    caps: Caps = DEFAULT_CAPS
    cgroup: Cgroup | None = None  # memory and pids for the whole sandbox, where the kernel offers one

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
        from harness.sandbox import toolshell

        if toolshell.abi() < 1:
            raise PreflightError(
                "this kernel offers no Landlock: the agent's tools could reach opencode's memory through "
                "/proc and forge its events",
                field="sandbox",
                fix="run on a Linux kernel with Landlock enabled (5.13 or later, `landlock` in "
                    "/sys/kernel/security/lsm or the lsm= boot parameter), or pass --no-sandbox (the run and "
                    "its row are then marked unsandboxed)")
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


_HERE = Path(__file__).resolve().parent
# Where enter.py, as root in a mount namespace of its own, stages the bound folders the agent
# user cannot walk to (a tmpfs there, seen by no other process): one root-owned folder.
STAGE = Path("/run/llms-benchmark-stage") if Path("/run").is_dir() else Path("/tmp/llms-benchmark-stage")


def _outside_argv(view: View) -> list[str]:
    """enter.py ahead of bwrap when there is a cgroup to join or root to drop."""
    if not view.who.drop and view.cgroup is None:
        return []
    argv = [os.path.realpath(sys.executable), "-I", str(_HERE / "enter.py")]
    for procs in view.cgroup.procs if view.cgroup else []:
        argv += ["--cgroup", str(procs)]
    if view.who.drop:
        STAGE.mkdir(mode=0o755, parents=True, exist_ok=True)
        argv += ["--uid", str(view.who.uid), "--gid", str(view.who.gid), "--stage", str(STAGE)]
    return [*argv, "--"]


def _inside_argv(view: View) -> list[str]:
    """inside.py ahead of the command: the rlimits, and the forwarders of the allowed ports."""
    argv = [os.path.realpath(sys.executable), "-I", str(_HERE / "inside.py"),
            "--rlimit", view.caps.rlimits(with_memory=view.cgroup is None)]
    if isinstance(view.net, Bridge):
        argv += ["--net", INSIDE_DIR, ",".join(map(str, view.net.ports))]
    return [*argv, "--"]


def _bwrap_argv(tool: str, view: View, cwd: Path) -> list[str]:
    # bwrap starts from an empty tmpfs root: only what is listed here exists inside. Its own
    # user namespace with every capability dropped: no mount, no file handle, no device node,
    # whoever launched it (root is dropped to an unprivileged user before, see identity.py);
    # a new session: no ioctl can push keystrokes into the launcher's terminal.
    argv = [*_outside_argv(view), tool, "--die-with-parent", "--unshare-user", "--disable-userns",
            "--cap-drop", "ALL", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--proc", "/proc", "--dev", "/dev",
            # /dev's own tmpfs (and /dev/shm in it) and the root tmpfs are unsized memory of the
            # host: /dev/shm gets a sized tmpfs of its own, /dev and / are made read-only below.
            "--size", str(view.caps.shm_bytes), "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
            "--size", str(view.caps.tmp_bytes), "--tmpfs", "/tmp"]
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
    return [*argv, "--remount-ro", "/", "--chdir", str(cwd), "--", *_inside_argv(view)]


def describe_caps(view: View) -> dict[str, str]:
    """Each cap and what enforces it, for the record."""
    caps, gib = view.caps, 1 << 30
    memory = (f"{caps.memory_bytes / gib:g} GiB for the whole sandbox ({view.cgroup.kind})" if view.cgroup
              else f"{caps.memory_bytes / gib:g} GiB of address space, bounded per process only "
                   "(RLIMIT_AS; no cgroup offered: several processes may hold more together)")
    pids = f"{caps.pids} (RLIMIT_NPROC in its user namespace" + (f"; {view.cgroup.kind} pids.max)" if view.cgroup
                                                                else ")")
    return {"processes": pids, "file size": f"{caps.file_bytes / gib:g} GiB (RLIMIT_FSIZE)",
            "tmp": f"{caps.tmp_bytes / gib:g} GiB (its own tmpfs); /dev/shm {caps.shm_bytes / gib:g} GiB "
                   "(its own tmpfs); / and /dev read-only",
            "disk": f"{caps.disk_bytes / gib:g} GiB over its host folders (watched every second; the run ends past it)",
            "memory": memory}


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
