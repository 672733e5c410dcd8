"""The post-run on what the agent left behind: links planted where the scrub writes, trees too
deep for a recursive or path-based walk, SQL in file and table names, the key in names,
link targets and other encodings, sparse files, FIFOs. Each attack is built here as the
agent would leave it; the scrub, the hand-back and the removal run on it with the
launcher's rights (root in CI) and must change nothing outside the tree, leave no key,
and fail closed (`agentfs.Unclean`) where they cannot vouch for the tree."""

from __future__ import annotations

import base64
import codecs
import os
import secrets
import sqlite3
from pathlib import Path

import pytest

from harness.sandbox import agentfs
from harness.sandbox.secrets import REDACTED, scrub_tree


def _key() -> str:
    return "sk-" + secrets.token_hex(16)


def _chain(root: Path, depth: int, name: str = "d") -> int:
    """A chain of `depth` folders under `root`, made by descriptor (deeper than PATH_MAX allows by path);
    the innermost folder's descriptor (the caller closes it)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir(name, dir_fd=fd)
        nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    return fd


def _write_at(fd: int, name: str, data: bytes) -> None:
    out = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
    os.write(out, data)
    os.close(out)


def test_a_link_at_every_name_the_scrub_might_write_changes_nothing_outside(tmp_path: Path):
    key = _key()
    outside = tmp_path / "harness"
    outside.mkdir()
    victim = outside / "module.py"
    victim.write_text("print('harness code')\n")
    secret_elsewhere = outside / "other.txt"
    secret_elsewhere.write_text(f"a host file holding {key}\n")
    ws = tmp_path / "run" / "workspace"
    ws.mkdir(parents=True)
    (ws / "REPORT.md").write_text(f"the key is {key}\n")
    # The names the old scrub wrote through, and a report that is a link to a host file.
    for name in (".REPORT.md.scrub", ".REPORT.md.tmp", ".x.scrub"):
        (ws / name).symlink_to(victim)
    (ws / "linked.md").symlink_to(secret_elsewhere)
    changed, left = scrub_tree(tmp_path / "run", [key])
    assert left == [] and changed == 1
    assert victim.read_text() == "print('harness code')\n"
    assert secret_elsewhere.read_text() == f"a host file holding {key}\n"  # never followed, never written
    assert (ws / "REPORT.md").read_text() == f"the key is {REDACTED}\n"
    assert (ws / ".REPORT.md.scrub").is_symlink() and os.readlink(ws / ".REPORT.md.scrub") == str(victim)
    assert not [p for p in ws.iterdir() if p.name.endswith(".scrub") and not p.is_symlink()]


def test_a_tree_deeper_than_the_bound_fails_closed_and_is_removed_whole(tmp_path: Path):
    key = _key()
    run = tmp_path / "run"
    (run / "workspace").mkdir(parents=True)
    (run / "workspace" / "REPORT.md").write_text(f"{key}\n")
    fd = _chain(run / "workspace", 1500)
    _write_at(fd, "deep.txt", f"{key}\n".encode())
    os.close(fd)
    with pytest.raises(agentfs.Unclean, match="nested more than"):
        scrub_tree(run, [key])
    with pytest.raises(agentfs.Unclean):
        agentfs.chown_tree(run / "workspace", os.geteuid(), os.getegid())
    agentfs.remove(run / "workspace")
    assert not (run / "workspace").exists() and run.is_dir()


def test_a_tree_past_path_max_is_walked_scrubbed_and_removed_by_descriptor(tmp_path: Path):
    key = _key()
    ws = tmp_path / "workspace"
    ws.mkdir()
    fd = _chain(ws, 40, "x" * 200)  # 8,000+ bytes of path: any path-based call fails ENAMETOOLONG
    _write_at(fd, "note.txt", f"deep {key}\n".encode())
    os.close(fd)
    changed, left = scrub_tree(ws, [key])
    assert (changed, left) == (1, [])
    assert agentfs.chown_tree(ws, os.geteuid(), os.getegid()) == 42
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(40):
        nxt = os.open("x" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    note = os.open("note.txt", os.O_RDONLY, dir_fd=fd)
    assert os.read(note, 100) == f"deep {REDACTED}\n".encode()
    os.close(note)
    os.close(fd)
    agentfs.remove(ws)
    assert not ws.exists()


def test_removal_lifts_a_chain_deeper_than_its_descriptors(tmp_path: Path):
    ws = tmp_path / "workspace"
    ws.mkdir()
    fd = _chain(ws, 3000)
    _write_at(fd, "bottom", b"x")
    os.close(fd)
    agentfs.remove(ws)
    assert not ws.exists()


def test_too_many_entries_fail_closed(tmp_path: Path):
    for i in range(60):
        (tmp_path / f"f{i}").write_text("x")
    with pytest.raises(agentfs.Unclean, match="more than 50 entries"):
        list(agentfs.walk(tmp_path, max_entries=50))


def test_sql_in_sqlite_table_and_column_names_stays_a_name(tmp_path: Path):
    key = _key()
    db = tmp_path / "store.db"
    table, column = 'part"; DROP TABLE keep; --', 'data"; DELETE FROM keep; --'
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE keep (n INTEGER)")
        con.execute("INSERT INTO keep VALUES (7)")
        con.execute(f'CREATE TABLE "{table.replace(chr(34), chr(34) * 2)}" ("{column.replace(chr(34), chr(34) * 2)}" TEXT, b BLOB)')
        con.execute("INSERT INTO " + '"' + table.replace('"', '""') + '"' + " VALUES (?, ?)",
                    (f"x {key} y", b"\x00\xff" + key.encode() + b"\x01"))
    assert scrub_tree(tmp_path, [key]) == (1, [])
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT n FROM keep").fetchall() == [(7,)]
        assert key.encode() not in db.read_bytes()
    assert {p.name for p in tmp_path.iterdir()} == {"store.db"}


def test_sql_in_duckdb_file_and_table_names_runs_nothing(tmp_path: Path, monkeypatch):
    import duckdb

    key = _key()
    monkeypatch.chdir(tmp_path)  # a COPY that ran would write here
    pwned = tmp_path / "pwned.csv"
    name = "x'; COPY (SELECT 42) TO 'pwned.csv'; --.duckdb"
    db = tmp_path / "ws" / name
    db.parent.mkdir()
    table = "t\"; COPY (SELECT 1) TO 'pwned.csv'; --"
    with duckdb.connect(str(db)) as con:
        con.execute(f'CREATE TABLE "{table.replace(chr(34), chr(34) * 2)}" (v VARCHAR)')
        con.execute('INSERT INTO "' + table.replace('"', '""') + '" VALUES (?)', [f"k={key}"])
    changed, left = scrub_tree(tmp_path / "ws", [key])
    assert (changed, left) == (1, [])
    assert not pwned.exists()
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute('SELECT v FROM "' + table.replace('"', '""') + '"').fetchall() == [(f"k={REDACTED}",)]


def test_the_key_in_names_link_targets_and_other_encodings_is_gone(tmp_path: Path):
    key = _key()
    ws = tmp_path / "ws"
    (ws / f"dir-{key}" / f"sub-{key}").mkdir(parents=True)
    (ws / f"dir-{key}" / f"sub-{key}" / f"file-{key}.txt").write_text("plain\n")
    (ws / "link").symlink_to(f"/nowhere/{key}")
    (ws / "forms.txt").write_text("\n".join([
        codecs.encode(key, "rot13"), base64.b85encode(b"ab" + key.encode()).decode(),
        base64.a85encode(key.encode()).decode(), key[::-1]]) + "\n")
    (ws / "utf16.txt").write_bytes(f"k={key}".encode("utf-16-le"))
    changed, left = scrub_tree(ws, [key])
    assert left == []
    assert f"k={key}".encode("utf-16-le") not in (ws / "utf16.txt").read_bytes()
    assert not (ws / "link").is_symlink()
    every = [p.name for p in ws.rglob("*")]
    assert not any(key in n for n in every), every
    assert (ws / f"dir-{REDACTED}" / f"sub-{REDACTED}" / f"file-{REDACTED}.txt").read_text() == "plain\n"
    assert (ws / "forms.txt").read_text().count(REDACTED) == 4


def test_a_sparse_file_is_never_expanded_and_a_fifo_never_opened(tmp_path: Path):
    key = _key()
    ws = tmp_path / "ws"
    ws.mkdir()
    sparse = ws / "sparse.log"
    with open(sparse, "wb") as f:
        f.seek(8 << 30)
        f.write(f"tail {key}\n".encode())
    os.mkfifo(ws / "REPORT.md")
    free = os.statvfs(tmp_path).f_bavail
    changed, left = scrub_tree(ws, [key])
    assert (changed, left) == (0, ["sparse.log"])
    assert os.stat(sparse).st_blocks * 512 < 1 << 20
    assert abs(os.statvfs(tmp_path).f_bavail - free) * os.statvfs(tmp_path).f_frsize < 64 << 20


def test_the_store_copy_follows_no_link(tmp_path: Path):
    """`opencode.db-wal -> /dev/zero` would fill the launcher's TMPDIR; a linked db would read a host file."""
    from harness.errors import UserError
    from harness.opencode.store import store_copy

    data = tmp_path / "opencode"
    data.mkdir()
    with sqlite3.connect(data / "opencode.db") as con:
        con.execute("CREATE TABLE session (id TEXT)")
    (data / "opencode.db-wal").symlink_to("/dev/zero")
    with pytest.raises(UserError, match="not a file the harness reads"):
        with store_copy(data):
            pass
    (data / "opencode.db-wal").unlink()
    os.mkfifo(data / "opencode.db-shm")
    with pytest.raises(UserError, match="not a regular file"):
        with store_copy(data):
            pass
    (data / "opencode.db-shm").unlink()
    with store_copy(data) as conn:
        assert conn.execute("SELECT count(*) FROM session").fetchone()[0] == 0
    host = tmp_path / "host.db"
    (data / "opencode.db").rename(host)
    (data / "opencode.db").symlink_to(host)
    with pytest.raises(UserError, match="no opencode session store"):
        with store_copy(data):
            pass


