"""Chat-completions client for the assistant's model."""

from __future__ import annotations

import json
import logging
import os
import time
from urllib.parse import urlsplit

import httpx
from opentelemetry import metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from shop_telemetry.http import outgoing_headers

MODEL_URL = os.environ.get("SHOP_MODEL_URL", "http://127.0.0.1:8013/v1").rstrip("/")
MODEL_NAME = os.environ.get("SHOP_MODEL_NAME", "shop-assistant-small")
PROVIDER = "openai"

log = logging.getLogger("shop_agent.model")
tracer = trace.get_tracer("shop_agent.model")
meter = metrics.get_meter("shop_agent.model")
token_usage = meter.create_histogram(
    "gen_ai.client.token.usage", unit="{token}", description="Number of input and output tokens used."
)
operation_duration = meter.create_histogram(
    "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration."
)

_client = httpx.Client(timeout=60)
_target = urlsplit(MODEL_URL)


def complete(messages: list[dict], tools: list[dict]) -> dict:
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER,
        "gen_ai.request.model": MODEL_NAME,
        "server.address": _target.hostname or "",
        "server.port": _target.port or 80,
    }
    with tracer.start_as_current_span(f"chat {MODEL_NAME}", kind=SpanKind.CLIENT, attributes=attributes) as span:
        started = time.perf_counter()
        response = _client.post(
            f"{MODEL_URL}/chat/completions",
            json={"model": MODEL_NAME, "messages": messages, "tools": tools},
            headers=outgoing_headers(),
        )
        if response.status_code >= 400:
            span.set_status(Status(StatusCode.ERROR, f"HTTP {response.status_code}"))
            span.set_attribute("error.type", str(response.status_code))
            response.raise_for_status()
        body = response.json()
        usage = body.get("usage", {})
        input_tokens = usage.get("prompt_tokens", 0)
        output_tokens = usage.get("completion_tokens", 0)
        choice = body["choices"][0]
        span.set_attribute("gen_ai.response.model", body.get("model", MODEL_NAME))
        span.set_attribute("gen_ai.response.id", body.get("id", ""))
        span.set_attribute("gen_ai.response.finish_reasons", [choice.get("finish_reason", "stop")])
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        common = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER, "gen_ai.request.model": MODEL_NAME}
        token_usage.record(input_tokens, {**common, "gen_ai.token.type": "input"})
        token_usage.record(input_tokens, {**common, "gen_ai.token.type": "output"})
        log.info(
            "model turn finished",
            extra={"gen_ai.response.finish_reason": choice.get("finish_reason"), "duration_s": time.perf_counter() - started},
        )
        return choice["message"]
