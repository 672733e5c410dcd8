"""The telemetry store end to end: the receiver as a subprocess, real OpenTelemetry SDK
exporters sending to it over OTLP/HTTP protobuf, and the `obs` CLI reading it back."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
OBS = REPO / ".venv" / "bin" / "obs"
SERVICE = "shop-api"


# -- the store process ------------------------------------------------------------------
@dataclass
class StoreProc:
    proc: subprocess.Popen
    url: str
    db: Path

    def post(self, path: str, body: bytes, content_type: str = "application/json",
             headers: dict | None = None) -> tuple[int, bytes]:
        req = urllib.request.Request(self.url + path, data=body,
                                     headers={"Content-Type": content_type, **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def query(self, sql: str, limit: int = 1000) -> list[dict]:
        status, body = self.post("/query", json.dumps({"sql": sql, "limit": limit}).encode())
        assert status == 200, body
        doc = json.loads(body)
        return [dict(zip(doc["columns"], r)) for r in doc["rows"]]

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=30) as resp:
            return json.loads(resp.read())

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode


def start_store(tmp: Path) -> StoreProc:
    db = tmp / "telemetry.duckdb"
    proc = subprocess.Popen(
        [str(PYTHON), "-m", "harness.telemetry.receiver", "--db", str(db), "--host", "127.0.0.1",
         "--port", "0", "--counters", str(tmp / "counters.json")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    line = proc.stdout.readline()  # the one line, printed once it listens
    if not line.startswith("telemetry store listening on http://"):
        proc.kill()
        raise AssertionError(f"bad first line {line!r}; stderr: {proc.stderr.read()}")
    return StoreProc(proc, line.split(" on ", 1)[1].strip(), db)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Iterator[StoreProc]:
    s = start_store(tmp_path_factory.mktemp("store"))
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def fresh_store(tmp_path) -> Iterator[StoreProc]:
    s = start_store(tmp_path)
    try:
        yield s
    finally:
        s.stop()


# -- real SDK telemetry -----------------------------------------------------------------
@dataclass
class Sent:
    trace_id: str
    root_id: str
    child_id: str


def _send_telemetry(url: str) -> Sent:
    resource = Resource.create({"service.name": SERVICE, "service.instance.id": "i-1"})
    tp = TracerProvider(resource=resource)
    # gzip: the SDK may compress, the store must inflate.
    tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{url}/v1/traces",
                                                              compression=Compression.Gzip)))
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{url}/v1/metrics"),
                                           export_interval_millis=3_600_000)
    mp = MeterProvider(resource=resource, metric_readers=[reader])
    lp = LoggerProvider(resource=resource)
    lp.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(endpoint=f"{url}/v1/logs")))
    log = logging.getLogger("test.shop")
    with warnings.catch_warnings():  # deprecated in the SDK, still what the services use
        warnings.simplefilter("ignore", DeprecationWarning)
        handler = LoggingHandler(level=logging.INFO, logger_provider=lp)
    log.addHandler(handler)
    log.propagate, log.level = False, logging.INFO
    try:
        sent = _emit(tp, mp, log)
        assert tp.force_flush(10_000) and mp.force_flush(10_000) and lp.force_flush(10_000)
    finally:
        log.removeHandler(handler)
        tp.shutdown(), mp.shutdown(), lp.shutdown()
    return sent


def _emit(tp: TracerProvider, mp: MeterProvider, log: logging.Logger) -> Sent:
    tracer = tp.get_tracer("shop.test")
    meter = mp.get_meter("shop.test")
    orders = meter.create_counter("orders.created", unit="{order}", description="orders placed")
    latency = meter.create_histogram("request.duration", unit="ms")
    orders.add(3, {"category": "books"})
    orders.add(2, {"category": "toys"})
    for v in (3, 7, 20, 20, 20, 600):
        latency.record(v, {"route": "/products"})
    with tracer.start_as_current_span("GET /products", kind=SpanKind.SERVER,
                                      attributes={"http.route": "/products"}) as root:
        with tracer.start_as_current_span("catalog.read", attributes={"db.system.name": "sqlite"}) as child:
            time.sleep(0.02)
            child.record_exception(ValueError("boom"))
            child.set_status(Status(StatusCode.ERROR, "boom"))
        log.error("order failed for sku %s", "SKU-1")
    log.info("outside any span")
    return Sent(format(root.get_span_context().trace_id, "032x"),
                format(root.get_span_context().span_id, "016x"),
                format(child.get_span_context().span_id, "016x"))


@pytest.fixture(scope="module")
def sent(store: StoreProc) -> Sent:
    result = _send_telemetry(store.url)
    status, body = store.post("/v1/profiles", json.dumps({
        "service": SERVICE, "time_ns": time.time_ns(), "period_ms": 10.0,
        "stacks": {"app.main:handle;app.db:query": 30, "app.main:handle;app.stats:render": 60,
                   "app.main:handle": 10},
    }).encode())
    assert status == 200, body
    return result


# -- ingest -----------------------------------------------------------------------------
def test_spans_land_with_parent_duration_and_error(store: StoreProc, sent: Sent):
    rows = {r["span_id"]: r for r in store.query(
        f"SELECT * FROM spans WHERE trace_id = '{sent.trace_id}'")}
    assert set(rows) == {sent.root_id, sent.child_id}
    root, child = rows[sent.root_id], rows[sent.child_id]
    assert root["parent_span_id"] is None and child["parent_span_id"] == sent.root_id
    assert root["service"] == SERVICE and root["kind"] == "SERVER" and child["kind"] == "INTERNAL"
    assert child["duration_ms"] >= 20 and root["duration_ms"] >= child["duration_ms"]
    assert child["duration_ms"] == pytest.approx((child["end_ns"] - child["start_ns"]) / 1e6)
    assert child["status_code"] == "ERROR" and child["status_message"] == "boom"
    assert root["status_code"] == "UNSET"
    assert json.loads(root["attributes"]) == {"http.route": "/products"}
    assert json.loads(root["resource"])["service.instance.id"] == "i-1"
    assert root["scope"] == "shop.test"
    (event,) = json.loads(child["events"])
    assert event["name"] == "exception" and event["attributes"]["exception.type"] == "ValueError"


def test_metrics_land_one_row_per_point(store: StoreProc, sent: Sent):
    # force_flush and shutdown each export a cumulative point: read the latest per series.
    latest = "QUALIFY row_number() OVER (PARTITION BY attributes ORDER BY time_ns DESC) = 1"
    counter = {json.loads(r["attributes"])["category"]: r for r in store.query(
        f"SELECT * FROM metrics WHERE name = 'orders.created' {latest}")}
    assert {k: r["value"] for k, r in counter.items()} == {"books": 3.0, "toys": 2.0}
    books = counter["books"]
    assert books["type"] == "sum" and books["is_monotonic"] is True
    assert books["temporality"] == "CUMULATIVE" and books["unit"] == "{order}"
    assert books["service"] == SERVICE and books["time_ns"] > books["start_ns"] > 0
    (hist,) = store.query(f"SELECT * FROM metrics WHERE name = 'request.duration' {latest}")
    assert hist["type"] == "histogram" and hist["count"] == 6 and hist["sum"] == 670
    bounds, buckets = json.loads(hist["bounds"]), json.loads(hist["bucket_counts"])
    assert len(buckets) == len(bounds) + 1 and sum(buckets) == 6
    assert buckets[bounds.index(25.0)] == 3  # the three 20s fall in (10, 25]
    assert hist["value"] is None


def test_logs_carry_trace_context(store: StoreProc, sent: Sent):
    rows = store.query("SELECT * FROM logs ORDER BY time_ns")
    err = next(r for r in rows if r["body"] == "order failed for sku SKU-1")
    assert err["severity_text"] == "ERROR" and err["severity_number"] == 17
    assert err["trace_id"] == sent.trace_id and err["span_id"] == sent.root_id
    assert err["service"] == SERVICE and err["time_ns"] > 0
    outside = next(r for r in rows if r["body"] == "outside any span")
    assert outside["trace_id"] is None and outside["severity_text"] == "INFO"


def test_profiles_land(store: StoreProc, sent: Sent):
    rows = store.query("SELECT stack, samples, period_ms FROM profiles ORDER BY samples DESC")
    assert rows[0] == {"stack": "app.main:handle;app.stats:render", "samples": 60, "period_ms": 10.0}
    assert sum(r["samples"] for r in rows) == 100


def test_stats_count_everything_and_reject_nothing(store: StoreProc, sent: Sent):
    stats = store.get("/stats")
    assert stats["rejected"] == 0 and stats["dropped"] == 0
    assert stats["rows"]["spans"] >= 2 and stats["rows"]["profiles"] == 3
    assert stats["received"]["spans"] == stats["rows"]["spans"]
    assert stats["received"]["logs"] == stats["rows"]["logs"] == 2
    assert store.get("/health")


def test_query_refuses_anything_but_one_select(store: StoreProc, sent: Sent):
    for sql in ("DROP TABLE spans", "INSERT INTO profiles VALUES (1, 'x', 'a', 1, 1)",
                "SELECT 1; DELETE FROM spans", "COPY spans TO 'x.csv'", "ATTACH 'other.db'",
                "SELECT * FROM read_csv('/etc/passwd')"):
        status, body = store.post("/query", json.dumps({"sql": sql}).encode())
        assert status == 400, sql
        assert json.loads(body)["error"], sql
    assert "read-only" in json.loads(store.post("/query", b'{"sql": "DROP TABLE spans"}')[1])["error"]
    assert store.query("SELECT count(*) AS n FROM spans")[0]["n"] >= 2
    assert store.query("DESCRIBE spans")[0]["column_name"] == "trace_id"
    status, body = store.post("/query", json.dumps({"sql": "SELECT * FROM range(10)", "limit": 3}).encode())
    assert json.loads(body) == {"columns": ["range"], "rows": [[0], [1], [2]], "truncated": True}


def test_otlp_json_bad_payloads_and_clean_shutdown(fresh_store: StoreProc):
    s = fresh_store
    doc = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "shop-mcp"}}]},
        "scopeSpans": [{"scope": {"name": "j"}, "spans": [{
            "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "tools/call", "kind": 2, "startTimeUnixNano": "1000000000",
            "endTimeUnixNano": "1005000000", "status": {"code": 2}}]}]}]}
    status, _ = s.post("/v1/traces", json.dumps(doc).encode())
    assert status == 200
    (row,) = s.query("SELECT trace_id, span_id, service, kind, duration_ms, status_code FROM spans")
    assert row == {"trace_id": "5b8efff798038103d269b633813fc60c", "span_id": "eee19b7ec3c1b174",
                   "service": "shop-mcp", "kind": "SERVER", "duration_ms": 5.0, "status_code": "ERROR"}
    assert s.post("/v1/traces", b"\xff\x00garbage", "application/x-protobuf")[0] == 400
    assert s.post("/v1/profiles", b'{"service": "x", "stacks": {"a;b": -1}}')[0] == 400
    assert s.get("/stats")["rejected"] == 2
    assert s.stop() == 0
    counters = json.loads((s.db.parent / "counters.json").read_text())
    assert counters["rejected"] == 2 and counters["received"]["spans"] == 1
    import duckdb  # the file is closed and whole: anyone may open it now

    with duckdb.connect(str(s.db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM spans").fetchone()[0] == 1


def _raw_request(url: str, head: str, body: bytes = b"") -> tuple[int, float]:
    """(status, seconds) of one request sent by hand; the socket stays open, as a hostile client's would."""
    import socket
    import time
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(head.encode() + b"\r\n" + body)
        answer = sock.recv(4096)  # raises socket.timeout if the store waits for more
        return int(answer.split(b" ", 2)[1]), time.monotonic() - started


