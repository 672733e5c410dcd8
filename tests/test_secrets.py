"""No secret leaks: a launch whose unit demands a key (vLLM's VLLM_API_KEY convention,
passed by name) and whose preset passes a second secret by name; the scripted agent
even echoes its key into a tool's output. While it runs, no process it started carries
either secret on its command line; afterwards no file under the project root holds
either (run folder, opencode store, logs, ledger, record), and the agent's echo was
redacted."""

from __future__ import annotations

import secrets
import subprocess
import threading
import time

import psutil
import pytest
import yaml

from harness.sandbox.secrets import REDACTED, scrub_tree
from conftest import REPO, Project, processes_under, stop
from test_launch_e2e import SMALL_PROBE, dump


class Cmdlines:
    """Every command line of the launch's process tree, sampled while it runs."""

    def __init__(self, proc: subprocess.Popen, project: Project) -> None:
        self.proc, self.seen, self.project = proc, {}, project
        self.rounds, self.errors = 0, []
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        deadline = time.monotonic() + 400
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.rounds += 1
            try:
                self._round()
            except Exception as exc:  # noqa: BLE001 - a sampler that dies makes the argv check vacuous
                self.errors.append(repr(exc))
            time.sleep(0.05)

    def _round(self) -> None:
        try:
            procs = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            # A child that ended during the walk (the launch starts many short ones: the
            # sandbox's probes, enter.py) is no reason to stop sampling; the launch ending is.
            procs = []
        # The unit by the pid its ledger entry and its run folder's pid file name, too (a busy
        # box can starve the tree walk), and every half second whatever runs with this project
        # as its root (a unit of its own session, whose tree walk a loaded CI box lost once).
        pids = [unit.get("pid") for unit in self.project.ledger().values() if isinstance(unit, dict)]
        for pid_file in self.project.root.glob(".llms-benchmark/runs/*/*.pid"):
            try:
                pids.append(int(pid_file.read_text().strip()))
            except (OSError, ValueError):
                continue
        for pid in pids:
            try:
                procs.append(psutil.Process(int(pid)))
            except (psutil.Error, TypeError, ValueError):
                continue
        if self.rounds % 10 == 0:
            procs += processes_under(self.project.root)
        for p in procs:
            try:
                key, argv = (p.pid, p.create_time()), p.cmdline()
            except psutil.Error:
                continue
            # Every command line a process showed: read between fork and exec it is its parent's,
            # so no read replaces another.
            versions = self.seen.setdefault(key, [])
            if argv and argv not in versions:
                versions.append(argv)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_a_launch_with_known_keys_leaves_them_nowhere(project: Project):
    unit_key, hf_token = f"sk-unit-{secrets.token_hex(12)}", f"hf_{secrets.token_hex(12)}"
    hello = yaml.safe_load((project.root / "replay" / "hello.yaml").read_text())  # quick: see conftest
    hello["trajectories"][1]["steps"].insert(0, {"tool_calls": [{"name": "bash", "arguments": {
        "command": 'echo "my key is $VOT_API_KEY"', "description": "leak the key"}}]})
    # Every encoding the agent might reach for, in its tool output and in its report.
    hello["trajectories"][1]["steps"].insert(1, {"tool_calls": [{"name": "write", "arguments": {
        "filePath": "encode.py", "content": ENCODE}}]})
    hello["trajectories"][1]["steps"].insert(2, {"tool_calls": [{"name": "bash", "arguments": {
        "command": "python3 encode.py | tee -a FORMS.txt", "description": "leak it encoded"}}]})
    hello["trajectories"][1]["steps"].insert(5, {"tool_calls": [{"name": "bash", "arguments": {
        "command": "python3 encode.py >> REPORT.md", "description": "into the report"}}]})
    project.add_trajectory("leaky", hello)
    project.add_preset("replay-leaky", trajectory="leaky", env=["VLLM_API_KEY", "HF_TOKEN"])
    project.env.update(VLLM_API_KEY=unit_key, HF_TOKEN=hf_token)

    proc = project.popen(["launch", "local", "replay", "replay-leaky", "--mission", "hello", *SMALL_PROBE])
    lines = Cmdlines(proc, project)
    try:
        out, err = proc.communicate(timeout=360)
    except subprocess.TimeoutExpired:
        out, err = stop(proc)
    lines.thread.join(timeout=10)
    assert proc.returncode == 0, dump(out, err)
    assert len(lines.seen) >= 4  # the launch, the replay unit, opencode (smoke and mission), tools
    shown = [argv for versions in lines.seen.values() for argv in versions]
    for argv in shown:
        joined = " ".join(argv)
        assert unit_key not in joined and hf_token not in joined, argv
    unit_pids = {int(f.read_text()) for f in project.root.glob(".llms-benchmark/runs/*/*.pid")}
    assert any("--api-key-env" in argv and "VLLM_API_KEY" in argv for argv in shown), (
        lines.rounds, lines.errors[-5:], unit_pids, {k: v for k, v in lines.seen.items() if k[0] in unit_pids},
        [argv[:6] for argv in shown])

    run_dir, rec = project.only_run()
    assert unit_key not in out + err and hf_token not in out + err
    # The unit demanded the key and got it: every chat request was answered.
    assert [r.get("status", 200) for r in project.served(run_dir)] == [200] * len(project.served(run_dir))
    events = (run_dir / "opencode-events.jsonl").read_text()
    assert f"my key is {REDACTED}" in events  # the echo happened, and was redacted
    scanned = 0
    for path in project.root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            scanned += 1
            assert unit_key.encode() not in data and hf_token.encode() not in data, path
    assert scanned > 20
    assert any(p.name == "opencode.db" for p in run_dir.rglob("*"))
    # Each encoded form the agent printed (into its events, its store, FORMS.txt and the
    # report copied into the run folder) is gone from every file.
    printed = [f.encode() for f in encoded_forms(unit_key)]
    assert "into the report" in events and (run_dir / "report.md").is_file()
    for path in project.root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            assert not [f for f in printed if f in data], path


