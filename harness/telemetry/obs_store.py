"""What every `obs` command stands on: the store client and its two failures, the SQL
helpers that quote what the agent typed, and the plain-text formats. Stdlib only."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

HTTP_TIMEOUT_S = 120.0
BIG_LIMIT = 200_000  # internal queries that aggregate client-side


class StoreDown(Exception):
    """The store did not answer (exit 2)."""


class QueryFailed(Exception):
    """The store answered with an error (exit 1)."""


@dataclass
class Result:
    columns: list[str]
    rows: list[list[Any]]
    truncated: bool = False

    def dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, r)) for r in self.rows]


@dataclass
class Output:
    lines: list[str] = field(default_factory=list)
    rows: int = 0


# -- the store --------------------------------------------------------------------------
class Client:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def sql(self, sql: str, limit: int = 1000) -> Result:
        doc = self.post("/query", {"sql": sql, "limit": limit})
        return Result(doc["columns"], doc["rows"], bool(doc.get("truncated")))

    def post(self, path: str, payload: dict, timeout: float = HTTP_TIMEOUT_S) -> dict:
        body = json.dumps(payload).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                doc = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise QueryFailed(_error_text(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise StoreDown(f"{self.url} not reachable ({reason}); is the launch's telemetry running, and "
                            "are OBS_URL / OBS_DRIVE_URL right?") from None
        except ValueError as exc:
            raise QueryFailed(f"store answered something that is not JSON: {exc}") from None
        return doc


def _error_text(exc: urllib.error.HTTPError) -> str:
    try:
        return f"refused (HTTP {exc.code}): {json.loads(exc.read())['error']}"
    except Exception:
        return f"store answered HTTP {exc.code}"


# -- SQL helpers ------------------------------------------------------------------------
def lit(value: str) -> str:
    return "'" + str(value).replace("'", "''") + "'"


def json_path(key: str) -> str:
    # Quoted key: attribute names contain dots (http.route).
    return lit('$."' + key.replace('"', '\\"') + '"')


def attr_clause(pair: str, columns: tuple[str, ...] = ("attributes", "resource")) -> str:
    key, _, value = pair.partition("=")
    path = json_path(key.strip())
    ors = " OR ".join(f"{c}->>{path} = {lit(value.strip())}" for c in columns)
    return f"({ors})"


def since_seconds(text: str) -> float:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use 30s, 5m, 2h, 1d)")
    scale = {"ms": 1e-3, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    return float(m.group(1)) * scale


def since_ns(seconds: float | None) -> int | None:
    return None if seconds is None else time.time_ns() - int(seconds * 1e9)


def where(clauses: list[str]) -> str:
    return ("WHERE " + " AND ".join(clauses)) if clauses else ""


def contains(column: str, text: str) -> str:
    return f"contains(lower({column}), lower({lit(text)}))"


# -- formatting -------------------------------------------------------------------------
def fmt_time(ns: int | None) -> str:
    if not ns:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{ms / 1000:.2f}s"
    return f"{ms:.1f}ms" if ms >= 1 else f"{ms:.2f}ms"


def fmt_num(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return f"{v:.1f}" if abs(v) >= 100 else f"{v:.4g}"
    return str(v)


def clip(text: Any, width: int) -> str:
    s = "" if text is None else str(text).replace("\n", " ⏎ ")
    return s if len(s) <= width else s[: width - 1] + "…"


def table(header: list[str], rows: list[list[str]], max_width: int = 60) -> list[str]:
    """Left-aligned columns, each as wide as its widest cell (capped for alignment
    only: longer cells are printed whole)."""
    widths = [min(max_width, max([len(h)] + [len(r[i]) for r in rows])) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header)] + [line(r) for r in rows]


