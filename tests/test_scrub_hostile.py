"""The post-run scrub against databases and files built to make it run the agent's code or
expand what it copies (issue 53): nothing of theirs runs, the key is gone, holes stay holes."""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import sqlite3
import tempfile
from pathlib import Path

import pytest

from harness.sandbox.secrets import scrub_tree
from harness.sandbox.sqlitebytes import filler


def _key() -> str:
    return "sk-" + secrets.token_hex(16)


def _sqlite_with_trigger(db, key: str) -> None:
    """A store whose every UPDATE of `part` would write 64 MiB into `boom`, with a view that
    would recurse without end, and values longer than a page (the key split across overflow pages)."""
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, data TEXT, raw BLOB)")
        con.execute("CREATE TABLE boom (x BLOB)")
        con.execute("CREATE TRIGGER grow AFTER UPDATE ON part BEGIN "
                    "INSERT INTO boom SELECT zeroblob(1 << 20) FROM generate_series(1, 64); END")
        con.execute("CREATE VIEW forever AS WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
                    "SELECT n FROM r")
        long = "".join(f"{'x' * (i % 7)}{key}" for i in range(600))  # ~25 KB: six pages, every boundary split
        con.executemany("INSERT INTO part (data, raw) VALUES (?, ?)",
                        [(long, long.encode()) for _ in range(4)] + [(f"short {key}", b"none")])


def test_an_sqlite_trigger_and_view_never_run_and_split_keys_are_gone(tmp_path):
    key = _key()
    db = tmp_path / "store.db"
    _sqlite_with_trigger(db, key)
    size = db.stat().st_size
    changed, left = scrub_tree(tmp_path, [key])
    assert (changed, left) == (1, [])
    assert db.stat().st_size == size  # same pages: nothing grew, nothing of theirs ran
    raw = db.read_bytes()
    assert key.encode() not in raw
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert con.execute("SELECT count(*) FROM boom").fetchone() == (0,)  # the trigger never fired
        rows = con.execute("SELECT data, raw FROM part ORDER BY id").fetchall()
    assert len(rows) == 5
    for data, blob in rows:
        assert key not in data and key.encode() not in blob
        # Read through SQLite (the overflow chains reassembled), every copy of the key became filler.
        assert data.count(filler(len(key)).decode()) == data.count("[redacted]") > 0


def test_a_wal_is_folded_in_and_every_side_file_removed(tmp_path):
    key = _key()
    src = tmp_path / "src"
    src.mkdir()
    agent = tmp_path / "agent"
    agent.mkdir()
    con = sqlite3.connect(src / "opencode.db")
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, data TEXT)")
    con.commit()
    con.executemany("INSERT INTO part (data) VALUES (?)", [(f"tool output {i}: VOT_API_KEY={key}",) for i in range(300)])
    con.commit()
    for name in ("opencode.db", "opencode.db-wal"):  # as a SIGKILLed opencode leaves them
        shutil.copy(src / name, agent / name)
    con.close()
    assert key.encode() in (agent / "opencode.db-wal").read_bytes()
    assert scrub_tree(agent, [key]) == (1, [])
    assert sorted(p.name for p in agent.iterdir()) == ["opencode.db"]
    assert key.encode() not in (agent / "opencode.db").read_bytes()
    with sqlite3.connect(agent / "opencode.db") as check:
        assert check.execute("SELECT count(*) FROM part WHERE data LIKE '%[redacted]%'").fetchone() == (300,)


def test_a_sparse_file_with_sqlites_header_is_never_expanded(tmp_path):
    key = _key()
    holding, clean = tmp_path / "a.db", tmp_path / "b.db"
    for path, body in ((holding, key.encode()), (clean, b"nothing")):
        with open(path, "wb") as f:
            f.write(b"SQLite format 3\x00" + b"\x10\x00\x01\x01\x00\x40\x20\x20" + b"\x00" * 76)
            f.seek(512 << 20)
            f.write(body)
            f.truncate(1 << 30)
    before = {p: p.stat().st_blocks for p in (holding, clean)}
    changed, left = scrub_tree(tmp_path, [key])
    assert (changed, left) == (0, ["a.db"])  # named, never rewritten: the caller fails closed
    for path, blocks in before.items():
        assert path.stat().st_blocks == blocks and path.stat().st_size == 1 << 30
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".scrub")]


