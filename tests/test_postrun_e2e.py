"""The post-run against a scripted agent, through the real opencode and the real bwrap: the
agent leaves links where the old scrub wrote its temporaries (pointing at a host file of
the checkout), its key in the report, a folder tree 1,500 levels deep (a recursive walk
dies on it) and a file named with a terminal escape. The launch must change no file
outside the run folder, leave no raw key in it, print no raw escape, and fail closed:
void, the post-run named as the reason, the agent's workspace removed."""

from __future__ import annotations

import os
import platform
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from harness.sandbox import agentfs
from conftest import CLI, REPO, Project, make_project, wait_gone
from test_launch_e2e import SMALL_PROBE, dump

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
USER_ID = 4242  # an ordinary user for the launch (no passwd entry needed)


@dataclass
class UserProject(Project):
    """A project launched by an ordinary user: as root, the CLI runs under `setpriv` as USER_ID
    in a root of that user's own (the agent then keeps that uid, no drop)."""

    def popen(self, args: list[str]) -> subprocess.Popen:
        argv = [str(CLI), *args]
        if os.geteuid() == 0:
            argv = ["setpriv", f"--reuid={USER_ID}", f"--regid={USER_ID}", "--clear-groups", *argv]
        return subprocess.Popen(argv, cwd=self.root, env=self.env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(params=["root", "user"])
def launcher(request, tmp_path: Path):
    """The same attack launched by root (CI: the agent dropped to nobody) and by an ordinary user."""
    if request.param == "root" or os.geteuid() != 0:
        if request.param == "root" and os.geteuid() != 0:
            pytest.skip("root's launch needs root")
        proj = make_project((tmp_path / "project").resolve())
        yield proj
        wait_gone(tmp_path.resolve())
        return
    base = Path(tempfile.mkdtemp(prefix="llms-user-", dir="/tmp"))  # tmp_path's parents are root's 0700
    os.chmod(base, 0o755)
    # CI's Python lives under /root (0700): a real user runs a Python of their own; for this
    # launch the folders above it are made searchable (not listable), as they were, after.
    # (This file runs on one worker: tests/conftest.py ONE_WORKER.)
    opened = [p for p in Path(os.path.realpath(sys.executable)).parents
              if not os.stat(p).st_mode & stat.S_IXOTH]
    for path in opened:
        os.chmod(path, os.stat(path).st_mode | stat.S_IXOTH)
    plain = make_project(base / "project")
    proj = UserProject(root=plain.root, env={**plain.env, "HOME": str(base / "home")})
    (base / "home").mkdir()
    for path in (base, *base.rglob("*")):
        os.lchown(path, USER_ID, USER_ID)
    try:
        yield proj
    finally:
        wait_gone(base)
        agentfs.remove(base)
        for path in opened:
            os.chmod(path, os.stat(path).st_mode & ~stat.S_IXOTH)

DEEP = """import os
fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
for _ in range(1500):
    os.mkdir("d", dir_fd=fd)
    nxt = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = nxt
out = os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
os.write(out, ("deep " + os.environ["VOT_API_KEY"]).encode())
print("deep tree made")
"""


def _bash(description: str, command: str) -> dict:
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command, "description": description}}]}


def _write(name: str, content: str) -> dict:
    return {"tool_calls": [{"name": "write", "arguments": {"filePath": name, "content": content}}]}


