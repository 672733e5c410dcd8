"""SQL read with DuckDB's own parser (`json_serialize_sql`), never with regexes.

What a cited query looks at is read off its parse tree: the base tables it reads (CTE
names resolved away), its string literals (comments are gone: the parser drops them), the
literals it compares with the `service` column (a service name says nothing about which
defect a query looks at), the functions and table functions it calls, and whether its
result is a measurement at all (its select list reads a column or counts rows) or a
constant written into the query.

`refusal(shape)` says why a query may not be re-run as evidence: it does not parse as one
SELECT, it calls a table function (`read_text`, `glob`, `range`, `duckdb_settings` ...),
reads a table or file that is not one of the store's signal tables, or calls a function
that reports on the host or the database rather than on the telemetry. The re-run itself
is also confined (`harness.verdicts.evidence.open_store`): external access off, extensions
neither installed nor loaded, the configuration locked, a time limit and a row cap.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

SIGNAL_TABLES = ("spans", "metrics", "logs", "profiles")
# Scalar functions that read the host, the session or the database's own state, not telemetry.
_DENIED_FUNCTIONS = {"current_setting", "getenv", "version", "current_database", "current_catalog",
                     "current_schema", "current_schemas", "current_user", "user", "session_user",
                     "current_role", "pg_typeof", "txid_current", "current_query", "database_size",
                     "read_blob", "read_text", "glob", "file_exists", "filesystem", "load_extension",
                     "install_extension", "http_get", "http_post", "random", "uuid", "gen_random_uuid",
                     "setseed"}
_DENIED_PREFIXES = ("duckdb_", "pragma_", "pg_", "sqlite_", "read_", "parquet_", "iceberg_", "delta_")
_AGGREGATES_OVER_ROWS = {"count_star", "count", "sum", "max", "min", "avg", "mean", "median", "quantile",
                         "quantile_cont", "quantile_disc", "approx_count_distinct", "any_value", "first",
                         "last", "arg_max", "arg_min", "list", "string_agg", "stddev", "stddev_pop",
                         "stddev_samp", "var_pop", "var_samp", "bool_or", "bool_and", "histogram",
                         "approx_quantile", "mode", "product", "fsum", "sumkahan", "kahan_sum"}


# Aggregates whose value grows with the traffic driven (a longer drive, more users).
# A distinct count grows with it too (issue 48): more requests, more distinct traces and refs.
SCALING = {"count", "sum", "fsum", "sumkahan", "kahan_sum", "count_distinct", "approx_count_distinct", "sum_distinct"}


@dataclass
class Shape:
    """What one SQL text asks of the store, read off DuckDB's parse tree."""

    sql: str
    error: str | None = None  # it does not parse as a single SELECT
    tables: set[str] = field(default_factory=set)  # base tables read (lower-case), CTE names excluded
    ctes: set[str] = field(default_factory=set)
    literals: set[str] = field(default_factory=set)  # string literals, as written
    service_literals: set[str] = field(default_factory=set)  # compared with a `service` column
    functions: set[str] = field(default_factory=set)  # scalar and aggregate functions called (lower-case)
    table_functions: set[str] = field(default_factory=set)
    measures: bool = False  # the select list reads a column or aggregates rows
    select_numbers: set[float] = field(default_factory=set)  # numeric constants in the result's select list
    select_aggregates: set[str] = field(default_factory=set)  # aggregates of the result's select list

    @property
    def signal_tables(self) -> set[str]:
        return self.tables & set(SIGNAL_TABLES)


_local = threading.local()


def _parser():
    """A private in-memory DuckDB that only parses (nothing attached, nothing reachable)."""
    con = getattr(_local, "con", None)
    if con is None:
        import duckdb

        con = duckdb.connect(":memory:", config={
            "enable_external_access": False, "autoinstall_known_extensions": False,
            "autoload_known_extensions": False, "lock_configuration": True})
        _local.con = con
    return con


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text and text.strip() else "it does not parse"


def parse(sql: str) -> Shape:
    shape = Shape(sql=sql or "")
    if not isinstance(sql, str) or not sql.strip():
        shape.error = "an empty query"
        return shape
    try:
        raw = _parser().execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()[0]
        tree = json.loads(raw)
    except Exception as exc:  # noqa: BLE001 - DuckDB's error is the query's, reported not raised
        shape.error = _first_line(str(exc))
        return shape
    if tree.get("error"):
        shape.error = _first_line(str(tree.get("error_message") or "it does not parse as a SELECT"))
        return shape
    statements = tree.get("statements") or []
    if len(statements) != 1:
        shape.error = f"{len(statements)} statements where one SELECT is expected"
        return shape
    _walk(statements[0].get("node"), shape, in_select=True)
    shape.tables -= shape.ctes
    return shape


def _literal(node: dict) -> tuple[str | None, Any]:
    lit = node.get("literal") if isinstance(node, dict) else None
    if not isinstance(lit, dict):
        value = node.get("value") if isinstance(node, dict) else None
        if isinstance(value, dict) and "type" in value:  # older serialisations: {"type": {...}, "value": ...}
            kind = str((value.get("type") or {}).get("id", "")).upper()
            return ("STRING" if "VARCHAR" in kind else kind), value.get("value")
        return None, None
    return str(lit.get("kind", "")).upper(), lit.get("text")


def _is_service_column(node: Any) -> bool:
    return isinstance(node, dict) and node.get("class") == "COLUMN_REF" and \
        str((node.get("column_names") or [""])[-1]).lower() == "service"


