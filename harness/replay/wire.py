"""The replay servers' side of the OpenAI wire: reading a chat request (its text, its
prompt size, what it asks for, what is wrong with it) and writing the answer (chunks,
the usage chunk, a whole completion body, SSE framing, error bodies)."""

from __future__ import annotations

import json
import math
import secrets
import time
from typing import Any

from harness.replay.reply import Reply
from harness.replay.trajectory import Usage

DEFAULT_MAX_TOKENS = 64


# ---------------------------------------------------------------- the model card


def model_card(model: str, owned_by: str, max_model_len: int, root: str) -> dict[str, Any]:
    """One /v1/models entry, in vLLM 0.32's shape (read from the real server): `root` (what was
    loaded), `parent`, `max_model_len`, and a `permission` list."""
    created = int(time.time())
    return {"id": model, "object": "model", "created": created, "owned_by": owned_by, "root": root,
            "parent": None, "max_model_len": max_model_len,
            "permission": [{"id": f"modelperm-{secrets.token_hex(8)}", "object": "model_permission",
                            "created": created, "allow_create_engine": False, "allow_sampling": True,
                            "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}]}


# ---------------------------------------------------------------- reading a request


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or a list of `{type: text, text}` parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        )
    return ""


def first_user_text(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return ""


def count_assistant_messages(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def estimate_prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """An estimate (about 4 characters a token), not a tokenizer count.

    The replay server has no tokenizer; the harness's probe reads `usage`, which
    reports this same number, so the estimate is all anyone sees.
    """
    chars = sum(len(message_text(m.get("content"))) for m in messages)
    return max(1, math.ceil(chars / 4))


def requested_max_tokens(body: dict[str, Any]) -> int:
    # vLLM's precedence: max_completion_tokens, then max_tokens.
    value = body.get("max_completion_tokens") or body.get("max_tokens")
    return DEFAULT_MAX_TOKENS if value is None else value


def request_problem(body: Any, served_model: str) -> tuple[int, str, str] | None:
    """(status, message, type) when the request cannot be served, as vLLM would refuse it."""
    if not isinstance(body, dict):
        return 400, "the request body must be a JSON object", "BadRequestError"
    model = body.get("model")
    if model is not None and model != served_model:
        return 404, f"The model `{model}` does not exist.", "NotFoundError"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return 400, "`messages` must be a non-empty list of message objects", "BadRequestError"
    max_tokens = requested_max_tokens(body)
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
        return 400, "max_tokens must be a non-negative integer", "BadRequestError"
    return None


# ---------------------------------------------------------------- the wire format


def error_body(message: str, type_: str | None, status: int) -> dict[str, Any]:
    """The error object vLLM returns (OpenAI shape)."""
    default_type = "BadRequestError" if status < 500 else "InternalServerError"
    return {"error": {"message": message, "type": type_ or default_type, "param": None, "code": status}}


def chunk(cid: str, created: int, model: str, delta: dict[str, Any], finish_reason: str | None = None) -> dict:
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [choice]}


def usage_chunk(cid: str, created: int, model: str, usage: Usage) -> dict:
    return {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage.openai(),
    }


def assemble(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """Fold streamed deltas into one assistant message, the way an OpenAI client does."""
    content, reasoning, calls = "", "", {}
    for delta in deltas:
        content += delta.get("content") or ""
        reasoning += delta.get("reasoning_content") or ""
        for tc in delta.get("tool_calls") or []:
            call = calls.setdefault(tc["index"], {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
            call["id"] = tc.get("id") or call["id"]
            fn = tc.get("function") or {}
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def completion_body(reply: Reply, cid: str, created: int, model: str) -> dict[str, Any]:
    """The non-streaming `chat.completion` object with the same content and usage."""
    choice = {
        "index": 0,
        "message": assemble([p.delta for p in reply.pieces]),
        "logprobs": None,
        "finish_reason": reply.finish_reason,
    }
    return {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [choice],
        "usage": reply.usage.openai() if reply.usage else None,
    }


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()

