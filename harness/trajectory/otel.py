"""A run's ATIF trajectory as OpenTelemetry spans, per the GenAI semantic conventions
(open-telemetry/semantic-conventions-genai, Development), through the OTel SDK and OTLP.

- `invoke_agent opencode` (INTERNAL): the agent's whole run (a subagent: one under the task call
  that delegated to it), with the trajectory's token totals;
- `chat {model}` (CLIENT), one per agent step with metrics (one model call; an aggregated step of
  a committed run: one span for its `llm_call_count` calls): `gen_ai.operation.name`,
  `gen_ai.provider.name` (and the older `gen_ai.system`: the serving engine), `gen_ai.request.model`,
  `gen_ai.usage.input_tokens` (cached included, as the conventions count), `gen_ai.usage.output_tokens`,
  `gen_ai.usage.cache_read.input_tokens`, `gen_ai.response.finish_reasons`;
- `execute_tool {name}` (INTERNAL), one per tool call: `gen_ai.tool.name`, `gen_ai.tool.call.id`
  (arguments and results are opt-in in the conventions: left out).

Span times are the trajectory's: a chat span from the request's start to its end on the wire, a
tool span from opencode's tool start to end. Sent with the SDK's OTLP/HTTP exporter to a URL, or
written to a FILE as OTLP/JSON (one ExportTraceServiceRequest, ids in hex as OTLP/JSON wants).
"""

from __future__ import annotations

import contextlib
import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import atif

from harness.atomic import write_atomic
from harness.errors import UserError

EXTRA = "observability"
SCOPE = "llms-benchmark.trajectory"
TIMEOUT_S = 10.0  # the OTLP POST, retries included


def _sdk():
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: F401
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: F401
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    except ImportError:
        raise UserError("the OpenTelemetry SDK is not installed", field="--otel",
                        fix=f"pip install 'llms-benchmark[{EXTRA}]' (the `{EXTRA}` extra: opentelemetry-sdk and "
                            "its OTLP/HTTP exporter)") from None
    return trace, Resource, TracerProvider, SimpleSpanProcessor, InMemorySpanExporter


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(value) -> int | None:
    """An ISO time as integer nanoseconds, exactly (a float's seconds would lose the microseconds)."""
    try:
        moment = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def _step_window(step: atif.Step) -> tuple[int | None, int | None]:
    start = _ns(step.timestamp)
    extra = (step.metrics.extra if step.metrics and step.metrics.extra else {}) | (step.extra or {})
    end = _ns(extra.get("ended")) or _ns(extra.get("completed"))
    return start, max(end, start) if end and start else start


def _tool_windows(step: atif.Step, after: int | None) -> list[tuple[atif.ToolCall, int | None, int | None]]:
    out = []
    for call in step.tool_calls or []:
        extra = call.extra or {}
        start = _ns(extra.get("started")) or after
        end = _ns(extra.get("ended")) or start
        out.append((call, start, max(end, start) if end and start else start))
    return out


def _bounds(traj: atif.Trajectory) -> tuple[int | None, int | None]:
    times = []
    for step in traj.steps:
        start, end = _step_window(step)
        times += [start, end] + [t for _, a, b in _tool_windows(step, end) for t in (a, b)]
    for sub in traj.subagent_trajectories or []:
        times += list(_bounds(sub))
    times = [t for t in times if t]
    return (min(times), max(times)) if times else (None, None)


