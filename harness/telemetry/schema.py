"""The DuckDB schema of the telemetry store. Other components (mission keys, the
harness, `obs`) query these exact tables and columns: change them only together with
SCHEMA.md and every reader.

Conventions: times are integer nanoseconds since the Unix epoch (UTC); trace and span
ids are lower-case hex (NULL when absent); `service` is the resource attribute
`service.name`; JSON columns hold objects (attributes, resource) or arrays (events,
bounds, bucket_counts) with keys sorted.
"""

from __future__ import annotations

# (column, DuckDB type) per table, in insert order.
COLUMNS: dict[str, list[tuple[str, str]]] = {
    "spans": [
        ("trace_id", "VARCHAR"),
        ("span_id", "VARCHAR"),
        ("parent_span_id", "VARCHAR"),
        ("service", "VARCHAR"),
        ("name", "VARCHAR"),
        ("kind", "VARCHAR"),
        ("start_ns", "BIGINT"),
        ("end_ns", "BIGINT"),
        ("duration_ms", "DOUBLE"),
        ("status_code", "VARCHAR"),  # UNSET | OK | ERROR
        ("status_message", "VARCHAR"),
        ("attributes", "JSON"),
        ("resource", "JSON"),
        ("scope", "VARCHAR"),
        ("events", "JSON"),
    ],
    "metrics": [
        ("service", "VARCHAR"),
        ("name", "VARCHAR"),
        ("type", "VARCHAR"),  # gauge | sum | histogram
        ("unit", "VARCHAR"),
        ("description", "VARCHAR"),
        ("time_ns", "BIGINT"),
        ("start_ns", "BIGINT"),
        ("value", "DOUBLE"),  # gauge / sum
        ("count", "BIGINT"),  # histogram
        ("sum", "DOUBLE"),
        ("bounds", "JSON"),
        ("bucket_counts", "JSON"),
        ("is_monotonic", "BOOLEAN"),
        ("temporality", "VARCHAR"),  # CUMULATIVE | DELTA | NULL (gauge)
        ("attributes", "JSON"),
        ("resource", "JSON"),
        ("scope", "VARCHAR"),
    ],
    "logs": [
        ("time_ns", "BIGINT"),
        ("observed_ns", "BIGINT"),
        ("service", "VARCHAR"),
        ("severity_text", "VARCHAR"),
        ("severity_number", "INTEGER"),
        ("body", "VARCHAR"),
        ("trace_id", "VARCHAR"),
        ("span_id", "VARCHAR"),
        ("attributes", "JSON"),
        ("resource", "JSON"),
        ("scope", "VARCHAR"),
    ],
    "profiles": [
        ("time_ns", "BIGINT"),
        ("service", "VARCHAR"),
        ("stack", "VARCHAR"),  # folded: root;caller;...;leaf, frames as module:function
        ("samples", "BIGINT"),
        ("period_ms", "DOUBLE"),
    ],
}

TABLES = tuple(COLUMNS)


def create_table_sql(table: str) -> str:
    cols = ",\n    ".join(f"{name} {kind}" for name, kind in COLUMNS[table])
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    {cols}\n)"


# The CREATE TABLE statements, one per table.
DDL: dict[str, str] = {table: create_table_sql(table) for table in TABLES}


def insert_sql(table: str) -> str:
    """A columnar insert: one list parameter per column, zipped by UNNEST. Far faster in
    DuckDB than executemany (about 40k rows/s against a few hundred)."""
    exprs = ", ".join(
        f"unnest(${i + 1}::{kind}[])" for i, (_, kind) in enumerate(COLUMNS[table])
    )
    return f"INSERT INTO {table} SELECT * FROM (SELECT {exprs})"


def create_all(con) -> None:
    """Create every table on a DuckDB connection (idempotent)."""
    for sql in DDL.values():
        con.execute(sql)