def test_the_disk_watch_counts_unnamed_files_and_data_past_path_max(tmp_path: Path):
    """Files open but named nowhere (O_TMPFILE) count when the sandbox's namespace is known, data
    below folders deeper than PATH_MAX counts, and a tree nested past the bound counts as full."""
    from harness.sandbox.limits import FULL, DiskWatch, MiB, allocated_bytes

    ws = tmp_path / "ws"
    ws.mkdir()
    fd = _chain(ws, 40, "y" * 200)
    _write_at(fd, "data", b"x" * (8 * MiB))
    os.close(fd)
    assert allocated_bytes([ws]) >= 8 * MiB
    hidden = os.open(ws, os.O_TMPFILE | os.O_WRONLY, 0o600)
    try:
        os.write(hidden, b"z" * (16 * MiB))
        own_netns = os.stat("/proc/self/ns/net").st_ino
        blind = DiskWatch([ws], cap=20 * MiB, every_s=0)
        seeing = DiskWatch([ws], cap=20 * MiB, every_s=0, netns=lambda: own_netns)
        assert blind() is None and blind.peak < 16 * MiB
        assert seeing() is not None and seeing.peak >= 24 * MiB
    finally:
        os.close(hidden)
    deep = tmp_path / "deep"
    deep.mkdir()
    os.close(_chain(deep, 300))
    assert allocated_bytes([deep]) == FULL
    assert "more than the watcher can total" in DiskWatch([deep], cap=1 << 40, every_s=0)()
