"""The store itself: the one DuckDB file, the single writer thread that batches rows into
it through a bounded queue (a full queue blocks the sender: backpressure, never a drop),
the read-only queries that wait for the writer to catch up, and the counters file."""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import duckdb

from harness.telemetry.readonly import BadRequest, check_read_only, first_line, run_select
from harness.telemetry.schema import TABLES, create_all, insert_sql

QUEUE_ITEMS = 256  # requests waiting for the writer before senders block
WRITE_BATCH_ROWS = 20_000  # rows the writer gathers into one transaction
FLUSH_WAIT_S = 60.0  # longest a query waits for the writer to catch up
QUERY_TIMEOUT_S = 60.0  # a query running longer is interrupted


class ShuttingDown(Exception):
    """The store stopped taking telemetry (HTTP 503)."""


# -- the store --------------------------------------------------------------------------
@dataclass
class _Item:
    table: str
    rows: list[tuple]


_STOP = object()


class Store:
    """The DuckDB file, its single writer thread and the counters."""

    def __init__(self, path: str | Path, counters: str | Path | None = None):
        self.con = duckdb.connect(str(path))
        create_all(self.con)
        # Queries are agent-written SQL: no file access, and no way to turn it back on.
        self.con.execute("SET enable_external_access = false")
        self.con.execute("SET lock_configuration = true")
        self.counters_path = Path(counters) if counters else None
        self.queue: queue.Queue = queue.Queue(maxsize=QUEUE_ITEMS)
        self.cond = threading.Condition()
        self.enqueued = 0  # items put (or about to be put) on the queue
        self.done = 0  # items the writer has finished (stored or rejected)
        self.received: Counter = Counter()
        self.rejected = 0
        self.closing = False
        self._last_counters = 0.0
        self._sql = {t: insert_sql(t) for t in TABLES}
        self.writer = threading.Thread(target=self._run, name="store-writer", daemon=True)
        self.writer.start()

    # ingest
    def submit(self, table: str, rows: list[tuple]) -> None:
        """Queue rows for the writer; blocks while the queue is full (backpressure)."""
        with self.cond:
            if self.closing:
                raise ShuttingDown("store is shutting down")
            self.enqueued += 1
            self.received["requests"] += 1
            self.received[table] += len(rows)
        self.queue.put(_Item(table, rows))

    def reject(self) -> None:
        with self.cond:
            self.rejected += 1

    def flush(self, timeout_s: float = FLUSH_WAIT_S) -> bool:
        """Wait until the writer has stored everything queued before this call."""
        with self.cond:
            target = self.enqueued
            return self.cond.wait_for(lambda: self.done >= target, timeout=timeout_s)

    def _run(self) -> None:
        while True:
            batch, stop = self._gather()
            if batch:
                self._write(batch)
                with self.cond:
                    self.done += len(batch)
                    self.cond.notify_all()
                self._maybe_write_counters()
            if stop:
                return

    def _gather(self) -> tuple[list[_Item], bool]:
        """One blocking get, then whatever else is already waiting (bounded by rows)."""
        first = self.queue.get()
        if first is _STOP:
            return [], True
        batch, rows = [first], len(first.rows)
        while rows < WRITE_BATCH_ROWS:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)
            rows += len(item.rows)
        return batch, False

    def _write(self, batch: list[_Item]) -> None:
        try:
            self._insert(batch)
        except Exception:  # one bad request must not lose its neighbours: retry alone
            for item in batch:
                try:
                    self._insert([item])
                except Exception as exc:
                    print(f"telemetry store: rejected {len(item.rows)} {item.table} rows: {exc}",
                          file=sys.stderr, flush=True)
                    self.reject()

    def _insert(self, batch: list[_Item]) -> None:
        by_table: dict[str, list[tuple]] = {}
        for item in batch:
            by_table.setdefault(item.table, []).extend(item.rows)
        cur = self.con.cursor()
        try:
            cur.execute("BEGIN")
            try:
                for table, rows in by_table.items():
                    if rows:
                        cur.execute(self._sql[table], [list(col) for col in zip(*rows)])
                cur.execute("COMMIT")
            except Exception:
                cur.execute("ROLLBACK")
                raise
        finally:
            cur.close()

    # read
    def query(self, sql: str, limit: int) -> dict:
        check_read_only(sql)
        self.flush()
        cur = self.con.cursor()
        timer = threading.Timer(QUERY_TIMEOUT_S, cur.interrupt)
        timer.start()
        try:
            columns, result = run_select(cur, sql)
            rows = result.fetchmany(limit + 1)
        except duckdb.Error as exc:
            if isinstance(exc, duckdb.InterruptException):
                raise BadRequest(f"query ran over {QUERY_TIMEOUT_S:.0f} s and was stopped") from exc
            raise BadRequest(first_line(exc)) from exc
        finally:
            timer.cancel()
            cur.close()
        return {"columns": columns, "rows": [list(r) for r in rows[:limit]], "truncated": len(rows) > limit}

    def stats(self) -> dict:
        self.flush()
        cur = self.con.cursor()
        try:
            rows = {t: cur.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        finally:
            cur.close()
        return {"rows": rows, **self.counters()}

    def counters(self) -> dict:
        with self.cond:
            received = {k: self.received.get(k, 0) for k in ("requests", *TABLES)}
            return {"received": received, "dropped": 0, "rejected": self.rejected}

    def _maybe_write_counters(self, force: bool = False) -> None:
        # At most once a second: the file is for whoever reads it after the run.
        if not self.counters_path or (not force and time.monotonic() - self._last_counters < 1.0):
            return
        self._last_counters = time.monotonic()
        tmp = self.counters_path.with_name(self.counters_path.name + ".tmp")
        tmp.write_text(json.dumps(self.counters(), sort_keys=True) + "\n")
        os.replace(tmp, self.counters_path)

    def close(self) -> None:
        with self.cond:
            self.closing = True
        self.queue.put(_STOP)
        self.writer.join(timeout=120)
        self._maybe_write_counters(force=True)
        self.con.close()