ENCODE = """import base64, os, urllib.parse
k = os.environ["VOT_API_KEY"].encode()
for lead in (b"", b"a", b"ab", b"abc", b"abcd"):
    print("b64", base64.b64encode(lead + k).decode(), base64.urlsafe_b64encode(lead + k).decode())
    print("b32", base64.b32encode(lead + k).decode(), base64.b32encode(lead + k).decode().lower())
print("hex", k.hex(), k.hex().upper(), "rev", k[::-1].decode(), "url", urllib.parse.quote(k.decode() + "/"))
"""


def encoded_forms(key: str) -> list[str]:
    """What ENCODE prints for `key`, computed here independently of the harness's scrub."""
    import base64
    from urllib.parse import quote

    k = key.encode()
    out = [k.hex(), k.hex().upper(), key[::-1], quote(key + "/", safe="")]
    for lead in (b"", b"a", b"ab", b"abc", b"abcd"):
        out += [base64.b64encode(lead + k).decode(), base64.urlsafe_b64encode(lead + k).decode(),
                base64.b32encode(lead + k).decode(), base64.b32encode(lead + k).decode().lower()]
    return out


def test_scrub_covers_text_and_sqlite_and_leaves_no_old_page(tmp_path):
    import sqlite3

    key = "sk-" + secrets.token_hex(16)
    (tmp_path / "log.txt").write_text(f"a {key} b\n")
    (tmp_path / "clean.txt").write_text("nothing here\n")
    db = tmp_path / "store.db"
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE part (id INTEGER, data TEXT, n INTEGER)")
        con.executemany("INSERT INTO part VALUES (?, ?, ?)", [(i, f"x{i} {key} y" * 50, i) for i in range(200)])
    changed, left = scrub_tree(tmp_path, [key])
    assert changed == 2 and left == []
    assert (tmp_path / "log.txt").read_text() == f"a {REDACTED} b\n"
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT count(*) FROM part WHERE data LIKE '%[redacted]%'").fetchone()[0] == 200
        assert con.execute("SELECT sum(n) FROM part").fetchone()[0] == sum(range(200))
    for path in tmp_path.iterdir():
        assert key.encode() not in path.read_bytes(), path


def test_scrub_finds_base64_and_url_encoded_forms_at_any_alignment(tmp_path):
    import base64
    from urllib.parse import quote

    key = "sk-" + secrets.token_hex(16) + "/+="
    lines = [f"plain {key}", f"url {quote(key, safe='')}"]
    for lead in ("", "a", "ab"):
        lines.append("b64 " + base64.b64encode(f"{lead}Bearer {key}!".encode()).decode())
        lines.append("b64url " + base64.urlsafe_b64encode(f"{lead}{key}".encode()).decode())
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    changed, left = scrub_tree(tmp_path, [key])
    assert (changed, left) == (1, [])
    text = (tmp_path / "events.jsonl").read_text()
    assert text.count(REDACTED) == len(lines)
    for before, after in zip(lines, text.splitlines()):
        if before.startswith("b64"):  # what is left could encode at most a few bytes of the key
            kept = len(after) - len(REDACTED)
            assert len(before) - kept >= (len(key) - 3) * 4 // 3, (before, after)