def test_a_duckdb_macro_named_contains_or_replace_is_never_called(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    key = _key()
    db = tmp_path / "shop.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE MACRO contains(a, b) AS error('the agent''s macro ran')")
        con.execute("CREATE MACRO replace(a, b, c) AS error('the agent''s macro ran')")
        con.execute("CREATE VIEW v AS SELECT contains('a', 'b') AS x")
        con.execute("CREATE TABLE t (body VARCHAR, n INTEGER)")
        con.executemany("INSERT INTO t VALUES (?, ?)", [(f"token={key}", i) for i in range(50)])
    assert scrub_tree(tmp_path, [key]) == (1, [])  # an error from their macro would have left it named
    assert key.encode() not in db.read_bytes()
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*), sum(n) FROM t WHERE body = 'token=[redacted]'").fetchone() == (50, 1225)


def test_a_duckdb_file_whose_update_would_run_its_code_is_refused(tmp_path):
    duckdb = pytest.importorskip("duckdb")
    key = _key()
    db = tmp_path / "shop.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("CREATE MACRO heavy(a) AS length(repeat(a, 100000000)) > 0")
        con.execute("CREATE TABLE t (body VARCHAR CHECK (heavy(body)))")
        con.execute("INSERT INTO t SELECT ? FROM range(1)", [f"token={key}"])
    raw = db.read_bytes()
    assert scrub_tree(tmp_path, [key]) == (0, ["shop.duckdb"])
    assert db.read_bytes() == raw  # never rewritten: named, and the launch fails closed on it


def test_the_key_in_extended_attributes_is_removed(tmp_path):
    key = _key()
    (tmp_path / "notes.txt").write_text("clean\n")
    (tmp_path / "folder").mkdir()
    os.setxattr(tmp_path / "notes.txt", "user.note", f"token={key}".encode())
    os.setxattr(tmp_path / "notes.txt", "user.kept", b"nothing secret")
    os.setxattr(tmp_path / "folder", f"user.{key}", b"x")
    os.setxattr(tmp_path / "folder", "user.b64", base64.b64encode(f"a{key}".encode()))
    changed, left = scrub_tree(tmp_path, [key])
    assert left == [] and changed == 2
    assert os.listxattr(tmp_path / "notes.txt") == ["user.kept"]
    assert os.listxattr(tmp_path / "folder") == []
    assert (tmp_path / "notes.txt").read_text() == "clean\n"


USER_ID = 4242


def _as_user(work, *args):
    """`work(*args)` in a child process that dropped to an ordinary user (as a user's launch
    runs its post-run: the agent's files are its own, so DAC bits bind it): its result, or the
    text of what it raised."""
    import pickle

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no exec, the harness is already imported
        code = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(USER_ID)
            os.setuid(USER_ID)
            try:
                out = ("ok", work(*args))
            except Exception as exc:  # noqa: BLE001 - handed back to the test
                out = ("raised", f"{type(exc).__name__}: {exc}")
            os.write(write, pickle.dumps(out))
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0 and data
    return pickle.loads(data)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="drops to an ordinary user: needs root")


@pytest.fixture
def user_tree():
    """A folder an ordinary user owns, where that user can reach it."""
    base = tempfile.mkdtemp(prefix="llms-user-", dir="/tmp")
    os.chmod(base, 0o755)
    tree = Path(base) / "agent"
    tree.mkdir()
    os.chown(base, USER_ID, USER_ID)  # the run folder: the user's own
    yield tree
    shutil.rmtree(base, ignore_errors=True)


def _chown_all(root):
    for path in (root, *root.rglob("*")):
        os.lchown(path, USER_ID, USER_ID)


@needs_root
def test_as_a_user_a_key_named_file_in_a_0555_folder_is_renamed_and_removable(user_tree):
    from harness.sandbox import agentfs

    key = _key()
    locked = user_tree / "locked"
    (locked / f"inner-{key}").mkdir(parents=True)
    (locked / f"inner-{key}" / "f.txt").write_text(f"{key}\n")
    (locked / f"key-{key}.txt").write_text(f"the key {key}\n")
    (locked / f"link-{key}").symlink_to(f"/nowhere/{key}")
    os.setxattr(locked / f"key-{key}.txt", "user.k", key.encode())
    _chown_all(user_tree)
    for folder in (locked / f"inner-{key}", locked):
        os.chmod(folder, 0o555)
    outcome = _as_user(scrub_tree, user_tree, [key])
    assert outcome[0] == "ok", outcome
    assert outcome[1][1] == []
    for path in user_tree.rglob("*"):
        assert key not in path.name, path
        if path.is_file() and not path.is_symlink():
            assert key.encode() not in path.read_bytes()
            assert not [a for a in os.listxattr(path) if key.encode() in os.getxattr(path, a)]
    # Removal as the user, with folders 0555 again and a name still holding the key.
    os.chmod(locked, 0o755)
    (locked / f"again-{key}").write_text("x")
    os.lchown(locked / f"again-{key}", USER_ID, USER_ID)
    os.chmod(locked, 0o555)
    outcome = _as_user(agentfs.remove, user_tree)
    assert outcome == ("ok", None) and not user_tree.exists()


