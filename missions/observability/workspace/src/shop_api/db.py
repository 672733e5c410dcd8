"""SQLite access for the API, with a client span per statement."""

from __future__ import annotations

import os
import sqlite3

from opentelemetry import trace
from opentelemetry.trace import SpanKind

DB_PATH = os.environ.get("SHOP_DB_PATH", "shop.db")
tracer = trace.get_tracer("shop_api.db")


def connect() -> sqlite3.Connection:
    conn = sqlite3.connect(DB_PATH, timeout=10)
    conn.row_factory = sqlite3.Row
    return conn


def query(sql: str, params: tuple = (), op: str = "SELECT", table: str = "products") -> list[dict]:
    with tracer.start_as_current_span(
        f"{op} {table}",
        kind=SpanKind.CLIENT,
        attributes={
            "db.system.name": "sqlite",
            "db.operation.name": op,
            "db.collection.name": table,
            "db.query.text": sql,
        },
    ) as span:
        conn = connect()
        try:
            rows = [dict(r) for r in conn.execute(sql, params).fetchall()]
        finally:
            conn.close()
        span.set_attribute("db.response.returned_rows", len(rows))
        return rows
