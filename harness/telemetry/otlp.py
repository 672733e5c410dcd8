"""OTLP export requests (traces, metrics, logs; protobuf or JSON) and our CPU-profile
documents, turned into the store's rows: one tuple per span, data point, log record or
stack sample, in the column order of harness/telemetry/schema.py."""

from __future__ import annotations

import base64
import json
import math
import time
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

from harness.telemetry.readonly import BadRequest

UNKNOWN_SERVICE = "unknown_service"
_ID_KEYS = {"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"}
_SEVERITIES = ((21, "FATAL"), (17, "ERROR"), (13, "WARN"), (9, "INFO"), (5, "DEBUG"), (1, "TRACE"))


# -- OTLP → rows ------------------------------------------------------------------------
# Sorted keys: equal attribute sets give equal strings, so they group as one series.
# One encoder for all: json.dumps with options builds a new one per call.
_dumps = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def any_value(v) -> Any:
    """An OTLP AnyValue as plain JSON-able Python (bytes as hex, non-finite floats as
    strings, since JSON has no NaN)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return kv_dict(v.kvlist_value.values)
    if kind == "bytes_value":
        return v.bytes_value.hex()
    if kind == "double_value" and not math.isfinite(v.double_value):
        return str(v.double_value)
    return getattr(v, kind)


def kv_dict(kvs) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs}


def _hex_or_none(raw: bytes) -> str | None:
    return raw.hex() if raw and any(raw) else None


def _resource(resource) -> tuple[str, str]:
    attrs = kv_dict(resource.attributes)
    return str(attrs.get("service.name") or UNKNOWN_SERVICE), _dumps(attrs)


def _enum_name(enum_type, number: int, prefix: str) -> str:
    try:
        return enum_type.Name(number).removeprefix(prefix)
    except ValueError:
        return str(number)


def span_rows(req) -> list[tuple]:
    rows = []
    for rs in req.resource_spans:
        service, resource = _resource(rs.resource)
        for ss in rs.scope_spans:
            scope = ss.scope.name or None
            for s in ss.spans:
                events = [
                    {"name": e.name, "time_ns": e.time_unix_nano, "attributes": kv_dict(e.attributes)}
                    for e in s.events
                ]
                start, end = s.start_time_unix_nano, s.end_time_unix_nano
                rows.append((
                    _hex_or_none(s.trace_id), _hex_or_none(s.span_id), _hex_or_none(s.parent_span_id),
                    service, s.name, _enum_name(trace_pb2.Span.SpanKind, s.kind, "SPAN_KIND_"),
                    start, end, (end - start) / 1e6 if end >= start else None,
                    _enum_name(trace_pb2.Status.StatusCode, s.status.code, "STATUS_CODE_"),
                    s.status.message or None, _dumps(kv_dict(s.attributes)), resource, scope,
                    _dumps(events),
                ))
    return rows


def _temporality(number: int) -> str | None:
    return {1: "DELTA", 2: "CUMULATIVE"}.get(number)


def _number(dp) -> float | None:
    kind = dp.WhichOneof("value")
    return float(getattr(dp, kind)) if kind else None


def _exponential_as_explicit(dp) -> tuple[list[float], list[int]]:
    """Exponential buckets as explicit ones, so every histogram reads the same way:
    bucket k of the positive range covers (base^k, base^(k+1)]; zero and negative
    counts fall in the first bucket."""
    base = 2.0 ** (2.0 ** -dp.scale)
    offset, counts = dp.positive.offset, list(dp.positive.bucket_counts)
    bounds = [base ** (offset + i) for i in range(len(counts) + 1)]
    first = dp.zero_count + sum(dp.negative.bucket_counts)
    return bounds, [first, *counts, 0]


def _metric_points(metric) -> list[dict]:
    """One dict per data point with the type-specific columns filled."""
    kind = metric.WhichOneof("data")
    if kind in ("gauge", "sum"):
        data = getattr(metric, kind)
        mono = data.is_monotonic if kind == "sum" else None
        temp = _temporality(data.aggregation_temporality) if kind == "sum" else None
        return [
            {"dp": dp, "type": kind, "value": _number(dp), "is_monotonic": mono, "temporality": temp}
            for dp in data.data_points
        ]
    if kind == "histogram":
        temp = _temporality(metric.histogram.aggregation_temporality)
        return [
            {"dp": dp, "type": "histogram", "count": dp.count, "sum": dp.sum if dp.HasField("sum") else None,
             "bounds": list(dp.explicit_bounds), "bucket_counts": list(dp.bucket_counts), "temporality": temp}
            for dp in metric.histogram.data_points
        ]
    if kind == "exponential_histogram":
        temp = _temporality(metric.exponential_histogram.aggregation_temporality)
        points = []
        for dp in metric.exponential_histogram.data_points:
            bounds, counts = _exponential_as_explicit(dp)
            points.append({"dp": dp, "type": "histogram", "count": dp.count,
                           "sum": dp.sum if dp.HasField("sum") else None,
                           "bounds": bounds, "bucket_counts": counts, "temporality": temp})
        return points
    if kind == "summary":
        # No quantile columns: a summary keeps its count and sum, as a one-bucket histogram.
        return [
            {"dp": dp, "type": "histogram", "count": dp.count, "sum": dp.sum, "bounds": [],
             "bucket_counts": [dp.count], "temporality": "CUMULATIVE"}
            for dp in metric.summary.data_points
        ]
    return []


def metric_rows(req) -> list[tuple]:
    rows = []
    for rm in req.resource_metrics:
        service, resource = _resource(rm.resource)
        for sm in rm.scope_metrics:
            scope = sm.scope.name or None
            for m in sm.metrics:
                for p in _metric_points(m):
                    dp = p["dp"]
                    rows.append((
                        service, m.name, p["type"], m.unit or None, m.description or None,
                        dp.time_unix_nano, dp.start_time_unix_nano or None, p.get("value"),
                        p.get("count"), p.get("sum"),
                        _dumps(p["bounds"]) if "bounds" in p else None,
                        _dumps(p["bucket_counts"]) if "bucket_counts" in p else None,
                        p.get("is_monotonic"), p.get("temporality"),
                        _dumps(kv_dict(dp.attributes)), resource, scope,
                    ))
    return rows


def _severity_text(text: str, number: int) -> str | None:
    if text:
        return text
    return next((name for floor, name in _SEVERITIES if number >= floor), None)


def _body_text(body) -> str | None:
    value = any_value(body)
    if value is None or isinstance(value, str):
        return value
    return _dumps(value)


def log_rows(req) -> list[tuple]:
    rows = []
    for rl in req.resource_logs:
        service, resource = _resource(rl.resource)
        for sl in rl.scope_logs:
            scope = sl.scope.name or None
            for r in sl.log_records:
                observed = r.observed_time_unix_nano or None
                rows.append((
                    r.time_unix_nano or observed, observed, service,
                    _severity_text(r.severity_text, r.severity_number), r.severity_number or None,
                    _body_text(r.body), _hex_or_none(r.trace_id), _hex_or_none(r.span_id),
                    _dumps(kv_dict(r.attributes)), resource, scope,
                ))
    return rows


def profile_rows(doc: Any) -> list[tuple]:
    """Rows from our profile format: {"service", "time_ns", "period_ms", "stacks":
    {"root;...;leaf": samples}}."""
    if not isinstance(doc, dict):
        raise BadRequest("profile must be a JSON object")
    service, stacks = doc.get("service"), doc.get("stacks")
    if not isinstance(service, str) or not service:
        raise BadRequest("profile needs a non-empty string 'service'")
    if not isinstance(stacks, dict):
        raise BadRequest("profile needs 'stacks': {\"root;...;leaf\": samples}")
    time_ns = doc.get("time_ns", time.time_ns())
    period_ms = doc.get("period_ms", 10.0)
    if not isinstance(time_ns, int) or not isinstance(period_ms, (int, float)):
        raise BadRequest("profile 'time_ns' must be an integer and 'period_ms' a number")
    rows = []
    for stack, samples in stacks.items():
        if not stack or not isinstance(samples, int) or isinstance(samples, bool) or samples < 0:
            raise BadRequest(f"bad stack entry {stack!r}: samples must be a non-negative integer")
        rows.append((time_ns, service, stack, samples, float(period_ms)))
    return rows


@dataclass(frozen=True)
class Signal:
    table: str
    request: type
    response: type
    to_rows: Any


SIGNALS = {
    "/v1/traces": Signal("spans", trace_service_pb2.ExportTraceServiceRequest,
                         trace_service_pb2.ExportTraceServiceResponse, span_rows),
    "/v1/metrics": Signal("metrics", metrics_service_pb2.ExportMetricsServiceRequest,
                          metrics_service_pb2.ExportMetricsServiceResponse, metric_rows),
    "/v1/logs": Signal("logs", logs_service_pb2.ExportLogsServiceRequest,
                       logs_service_pb2.ExportLogsServiceResponse, log_rows),
}


def _hex_ids_to_base64(node: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex, protobuf's JSON mapping expects base64."""
    if isinstance(node, list):
        return [_hex_ids_to_base64(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in _ID_KEYS and isinstance(value, str):
            try:
                value = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                pass  # not hex: leave it to the parser to judge
        out[key] = _hex_ids_to_base64(value)
    return out


def decode_otlp(sig: Signal, body: bytes, is_json: bool):
    msg = sig.request()
    try:
        if is_json:
            json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), msg, ignore_unknown_fields=True)
        else:
            msg.ParseFromString(body)
    except (DecodeError, json_format.ParseError, ValueError) as exc:
        raise BadRequest(f"cannot decode OTLP {'JSON' if is_json else 'protobuf'}: {exc}") from exc
    return msg