def _walk(node: Any, shape: Shape, in_select: bool) -> None:
    """Gather what the tree reads. `in_select`: this node is part of the query's result (the
    outermost select list, or a scalar subquery's inside it); FROM, WHERE and CTE bodies are not."""
    if isinstance(node, list):
        for item in node:
            _walk(item, shape, in_select)
        return
    if not isinstance(node, dict):
        return
    kind, cls = node.get("type"), node.get("class")
    if kind == "BASE_TABLE" and "table_name" in node:
        shape.tables.add(str(node["table_name"]).lower())
    if kind == "TABLE_FUNCTION":
        fn = node.get("function") or {}
        shape.table_functions.add(str(fn.get("function_name", "?")).lower())
    cte_map = node.get("cte_map")
    if isinstance(cte_map, dict):
        for entry in cte_map.get("map") or []:
            if isinstance(entry, dict) and "key" in entry:
                shape.ctes.add(str(entry["key"]).lower())
    if cls == "CONSTANT":
        kind_, text = _literal(node)
        if kind_ in ("STRING", "VARCHAR"):
            if text is not None:
                shape.literals.add(str(text))
        elif text is not None and in_select:
            try:
                shape.select_numbers.add(float(text))
            except (TypeError, ValueError):
                pass
    if cls == "COMPARISON":
        left, right = node.get("left"), node.get("right")
        for a, b in ((left, right), (right, left)):
            if _is_service_column(a) and isinstance(b, dict) and b.get("class") == "CONSTANT":
                _, text = _literal(b)
                if text is not None:
                    shape.service_literals.add(str(text))
    if cls == "OPERATOR" and str(kind or "").endswith("COMPARE_IN"):
        children = node.get("children") or []
        if children and _is_service_column(children[0]):
            for child in children[1:]:
                _, text = _literal(child)
                if text is not None:
                    shape.service_literals.add(str(text))
    name = str(node.get("function_name", "")).lower() if cls in ("FUNCTION", "AGGREGATE", "WINDOW") else ""
    if name:
        shape.functions.add(name)
        if in_select and (name in _AGGREGATES_OVER_ROWS or cls == "WINDOW"):
            shape.measures = True
        if in_select and cls in ("AGGREGATE", "FUNCTION", "WINDOW") and name in _AGGREGATES_OVER_ROWS:
            base = "count" if name == "count_star" else name
            shape.select_aggregates.add(f"{base}_distinct" if node.get("distinct") else base)
    if in_select and cls in ("COLUMN_REF", "STAR"):
        shape.measures = True
    is_select = kind == "SELECT_NODE"
    for key, value in node.items():
        if key in ("literal", "qualified_name") or not isinstance(value, (dict, list)):
            continue
        if is_select and key == "select_list":
            _walk(value, shape, in_select)
        elif is_select or key == "cte_map":
            _walk(value, shape, False)  # FROM, WHERE, GROUP BY, HAVING, CTE bodies: not the result
        else:
            _walk(value, shape, in_select)


def refusal(shape: Shape) -> str | None:
    """Why this query is not re-run as evidence (None: it may be)."""
    if shape.error:
        return f"it is not one SELECT DuckDB can parse ({shape.error})"
    if shape.table_functions:
        return (f"it calls the table function {', '.join(sorted(shape.table_functions))}(); "
                f"only the run's telemetry tables ({', '.join(SIGNAL_TABLES)}) are evidence")
    other = sorted(t for t in shape.tables if t not in SIGNAL_TABLES)
    if other:
        shown = ", ".join(o if len(o) <= 40 else o[:37] + "..." for o in other)
        return f"it reads {shown}, which is not one of the store's tables ({', '.join(SIGNAL_TABLES)})"
    denied = sorted(f for f in shape.functions if f in _DENIED_FUNCTIONS or f.startswith(_DENIED_PREFIXES))
    if denied:
        return f"it calls {', '.join(d + '()' for d in denied)}, which does not read the run's telemetry"
    return None


def not_a_measurement(shape: Shape) -> str | None:
    """Why a query that may run still cannot be evidence (None: it measures the telemetry)."""
    if not shape.signal_tables:
        return "it reads no telemetry table, so its result is written in the query, not measured"
    if not shape.measures:
        return "its result is a constant written into the query, not a measurement of the telemetry"
    return None


def strip_leading_comments(sql: str) -> str:
    """The query without the `--` and `/* */` comments before its first word (a linear scan): a
    comment heading a query is an honest form, not a different query."""
    text = sql or ""
    for _ in range(100):
        text = text.lstrip()
        if text.startswith("--"):
            cut = text.find("\n")
            text = "" if cut < 0 else text[cut + 1:]
        elif text.startswith("/*"):
            cut = text.find("*/", 2)
            text = "" if cut < 0 else text[cut + 2:]
        else:
            break
    return text


def canonical(sql: str) -> str:
    """One query however it is spelled: DuckDB's parse tree without aliases and source positions
    (comments, spacing, case and names given to columns gone); the spaced text if it does not parse."""
    text = (sql or "")[:20_000]
    try:
        raw = _parser().execute("SELECT json_serialize_sql(?::VARCHAR)", [text]).fetchone()[0]
        tree = json.loads(raw)
    except Exception:  # noqa: BLE001 - an unparsable query is its own text
        return text.lower()
    if tree.get("error"):
        return " ".join(text.split()).lower()

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in ("alias", "query_location", "query_location_length")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return json.dumps(strip(tree.get("statements")), sort_keys=True)
