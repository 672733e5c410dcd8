"""The agent's sandbox: what it shows, what it hides, and the denials a run records.

The escape test plays a scripted trajectory through the real opencode inside bubblewrap
that tries to read the mission's hidden key by absolute path, the user's real HOME, and
another run's report: all denied, counted on the record, and none of their contents
lands anywhere in the run folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.errors import PreflightError
from harness.sandbox.confine import Sandbox, View, agent_view, detect, sbpl_profile, wrap
from harness.sandbox.denials import count_denials
from harness.sandbox.identity import hand_over
from conftest import Project, describe, kill_by_pid, make_project, wait_gone
from test_launch_e2e import SMALL_PROBE, dump

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason="bubblewrap is installed by `make setup` / .ci/run")
KEY_SECRET = "PLANTED-KEY-7f3a"
HOME_SECRET = "SSH-PRIVATE-KEY-91c2"
REPORT_SECRET = "OTHER-RUN-FINDING-4be8"


def test_without_bwrap_preflight_refuses_and_names_no_sandbox(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(PreflightError) as caught:
        detect(no_sandbox=False, system="Linux")
    text = caught.value.render()
    assert "bubblewrap (bwrap) is not installed" in text and "--no-sandbox" in text
    assert detect(no_sandbox=True, system="Linux") == Sandbox("none")
    with pytest.raises(PreflightError, match="no sandbox for the agent on Plan9"):
        detect(no_sandbox=False, system="Plan9")


def test_macos_profile_denies_by_default_and_allows_only_the_view(tmp_path: Path):
    from harness.sandbox.net import PortsOnly

    view = View(writable=[tmp_path / "ws"], readable=[tmp_path / "bin"], net=PortsOnly([8000, 4001]))
    profile = sbpl_profile(view, Path("/Users/me"), [8000, 4001])
    lines = profile.splitlines()
    assert lines[:2] == ["(version 1)", "(deny default)"] and "(allow default)" not in profile
    assert '(deny file-read* file-write* (subpath "/Users/me"))' in lines
    assert f'(allow file-read* file-write* (subpath "{tmp_path / "ws"}"))' in lines
    assert f'(allow file-read* (subpath "{tmp_path / "bin"}"))' in lines
    assert not any(line.startswith("(allow file-write*") and "ws" not in line and "/dev/" not in line
                   for line in lines)
    assert [line for line in lines if "network" in line] == [
        '(allow network-outbound (remote tcp "localhost:8000"))', '(allow network-outbound (remote tcp "localhost:4001"))']
    assert not any("/opt" in line or '"/private/etc"' in line for line in lines)
    argv = wrap(Sandbox("sandbox-exec", "/usr/bin/sandbox-exec"), ["opencode", "run"], view, tmp_path, tmp_path)
    assert argv == ["/usr/bin/sandbox-exec", "-f", str(tmp_path / "sandbox.sb"), "opencode", "run"]
    assert (tmp_path / "sandbox.sb").read_text() == sbpl_profile(view, Path.home(), [8000, 4001])


@needs_bwrap
def test_bwrap_shows_the_view_and_hides_the_rest(tmp_path: Path):
    ws, home, hidden = tmp_path / "ws", tmp_path / "home", tmp_path / "checkout"
    for d in (ws, home, hidden):
        d.mkdir()
    (hidden / "defects.yaml").write_text(KEY_SECRET)
    view = agent_view([ws, home], Path(sys.executable), [])
    hand_over(view.writable, view.who)
    script = (f"cat {hidden}/defects.yaml; echo rc=$?; touch /usr/x 2>&1; echo rc=$?; "
              f"echo ok > {ws}/out.txt; echo rc=$?; echo tmp=$(ls -A /tmp); "
              f"{sys.executable} -c 'import harness; print(\"harness ok\")'")
    argv = wrap(Sandbox("bwrap", BWRAP), ["/bin/sh", "-c", script], view, ws, tmp_path)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    out = done.stdout + done.stderr
    assert KEY_SECRET not in out
    lines = done.stdout.split()
    assert "rc=1" in lines[:3] and "Read-only file system" in out
    assert (ws / "out.txt").read_text() == "ok\n"  # the workspace is writable, through to the host
    assert "harness ok" in out  # the mission's tools (Python + harness) still run
    # A /tmp of its own: only the paths down to what the view binds there (the workspace,
    # and the checkout's venv and harness when the checkout itself lies under /tmp).
    shown = next(line for line in done.stdout.splitlines() if line.startswith("tmp="))
    under_tmp = sorted({p.parts[2] for p in [*view.writable, *view.readable]
                        if len(p.parts) > 2 and p.parts[1] == "tmp"})
    assert sorted(shown.removeprefix("tmp=").split()) == under_tmp


@needs_bwrap
def test_dev_shm_and_the_root_hold_no_more_than_their_caps(tmp_path: Path):
    """bwrap's root and /dev are tmpfs of the host's memory with no size: / and /dev are
    read-only inside, /dev/shm a tmpfs of its own of `shm_bytes` (4 GiB once went there)."""
    from harness.sandbox.limits import DEFAULT_CAPS, MiB

    ws = tmp_path / "ws"
    ws.mkdir()
    view = agent_view([ws], Path(sys.executable), [])
    hand_over(view.writable, view.who)
    script = ("echo x > /planted; echo root=$?; echo x > /dev/planted; echo dev=$?; "
              f"dd if=/dev/zero of=/dev/shm/fill bs=1M count={DEFAULT_CAPS.shm_bytes // MiB + 16} 2>/dev/null; "
              "echo shm=$(du -sk /dev/shm | cut -f1); echo hi > /dev/null; echo null=$?")
    argv = wrap(Sandbox("bwrap", BWRAP), ["/bin/sh", "-c", script], view, ws, tmp_path)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    seen = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    assert seen["root"] != "0" and seen["dev"] != "0", done.stdout + done.stderr
    assert int(seen["shm"]) <= DEFAULT_CAPS.shm_bytes // 1024
    assert seen["null"] == "0"  # the devices still work


GETFD = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
pidfd = os.pidfd_open(os.getppid())
fd = libc.syscall(438, pidfd, 1, 0)  # pidfd_getfd: the parent's stdout
if fd >= 0:
    os.write(fd, b'{"type":"text","part":{"text":"FORGED"}}\\n')
print("getfd", "taken" if fd >= 0 else "refused " + os.strerror(ctypes.get_errno()))
print("vm", libc.syscall(310, os.getppid(), 0, 0, 0, 0, 0), os.strerror(ctypes.get_errno()))
"""


