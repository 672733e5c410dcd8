"""Server spans for the FastAPI apps and trace-context helpers for outgoing calls."""

from __future__ import annotations

import time

from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.trace import SpanKind, Status, StatusCode

EXCLUDED_PATHS = {"/health"}


class ServerSpanMiddleware:
    """Pure ASGI middleware: one SERVER span per request, named after the matched route."""

    def __init__(self, app, tracer_name: str, on_request=None) -> None:
        self.app = app
        self.tracer = trace.get_tracer(tracer_name)
        self.on_request = on_request

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") in EXCLUDED_PATHS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        ctx = extract(headers)
        method = scope.get("method", "GET")
        status = {"code": 500}
        started = time.perf_counter()

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        with self.tracer.start_as_current_span(
            f"{method} {scope.get('path')}",
            context=ctx,
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": method,
                "url.path": scope.get("path", ""),
                "url.scheme": scope.get("scheme", "http"),
                "user_agent.original": headers.get("user-agent", ""),
                "server.port": (scope.get("server") or ("", 0))[1] or 0,
            },
        ) as span:
            try:
                await self.app(scope, receive, send_wrapper)
            finally:
                route = scope.get("route")
                template = getattr(route, "path", None) or scope.get("path", "")
                span.update_name(f"{method} {template}")
                span.set_attribute("http.route", template)
                span.set_attribute("http.response.status_code", status["code"])
                if status["code"] >= 500:
                    span.set_status(Status(StatusCode.ERROR, f"HTTP {status['code']}"))
                if self.on_request is not None:
                    self.on_request(method, template, status["code"], time.perf_counter() - started)


def outgoing_headers(extra: dict | None = None) -> dict:
    headers = dict(extra or {})
    inject(headers)
    return headers


# The services record their own server spans and request metrics (ServerSpanMiddleware).
NATIVE_TELEMETRY_OFF = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
}


def serve(app, port: int, telemetry) -> None:
    """Run uvicorn until SIGTERM/SIGINT, then flush and shut the telemetry providers down."""
    import signal

    import uvicorn

    def _exit(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    try:
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    except SystemExit:
        pass
    finally:
        telemetry.shutdown()