@needs_root
def test_as_a_user_an_error_never_carries_the_raw_key(user_tree):
    """A folder the user cannot fix (root's own, inside the agent's tree): the removal fails,
    and what it says holds no name (the raw key in it was printed twice once)."""
    from harness.sandbox import agentfs

    key = _key()
    stuck = user_tree / "stuck"
    stuck.mkdir()
    (stuck / f"key-{key}.txt").write_text("x")
    _chown_all(user_tree)
    os.chown(stuck, 0, 0)
    os.chmod(stuck, 0o555)
    outcome = _as_user(agentfs.remove, user_tree)
    assert outcome[0] == "raised" and key not in outcome[1], outcome


def test_a_sparse_store_is_refused_never_copied_whole(tmp_path):
    """opencode's store read for the figures: a sparse file behind its name (24 KiB on disk,
    3 GiB in the launcher's TMPDIR once) is refused before any copy."""
    from harness.errors import UserError
    from harness.opencode.store import store_copy

    with open(tmp_path / "opencode.db", "wb") as f:
        f.write(b"SQLite format 3\x00")
        f.truncate(512 << 20)
    with pytest.raises(UserError, match="sparse"):
        with store_copy(tmp_path):
            pass


def test_the_scrub_past_its_time_bound_fails_closed(tmp_path):
    """Post-run time is bounded (100,000 files held the unit 349 s once): past the deadline the
    scrub raises, and the launch fails closed on it."""
    import time

    from harness.sandbox.secrets import PastDeadline

    key = _key()
    for i in range(5):
        (tmp_path / f"f{i}.txt").write_text(key)
    with pytest.raises(PastDeadline):
        scrub_tree(tmp_path, [key], deadline=time.monotonic() - 1)


def test_the_record_on_disk_says_void_until_the_post_run_finishes(tmp_path):
    """A post-run that crashes (a save that fails) leaves void on disk, never ok."""
    import json
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from harness.launcher.launch import _save_pending
    from harness.records.record import RowKey, RunRecord, Status, Timestamps

    record = RunRecord(run_id="r1", key=RowKey(preset="p", effort="e", effort_requested="e", gpu="g"),
                       environment="local", stack="replay", mission="hello",
                       times=Timestamps(launch=datetime.now(UTC)), status=Status.ok)
    _save_pending(record, SimpleNamespace(paths=SimpleNamespace(dir=tmp_path)))
    saved = json.loads((tmp_path / "run.json").read_text())
    assert (saved["status"], saved["stopped_at"]) == ("void", "post-run")
    assert saved["reason"] == "the post-run did not finish"
    assert record.status == Status.ok and record.reason is None  # in memory: as the launch left it


# --- issue 60, item 4: the SQLite scrub complete and linear ------------------------------------------

def _overflow_db(db: Path, key: str, rows: int = 40) -> int:
    """A store of long values (each a chain of overflow pages) with the key in each; its page size."""
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA page_size = 1024")
        con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, data TEXT)")
        con.executemany("INSERT INTO part (data) VALUES (?)", [(("y" * 3000) + key + ("z" * 3000),)
                                                              for _ in range(rows)])
    return 1024


def _looping(db: Path, page_size: int) -> int:
    """Every overflow page's next pointer bent back to the page itself's chain start: chains that loop.
    The pages changed."""
    import struct

    raw = bytearray(db.read_bytes())
    pages = len(raw) // page_size
    bent = 0
    for number in range(2, pages + 1):
        base = (number - 1) * page_size
        if raw[base] in (2, 5, 10, 13):  # a b-tree page
            continue
        nxt = struct.unpack(">I", raw[base:base + 4])[0]
        if 0 < nxt <= pages:
            raw[base:base + 4] = struct.pack(">I", number)  # a chain of one page, followed forever
            bent += 1
    db.write_bytes(bytes(raw))
    return bent