def test_bad_lengths_and_bombs_are_refused_at_once(store: StoreProc):
    import zlib

    post = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    status, took = _raw_request(store.url, post + "Content-Length: -1\r\n", b"{}")
    assert status == 400 and took < 5
    status, _ = _raw_request(store.url, post + "Content-Length: 1e3\r\n", b"{}")
    assert status == 400
    status, _ = _raw_request(store.url, post + f"Content-Length: {64 * 1024 * 1024 + 1}\r\n")
    assert status == 413
    status, _ = _raw_request(store.url, post + "Transfer-Encoding: chunked\r\n", b"-5\r\nhello\r\n")
    assert status == 400
    zeros = b"\0" * (1 << 20)
    for wbits, encoding in ((-15, "deflate"), (31, "gzip"), (15, "deflate")):
        packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
        bomb = b"".join(packer.compress(zeros) for _ in range(80)) + packer.flush()  # 80 MiB inflated
        assert len(bomb) < 200_000
        status, took = _raw_request(store.url, post + f"Content-Encoding: {encoding}\r\n"
                                    f"Content-Length: {len(bomb)}\r\n", bomb)
        assert status == 413 and took < 30, (encoding, wbits)
    assert store.get("/health") == {"status": "ok"}  # still serving


def test_a_512_span_batch_is_acknowledged_fast(fresh_store: StoreProc):
    from opentelemetry.sdk.trace.export import SpanExportResult

    tp = TracerProvider(resource=Resource.create({"service.name": "bulk"}))
    spans = []
    for i in range(512):
        span = tp.get_tracer("bulk").start_span(f"op-{i % 7}", attributes={"i": i, "route": "/x"})
        span.end()
        spans.append(span)
    exporter = OTLPSpanExporter(endpoint=f"{fresh_store.url}/v1/traces")
    try:
        assert exporter.export(spans) == SpanExportResult.SUCCESS  # warm the connection
        t0 = time.perf_counter()
        assert exporter.export(spans) == SpanExportResult.SUCCESS
        elapsed = time.perf_counter() - t0
    finally:
        exporter.shutdown()
    assert elapsed < 0.5, elapsed  # target well under 0.1 s; loose on a shared machine
    assert fresh_store.query("SELECT count(*) AS n FROM spans")[0]["n"] == 1024


