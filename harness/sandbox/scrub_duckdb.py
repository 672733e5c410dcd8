"""A DuckDB file the agent left, scrubbed: copied (holes kept) into a private folder and opened
read-only there with external access off, the configuration locked, memory and spill bounded,
every function the scrub calls schema-qualified (`system.main.contains`: an agent's macro of that
name is never called); a file carrying code an UPDATE or a copy would run (CHECK constraints,
generated columns, defaults, indexes) is refused; otherwise every form replaced in each VARCHAR
and JSON column and each table copied into a fresh file (no old block keeps a copy), written back."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.sandbox.fd_files import copy_extents, holds_any, open_file, unlink, write_back
from harness.sandbox.secret_forms import REDACTED

DUCK_MEMORY = "256MB"  # the scrub's DuckDB: its memory and its spill bounded (a macro once took 3.3 GiB)


def _quote(identifier: str) -> str:
    """An SQL identifier as a quoted name whatever it holds (a name carrying SQL stays a name)."""
    return '"' + identifier.replace('"', '""') + '"'


def _duck_connect(path: Path, read_only: bool = False, attach: Path | None = None):
    """A DuckDB connection that can reach no file but `path` (and `attach`, made before it locks):
    external access off, configuration locked, no extension loaded, one thread, memory and
    spill bounded (its spill in the private folder)."""
    import duckdb

    spill = path.parent / "spill"
    con = duckdb.connect(str(path), read_only=read_only,
                         config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "memory_limit": DUCK_MEMORY, "threads": 1, "temp_directory": str(spill),
                                 "max_temp_directory_size": DUCK_MEMORY})
    if attach is not None:
        con.execute("ATTACH ? AS fresh_copy", [str(attach)])
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


class _DuckCode(Exception):
    """A DuckDB file carrying code an UPDATE or a copy would run."""


def _duck_code(con) -> None:
    """Refuse a file whose UPDATE or copy would run its own expressions: CHECK constraints,
    generated columns, defaults, explicit indexes. (Its macros and views are never called:
    every function here is schema-qualified and only base tables are read.)"""
    here = "database_name = system.main.current_database()"
    for what, sql in (
        ("a CHECK constraint", f"SELECT count(*) FROM system.main.duckdb_constraints() WHERE {here} "
                               "AND constraint_type = 'CHECK'"),
        ("a generated column or a default", f"SELECT count(*) FROM system.main.duckdb_columns() WHERE {here} "
                                            "AND (is_generated OR column_default IS NOT NULL)"),
        ("an index", f"SELECT count(*) FROM system.main.duckdb_indexes() WHERE {here}"),
    ):
        if con.execute(sql).fetchone()[0]:
            raise _DuckCode(what)


def _duck_text_columns(con) -> list[tuple[str, str, str, str]]:
    return con.execute(
        "SELECT c.schema_name, c.table_name, c.column_name, c.data_type FROM system.main.duckdb_columns() c "
        "JOIN system.main.duckdb_tables() t ON c.table_oid = t.table_oid "
        "WHERE c.database_name = system.main.current_database() AND NOT c.internal "
        "AND (c.data_type = 'VARCHAR' OR c.data_type = 'JSON')").fetchall()


def _duck_where(column: str, n: int) -> str:
    return " OR ".join([f"system.main.contains(CAST({column} AS VARCHAR), ?)"] * n)


def _duckdb_holds(path: Path, encoded: list[bytes]) -> bool:
    texts = [f.decode() for f in encoded]
    with _duck_connect(path, read_only=True) as con:
        _duck_code(con)
        for schema, table, column, _ in _duck_text_columns(con):
            hit = con.execute(f"SELECT 1 FROM {_quote(schema)}.{_quote(table)} "
                              f"WHERE {_duck_where(_quote(column), len(texts))} LIMIT 1", texts).fetchone()
            if hit:
                return True
    return holds_any(path, encoded)


def _scrub_duckdb(path: Path, encoded: list[bytes]) -> bool:
    """Replace through DuckDB (its strings are compressed: a byte search can miss them), then
    copy each table into a fresh file so no freed block keeps a copy. `path` is a private copy."""
    texts = [f.decode() for f in encoded]
    fresh = path.with_name(path.name + ".fresh")
    changed = 0
    with _duck_connect(path, attach=fresh) as con:
        _duck_code(con)
        for schema, table, column, dtype in _duck_text_columns(con):
            c = _quote(column)
            value = f"CAST({c} AS VARCHAR)"
            for _ in texts:
                value = f"system.main.replace({value}, ?, '{REDACTED}')"
            changed += con.execute(
                f"UPDATE {_quote(schema)}.{_quote(table)} SET {c} = CAST(({value}) AS {dtype}) "
                f"WHERE {_duck_where(c, len(texts))}", [*texts, *texts]).fetchone()[0]
        if changed:
            here = con.execute("SELECT system.main.current_database()").fetchone()[0]
            tables = con.execute("SELECT schema_name, table_name FROM system.main.duckdb_tables() "
                                 "WHERE database_name = ? AND NOT internal", [here]).fetchall()
            for schema, table in tables:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS fresh_copy.{_quote(schema)}")
                con.execute(f"CREATE TABLE fresh_copy.{_quote(schema)}.{_quote(table)} AS "
                            f"SELECT * FROM {_quote(here)}.{_quote(schema)}.{_quote(table)}")
        con.execute("DETACH fresh_copy")
    if changed:
        os.replace(fresh, path)
    return bool(changed)


def _copy_sparse_in(dir_fd: int, name: str, dest: Path) -> bool:
    """The agent's file copied into a private folder of the harness by descriptor, holes kept."""
    fd = open_file(dir_fd, name)
    if fd is None:
        return False
    try:
        out = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            copy_extents(fd, out)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return True


def scrub_duckdb_at(dir_fd: int, name: str, st: os.stat_result, encoded: list[bytes]) -> tuple[bool, bool]:
    with tempfile.TemporaryDirectory(prefix="llms-scrub-") as tmp:
        db = Path(tmp) / "db.duckdb"
        _copy_sparse_in(dir_fd, name, db)
        _copy_sparse_in(dir_fd, name + ".wal", Path(tmp) / "db.duckdb.wal")
        try:
            if not _duckdb_holds(db, encoded):
                return False, False
            _scrub_duckdb(db, encoded)
            if _duckdb_holds(db, encoded):
                return False, True
        except Exception:  # noqa: BLE001 - duckdb's errors have no common base; _DuckCode: refused. Named.
            return False, True
        write_back(db, dir_fd, name, st)
    unlink(dir_fd, name + ".wal")
    return True, False
