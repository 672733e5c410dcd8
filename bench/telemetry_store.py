"""How fast is the telemetry store? Measures (a) receiver start → /health ready,
(b) span ingest through the real OTLP/HTTP SDK exporter in batches of 512
(acknowledged throughput, per-batch ack latency, rejected count), and (c) `obs` call
latency over mixed queries on a store holding ~50k spans, 20k metric points and 20k
log records (plus a few profiles).

    .venv/bin/python bench/telemetry_store.py [--spans 50000] [--metric-points 20000]
                                             [--logs 20000] [--queries 240]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context

REPO = Path(__file__).resolve().parents[1]
PYTHON = REPO / ".venv" / "bin" / "python"
OBS = REPO / ".venv" / "bin" / "obs"
SERVICES = ("shop-api", "shop-mcp", "shop-agent")
ROUTES = ("/products", "/products/{sku}", "/orders", "/stats", "/orders/{ref}")
BATCH = 512
WINDOW_NS = 10 * 60 * 10**9  # telemetry spread over the last ten minutes


# -- the store --------------------------------------------------------------------------
def start_store(tmp: Path) -> tuple[subprocess.Popen, str, float]:
    """Start the receiver; return it, its URL and the seconds until /health answered."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(PYTHON), "-m", "harness.telemetry.receiver", "--db", str(tmp / "t.duckdb"),
                             "--host", "127.0.0.1", "--port", "0"], cwd=REPO, stdout=subprocess.PIPE, text=True)
    url = proc.stdout.readline().rsplit(" ", 1)[-1].strip()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return proc, url, time.perf_counter() - t0
        except OSError:
            time.sleep(0.01)
    proc.kill()
    raise SystemExit("the store never answered /health")