# -- obs --------------------------------------------------------------------------------
@pytest.fixture
def obs(store: StoreProc, sent: Sent, tmp_path: Path):
    env = {**os.environ, "OBS_URL": store.url, "OBS_LOG": str(tmp_path / "calls.jsonl"),
           "OBS_SPILL_DIR": str(tmp_path / "spill")}

    def run(*args: str, url: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([str(OBS), *args], env={**env, **({"OBS_URL": url} if url else {})},
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)

    run.calls = lambda: [json.loads(x) for x in (tmp_path / "calls.jsonl").read_text().splitlines()]
    run.spill = tmp_path / "spill"
    return run


def test_obs_traces(obs, sent: Sent):
    r = obs("traces", "search", "--service", SERVICE, "--status", "ERROR", "--since", "10m")
    assert r.returncode == 0, r.stderr
    assert "catalog.read" in r.stdout and sent.trace_id in r.stdout and "GET /products" not in r.stdout
    r = obs("traces", "search", "--attr", "http.route=/products", "--min-ms", "20")
    assert "GET /products" in r.stdout and "catalog.read" not in r.stdout
    r = obs("traces", "get", sent.trace_id[:12])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"trace {sent.trace_id}  2 spans")
    root = next(i for i, x in enumerate(lines) if x.startswith("GET /products [shop-api SERVER]"))
    child = next(i for i, x in enumerate(lines) if x.startswith("  catalog.read [shop-api INTERNAL]"))
    assert child > root and "ERROR: boom" in lines[child]
    assert "! exception ValueError: boom" in r.stdout and "db.system.name=sqlite" in r.stdout
    assert [(c["signal"], c["rows"], c["ok"]) for c in obs.calls()] == [
        ("traces", 1, True), ("traces", 1, True), ("traces", 2, True)]