def _launch(project: Project, name: str, steps: list[dict], **preset) -> tuple[int, str, str, Path, dict]:
    """The hello mission played by a scripted agent taking `steps`, through the real opencode:
    (exit code, stdout, stderr, run folder, record)."""
    hello = yaml.safe_load((project.root / "replay" / "hello.yaml").read_text())  # quick: see conftest
    hello["trajectories"][1]["steps"] = steps
    project.add_trajectory(name, hello)
    project.add_preset(f"replay-{name}", trajectory=name, **preset)
    code, out, err = project.run_cli(["launch", "local", "replay", f"replay-{name}", "--mission", "hello",
                                      *SMALL_PROBE], timeout=360)
    return (code, out, err, *project.only_run())


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_links_deep_trees_and_escapes_left_by_the_agent_fail_closed(launcher: Project):
    project = launcher
    key = f"sk-unit-{secrets.token_hex(12)}"
    canary = project.root / "harness-canary.py"
    canary.write_text("print('the harness')\n")
    plant = (f"ln -s {canary} .REPORT.md.scrub; ln -s {canary} .report.md.tmp; "
             f"ln -s {canary} opencode.db.scrub; echo planted\n")
    # The tree is made last: the disk watcher counts a tree nested that deep as full and ends the run.
    steps = [_bash("report", 'echo "the key is $VOT_API_KEY" > REPORT.md'),
             _write("plant.sh", plant), _bash("plant links", "sh plant.sh"),
             _bash("escape name", "touch \"$(printf 'x\\033]0;pwned\\007y')\"; echo named"),
             _write("deep.py", DEEP), _bash("deep tree", "python3 deep.py; sleep 5"), {"text": "DONE"}]
    project.env.update(VLLM_API_KEY=key)
    code, out, err, run_dir, rec = _launch(project, "leftovers", steps, env=["VLLM_API_KEY"])
    assert code == 1, dump(out, err)
    assert rec["status"] == "void" and "post-run" in rec["reason"], rec["reason"]
    assert "workspace removed" in rec["reason"] and "nested more than" in rec["reason"], rec["reason"]
    assert not (run_dir / "workspace").exists()
    assert canary.read_text() == "print('the harness')\n"  # nothing outside the run folder changed
    assert "\x1b" not in out + err and "\x07" not in out + err
    # Nor in the record (issue 60): every string of run.json, decoded, is free of raw control bytes.
    import json as _json

    def strings(v):
        return [v] if isinstance(v, str) else [s for x in (v.values() if isinstance(v, dict) else v if
                                                          isinstance(v, list) else []) for s in strings(x)]
    assert not [t for t in strings(_json.loads((run_dir / "run.json").read_text())) if re.search(r"[\x00-\x1f\x7f-\x9f]", t)]
    events = (run_dir / "opencode-events.jsonl").read_text()
    assert "deep tree made" in events and "planted" in events  # the attacks ran
    for path in project.root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert key.encode() not in path.read_bytes(), path
    assert rec["run"]["report_found"], (rec["reason"], rec["run"])
    assert (run_dir / "report.md").read_text().strip() == "the key is [redacted]"


