"""Read-only SQL on a run's telemetry store, once for everyone who asks it: the receiver's
query endpoint (the agent's), the grader's `sql` tool and the evidence re-runs. One
SELECT at a time; anything else is refused with a message the asker can act on."""

from __future__ import annotations

import datetime as dt
import decimal
import uuid
from typing import Any

import duckdb


class BadRequest(Exception):
    """A request the store refuses with HTTP 400 and this message."""


def first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def check_read_only(sql: str) -> None:
    """Refuse anything but one SELECT (WITH, DESCRIBE, SHOW, SUMMARIZE, FROM-first parse
    as SELECT in DuckDB)."""
    if not isinstance(sql, str) or not sql.strip():
        raise BadRequest("'sql' must be a non-empty string")
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise BadRequest(first_line(exc)) from exc
    if len(statements) != 1:
        raise BadRequest(f"read-only store: send exactly one statement, got {len(statements)}")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise BadRequest(
            f"read-only store: only SELECT / WITH / DESCRIBE / SHOW queries are allowed, not {kind.name}"
        )


def run_select(cur, sql: str):
    """Execute; TIMESTAMPTZ columns come back as text, since converting them to Python
    needs pytz, which the store does not carry."""
    rel = cur.sql(sql)
    columns, types = rel.columns, [str(t) for t in rel.types]
    if not any("WITH TIME ZONE" in t for t in types):
        return columns, cur.execute(sql)
    proj = ", ".join(f"#{i + 1}::VARCHAR" if "WITH TIME ZONE" in t else f"#{i + 1}" for i, t in enumerate(types))
    return columns, cur.execute(f"SELECT {proj} FROM ({sql})")


def jsonable(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)