def test_obs_metrics(obs):
    r = obs("metrics", "list")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("orders.created"))
    assert "sum/monotonic" in line and "{order}" in line and SERVICE in line and "category" in line
    r = obs("metrics", "query", "orders.created", "--by", "category")
    assert [x.split() for x in r.stdout.splitlines()[2:]] == [["category=books", "3"], ["category=toys", "2"]]
    r = obs("metrics", "query", "orders.created", "--agg", "sum", "--since", "10m")
    assert r.stdout.splitlines()[-1].split() == ["(all)", "5"]
    r = obs("metrics", "query", "request.duration", "--agg", "p50", "--by", "service")
    # Median rank 3 of 6: the first of the three values in (10, 25], interpolated to 15.
    assert r.stdout.splitlines()[-1].split() == [f"service={SERVICE}", "15"]
    r = obs("metrics", "query", "request.duration")
    assert r.stdout.splitlines()[1].split() == ["(all)", "count", "avg", "p50", "p95", "p99"]
    assert r.stdout.splitlines()[2].split()[:3] == ["(all)", "6", "111.7"]
    r = obs("metrics", "query", "orders.created", "--agg", "p95")
    assert r.returncode == 1 and "histogram" in r.stderr
    calls = obs.calls()
    assert [c["signal"] for c in calls] == ["metrics"] * 6
    assert calls[0]["rows"] >= 2 and calls[1]["rows"] == 2 and calls[-1]["ok"] is False