@needs_bwrap
def test_no_process_inside_can_take_anothers_descriptor_or_memory(tmp_path: Path):
    """pidfd_getfd took opencode's stdout once (a forged event, denials hidden): every process
    inside runs under a seccomp filter that refuses it, ptrace and process_vm_* with EPERM."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "g.py").write_text(GETFD)
    view = agent_view([ws], Path(sys.executable), [])
    hand_over(view.writable, view.who)
    argv = wrap(Sandbox("bwrap", BWRAP), ["/bin/sh", "-c", f"python3 {ws}/g.py; echo done"], view, ws, tmp_path)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert "getfd refused Operation not permitted" in done.stdout, done.stdout + done.stderr
    assert "vm -1 Operation not permitted" in done.stdout and "FORGED" not in done.stdout
    assert done.stdout.strip().endswith("done")


@needs_bwrap
def test_the_network_is_its_own_only_allowed_ports_answer_and_streams_flow(tmp_path: Path):
    """Inside: the allowed host port answers (a streamed answer arrives as it is sent), another
    host port is refused, and the metadata address and the internet have no route: the
    connects fail inside the agent's own namespace, nothing leaves it."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from harness.sandbox.net import bridge

    class Stream(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for i in range(3):
                self.wfile.write(f"data: {i}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.4)

        def log_message(self, *args):
            pass

    allowed, other = (ThreadingHTTPServer(("127.0.0.1", 0), Stream) for _ in range(2))
    for server in (allowed, other):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ws = tmp_path / "ws"
    ws.mkdir()
    code = (f"import socket, time, urllib.request\n"
            f"t = time.monotonic()\n"
            f"with urllib.request.urlopen('http://127.0.0.1:{allowed.server_port}/') as r:\n"
            f"    for line in r:\n"
            f"        if line.strip(): print('event', round(time.monotonic() - t, 1))\n"
            f"for host, port in (('127.0.0.1', {other.server_port}), ('169.254.169.254', 80), ('192.0.2.1', 443)):\n"
            f"    s = socket.socket(); s.settimeout(3); print('connect', host, s.connect_ex((host, port)))\n")
    try:
        with bridge("bwrap", [allowed.server_port]) as net:
            view = agent_view([ws], Path(sys.executable), [])
            view.net = net
            argv = wrap(Sandbox("bwrap", BWRAP), [sys.executable, "-I", "-c", code], view, ws, tmp_path)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            assert net.connections[allowed.server_port] == 1
    finally:
        allowed.shutdown()
        other.shutdown()
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stderr
    times = [float(line.split()[1]) for line in lines if line.startswith("event")]
    assert len(times) == 3 and times[2] - times[0] >= 0.6  # each event came as sent, not all at the end
    import errno

    assert f"connect 127.0.0.1 {errno.ECONNREFUSED}" in lines  # another host port: nothing listens inside
    assert f"connect 169.254.169.254 {errno.ENETUNREACH}" in lines  # no route out of the namespace
    assert f"connect 192.0.2.1 {errno.ENETUNREACH}" in lines


def test_loopback_ports_come_from_the_urls_the_agent_is_given():
    from harness.sandbox.net import loopback_ports

    env = {"OBS_URL": "http://127.0.0.1:4000", "SHOP_MCP_URL": "http://localhost:4001/mcp", "PATH": "/usr/bin",
           "REMOTE": "https://example.invalid:443/v1", "BAD": "http://127.0.0.1:notaport/"}
    assert loopback_ports(["http://127.0.0.1:8000", *env.values()]) == [4000, 4001, 8000]


@needs_bwrap
def test_prove_view_refuses_a_checkout_inside_a_shown_folder_and_what_shows_from_inside(tmp_path: Path, monkeypatch):
    import harness.sandbox.proof as sandbox_mod
    from harness.sandbox.proof import must_stay_hidden, prove_view

    root = tmp_path / "checkout"
    run_dir = root / ".llms-benchmark" / "runs" / "r1"
    (root / "missions" / "hello" / "key").mkdir(parents=True)
    (root / ".llms-benchmark" / "runs" / "r0").mkdir(parents=True)
    run_dir.mkdir()
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    bwrap = Sandbox("bwrap", BWRAP)
    hidden = must_stay_hidden(root, run_dir, home)
    prove_view(bwrap, agent_view([run_dir], Path(sys.executable), []), hidden)  # the launch's own view: fine
    with pytest.raises(PreflightError, match=r"would show a mission's hidden key .* through the bound"):
        prove_view(bwrap, agent_view([run_dir], Path(sys.executable), [root / "missions"]), hidden)
    with pytest.raises(PreflightError, match=r"would show the real HOME"):
        prove_view(bwrap, agent_view([run_dir], Path(sys.executable), [home]), hidden)
    # Looking from inside catches what the static check misses (here: the check switched off).
    monkeypatch.setattr(sandbox_mod, "_exposed_statically", lambda binds, hidden: [])
    with pytest.raises(PreflightError, match=r"not tight: it shows .*key"):
        prove_view(bwrap, agent_view([run_dir], Path(sys.executable), [root / "missions"]), hidden)


def test_denials_are_counted_from_the_tool_events(tmp_path: Path):
    ws = tmp_path / "ws"
    ws.mkdir()
    hidden = tmp_path / "checkout" / "key.yaml"
    hidden.parent.mkdir()
    hidden.write_text("x")
    view = View(writable=[ws])
    events = tmp_path / "events.jsonl"

    def tool(name, status, inp, output="", error=None):
        state = {"status": status, "input": inp, "output": output, **({"error": error} if error else {})}
        return json.dumps({"type": "tool_use", "part": {"tool": name, "state": state}})

    events.write_text("\n".join([
        tool("read", "error", {"filePath": str(hidden)}, error=f"File not found: {hidden}"),
        tool("bash", "completed", {"command": f"cat {hidden}"}, f"cat: {hidden}: No such file or directory"),
        tool("bash", "completed", {"command": "touch /usr/lib/x"}, "touch: Read-only file system"),
        tool("read", "completed", {"filePath": "notes.txt"}, "hello"),  # fine
        # Absent on the host: counted all the same (the host is never asked which of the agent's paths exist).
        tool("read", "error", {"filePath": str(tmp_path / "nowhere")}, error="File not found"),
        tool("bash", "completed", {"command": "cat /proc/1/status"}, "Name: bwrap"),
        "not json",
    ]))
    count, denied = count_denials(events, view, ws)
    assert count == 4, denied
    assert denied[0] == f"read: {hidden}" and denied[2] == "bash: Read-only file system"
    assert denied[3] == f"read: {tmp_path / 'nowhere'}"


def test_denials_never_probe_the_host_and_escape_what_they_record(tmp_path: Path):
    """A failed command naming 300 host paths: the record cannot tell which exist, holds at
    most three names per call, each escaped (a name with an escape code or a newline)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    real = [str(tmp_path / f"real{i}") for i in range(5)]
    for path in real:
        Path(path).write_text("x")
    made_up = [str(tmp_path / f"none{i}") for i in range(295)]
    odd = str(tmp_path / "a\x1b]52;c;eA==\x07\nrun ok")
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(json.dumps({"type": "tool_use", "part": {"tool": "bash", "state": {
        "status": "error", "input": {"command": "cat " + " ".join(paths)}, "error": "No such file"}}})
        for paths in (made_up[:3] + real, real + made_up, [odd])) + "\n")
    count, denied = count_denials(events, View(writable=[ws]), ws)
    assert count == 3
    assert denied[0] == f"bash: {', '.join(made_up[:3])} and 5 more"  # the real ones named no differently
    assert denied[1] == f"bash: {', '.join(real[:3])} and 297 more"
    assert "\x1b" not in denied[2] and "\n" not in denied[2] and "\\x1b]52" in denied[2]


@dataclass
class Outside:
    """A checkout under /opt (outside /tmp, which bwrap replaces anyway), host canaries under
    /opt, /etc and /srv, and a host loopback service that counts who calls it."""

    project: Project
    canaries: dict[str, Path]
    host_port: int
    calls: list[str]


@pytest.fixture
def outside() -> Iterator[Outside]:
    tag = uuid.uuid4().hex[:8]
    base = Path(f"/opt/llms-benchmark-escape-{tag}")
    canaries = {"opt": base / "canary" / "secret.txt", "etc": Path(f"/etc/llms-canary-{tag}"),
                "srv": Path(f"/srv/llms-canary-{tag}") / "secret.txt"}
    made: list[Path] = []
    try:
        for where, path in canaries.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            made.append(path if where == "etc" else path.parent)
            path.write_text(f"CANARY-{where}-{tag}\n")
    except PermissionError:
        _remove(made + [base])
        pytest.skip("needs write access to /opt, /etc and /srv for the host canaries")
    listener = socket.create_server(("127.0.0.1", 0))
    calls: list[str] = []

    def count() -> None:
        while True:
            try:
                conn, peer = listener.accept()
            except OSError:
                return
            calls.append(str(peer))
            conn.close()

    threading.Thread(target=count, daemon=True).start()
    try:
        yield Outside(make_project(base / "project"), canaries, listener.getsockname()[1], calls)
    finally:
        listener.close()
        left = wait_gone(base)
        kill_by_pid(left)
        _remove([*made, base])
        assert not left, f"processes outlived the test: {describe(left)}"


def _remove(paths: list[Path]) -> None:
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _files_holding(folder: Path, needles: list[bytes]) -> list[tuple[str, str]]:
    """(file, needle) for every regular file under `folder` holding a needle; links never followed."""
    found = []
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            if not stat.S_ISREG(path.lstat().st_mode):
                continue
            data = path.read_bytes()
            found += [(str(path), n.decode()) for n in needles if n in data]
    return found


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_escape_attempts_from_a_checkout_under_opt_are_denied_and_counted(outside: Outside):
    project = outside.project
    key = project.root / "missions" / "hello" / "key" / "defects.yaml"
    key.parent.mkdir(parents=True)
    key.write_text(f"answer: {KEY_SECRET}\n")
    real_home = project.root.parent / "realhome"
    (real_home / ".ssh").mkdir(parents=True)
    (real_home / ".ssh" / "id_ed25519").write_text(HOME_SECRET)
    other = project.root / ".llms-benchmark" / "runs" / "20260101T000000Z-other-medium-0000"
    other.mkdir(parents=True)
    (other / "report.md").write_text(f"| 1 | {REPORT_SECRET} |\n")
    project.env["HOME"] = str(real_home)
    c = outside.canaries

    def bash(command: str) -> dict:
        return {"tool_calls": [{"name": "bash", "arguments": {"command": command, "description": "try"}}]}

    steps = [  # every read goes through bash: bwrap, not opencode's own tools, must refuse it
        bash(f"cat {c['opt']}"), bash(f"cat {c['etc']}"), bash(f"cat {c['srv']}"), bash(f"cat {key}"),
        bash(f"cat {real_home}/.ssh/id_ed25519"), bash(f"cat {other}/report.md"),
        bash(f"exec 3<>/dev/tcp/127.0.0.1/{outside.host_port} && echo connected"),
        bash("curl -sS -m 5 http://169.254.169.254/metadata/identity/oauth2/token"),
        bash(f"ln -sf {c['srv']} REPORT.md"),
        {"text": "DONE"},
    ]
    hello = yaml_load(Path(__file__).resolve().parents[1] / "replay" / "hello.yaml")
    hello["trajectories"][1]["steps"] = steps
    project.add_trajectory("escape", hello)
    project.add_preset("replay-escape", trajectory="escape")
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-escape", "--mission", "hello",
                                      *SMALL_PROBE], timeout=300)
    assert code == 1, dump(out, err)  # void: the report is a link to a host file
    run_dir, rec = project.only_run()
    assert rec["status"] == "void" and "REPORT.md is a symbolic link" in rec["reason"], rec["reason"]
    assert rec["run"]["report_found"] is False and not (run_dir / "report.md").exists()
    sandbox = rec["sandbox"]
    assert sandbox["kind"] == "bwrap" and sandbox["network"] == "own namespace"
    denied = "\n".join(sandbox["denied"])
    for path in (*c.values(), key, real_home / ".ssh" / "id_ed25519", other / "report.md"):
        assert str(path) in denied, (path, denied)
    assert "network: Connection refused" in denied
    assert re.search(r"network: (Network is unreachable|Failed to connect|Couldn't connect)", denied), denied
    assert "harness: the report was refused: REPORT.md is a symbolic link" in denied
    assert sandbox["denials"] == 9, denied
    assert outside.calls == []  # the host's loopback service never saw a connection
    needles = [s.encode() for s in (KEY_SECRET, HOME_SECRET, REPORT_SECRET)] + [
        p.read_bytes().strip() for p in c.values()]
    assert _files_holding(run_dir, needles) == []
    assert _files_holding(project.root / ".vot", needles) == []
    served = project.served(run_dir, "hello")  # the mission trajectory, renamed file only
    assert len(served) == len(steps)  # the model endpoint itself was reachable throughout


def yaml_load(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text())


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_no_sandbox_is_marked_on_the_record(project: Project):
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "hello",
                                      "--no-sandbox", *SMALL_PROBE], timeout=300)
    assert code == 0, dump(out, err)
    _, rec = project.only_run()
    assert rec["sandbox"].pop("launcher_peak_rss_mib") > 0
    assert rec["sandbox"] == {"kind": "none", "denials": 0, "denied": [], "network": "host", "agent_user": None,
                              "limits": None, "privilege": None}
    # With the host's network, opencode's background install of its plugin package would reach
    # the public npm registry on every run (tests talk to loopback only); npm stays offline.
    run_dir = project.run_dirs()[0]
    fetched = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("_cacache"))
    assert fetched == [], fetched


# -- as root: the privileged calls, the caps, the store ------------------------------------
FORK_BOMB = ("import os, time, signal\n"
             "kids = []\n"
             "try:\n"
             "    while len(kids) < 2000:\n"
             "        pid = os.fork()\n"
             "        if pid == 0:\n"
             "            time.sleep(30); os._exit(0)\n"
             "        kids.append(pid)\n"
             "except OSError as exc:\n"
             "    print('spawned', len(kids), 'then', exc.strerror)\n"
             "else:\n"
             "    print('spawned', len(kids), 'ALL')\n"
             "for pid in kids: os.kill(pid, signal.SIGKILL)\n")
# A handle to inode 2 (the root of an ext2/3/4 filesystem) of the filesystem under the
# workspace: with CAP_DAC_READ_SEARCH this lists the host's `/` (the attack the issue met).
HANDLE_ATTACK = ("import ctypes, os, errno\n"
                 "libc = ctypes.CDLL(None, use_errno=True)\n"
                 "class H(ctypes.Structure):\n"
                 "    _fields_ = [('n', ctypes.c_uint), ('t', ctypes.c_int), ('b', ctypes.c_ubyte * 8)]\n"
                 "h = H(n=8, t=1); h.b[0] = 2\n"
                 "fd = libc.open_by_handle_at(os.open('.', os.O_RDONLY), ctypes.byref(h), os.O_RDONLY | 0o200000)\n"
                 "print('handle', 'ALLOWED ' + str(os.listdir(fd)) if fd >= 0 else "
                 "'refused ' + errno.errorcode[ctypes.get_errno()])\n")
STORE_EDIT = ("import sqlite3, glob\n"
              "db, = glob.glob(os.environ['XDG_DATA_HOME'] + '/opencode/opencode.db')\n"
              "c = sqlite3.connect(db); c.execute('UPDATE session SET tokens_input = tokens_input + 500000')\n"
              "c.execute('CREATE TABLE forged (x)'); c.commit(); print('store edited')\n")


def _outputs(events: Path) -> dict[str, str]:
    """Each bash call's description → its output, from the run's opencode events."""
    out = {}
    for line in events.read_text().splitlines():
        event = json.loads(line)
        part = event.get("part") or {}
        if event.get("type") == "tool_use" and part.get("tool") == "bash":
            state = part["state"]
            out[state["input"]["description"]] = str(state.get("output") or state.get("error") or "")
    return out


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(500)
def test_as_root_or_not_the_agent_holds_no_privilege_and_hits_every_cap(project: Project):
    """Run by root (CI) the agent is dropped to an unprivileged user; run by a user it keeps
    theirs: either way every privileged call, the caps and a forged store are refused or named."""
    import harness

    key = project.root / "missions" / "hello" / "key" / "defects.yaml"
    key.parent.mkdir(parents=True)
    key.write_text(f"answer: {KEY_SECRET}\n")
    pkg = Path(harness.__file__).resolve().parent  # the harness package: bound read-only
    host_tmp = Path(f"/tmp/llms-canary-{uuid.uuid4().hex[:8]}.txt")
    host_tmp.write_text("HOST-TMP-CANARY\n")
    try:
        _privileged_run(project, key, pkg, host_tmp)
    finally:
        host_tmp.unlink()


def _privileged_run(project: Project, key: Path, pkg: Path, host_tmp: Path) -> None:
    checkout_file = project.root / "pwned.txt"

    def bash(description: str, command: str) -> dict:
        return {"tool_calls": [{"name": "bash", "arguments": {"command": command, "description": description}}]}

    # opencode's own rules refuse a command naming a path outside the workspace: the attacks
    # live in scripts the agent writes first, so that only the sandbox stands in their way.
    attacks = {
        "caps": "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; id -u",
        "privcheck": f"python3 -I {pkg}/sandbox/privcheck.py . {pkg}",
        "remount": f"mount -o remount,rw,bind {pkg} 2>&1; touch {pkg}/pwned 2>&1; echo rc=$?",
        "handle": f"python3 - <<'PY'\n{HANDLE_ATTACK}PY",
        "mknod": "mknod mem c 1 1 2>&1; echo rc=$?",
        "key": f"cat {key} 2>&1",
        "checkout": f"echo x > {checkout_file} 2>&1; echo x > {project.root}/.vot/pwned 2>&1; echo rc=$?",
        "host tmp": f"cat {host_tmp} 2>&1; ls /tmp",
        "big file": "dd if=/dev/zero of=big bs=1M count=3072 2>&1 | tail -1; ls -l big; rm -f big",
        "tmp fill": "dd if=/dev/zero of=/tmp/fill bs=1M count=1024 2>&1 | grep -v records; rm -f /tmp/fill",
        "fork": f"python3 - <<'PY'\n{FORK_BOMB}PY",
        "store": f"python3 - <<'PY'\nimport os\n{STORE_EDIT}PY",
    }
    script = ('for a do echo "== $a"; case "$a" in\n' + "".join(f"  '{k}') {v}\n  ;;\n" for k, v in attacks.items())
              + "esac; done\n")

    def write(name: str, content: str) -> dict:
        return {"tool_calls": [{"name": "write", "arguments": {"filePath": name, "content": content}}]}

    groups = [["caps", "privcheck", "remount", "handle", "mknod"], ["key", "checkout", "host tmp"],
              ["big file", "tmp fill", "fork"], ["store"]]  # within hello's 12 agent steps
    steps = [write("attack.sh", script),
             *(bash(" ".join(g), "sh attack.sh " + " ".join(f"'{k}'" for k in g)) for g in groups),
             write("REPORT.md", "report\n"), {"text": "DONE"}]
    hello = yaml_load(Path(__file__).resolve().parents[1] / "replay" / "hello.yaml")
    hello["trajectories"][1]["steps"] = steps
    project.add_trajectory("privileged", hello)
    project.add_preset("replay-privileged", trajectory="privileged")
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-privileged", "--mission", "hello",
                                      *SMALL_PROBE], timeout=400)
    run_dir, rec = project.only_run()
    said = {}
    for output in _outputs(run_dir / "opencode-events.jsonl").values():
        said |= dict(section.split("\n", 1) for section in output.split("== ")[1:])
    # The store the agent inflated departs from the wire past the tolerance: the run is void on it.
    assert code == 1, (dump(out, err), said)
    assert rec["status"] == "void" and "the wire and opencode's store disagree" in rec["reason"], rec["reason"]
    sandbox = rec["sandbox"]
    # Preflight proved it from outside before anything was served.
    assert all(v.startswith("refused") for v in sandbox["privilege"].values()), sandbox["privilege"]
    assert ("dropped from root" in sandbox["agent_user"]) == (os.geteuid() == 0)
    # From inside, as the agent: no capability, not root.
    assert re.findall(r"Cap(?:Eff|Prm|Bnd):\s+(\w+)", said["caps"]) == ["0" * 16] * 3, said["caps"]
    assert said["caps"].split()[-1] != "0"
    assert all(v.startswith("refused") for v in json.loads(said["privcheck"].strip().splitlines()[-1]).values())
    assert "must be superuser" in said["remount"] or "permission denied" in said["remount"].lower()
    assert "Read-only file system" in said["remount"] and not (pkg / "pwned").exists()
    assert "handle refused EPERM" in said["handle"], said["handle"]
    assert "Operation not permitted" in said["mknod"] and "rc=1" in said["mknod"]
    assert KEY_SECRET not in json.dumps(said) and "No such file" in said["key"]
    assert not checkout_file.exists() and not (project.root / ".vot" / "pwned").exists()
    assert "HOST-TMP-CANARY" not in said["host tmp"] and "No such file" in said["host tmp"]
    # The caps: one file stops at 1 GiB, /tmp at 0.5 GiB, processes at 512.
    assert "File size limit exceeded" in said["big file"] or "File too large" in said["big file"], said["big file"]
    assert " 1073741824 " in said["big file"]
    assert "No space left on device" in said["tmp fill"]
    spawned = re.search(r"spawned (\d+) then (.+)", said["fork"])
    assert spawned and int(spawned.group(1)) < 512 and "Resource temporarily unavailable" in spawned.group(2), said["fork"]
    # The store the agent rewrote is named; the row's figures are the wire's.
    assert "store edited" in said["store"]
    wire = rec["wire"]
    assert any(d.startswith("input tokens: the store says") for d in wire["store_disagrees"]), wire
    assert wire["tokens"]["input"] == sum(s["usage"]["prompt_tokens"] for s in steps if "usage" in s) or \
        wire["tokens"]["input"] < rec["session"]["tokens"]["input"] - 400_000
    # Each refusal is on the record.
    denied = "\n".join(sandbox["denied"])
    for what in ("mount refused", "file size cap", "tmp cap", "process cap", str(key), str(host_tmp),
                 "Read-only file system"):
        assert what in denied, (what, denied)


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_disk_cap_ends_a_run_that_fills_its_folders(project: Project):
    """Files each under the 1 GiB file cap, 2.7 GiB together: past the 2 GiB disk cap the
    watcher ends the run; void, the cap named as its reason and as a denial."""
    fill = "for i in 1 2 3; do dd if=/dev/zero of=fill$i bs=1M count=900 2>/dev/null; done; sleep 20; echo filled"
    steps = [{"tool_calls": [{"name": "bash", "arguments": {"command": fill, "description": "fill"}}]},
             {"text": "DONE"}]
    hello = yaml_load(Path(__file__).resolve().parents[1] / "replay" / "hello.yaml")
    hello["trajectories"][1]["steps"] = steps
    project.add_trajectory("fill", hello)
    project.add_preset("replay-fill", trajectory="fill")
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-fill", "--mission", "hello",
                                      *SMALL_PROBE], timeout=300)
    assert code == 1, dump(out, err)
    run_dir, rec = project.only_run()
    assert rec["status"] == "void" and "disk cap reached" in rec["reason"], rec["reason"]
    assert any(d.startswith("sandbox: disk cap reached") for d in rec["sandbox"]["denied"]), rec["sandbox"]
    assert "filled" not in (run_dir / "opencode-events.jsonl").read_text()  # ended before the command was


@needs_bwrap
def test_preflight_refuses_a_sandbox_that_leaves_privilege_inside(tmp_path: Path):
    """The probes catch a sandbox that confines nothing: a stand-in 'bwrap' that only runs the
    command as root of a user namespace of its own (full capability set there)."""
    from harness.sandbox.identity import AgentIdentity
    from harness.sandbox.proof import prove_unprivileged

    fake = tmp_path / "bin" / "bwrap"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done; shift\nexec unshare -r -- "$@"\n')
    fake.chmod(0o755)
    probe = tmp_path / "probe"
    probe.mkdir()
    view = agent_view([probe], Path(sys.executable), [])
    view.who = AgentIdentity(os.geteuid(), os.getegid(), drop=False)
    with pytest.raises(PreflightError, match=r"privileged .*capabilities: ALLOWED") as caught:
        prove_unprivileged(Sandbox("bwrap", str(fake)), view, probe)
    assert "--no-sandbox" in caught.value.render()
    # The real one, as the launch builds it: every probe refused.
    real = agent_view([probe], Path(sys.executable), [])
    hand_over([probe], real.who)
    found = prove_unprivileged(Sandbox("bwrap", BWRAP), real, probe)
    assert set(found) == {"capabilities", "uid 0", "remount", "open_by_handle_at", "mknod", "nested user namespace"}
    assert all(v.startswith("refused") for v in found.values()), found


def test_the_agent_user_is_never_root(monkeypatch):
    from harness.sandbox.identity import NOBODY, UID_VAR, agent_identity

    who = agent_identity()
    assert who.uid != 0 and who.drop == (os.geteuid() == 0)
    if os.geteuid() == 0:
        assert who.uid == NOBODY
        monkeypatch.setenv(UID_VAR, "0")
        with pytest.raises(PreflightError, match=f"{UID_VAR}='0' is not an unprivileged"):
            agent_identity()
        monkeypatch.setenv(UID_VAR, "4242")
        assert agent_identity().uid == 4242


def test_enter_stages_only_what_the_agent_user_cannot_walk_to(tmp_path: Path):
    from harness.sandbox.enter import _reachable

    shut = tmp_path / "shut"
    (shut / "inner").mkdir(parents=True)
    shut.chmod(0o700)
    owner = os.stat(shut).st_uid  # owns tmp_path and every folder pytest made above it
    assert _reachable(str(shut / "inner"), 65534, 65534) is False  # 0700: staged
    assert _reachable(str(shut / "inner"), owner, 12345) is True
    shut.chmod(0o701)  # search for others: no staging needed at this level
    assert _reachable(str(shut / "inner"), 65534, 65534) is _reachable(str(shut), 65534, 65534)
    assert _reachable("/usr/bin", 65534, 65534) is True