def test_a_duckdb_store_is_scrubbed_through_duckdb_and_stays_readable(tmp_path):
    import base64
    import json as _json

    import duckdb

    key = "sk-" + secrets.token_hex(16)
    db = tmp_path / "telemetry.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE TABLE spans (name VARCHAR, attributes JSON, duration_ns BIGINT)")
        con.execute("CREATE TABLE logs (body VARCHAR)")
        rows = [(f"POST /orders {i}", _json.dumps({"http.request.header.authorization": f"Bearer {key}",
                                                    "i": i}), i) for i in range(500)]
        con.executemany("INSERT INTO spans VALUES (?, ?, ?)", rows)
        con.execute("INSERT INTO logs VALUES (?), (?)",
                    [f"token={key}", "auth " + base64.b64encode(f"user:{key}".encode()).decode()])
    changed, left = scrub_tree(tmp_path, [key])
    assert (changed, left) == (1, [])
    assert key.encode() not in db.read_bytes()
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*), sum(duration_ns) FROM spans").fetchone() == (500, sum(range(500)))
        attrs = con.execute("SELECT attributes->>'http.request.header.authorization' FROM spans LIMIT 1").fetchone()
        assert attrs == (f"Bearer {REDACTED}",)
        bodies = [r[0] for r in con.execute("SELECT body FROM logs ORDER BY body").fetchall()]
        assert bodies[1] == f"token={REDACTED}" and REDACTED in bodies[0]
        assert con.execute("SELECT count(*) FROM spans WHERE attributes::VARCHAR LIKE ?",
                           [f"%{key}%"]).fetchone() == (0,)


def test_hex_base32_reversed_forms_at_every_alignment_and_across_chunk_edges(tmp_path, monkeypatch):
    import base64

    import harness.sandbox.fd_files as mod

    monkeypatch.setattr(mod, "CHUNK", 7)  # every form straddles a read boundary somewhere
    key = "sk-" + secrets.token_hex(16)
    k = key.encode()
    lines = [f"hex {k.hex()}", f"HEX {k.hex().upper()}", f"rev {key[::-1]}"]
    for lead in (b"", b"a", b"ab", b"abc", b"abcd"):
        lines += [f"b32 {base64.b32encode(lead + k + b'!').decode()}",
                  f"b32l {base64.b32encode(lead + k).decode().lower()}"]
    for lead in (b"", b"a", b"ab"):
        lines.append(f"b64 {base64.b64encode(lead + k).decode()}")
    (tmp_path / "report.md").write_text("\n".join(lines) + "\n")
    assert scrub_tree(tmp_path, [key]) == (1, [])
    after = (tmp_path / "report.md").read_text().splitlines()
    assert len(after) == len(lines) and all(REDACTED in line for line in after), after
    for before, now in zip(lines, after):  # what is left could encode at most a few bytes of the key
        assert len(now) - len(REDACTED) <= len(before) - len(k), (before, now)


def test_a_binary_it_cannot_parse_is_named_never_rewritten(tmp_path):
    key = "sk-" + secrets.token_hex(16)
    blob = b"\x89PNG\r\n\x1a\n\xff\xfe" + key.encode() + b"\x00\x01"
    (tmp_path / "shot.png").write_bytes(blob)
    changed, left = scrub_tree(tmp_path, [key])
    assert changed == 0 and left == ["shot.png"]  # relative: the record names no host path
    assert (tmp_path / "shot.png").read_bytes() == blob


def test_run_json_is_scrubbed_after_everything_else(tmp_path, monkeypatch):
    import harness.sandbox.secrets as mod

    key = "sk-" + secrets.token_hex(16)
    for name in ("run.json", "a.log", "z.log"):
        (tmp_path / name).write_text(f"{key}\n")
    order = []
    real = mod._scrub_at
    monkeypatch.setattr(mod, "_scrub_at", lambda fd, name, st, encoded: (order.append(name), real(fd, name, st, encoded))[1])
    assert scrub_tree(tmp_path, [key]) == (3, [])
    assert order == ["a.log", "z.log", "run.json"]
