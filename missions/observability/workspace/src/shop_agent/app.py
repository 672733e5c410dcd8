"""POST /ask: a small tool-calling loop over the shop's MCP server."""

from __future__ import annotations

import json
import logging
import os

from fastapi import FastAPI
from mcp import Client
from opentelemetry import metrics, trace
from pydantic import BaseModel

from shop_agent import model
from shop_telemetry import SECONDS_BUCKETS
from shop_telemetry.http import NATIVE_TELEMETRY_OFF, ServerSpanMiddleware

MCP_URL = os.environ.get("SHOP_MCP_URL", "http://127.0.0.1:8011/mcp")
MAX_TURNS = 8
SYSTEM_PROMPT = (
    "You are the shop's assistant. Use the tools to look products up, read category statistics "
    "and place orders. Answer briefly."
)

log = logging.getLogger("shop_agent")
tracer = trace.get_tracer("shop_agent")
meter = metrics.get_meter("shop_agent")
questions = meter.create_counter("shop_agent.questions", unit="{question}", description="Questions answered.")
request_duration = meter.create_histogram(
    "http.server.request.duration", unit="s", description="Duration of HTTP server requests.",
    explicit_bucket_boundaries_advisory=SECONDS_BUCKETS,
)


def _record(method: str, route: str, status: int, seconds: float) -> None:
    request_duration.record(
        seconds, {"http.request.method": method, "http.route": route, "http.response.status_code": status}
    )


app = FastAPI(title="shop-agent", telemetry=NATIVE_TELEMETRY_OFF)
app.add_middleware(ServerSpanMiddleware, tracer_name="shop_agent", on_request=_record)


class Question(BaseModel):
    question: str


@app.get("/health")
async def health() -> dict:
    return {"status": "ok"}


def _tool_schema(tool) -> dict:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
    }


def _tool_text(result) -> str:
    if result.structured_content is not None:
        return json.dumps(result.structured_content)
    return "".join(getattr(part, "text", "") for part in result.content)


@app.post("/ask")
async def ask(body: Question) -> dict:
    with tracer.start_as_current_span(
        "invoke_agent shop-assistant",
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "shop-assistant",
            "gen_ai.provider.name": model.PROVIDER,
            "gen_ai.request.model": model.MODEL_NAME,
        },
    ) as agent_span:
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": body.question}]
        tool_calls_made = 0
        async with Client(MCP_URL) as session:
            listed = await session.list_tools()
            tools = [_tool_schema(t) for t in listed.tools]
            answer = ""
            for _ in range(MAX_TURNS):
                message = model.complete(messages, tools)
                messages.append(message)
                calls = message.get("tool_calls") or []
                if not calls:
                    answer = message.get("content") or ""
                    break
                for call in calls:
                    name = call["function"]["name"]
                    arguments = call["function"].get("arguments") or "{}"
                    with tracer.start_as_current_span(
                        f"execute_tool {name}",
                        attributes={
                            "gen_ai.operation.name": "execute_tool",
                            "gen_ai.tool.name": name,
                            "gen_ai.tool.call.id": call.get("id", ""),
                            "gen_ai.tool.call.arguments": arguments,
                            "gen_ai.tool.type": "function",
                        },
                    ):
                        result = await session.call_tool(name, json.loads(arguments))
                    tool_calls_made += 1
                    messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": _tool_text(result)})
        agent_span.set_attribute("shop_agent.tool_calls", tool_calls_made)
        questions.add(1, {"gen_ai.request.model": model.MODEL_NAME})
        log.info("question answered", extra={"shop_agent.tool_calls": tool_calls_made})
        return {"answer": answer, "tool_calls": tool_calls_made}
