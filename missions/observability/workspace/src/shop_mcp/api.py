"""HTTP calls from the MCP tools to the catalog API."""

from __future__ import annotations

import asyncio
import logging
import os

import httpx
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shop_telemetry.http import outgoing_headers

API_URL = os.environ.get("SHOP_API_URL", "http://127.0.0.1:8010").rstrip("/")
ATTEMPTS = int(os.environ.get("SHOP_API_ATTEMPTS", "3"))
BACKOFF_S = 0.2
TIMEOUT_S = 10.0

tracer = trace.get_tracer("shop_mcp.api")
log = logging.getLogger("shop_mcp.api")
_console = logging.StreamHandler()
_console.setFormatter(logging.Formatter("%(asctime)s api-call %(message)s"))
log.addHandler(_console)
log.setLevel(logging.INFO)
log.propagate = False


async def call(method: str, path: str, *, params: dict | None = None, json: dict | None = None) -> dict:
    url = f"{API_URL}{path}"
    last_error: Exception | None = None
    for attempt in range(1, ATTEMPTS + 1):
        with tracer.start_as_current_span(
            method,
            kind=SpanKind.CLIENT,
            attributes={"http.method": method, "http.url": url, "net.peer.name": "shop-api", "retry.attempt": attempt},
        ) as span:
            try:
                async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
                    response = await client.request(method, url, params=params, json=json, headers=outgoing_headers())
                span.set_attribute("http.status_code", response.status_code)
                response.raise_for_status()
                log.info("api call %s %s -> %s", method, path, response.status_code)
                return response.json()
            except Exception as exc:  # noqa: BLE001
                last_error = exc
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                log.warning("api call %s %s failed (attempt %d/%d): %s", method, path, attempt, ATTEMPTS, exc)
        if attempt < ATTEMPTS:
            await asyncio.sleep(BACKOFF_S * attempt)
    raise RuntimeError(f"catalog API call failed: {last_error}")
