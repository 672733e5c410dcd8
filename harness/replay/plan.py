"""Planning a replay answer: which scripted step (or the end, or the fallback) answers a
request, and the answer as a timeline of deltas (`Reply`), before anything is played."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from harness.replay.reply import Piece, Reply
from harness.replay.trajectory import DEFAULT_TTFT, Fallback, Scenario, Step, Trajectory, Usage
from harness.replay.wire import (
    count_assistant_messages,
    error_body,
    estimate_prompt_tokens,
    first_user_text,
    requested_max_tokens,
)

END_TEXT = "(end of scripted trajectory)"
# Tool-call arguments are streamed in pieces of this many characters, as a real
# model's tokens would split them.
ARGUMENT_PIECE = 12
FALLBACK_WORDS = ("replay", "tokens", "stream", "at", "a", "scripted", "pace", "for", "probes")


# ---------------------------------------------------------------- planning a reply


def plan_reply(trajectory: Trajectory, body: dict[str, Any]) -> Reply:
    """Stateless step selection: the scenario by the first user message, the step by the
    number of assistant messages. A retried request therefore gets the same step."""
    messages = body["messages"]
    scenario = trajectory.find(first_user_text(messages))
    if scenario is None:
        return plan_fallback(trajectory.fallback, messages, requested_max_tokens(body))
    index = count_assistant_messages(messages)
    if index >= len(scenario.steps):
        return plan_end(scenario, index, messages)
    return plan_step(scenario, index, scenario.steps[index], messages)


def plan_step(scenario: Scenario, index: int, step: Step, messages: list[dict[str, Any]]) -> Reply:
    where = {"trajectory": scenario.name, "step": index}
    if step.kind == "error":
        err = step.error
        return Reply(kind="error", status=err.status, error=error_body(err.message, err.type, err.status), **where)
    if step.kind == "stall":
        return Reply(kind="stall", stall=step.stall, **where)
    deltas = [{"reasoning_content": p} for p in words(step.reasoning or "")]
    deltas += [{"content": p} for p in words(step.text or "")]
    deltas += tool_call_deltas(step.tool_calls or [])
    # Without scripted usage: the prompt estimate and one token per streamed piece.
    usage = step.usage or Usage(prompt_tokens=estimate_prompt_tokens(messages), completion_tokens=len(deltas))
    return Reply(
        kind=step.kind,
        pieces=spread(deltas, step.ttft, step.total_duration, usage.completion_tokens),
        finish_at=step.total_duration,
        finish_reason="tool_calls" if step.tool_calls else "stop",
        usage=usage,
        **where,
    )


def plan_end(scenario: Scenario, index: int, messages: list[dict[str, Any]]) -> Reply:
    deltas = [{"content": p} for p in words(END_TEXT)]
    usage = Usage(prompt_tokens=estimate_prompt_tokens(messages), completion_tokens=len(deltas))
    finish_at = DEFAULT_TTFT + 0.05
    return Reply(
        kind="end",
        trajectory=scenario.name,
        step=index,
        pieces=spread(deltas, DEFAULT_TTFT, finish_at, usage.completion_tokens),
        finish_at=finish_at,
        finish_reason="stop",
        usage=usage,
    )


def plan_fallback(fallback: Fallback, messages: list[dict[str, Any]], max_tokens: int) -> Reply:
    """Simulated speed: prefill at prefill_tps, then max_tokens tokens at decode_tps."""
    prompt_tokens = estimate_prompt_tokens(messages)
    ttft = prompt_tokens / fallback.prefill_tps
    step_s = 1.0 / fallback.decode_tps
    pieces = [Piece(ttft, {"role": "assistant", "content": ""})]
    pieces += [
        Piece(ttft + k * step_s, {"content": f" {FALLBACK_WORDS[k % len(FALLBACK_WORDS)]}"}, 1)
        for k in range(max_tokens)
    ]
    return Reply(
        kind="fallback",
        trajectory=None,
        step=None,
        pieces=tuple(pieces),
        finish_at=pieces[-1].at,
        # The probe always runs to max_tokens, as vLLM does with ignore_eos.
        finish_reason="length",
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=max_tokens),
    )


def words(text: str) -> list[str]:
    """Split text into word-sized pieces that join back to exactly the text."""
    return re.findall(r"\s*\S+|\s+$", text)


def tool_call_deltas(calls: list[Any]) -> list[dict[str, Any]]:
    """OpenAI-style tool-call deltas: a header per call, then its arguments in pieces."""
    deltas: list[dict[str, Any]] = []
    for i, call in enumerate(calls):
        header = {"index": i, "id": f"call_{uuid.uuid4().hex[:24]}", "type": "function"}
        deltas.append({"tool_calls": [{**header, "function": {"name": call.name, "arguments": ""}}]})
        args = call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)
        for start in range(0, len(args), ARGUMENT_PIECE):
            piece = args[start : start + ARGUMENT_PIECE]
            deltas.append({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    return deltas


def spread(deltas: list[dict[str, Any]], ttft: float, duration: float, tokens: int) -> tuple[Piece, ...]:
    """Role chunk at ttft, then the deltas evenly over the rest of the duration.

    The completion tokens are shared out over the deltas (over the role chunk when
    there are none) so the generation-token counter grows as the stream does.
    """
    shares = split_evenly(tokens, max(1, len(deltas)))
    role = Piece(ttft, {"role": "assistant", "content": ""}, 0 if deltas else shares[0])
    gap = (duration - ttft) / max(1, len(deltas))
    return (role, *(Piece(ttft + k * gap, d, shares[k]) for k, d in enumerate(deltas)))


def split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]