class _Emitter:
    def __init__(self, tracer, trace_api, engine: str | None) -> None:
        self.tracer, self.trace, self.engine = tracer, trace_api, engine or "unknown"

    def _provider(self) -> dict:
        return {"gen_ai.provider.name": self.engine, "gen_ai.system": self.engine}

    def agent(self, traj: atif.Trajectory, parent_ctx=None) -> None:
        start, end = _bounds(traj)
        fm = traj.final_metrics or atif.FinalMetrics()
        span = self.tracer.start_span(
            f"invoke_agent {traj.agent.name}", context=parent_ctx, kind=self.trace.SpanKind.INTERNAL, start_time=start,
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": traj.agent.name,
                        "gen_ai.agent.version": traj.agent.version, **self._provider(),
                        "gen_ai.conversation.id": traj.trajectory_id or traj.session_id or "",
                        "gen_ai.request.model": traj.agent.model_name or "",
                        "gen_ai.usage.input_tokens": fm.total_prompt_tokens or 0,
                        "gen_ai.usage.output_tokens": fm.total_completion_tokens or 0,
                        "gen_ai.usage.cache_read.input_tokens": fm.total_cached_tokens or 0})
        ctx = self.trace.set_span_in_context(span)
        subs = {s.trajectory_id: s for s in traj.subagent_trajectories or []}
        done: set[str] = set()
        for step in traj.steps:
            if step.source != "agent":
                continue
            s_start, s_end = _step_window(step)
            if step.metrics is not None:
                self._chat(traj, step, ctx, s_start, s_end)
            refs = {r.source_call_id: r.subagent_trajectory_ref or [] for r in
                    (step.observation.results if step.observation else [])}
            for call, t_start, t_end in _tool_windows(step, s_end):
                tool = self.tracer.start_span(
                    f"execute_tool {call.function_name}", context=ctx, kind=self.trace.SpanKind.INTERNAL,
                    start_time=t_start, attributes={"gen_ai.operation.name": "execute_tool",
                                                    "gen_ai.tool.name": call.function_name,
                                                    "gen_ai.tool.call.id": call.tool_call_id,
                                                    "gen_ai.tool.type": "function"})
                if (call.extra or {}).get("status") == "error":
                    tool.set_status(self.trace.Status(self.trace.StatusCode.ERROR))
                for ref in refs.get(call.tool_call_id, []):
                    if ref.trajectory_id in subs and ref.trajectory_id not in done:
                        done.add(ref.trajectory_id)
                        self.agent(subs[ref.trajectory_id], self.trace.set_span_in_context(tool))
                tool.end(end_time=t_end)
        for tid, sub in subs.items():  # a subagent no call names: under the agent itself
            if tid not in done:
                self.agent(sub, ctx)
        span.end(end_time=end)

    def _chat(self, traj: atif.Trajectory, step: atif.Step, ctx, start: int | None, end: int | None) -> None:
        m, model = step.metrics, step.model_name or traj.agent.model_name or "unknown"
        finish = (m.extra or {}).get("finish_reason") or (step.extra or {}).get("finish")
        attrs = {"gen_ai.operation.name": "chat", **self._provider(), "gen_ai.request.model": model,
                 "gen_ai.response.model": model, "gen_ai.usage.input_tokens": m.prompt_tokens or 0,
                 "gen_ai.usage.output_tokens": m.completion_tokens or 0,
                 "gen_ai.usage.cache_read.input_tokens": m.cached_tokens or 0,
                 "gen_ai.conversation.id": traj.trajectory_id or traj.session_id or "",
                 "llms_benchmark.step_id": step.step_id, "llms_benchmark.llm_call_count": step.llm_call_count or 1}
        if finish:
            attrs["gen_ai.response.finish_reasons"] = [str(finish)]
        if step.reasoning_effort is not None:
            attrs["llms_benchmark.effort"] = str(step.reasoning_effort)
        span = self.tracer.start_span(f"chat {model}", context=ctx, kind=self.trace.SpanKind.CLIENT,
                                      start_time=start, attributes=attrs)
        span.end(end_time=end)


def spans(traj: atif.Trajectory) -> list:
    """The trajectory's spans (the SDK's ReadableSpans), made by a private TracerProvider."""
    trace_api, Resource, TracerProvider, SimpleSpanProcessor, InMemorySpanExporter = _sdk()
    extra = traj.extra or {}
    provider = TracerProvider(resource=Resource.create({
        "service.name": "llms-benchmark", "llms_benchmark.run_id": str(extra.get("run_id") or traj.session_id or ""),
        "gen_ai.agent.name": traj.agent.name}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    engine = ((traj.agent.extra or {}).get("engine") or {}).get("name")
    _Emitter(provider.get_tracer(SCOPE), trace_api, engine).agent(traj)
    provider.shutdown()
    return list(memory.get_finished_spans())


def _otlp_json(finished: list) -> dict:
    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    doc = json_format.MessageToDict(encode_spans(finished), use_integers_for_enums=True)

    def hexed(node):  # OTLP/JSON: trace and span ids in hex, not protobuf JSON's base64
        if isinstance(node, list):
            return [hexed(x) for x in node]
        if isinstance(node, dict):
            import base64

            return {k: base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str)
                    else hexed(v) for k, v in node.items()}
        return node

    return hexed(doc)


def _endpoint(url: str) -> str:
    import httpx

    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise UserError(f"{url[:200]!r} is not an OTLP/HTTP URL", field="--otel",
                        fix="give http://HOST:PORT (an OTLP/HTTP receiver; /v1/traces is added) or a FILE path")
    return url if parsed.path.rstrip("/").endswith("/v1/traces") else url.rstrip("/") + "/v1/traces"


def export(traj: atif.Trajectory, target: str) -> tuple[int, str]:
    """(spans sent or written, where): to an OTLP/HTTP URL, or to a FILE as OTLP/JSON."""
    finished = spans(traj)
    if "://" in target:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult

        endpoint = _endpoint(target)
        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=TIMEOUT_S)
        quiet = logging.getLogger("opentelemetry")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # its own log lines carry tracebacks: the refusal below says it
        try:
            result = exporter.export(finished)
        except Exception as exc:  # noqa: BLE001 - a refused connection, a bad TLS: one message
            raise UserError(f"the spans could not be sent to {endpoint} ({type(exc).__name__})", field="--otel",
                            fix="start the OTLP/HTTP receiver, or give the right URL") from None
        finally:
            quiet.setLevel(level)
            with contextlib.suppress(Exception):
                exporter.shutdown()
        if result is not SpanExportResult.SUCCESS:
            raise UserError(f"the OTLP endpoint {endpoint} did not take the spans (unreachable, or it refused them)",
                            field="--otel", fix="start the OTLP/HTTP receiver there, or give the right URL")
        return len(finished), endpoint
    path = Path(target)
    if path.is_dir() or not path.parent.is_dir():
        raise UserError(f"cannot write spans to {target}", file=target, field="--otel",
                        fix="give a FILE in an existing folder (or an http:// URL)")
    write_atomic(path, json.dumps(_otlp_json(finished)) + "\n")
    return len(finished), str(path)
