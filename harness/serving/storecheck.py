"""Cross-check the store's token counts against opencode's own event stream and the server.

- every `step_finish` event of `opencode run --format json` carries the call's tokens:
  they must equal the store's for the same message (the stream covers the root session);
- the server's counters over the run window: the tokens it generated must equal the
  completion tokens the store holds for all calls (the unit serves nobody else meanwhile),
  and on vLLM-named servers the prompt tokens too (llama.cpp counts only what it processed).
A mismatch is named, never silently fixed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.serving.turns import Turn


LINE_CAP = 8 << 20  # bytes of one events line (the runner keeps none longer)


def _lines(path: Path):
    """The file's lines streamed, each at most LINE_CAP bytes (a longer one skipped whole):
    the events file is what opencode wrote, and a tool could write into it."""
    with open(path, "rb") as f:
        while raw := f.readline(LINE_CAP + 1):
            if len(raw) > LINE_CAP and not raw.endswith(b"\n"):
                while (rest := f.readline(LINE_CAP)) and not rest.endswith(b"\n"):
                    pass
                continue
            yield raw.decode("utf-8", "replace")


def step_finish_tokens(events_path: Path) -> dict[str, tuple[int, int]]:
    """message id → (prompt, completion) from the event stream's step_finish events."""
    out: dict[str, tuple[int, int]] = {}
    if not events_path.is_file():
        return out
    for line in _lines(events_path):
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict) or event.get("type") != "step_finish":
            continue
        part = event.get("part") or {}
        tokens = part.get("tokens") or {}
        cache = tokens.get("cache") or {}
        prompt = sum(int(x or 0) for x in (tokens.get("input"), cache.get("read"), cache.get("write")))
        completion = int(tokens.get("output") or 0) + int(tokens.get("reasoning") or 0)
        msg = str(part.get("messageID") or "")
        if msg:
            p, c = out.get(msg, (0, 0))
            out[msg] = (p + prompt, c + completion)
    return out


def _grew(readings: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in readings if r.get(key) is not None]
    return values[-1] - values[0] if len(values) >= 2 and values[-1] >= values[0] else None


def cross_check(turns: list[Turn], events_path: Path, readings: list[dict[str, Any]]) -> list[str]:
    problems = []
    by_message = {t.message: t for t in turns}
    for msg, (prompt, completion) in step_finish_tokens(events_path).items():
        turn = by_message.get(msg)
        if turn is None:
            problems.append(f"step_finish event for message {msg} has no assistant message in the store")
        elif (turn.prompt, turn.output) != (prompt, completion):
            problems.append(f"message {msg}: store {turn.prompt}/{turn.output} prompt/completion tokens, "
                            f"step_finish events {prompt}/{completion}")
    generated = _grew(readings, "generation_tokens_total")
    stored_out = sum(t.output for t in turns)
    if generated is not None and int(round(generated)) != stored_out:
        problems.append(f"server generated {generated:.0f} tokens in the run window; the store holds {stored_out}")
    vllm_named = any(r.get("server") == "vllm" for r in readings)
    prompt = _grew(readings, "prompt_tokens_total")
    stored_in = sum(t.prompt for t in turns)
    if vllm_named and prompt is not None and int(round(prompt)) != stored_in:
        problems.append(f"server counted {prompt:.0f} prompt tokens in the run window; the store holds {stored_in}")
    return problems