def test_obs_logs(obs, sent: Sent):
    r = obs("logs", "search", "--severity", "error")
    assert r.returncode == 0, r.stderr
    assert "order failed for sku SKU-1" in r.stdout and sent.trace_id in r.stdout
    assert "outside any span" not in r.stdout
    r = obs("logs", "search", "--text", "OUTSIDE", "--service", SERVICE, "--since", "1h")
    assert "outside any span" in r.stdout
    r = obs("logs", "search", "--trace", sent.trace_id)
    assert "order failed" in r.stdout and "outside" not in r.stdout
    assert [(c["signal"], c["rows"]) for c in obs.calls()] == [("logs", 1), ("logs", 1), ("logs", 1)]


def test_obs_profiles_and_sql(obs):
    r = obs("profiles", "top", "--service", SERVICE)
    assert r.returncode == 0, r.stderr
    rows = [x.split() for x in r.stdout.splitlines()[2:]]
    assert rows[0] == ["60.0", "60.0", "app.stats:render"]
    assert ["10.0", "100.0", "app.main:handle"] in rows and "1.0s sampled" in r.stdout
    r = obs("profiles", "top", "--by", "total", "--limit", "1")
    assert r.stdout.splitlines()[2].split() == ["10.0", "100.0", "app.main:handle"]
    r = obs("sql", "SELECT service, count(*) AS n FROM spans GROUP BY service")
    assert r.returncode == 0 and SERVICE in r.stdout and "(1 row)" in r.stdout
    r = obs("sql", "DELETE FROM spans")
    assert r.returncode == 1 and "read-only" in r.stderr and "Traceback" not in r.stderr
    assert [(c["signal"], c["rows"], c["ok"]) for c in obs.calls()] == [
        ("profiles", 3, True), ("profiles", 1, True), ("sql", 1, True), ("sql", 0, False)]


def test_obs_spills_a_big_result(obs):
    r = obs("sql", "SELECT range AS i, 'row ' || range AS label FROM range(200)")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) < 60 and "more lines" in lines[-1]
    path = Path(lines[-1].rsplit(" in ", 1)[1])
    assert path.parent == obs.spill and "row 199" in path.read_text()
    assert len(path.read_text().splitlines()) == 202  # header, 200 rows, footer
    assert obs.calls()[-1]["rows"] == 200


def test_obs_store_down_is_one_clear_line(obs):
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    r = obs("traces", "search", url=f"http://127.0.0.1:{port}")
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "not reachable" in r.stderr and "Traceback" not in r.stderr
    assert obs.calls()[-1] == {**obs.calls()[-1], "signal": "traces", "rows": 0, "ok": False}


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_ingest_needs_the_services_token_and_the_query_endpoint_only_reads(tmp_path: Path):
    """Only the services (given the token) write the evidence: an OTLP POST without it, with a
    wrong one, or to the query-only endpoint (the agent's OBS_URL) is 401 and stores nothing."""
    token = "t0k3n-for-the-services-only"
    proc = subprocess.Popen(
        [str(PYTHON), "-m", "harness.telemetry.receiver", "--db", str(tmp_path / "t.duckdb"), "--host", "127.0.0.1",
         "--port", "0", "--query-port", "0"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "TELEMETRY_INGEST_TOKEN": token})
    ingest = StoreProc(proc, proc.stdout.readline().split(" on ", 1)[1].strip(), tmp_path / "t.duckdb")
    query_line = proc.stdout.readline()
    assert query_line.startswith("query endpoint on http://"), query_line
    reader = StoreProc(proc, query_line.split(" on ", 1)[1].strip(), ingest.db)
    try:
        def doc(name: str) -> bytes:
            return json.dumps({"resourceSpans": [{"resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "shop-api"}}]},
                "scopeSpans": [{"scope": {"name": "j"}, "spans": [{
                    "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": name,
                    "kind": 2, "startTimeUnixNano": "1000000000", "endTimeUnixNano": "1005000000"}]}]}]}).encode()

        assert ingest.post("/v1/traces", doc("forged, no token"))[0] == 401
        assert ingest.post("/v1/traces", doc("forged, wrong token"), headers={"Authorization": "Bearer nope"})[0] == 401
        assert ingest.post("/v1/profiles", b'{"service": "x", "stacks": {"a;b": 1}}')[0] == 401
        assert reader.post("/v1/traces", doc("forged, query endpoint"),
                           headers={"Authorization": f"Bearer {token}"})[0] == 401
        assert ingest.post("/v1/traces", doc("by a service"), headers={"Authorization": f"Bearer {token}"})[0] == 200
        assert [r["name"] for r in reader.query("SELECT name FROM spans")] == ["by a service"]
        assert reader.get("/health") == {"status": "ok"}
    finally:
        assert ingest.stop() == 0