def stop_store(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def post(url: str, body: bytes, content_type: str = "application/json") -> bytes:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read()


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return json.loads(resp.read())


# -- (b) spans through the SDK exporter -------------------------------------------------
def make_spans(n: int, rng: random.Random) -> tuple[list, list[str]]:
    """Traces of 5 spans across the three services (one provider each, for its
    resource), lognormal durations, 5 % errors, over the last ten minutes."""
    tracers = {s: TracerProvider(resource=Resource.create({"service.name": s})).get_tracer("bench")
               for s in SERVICES}
    now = time.time_ns()
    spans, trace_ids = [], []
    while len(spans) < n:
        start = now - rng.randrange(WINDOW_NS)
        route = rng.choice(ROUTES)
        dur = [int(rng.lognormvariate(16, 0.8)) for _ in range(5)]  # ~9 ms median
        root = tracers["shop-agent"].start_span("POST /ask", kind=SpanKind.SERVER, start_time=start,
                                                attributes={"http.route": "/ask"})
        ctx = set_span_in_context(root)
        mcp = tracers["shop-mcp"].start_span("tools/call search_products", context=ctx, kind=SpanKind.SERVER,
                                             start_time=start + 1000, attributes={"mcp.tool.name": "search_products"})
        ctx2 = set_span_in_context(mcp)
        api = tracers["shop-api"].start_span(f"GET {route}", context=ctx2, kind=SpanKind.SERVER,
                                             start_time=start + 2000, attributes={"http.route": route})
        db = tracers["shop-api"].start_span("catalog.read", context=set_span_in_context(api), start_time=start + 3000,
                                            attributes={"db.system.name": "sqlite", "catalog.op": "list_products"})
        model = tracers["shop-agent"].start_span("chat gpt", context=ctx, kind=SpanKind.CLIENT, start_time=start + 500,
                                                 attributes={"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 900})
        if rng.random() < 0.05:
            db.set_status(Status(StatusCode.ERROR, "database is locked"))
        for span, d in zip((db, api, mcp, model, root), dur):
            span.end(end_time=span.start_time + d + (sum(dur) if span is root else 0))
            spans.append(span)
        trace_ids.append(format(root.get_span_context().trace_id, "032x"))
    return spans[:n], trace_ids


def ingest_spans(url: str, spans: list) -> dict:
    exporter = OTLPSpanExporter(endpoint=f"{url}/v1/traces")
    acks = []
    t0 = time.perf_counter()
    try:
        for i in range(0, len(spans), BATCH):
            t = time.perf_counter()
            if exporter.export(spans[i:i + BATCH]) != SpanExportResult.SUCCESS:
                raise SystemExit("an export failed")
            acks.append(time.perf_counter() - t)
    finally:
        exporter.shutdown()
    return {"seconds": time.perf_counter() - t0, "acks": acks}


def store_acks(tmp: Path, spans: list, batches: int = 20) -> list[float]:
    """The store's own share of an ack: pre-encoded 512-span batches POSTed on one
    keep-alive connection to a scratch store (the SDK's encoding is not counted)."""
    import http.client

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    batches = max(1, min(batches, len(spans) // BATCH))
    bodies = [encode_spans(spans[i * BATCH:(i + 1) * BATCH]).SerializeToString() for i in range(batches)]
    (tmp / "acks").mkdir()
    proc, url, _ = start_store(tmp / "acks")
    acks = []
    try:
        conn = http.client.HTTPConnection(url.removeprefix("http://"), timeout=60)
        for body in bodies:
            t = time.perf_counter()
            conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            resp = conn.getresponse()
            resp.read()
            acks.append(time.perf_counter() - t)
            if resp.status != 200:
                raise SystemExit(f"store answered {resp.status}")
        conn.close()
    finally:
        stop_store(proc)
    return acks


# -- (c) the rest of the data, as raw OTLP (timestamps spread over the window) ----------
def _kv(d: dict) -> list:
    out = []
    for k, v in d.items():
        av = common_pb2.AnyValue(int_value=v) if isinstance(v, int) else common_pb2.AnyValue(string_value=str(v))
        out.append(common_pb2.KeyValue(key=k, value=av))
    return out


def _resource(service: str) -> resource_pb2.Resource:
    return resource_pb2.Resource(attributes=_kv({"service.name": service, "service.instance.id": f"{service}-0"}))


def metric_requests(points: int, now: int) -> list[bytes]:
    """Per service: a counter by route, a gauge, and a latency histogram by route,
    exported every `step` over the window until `points` data points exist."""
    per_collection = len(SERVICES) * (len(ROUTES) * 2 + 1)
    collections = max(1, points // per_collection)
    start, step = now - WINDOW_NS, WINDOW_NS // collections
    bounds = [0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000]
    reqs = []
    for c in range(collections):
        t = start + (c + 1) * step
        rms = []
        for s in SERVICES:
            counters, hists = [], []
            for r, route in enumerate(ROUTES):
                attrs = _kv({"http.route": route})
                counters.append(metrics_pb2.NumberDataPoint(attributes=attrs, start_time_unix_nano=start,
                                                            time_unix_nano=t, as_int=(c + 1) * (r + 1) * 7))
                buckets = [0, c, 3 * c, 5 * c, 2 * c, c, c, r * c, 0, 0, 0, 0, 0, 0, 0, 0]
                hists.append(metrics_pb2.HistogramDataPoint(
                    attributes=attrs, start_time_unix_nano=start, time_unix_nano=t, count=sum(buckets),
                    sum=30.0 * sum(buckets), bucket_counts=buckets, explicit_bounds=bounds))
            ms = [
                metrics_pb2.Metric(name="http.server.requests", unit="{request}", sum=metrics_pb2.Sum(
                    data_points=counters, is_monotonic=True, aggregation_temporality=2)),
                metrics_pb2.Metric(name="http.server.request.duration", unit="ms", histogram=metrics_pb2.Histogram(
                    data_points=hists, aggregation_temporality=2)),
                metrics_pb2.Metric(name="process.threads", unit="{thread}", gauge=metrics_pb2.Gauge(data_points=[
                    metrics_pb2.NumberDataPoint(time_unix_nano=t, as_int=8 + c % 5)])),
            ]
            rms.append(metrics_pb2.ResourceMetrics(resource=_resource(s), scope_metrics=[
                metrics_pb2.ScopeMetrics(scope=common_pb2.InstrumentationScope(name="bench"), metrics=ms)]))
        reqs.append(metrics_service_pb2.ExportMetricsServiceRequest(resource_metrics=rms).SerializeToString())
    return reqs


def log_requests(n: int, trace_ids: list[str], now: int, rng: random.Random) -> list[bytes]:
    reqs = []
    for i in range(0, n, BATCH):
        by_service: dict[str, list] = {s: [] for s in SERVICES}
        for _ in range(min(BATCH, n - i)):
            s = rng.choice(SERVICES)
            err = rng.random() < 0.05
            by_service[s].append(logs_pb2.LogRecord(
                time_unix_nano=now - rng.randrange(WINDOW_NS), severity_number=17 if err else 9,
                severity_text="ERROR" if err else "INFO",
                body=common_pb2.AnyValue(string_value=("order failed: out of stock" if err else
                                                       f"request served route={rng.choice(ROUTES)}")),
                trace_id=bytes.fromhex(rng.choice(trace_ids)), attributes=_kv({"code.function": "handle"})))
        rls = [logs_pb2.ResourceLogs(resource=_resource(s), scope_logs=[logs_pb2.ScopeLogs(log_records=recs)])
               for s, recs in by_service.items()]
        reqs.append(logs_service_pb2.ExportLogsServiceRequest(resource_logs=rls).SerializeToString())
    return reqs


def load_rest(url: str, args: argparse.Namespace, trace_ids: list[str], rng: random.Random) -> None:
    now = time.time_ns()
    for body in metric_requests(args.metric_points, now):
        post(f"{url}/v1/metrics", body, "application/x-protobuf")
    for body in log_requests(args.logs, trace_ids, now, rng):
        post(f"{url}/v1/logs", body, "application/x-protobuf")
    frames = ["app.main:handle", "app.db:query", "app.stats:render", "json:dumps", "ssl:create_default_context",
              "httpx:send", "app.catalog:search"]
    for s in SERVICES:
        for k in range(20):
            stacks = {";".join(["app.main:handle", *rng.sample(frames[1:], rng.randint(1, 3))]): rng.randint(1, 50)
                      for _ in range(40)}
            post(f"{url}/v1/profiles", json.dumps({"service": s, "time_ns": now - k * 10**9, "period_ms": 10.0,
                                                   "stacks": stacks}).encode())


# -- (c) obs latency --------------------------------------------------------------------
def obs_commands(trace_ids: list[str], rng: random.Random) -> list[list[str]]:
    return [
        ["traces", "search", "--service", "shop-api", "--status", "ERROR"],
        ["traces", "search", "--name", "catalog", "--min-ms", "20", "--since", "5m"],
        ["traces", "search", "--attr", "http.route=/stats", "--sort", "slowest"],
        ["traces", "get", rng.choice(trace_ids)],
        ["metrics", "list"],
        ["metrics", "query", "http.server.requests", "--by", "http.route", "--agg", "rate", "--since", "5m"],
        ["metrics", "query", "http.server.request.duration", "--by", "service", "--agg", "p95"],
        ["metrics", "query", "process.threads", "--agg", "max", "--service", "shop-mcp"],
        ["logs", "search", "--severity", "ERROR", "--since", "5m"],
        ["logs", "search", "--text", "stock", "--service", "shop-api", "--limit", "20"],
        ["logs", "search", "--trace", rng.choice(trace_ids)],
        ["profiles", "top", "--by", "total"],
        ["sql", "SELECT service, count(*), avg(duration_ms) FROM spans GROUP BY ALL"],
    ]


def time_obs(url: str, n: int, trace_ids: list[str], tmp: Path, rng: random.Random) -> dict[str, list[float]]:
    env = {**os.environ, "OBS_URL": url, "OBS_LOG": str(tmp / "calls.jsonl"), "OBS_SPILL_DIR": str(tmp / "spill")}
    times: dict[str, list[float]] = {}
    for i in range(n):
        cmds = obs_commands(trace_ids, rng)
        cmd = cmds[i % len(cmds)]
        t = time.perf_counter()
        out = subprocess.run([str(OBS), *cmd], env=env, capture_output=True, text=True, timeout=120, cwd=tmp)
        elapsed = time.perf_counter() - t
        if out.returncode != 0:
            raise SystemExit(f"obs {' '.join(cmd)} failed: {out.stderr}")
        times.setdefault("sql" if cmd[0] == "sql" else " ".join(cmd[:2]), []).append(elapsed)
    return times


def time_startup(n: int) -> list[float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run([str(OBS), "--help"], capture_output=True, timeout=60, check=True)
        times.append(time.perf_counter() - t)
    return times


# -- report -----------------------------------------------------------------------------
def ms(values: list[float], q: float) -> str:
    return f"{1000 * float(np.percentile(values, q)):.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=50_000)
    parser.add_argument("--metric-points", type=int, default=20_000)
    parser.add_argument("--logs", type=int, default=20_000)
    parser.add_argument("--queries", type=int, default=240)
    parser.add_argument("--starts", type=int, default=3, help="store starts timed for (a)")
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        ready = []
        for k in range(args.starts):
            (tmp / f"s{k}").mkdir()
            proc, _, seconds = start_store(tmp / f"s{k}")
            stop_store(proc)
            ready.append(seconds)
        spans, trace_ids = make_spans(args.spans, rng)
        ingest = {"store_acks": store_acks(tmp, spans)}
        proc, url, _ = start_store(tmp)
        try:
            ingest |= ingest_spans(url, spans)
            load_rest(url, args, trace_ids, rng)
            stats = get_json(f"{url}/stats")
            obs = time_obs(url, args.queries, trace_ids, tmp, rng)
            obs["(startup only: obs --help)"] = time_startup(10)
        finally:
            stop_store(proc)
    report(args, ready, ingest, stats, obs)


def report(args, ready: list[float], ingest: dict, stats: dict, obs: dict[str, list[float]]) -> None:
    acks, store = ingest["acks"], ingest["store_acks"]
    everything = [t for name, ts in obs.items() if not name.startswith("(") for t in ts]
    print(f"telemetry store bench ({args.spans} spans, {stats['rows']['metrics']} metric points, "
          f"{stats['rows']['logs']} logs, {stats['rows']['profiles']} profile stacks)")
    print(f"{'measure':<38} {'value':>12}")
    print(f"{'(a) start → /health ready, median s':<38} {np.median(ready):>12.2f}")
    print(f"{'(b) ingest spans/s (SDK, 512/batch)':<38} {args.spans / ingest['seconds']:>12.0f}")
    print(f"{'(b) SDK export per batch p50 / p95 ms':<38} {ms(acks, 50) + ' / ' + ms(acks, 95):>12}")
    print(f"{'(b) store ack per batch p50 / p95 ms':<38} {ms(store, 50) + ' / ' + ms(store, 95):>12}")
    print(f"{'(b) rejected / dropped':<38} {str(stats['rejected']) + ' / ' + str(stats['dropped']):>12}")
    print(f"{'(c) obs call p50 / p95 ms (all)':<38} {ms(everything, 50) + ' / ' + ms(everything, 95):>12}")
    for name, ts in sorted(obs.items()):
        print(f"{'    ' + name + f' (n={len(ts)})':<38} {ms(ts, 50) + ' / ' + ms(ts, 95):>12}")
    if stats["rejected"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