FORGE = """import os
event = b'{"type":"text","sessionID":"ses_forged","part":{"text":"FORGED-EVENT"}}\\n'
for fd in (1, 2):
    try:
        with open(f"/proc/{os.getppid()}/fd/{fd}", "wb") as f:
            f.write(event)
        print(fd, "written")
    except OSError as exc:
        print(fd, "refused", exc.strerror)
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_tool_cannot_write_into_opencodes_event_stream(launcher: Project):
    """The agent reopens opencode's stdout and stderr through /proc to forge an event: sockets,
    not pipes, so the reopen is refused and only opencode's own events are recorded."""
    project = launcher
    steps = [_write("forge.py", FORGE), _bash("forge", "python3 forge.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(project, "forger", steps)
    assert code == 0, dump(out, err)
    events = (run_dir / "opencode-events.jsonl").read_text()
    # Refused by the kernel: its descriptors are out of a tool's reach (issue 60: Landlock denies the
    # /proc walk into opencode, EACCES; before it, the sockets refused a reopen, ENXIO).
    assert re.search(r"1 refused (Permission denied|No such device or address)", events), events[-2000:]
    assert "2 refused" in events and "1 written" not in events and "2 written" not in events, events[-2000:]
    assert not any('"FORGED-EVENT"' in line and '"ses_forged"' in line and line.startswith('{"type":"text"')
                   for line in events.splitlines())
    assert "FORGED" not in (run_dir / "opencode-stderr.log").read_text()


# A tool that finds opencode among its ancestors and goes for it through /proc: its memory
# (opened read-write: the write would patch its code and forge an event on its stdout), its
# descriptors, a signal. Each attempt prints what the kernel answered.
MEM = """import os, signal
pid, opencode = os.getpid(), None
while pid > 1:
    stat = open(f"/proc/{pid}/stat").read()
    comm, pid = stat[stat.index("(") + 1:stat.rindex(")")], int(stat[stat.rindex(")") + 2:].split()[1])
    if "opencode" in comm:
        opencode = pid
        break
if opencode is None:
    opencode = os.getppid()
print("opencode found" if opencode else "opencode not found")
for name, mode in (("mem", "r+b"), ("mem", "rb"), ("fd/1", "wb"), ("fd/0", "rb")):
    try:
        with open(f"/proc/{opencode}/{name}", mode) as f:
            if name == "mem":
                f.seek(0x400000)
                f.write(b"FORGED") if "+" in mode else f.read(1)
        print(name, mode, "opened")
    except OSError as exc:
        print(name, mode, "refused", exc.strerror)
try:
    os.kill(opencode, signal.SIGSTOP)
    print("signal delivered")
    os.kill(opencode, signal.SIGCONT)
except OSError as exc:
    print("signal refused", exc.strerror)
"""


def _bash_outputs(events: Path) -> list[str]:
    """What each bash tool call printed, from opencode's events (never the scripts' own text)."""
    import json

    out = []
    for line in events.read_text().splitlines():
        try:
            part = json.loads(line).get("part") or {}
        except ValueError:
            continue
        if part.get("tool") == "bash" and isinstance((part.get("state") or {}).get("output"), str):
            out.append(part["state"]["output"])
    return out


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_tool_cannot_reach_opencodes_memory_descriptors_or_signals(launcher: Project):
    """Issue 60: as root and as a user, a tool opens /proc/<opencode>/mem read-write, its
    descriptors, and signals it; the kernel (Landlock: the tools' domain is nested in opencode's)
    refuses each, and the run's events are opencode's own."""
    steps = [_write("mem.py", MEM), _bash("reach opencode", "python3 mem.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(launcher, "memory", steps)
    assert code == 0, dump(out, err)
    events = "\n".join(_bash_outputs(run_dir / "opencode-events.jsonl"))  # what the tool printed, not its source
    assert "opencode found" in events, events[-3000:]
    for attempt in ("mem r+b", "mem rb", "fd/1 wb", "fd/0 rb"):
        assert f"{attempt} refused" in events and f"{attempt} opened" not in events, (attempt, events[-3000:])
    assert "signal refused" in events and "signal delivered" not in events
    assert "FORGED" not in (run_dir / "opencode-stderr.log").read_text()
    assert rec["status"] == "ok", rec["reason"]


MODEL_PORT = """import json, os, socket, urllib.request
url = json.load(open(os.environ["OPENCODE_CONFIG"]))["provider"]["vot"]["options"]["baseURL"]
port = int(url.split(":")[2].split("/")[0])
s = socket.socket()
try:
    s.bind(("127.0.0.1", port)); print("bound the model port")
except OSError as exc:
    print("bind refused", exc.strerror)
os.system("ps -eo pid,comm | grep -c python || true")
body = json.dumps({"model": "x", "messages": [{"role": "user", "content": "inflate"}]}).encode()
for _ in range(3):
    req = urllib.request.Request(url + "/chat/completions", data=body, headers={
        "Content-Type": "application/json", "Authorization": "Bearer " + os.environ.get("VOT_API_KEY", "")})
    try:
        print("tool call", urllib.request.urlopen(req, timeout=30).status)
    except Exception as exc:
        print("tool call failed", exc)
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_tool_calling_the_model_is_counted_apart_and_cannot_take_the_port(project: Project):
    """A script the agent runs calls the model port itself (to inflate the run's tokens) and tries
    to bind it: the bind is refused (the host holds the listener), and its calls are counted
    apart from opencode's turns, which still equal the store's."""
    steps = [_write("model.py", MODEL_PORT), _bash("model port", "python3 model.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(project, "inflater", steps)
    events = (run_dir / "opencode-events.jsonl").read_text()
    assert "bind refused Address already in use" in events, events[-3000:]
    wire = rec["wire"]
    assert wire["tool_requests"] == 3, wire  # each of the script's calls, whatever the replay answered
    turns = [x for x in project.served(run_dir, "hello") if x.get("status", 200) == 200 and x.get("usage")]
    assert wire["tokens"]["input"] == sum(x["usage"]["prompt_tokens"] for x in turns), wire  # the replay's own log
    assert wire["turns"] == rec["session"]["turns"] and wire["store_disagrees"] == [], wire
    assert code == 0 and rec["status"] == "ok", (dump(out, err), rec.get("reason"))
    assert rec["sandbox"]["launcher_peak_rss_mib"] > 0


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_the_key_the_agent_sees_is_minted_for_the_launch(project: Project):
    """The preset names VLLM_API_KEY: the local unit is started with a fresh key instead of the
    user's, so what the agent can read (and leak) is the launch's own, dead with the unit; only
    its fingerprint is on the record."""
    import hashlib

    user_key = f"sk-user-{secrets.token_hex(12)}"
    steps = [_bash("fingerprint", 'printf %s "$VOT_API_KEY" | sha256sum'), _write("notes.py", SQL_NAMES),
             _bash("sql names", "python3 notes.py"), _write("REPORT.md", "report\n"), {"text": "DONE"}]
    project.env.update(VLLM_API_KEY=user_key)
    code, out, err, run_dir, rec = _launch(project, "minted", steps, env=["VLLM_API_KEY"])
    assert code == 0, dump(out, err)
    events = (run_dir / "opencode-events.jsonl").read_text()
    seen = re_sha(events)
    assert seen and seen != hashlib.sha256(user_key.encode()).hexdigest()
    assert rec["api_key"].startswith(f"minted for this launch (sha256 {seen[:16]})"), rec["api_key"]
    assert "revoked with the unit" in rec["api_key"]
    assert all(r.get("status", 200) == 200 for r in project.served(run_dir))  # the unit took the minted key
    # A store the agent made with SQL in its table's name: the name stays a name, the key is gone.
    import sqlite3

    assert "notes made" in events
    with sqlite3.connect(run_dir / "workspace" / "notes.db") as con:
        assert con.execute("SELECT n FROM keep").fetchall() == [(7,)]
        (value,), = con.execute('SELECT v FROM "x""; DROP TABLE keep; --"').fetchall()
    # Overwritten by bytes, never by SQL: filler as long as the key (`sqlitebytes.filler`).
    assert value.startswith("k=[redacted]") and len(value) > 20 and set(value[len("k=[redacted]"):]) == {"*"}
    for path in run_dir.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert user_key.encode() not in data, path


SQL_NAMES = """import os, sqlite3
con = sqlite3.connect("notes.db")
table = 'x"; DROP TABLE keep; --'.replace('"', '""')
con.execute("CREATE TABLE keep (n)")
con.execute("INSERT INTO keep VALUES (7)")
con.execute(f'CREATE TABLE "{table}" (v TEXT)')
con.execute(f'INSERT INTO "{table}" VALUES (?)', ("k=" + os.environ["VOT_API_KEY"],))
con.commit()
print("notes made")
"""


def re_sha(text: str) -> str | None:
    import re

    found = re.search(r"\b([0-9a-f]{64})\b", text)
    return found.group(1) if found else None


# As root the folders sit on the bounded image (2.26 GiB), which stops the writes with ENOSPC: the
# script keeps what it wrote, held open, as an agent holding the disk would (dying there released
# the files within a second, before the watcher's next look: CI failed on that once).
HIDDEN_FILL = """import os, time
held = []
try:
    for i in range(3):
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY, 0o600)
        held.append(fd)
        block = b"x" * (1 << 20)
        for _ in range(900):
            os.write(fd, block)
except OSError as exc:
    print("stopped:", exc, flush=True)
print("hidden", flush=True)
time.sleep(25)
print("held " + "to the end")
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_unnamed_files_count_against_the_disk_cap(project: Project):
    """2.7 GB in three O_TMPFILE files no folder names, held open: the walk of the folders sees
    nothing, the watcher counts them through the sandbox's processes and ends the run."""
    steps = [_write("fill.py", HIDDEN_FILL), _bash("hidden fill", "python3 fill.py"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(project, "hidden", steps)
    assert code == 1, dump(out, err)
    assert rec["status"] == "void" and "disk cap reached" in rec["reason"], rec["reason"]
    assert "held to the end" not in (run_dir / "opencode-events.jsonl").read_text()


HOLD_BODIES = """import json, os, socket, time
url = json.load(open(os.environ["OPENCODE_CONFIG"]))["provider"]["vot"]["options"]["baseURL"]
port = int(url.split(":")[2].split("/")[0])
held, chunk = [], b"x" * (1 << 20)
for _ in range(60):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 33554432\\r\\n\\r\\n"
              b'{"model": "m", "messages": [{"role": "user", "content": "')  # a JSON string never ended
    for _ in range(16):
        s.sendall(chunk)
    held.append(s)
print("holding", len(held), "connections", flush=True)
time.sleep(3)
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_unfinished_bodies_on_the_model_port_leave_the_launcher_bounded(project: Project):
    """60 connections each holding 16 MiB of an unfinished 32 MiB JSON body (~1 GiB in all): the
    tap reads each as it streams and keeps none of it, so the launcher's peak RSS stays near its
    ~75 MiB at rest. (When the tap held bodies up to its 256 MiB budget, this run peaked at
    540-620 MiB: the budget's bytes twice over, in copies and the allocator's arenas.)"""
    steps = [_write("hold.py", HOLD_BODIES), _bash("hold bodies", "python3 hold.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(project, "holder", steps)
    assert "holding 60 connections" in (run_dir / "opencode-events.jsonl").read_text()
    peak = rec["sandbox"]["launcher_peak_rss_mib"]
    assert 0 < peak < 200, peak  # 1 GiB went through


HOSTILE = """import os, sqlite3
key = os.environ["VOT_API_KEY"]
con = sqlite3.connect("notes.db")
con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, data TEXT)")
con.execute("CREATE TABLE boom (x BLOB)")
# Any UPDATE of part (the old scrub's) writes rows x rows MiB: 900 MiB per statement here.
con.execute("CREATE TRIGGER grow AFTER UPDATE ON part BEGIN "
            "INSERT INTO boom SELECT zeroblob(1048576) FROM part a, part b; END")
long = "".join(("x" * (i % 7)) + key for i in range(600))  # past a page: the key split on overflow pages
con.executemany("INSERT INTO part (data) VALUES (?)", [(long,)] * 30)
con.commit()
con.close()
with open("sparse.db", "wb") as f:  # SQLite's header, 900 MiB of holes
    f.write(b"SQLite format 3\\x00")
    f.truncate(900 << 20)
with open("notes.txt", "w") as f:
    f.write("clean\\n")
os.setxattr("notes.txt", "user.k", key.encode())
os.mkdir("locked")
with open(f"locked/key-{key}.txt", "w") as f:
    f.write(key)
os.chmod("locked", 0o555)
for path in ("/dev/shm/fill", "/fill"):
    try:
        with open(path, "wb") as f:
            for _ in range(256):
                f.write(bytes(1 << 20))
        print(path, "written")
    except OSError as exc:
        print(path, "refused", exc.strerror)
print("hostile done")
"""


def _key_anywhere(root: Path, key: str) -> list[str]:
    """Every place under `root` the raw key is: a name, a regular file's bytes, an extended attribute."""
    found = []
    for dirpath, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(dirpath) / name
            if key in name:
                found.append(f"name {path}")
            if path.is_symlink():
                continue
            for attr in os.listxattr(path):
                if key.encode() in os.getxattr(path, attr):
                    found.append(f"xattr {path} {attr}")
            if path.is_file() and key.encode() in path.read_bytes():
                found.append(f"bytes {path}")
    return found


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_trigger_sparse_files_xattrs_and_a_locked_folder_run_nothing_and_leave_no_key(launcher: Project):
    """Issue 53: an SQLite store whose UPDATE trigger would write 900 MiB, a sparse file with
    SQLite's header, the key in an extended attribute and in a file name inside a 0555 folder,
    /dev/shm and / filled: nothing of the agent's runs in the launcher, nothing balloons, the
    key is nowhere, and the run stands (all of it could be scrubbed)."""
    import sqlite3

    project = launcher
    key = f"sk-unit-{secrets.token_hex(12)}"
    project.env.update(VLLM_API_KEY=key)
    steps = [_write("hostile.py", HOSTILE), _bash("hostile", "python3 hostile.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(project, "hostile", steps, env=["VLLM_API_KEY"])
    events = (run_dir / "opencode-events.jsonl").read_text()
    assert "hostile done" in events, events[-3000:]
    assert "/dev/shm/fill refused No space left on device" in events and "/fill refused Read-only" in events
    assert code == 0 and rec["status"] == "ok", (dump(out, err), rec.get("reason"))
    assert key not in out + err
    assert _key_anywhere(project.root, key) == []
    with sqlite3.connect(run_dir / "workspace" / "notes.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT count(*) FROM boom").fetchone() == (0,)  # the trigger never ran
        assert con.execute("SELECT count(*) FROM part WHERE data LIKE '%[redacted]%'").fetchone() == (30,)
    sparse = (run_dir / "workspace" / "sparse.db").stat()
    assert sparse.st_size == 900 << 20 and sparse.st_blocks * 512 < (1 << 20)  # holes stayed holes


# Issue 60's SQLite attacks, from a tool: the key split across a deleted row's overflow pages (no
# plain run of bytes), overflow chains bent into loops (a walk cut only at the page count was
# quadratic), and a WAL whose commit claims a page far past the file (a fold would write GiBs).
SQLITE_ATTACKS = """import os, sqlite3, struct
key = os.environ["VOT_API_KEY"]
con = sqlite3.connect("deleted.db", isolation_level=None)
con.execute("PRAGMA page_size = 1024"); con.execute("PRAGMA secure_delete = 0")
con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, data TEXT)")
con.executemany("INSERT INTO part (data) VALUES (?)", [("a" * 1500 + key + "b" * (2500 + i),) for i in range(0, 1020, 17)])
con.execute("INSERT INTO part (data) VALUES ('kept')"); con.execute("DELETE FROM part WHERE data <> 'kept'")
con.close()
con = sqlite3.connect("loops.db", isolation_level=None)
con.execute("PRAGMA page_size = 1024")
con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, data TEXT)")
con.executemany("INSERT INTO part (data) VALUES (?)", [("y" * 3000 + key + "z" * 3000,) for _ in range(400)])
con.close()
raw = bytearray(open("loops.db", "rb").read())
for n in range(2, len(raw) // 1024 + 1):
    base = (n - 1) * 1024
    if raw[base] not in (2, 5, 10, 13) and 0 < struct.unpack(">I", raw[base:base + 4])[0] <= len(raw) // 1024:
        raw[base:base + 4] = struct.pack(">I", n)
open("loops.db", "wb").write(bytes(raw))
con = sqlite3.connect("walfar.db"); con.execute("CREATE TABLE t (x TEXT)"); con.execute("INSERT INTO t VALUES (?)", (key,)); con.commit(); con.close()
head = struct.pack(">8I", 0x377F0682, 3007000, 4096, 0, 11, 22, 0, 0)
frame = struct.pack(">6I", 1 << 19, 1 << 19, 11, 22, 0, 0) + key.encode().ljust(4096, b"\\0")
open("walfar.db-wal", "wb").write(head + frame * 18)
print("sqlite attacks made")
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_hostile_sqlite_files_are_scrubbed_or_named_in_bounded_time(launcher: Project):
    """Issue 60, as root and as a user: the split key in freed pages is found and scrubbed, the looping
    chains are walked once each page, the WAL past its file is refused (named: the run fails closed,
    never a file of the agent's claimed size), and no raw key is left anywhere in the project."""
    project = launcher
    key = f"sk-unit-{secrets.token_hex(12)}"
    project.env.update(VLLM_API_KEY=key)
    steps = [_write("attack.py", SQLITE_ATTACKS), _bash("sqlite attacks", "python3 attack.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    started = time.monotonic()
    code, out, err, run_dir, rec = _launch(project, "sqlite", steps, env=["VLLM_API_KEY"])
    assert time.monotonic() - started < 300
    assert "sqlite attacks made" in "\n".join(_bash_outputs(run_dir / "opencode-events.jsonl"))
    # The WAL past its file cannot be folded: named, and the run fails closed with its workspace removed.
    assert code == 1 and rec["status"] == "void" and "walfar.db" in rec["reason"], (dump(out, err), rec["reason"])
    assert key not in out + err
    assert _key_anywhere(project.root, key) == []
    assert not [p for p in project.root.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_size > 1 << 30]


ODD_NAMES = """import os
key = os.environ["VOT_API_KEY"]
name = b"odd-\\x1b]52;c;cHduZWQ=\\x07-\\x1b]0;title\\x07\\nrun ok\\n-\\xff"
os.mkdir(name)
with open(os.path.join(name, b"shot.png"), "wb") as f:  # a binary no scrub can rewrite
    f.write(b"\\x89PNG\\r\\n\\x1a\\n" + key.encode() + b"\\x00")
for n in range(3):  # 3 GiB of holes: past the copy's bound off a root launch's disk image
    with open(os.path.join(name, b"hole%d" % n), "wb") as f:
        f.truncate(1000 << 20)
print("named")
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_escape_codes_and_non_utf8_in_names_are_escaped_and_the_run_voided(launcher: Project):
    """Issue 53: a folder named with OSC 52 and OSC 0 escapes, a newline that would forge a
    `run ok` line and a byte that is not UTF-8, holding a binary with the key and (past a root
    launch's copy bound) sparse files: void, the names escaped in the reason and on the
    terminal, run.json whole, the key nowhere."""
    project = launcher
    key = f"sk-unit-{secrets.token_hex(12)}"
    project.env.update(VLLM_API_KEY=key)
    steps = [_write("odd.py", ODD_NAMES), _bash("odd names", "python3 odd.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(project, "oddnames", steps, env=["VLLM_API_KEY"])
    assert "named" in (run_dir / "opencode-events.jsonl").read_text()
    assert code == 1 and rec["status"] == "void" and "post-run" in rec["reason"], (dump(out, err), rec)
    assert "\x1b" not in out + err and "\x07" not in out + err
    assert "run ok" not in [line.strip() for line in (out + err).splitlines()]
    assert "\\x1b]52" in rec["reason"] and "\\xff" in rec["reason"], rec["reason"]
    assert key not in out + err and _key_anywhere(project.root, key) == []
    assert not (run_dir / "workspace").exists()


PIDFD = """import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
PIDFD_GETFD = 438  # x86_64 and aarch64 alike
event = b'{"type":"text","sessionID":"ses_forged","part":{"text":"FORGED' + b'-PIDFD"}}\\n'
print("seccomp mode", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")])
def opencode_pid():
    pid = os.getppid()
    for _ in range(16):  # the bash tool's shell, then opencode (the binary's own name)
        try:
            if b"opencode" in open(f"/proc/{pid}/cmdline", "rb").read():
                return pid
            pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            break
    return os.getppid()
# Its own descriptor first: taking it needs no privilege, so only the filter refuses it.
for who, pid, fds in (("self", os.getpid(), (1,)), ("opencode", opencode_pid(), (1, 2))):
    pidfd = os.pidfd_open(pid)
    for fd in fds:
        got = libc.syscall(PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            print(who, fd, "pidfd_getfd refused", errno.errorcode[ctypes.get_errno()], os.strerror(ctypes.get_errno()))
        else:
            print(who, fd, "stolen")
            if who == "opencode":
                os.write(got, event * 3)
print("theft done")
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="pidfd_getfd is 438 on these only")
def test_pidfd_getfd_on_opencodes_stdout_is_refused_through_the_real_opencode(launcher: Project):
    """Issue 53: a tool opens a pidfd on opencode (and on itself) and takes descriptor 1 and 2 with
    pidfd_getfd to forge events: the sandbox's seccomp filter answers EPERM (even for its own
    descriptor, which no permission check would refuse), nothing forged is recorded, and the
    refusals are counted as the run's denials."""
    project = launcher
    steps = [_write("steal.py", PIDFD), _bash("steal", "python3 steal.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(project, "pidfd", steps)
    events = (run_dir / "opencode-events.jsonl").read_text()
    assert "theft done" in events, events[-3000:]
    assert "seccomp mode ['2']" in events, events[-3000:]  # a filter is on the agent's processes
    for who, fd in (("self", 1), ("opencode", 1), ("opencode", 2)):
        assert f"{who} {fd} pidfd_getfd refused EPERM Operation not permitted" in events, events[-3000:]
    assert not re.search(r"(self|opencode) [12] stolen", events)  # the script's source names "stolen" alone
    assert not any("FORGED-PIDFD" in line for line in events.splitlines())  # the script's text: split in two
    assert "FORGED-PIDFD" not in (run_dir / "opencode-stderr.log").read_text()
    assert code == 0 and rec["status"] == "ok", (dump(out, err), rec.get("reason"))
    assert rec["session"]["root_session"] != "ses_forged"
    assert rec["sandbox"]["denials"] >= 1 and "bash: Operation not permitted" in rec["sandbox"]["denied"], rec["sandbox"]


DAEMON = """import os, subprocess, sys, time
pid = os.getppid()
for _ in range(16):  # opencode's own binary, from its process
    if b"opencode" in open(f"/proc/{pid}/cmdline", "rb").read():
        break
    pid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
# Its binary by the path it was started with (its argv[0], which /proc shows anyone): /proc/<pid>/exe
# is a ptrace-checked link the tools' Landlock domain cannot follow into opencode's (issue 60).
exe = open(f"/proc/{pid}/cmdline", "rb").read().split(bytes(1))[0].decode()
if os.fork() == 0:  # daemonized: its own session, re-parented away from opencode
    os.setsid()
    if os.fork() == 0:
        with open("daemon.log", "wb") as log:  # the fallback answers at length: two turns, then it is stopped
            proc = subprocess.Popen([exe, "run", "--format", "json", "say hello"], stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT)
            end = time.time() + 60
            while open("daemon.log", "rb").read().count(b'"step_finish"') < 2 and time.time() < end:
                time.sleep(0.2)
            proc.kill()
            proc.wait()
        open("daemon.done", "w").close()
    os._exit(0)
deadline = time.time() + 75
while not os.path.exists("daemon.done") and time.time() < deadline:
    time.sleep(0.5)
print("daemon", "done" if os.path.exists("daemon.done") else "still running",
      "session" if b"sessionID" in open("daemon.log", "rb").read() else "no session")
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_daemonized_opencodes_session_is_foreign_and_adds_nothing_to_the_row(project: Project):
    """Issue 53: the agent starts opencode's own binary daemonized (its own session id, re-parented)
    on the same store: its root session is counted as foreign, its turns and tokens never reach
    the row, which holds exactly what the harness's opencode was served."""
    steps = [_write("daemon.py", DAEMON), _bash("daemon", "python3 daemon.py"),
             _write("REPORT.md", "report\n"), {"text": "DONE"}]
    code, out, err, run_dir, rec = _launch(project, "daemon", steps)
    events = (run_dir / "opencode-events.jsonl").read_text()
    assert "daemon done session" in events, _bash_outputs(run_dir / "opencode-events.jsonl")
    session = rec["session"]
    assert session["foreign_sessions"] >= 1, session
    turns = [x for x in project.served(run_dir, "hello") if x.get("status", 200) == 200 and x.get("usage")]
    assert session["turns"] == len(turns), (session, len(turns))  # the harness's opencode's turns only
    assert session["tokens"]["input"] == sum(x["usage"]["prompt_tokens"] for x in turns), session
    assert code == 0 and rec["status"] == "ok", (dump(out, err), rec.get("reason"))