def test_looping_overflow_chains_are_walked_once_each_page(tmp_path, monkeypatch):
    """Reads grow with the file, not with its square: twice the looping chains, about twice the
    reads (a chain cut at the page count read pages x chains: 1,652 s for a 512 KiB file)."""
    from harness.sandbox import sqlitebytes
    from harness.sandbox.secret_forms import forms as encoded_forms, pattern_of

    key = _key()
    forms = encoded_forms([key])
    real = os.pread
    counts = {}
    for rows in (100, 200):
        db = tmp_path / f"loop-{rows}.db"
        size = _overflow_db(db, key, rows=rows)
        assert _looping(db, size) > rows
        reads = []
        monkeypatch.setattr(sqlitebytes.os, "pread", lambda fd, n, at, reads=reads: reads.append(n) or real(fd, n, at))
        fd = os.open(db, os.O_RDWR)
        try:
            sqlitebytes.scrub(fd, forms, pattern_of(forms))
            assert not sqlitebytes.holds(fd, forms, pattern_of(forms))
        finally:
            os.close(fd)
            monkeypatch.setattr(sqlitebytes.os, "pread", real)
        counts[rows] = len(reads)
        assert key.encode() not in db.read_bytes()
    assert counts[200] < 2.5 * counts[100], counts


def test_a_wal_frame_far_past_the_file_is_refused_never_written(tmp_path):
    import struct

    key = _key()
    agent = tmp_path / "agent"
    agent.mkdir()
    db = agent / "opencode.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, data TEXT)")
        con.execute("INSERT INTO part (data) VALUES (?)", (f"the key {key}",))
    page_size = 4096
    header = struct.pack(">8I", 0x377F0682, 3007000, page_size, 0, 11, 22, 0, 0)
    frame = struct.pack(">6I", 1 << 19, 1 << 19, 11, 22, 0, 0) + key.encode().ljust(page_size, b"\0")
    (agent / "opencode.db-wal").write_bytes(header + frame * 18)  # 72 KiB claiming page 524288
    changed, left = scrub_tree(agent, [key])
    assert "opencode.db" in left  # named: the caller fails closed
    assert db.stat().st_size < 1 << 20  # never a 2 GiB file of the agent's claimed size
    assert not [p for p in agent.iterdir() if p.name.endswith(".scrub")]


def _split_across_pages(raw: bytes, size: int, key: str) -> int:
    """Copies of the key whose head ends one page and whose tail starts the page that page names as
    its next (after the 4-byte pointer): what no plain scan of the bytes finds."""
    import struct

    pages, k, found = len(raw) // size, key.encode(), 0
    for number in range(2, pages + 1):
        page = raw[(number - 1) * size:number * size]
        nxt = struct.unpack(">I", page[:4])[0]
        if 1 < nxt <= pages:
            following = raw[(nxt - 1) * size + 4:(nxt - 1) * size + 4 + len(k)]
            joined = page[-(len(k) - 1):] + following[:len(k) - 1]
            found += k in joined
    return found


def test_the_key_in_a_deleted_rows_overflow_pages_is_found_and_scrubbed(tmp_path):
    key = _key()
    db = tmp_path / "opencode.db"
    con = sqlite3.connect(db, isolation_level=None)
    con.execute("PRAGMA page_size = 1024")
    assert con.execute("PRAGMA secure_delete = 0").fetchall() == [(0,)]  # freed pages keep their bytes
    con.execute("CREATE TABLE part (id INTEGER PRIMARY KEY, data TEXT)")
    # Every offset of the key against the page edges: some copies are split between two overflow pages.
    con.executemany("INSERT INTO part (data) VALUES (?)",
                    [(("a" * 1500) + key + ("b" * (2500 + i)),) for i in range(0, 1020, 17)])
    con.execute("INSERT INTO part (data) VALUES ('kept')")
    con.execute("DELETE FROM part WHERE data <> 'kept'")  # the chains go to the freelist, their bytes left
    con.close()
    raw = db.read_bytes()
    whole = raw.count(key.encode())
    assert 0 < whole < 60 and _split_across_pages(raw, 1024, key) > 0  # a copy split across freed pages
    changed, left = scrub_tree(tmp_path, [key])
    assert (changed, left) == (1, [])
    from harness.sandbox import sqlitebytes
    from harness.sandbox.secret_forms import forms as encoded_forms, pattern_of

    forms = encoded_forms([key])
    fd = os.open(db, os.O_RDONLY)
    try:
        assert not sqlitebytes.holds(fd, forms, pattern_of(forms))
    finally:
        os.close(fd)
    # No split copy either: the freed pages' content read as their chains ran holds no piece pair of it.
    assert _split_across_pages(db.read_bytes(), 1024, key) == 0
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT data FROM part").fetchall() == [("kept",)]
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
