"""Tool-call health from the agent's own traffic, read from opencode's store.

- leaked: a call that arrived as text instead of `tool_calls` — the classic missing
  `--jinja` / wrong `--tool-call-parser` trap: the model wrote its call markup
  (`<tool_call>`, `<function=…>`, `[TOOL_CALLS]`, a bare `{"name": …, "arguments": …}`) and
  the server passed it on as content; opencode saw prose and the agent loop stopped or
  went on without the tool.
- malformed: a call whose arguments opencode could not use. opencode repairs such a call
  into its `invalid` tool, whose input names the failed tool and the parse error.
- finish reasons, as opencode stored them per call, and compactions (summary calls).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from harness.records.serving import ToolCallHealth
from harness.serving.turns import Turn

# One match per leaked call. The JSON form needs a tool-ish key pair so prose about JSON does not count.
LEAK_PATTERNS = (
    re.compile(r"<tool_call>"),  # hermes / qwen
    re.compile(r"<function=[\w.-]+>"),  # qwen3-coder, llama 3.x xml
    re.compile(r"<\|tool_call(?:s_section)?_begin\|>|<\|python_tag\|>"),  # kimi, llama 3
    re.compile(r"\[TOOL_CALLS\]"),  # mistral
    re.compile(r"(?<![\w\"])\{\s*\"name\"\s*:\s*\"[\w.-]+\"\s*,\s*\"(?:arguments|parameters)\"\s*:"),
)


def leaked_calls(text: str) -> int:
    # The patterns overlap (a hermes block holds a JSON object): count the most specific form.
    counts = [len(p.findall(text)) for p in LEAK_PATTERNS]
    return max(counts) if counts else 0


def _tool_state(part: dict[str, Any]) -> dict[str, Any]:
    state = part.get("state")
    return state if isinstance(state, dict) else {}


def tool_call_health(turns: list[Turn]) -> ToolCallHealth:
    health = ToolCallHealth()
    finishes: Counter[str] = Counter()
    for turn in turns:
        finishes[turn.finish or ("error" if turn.error else "unfinished")] += 1
        health.compactions += int(turn.summary)
        leaked = 0
        for part in turn.parts:
            kind = part.get("type")
            if kind == "text" and not turn.summary:
                leaked += leaked_calls(str(part.get("text") or ""))
            elif kind == "tool":
                health.calls += 1
                state = _tool_state(part)
                if state.get("status") == "error":
                    health.errors += 1
                if part.get("tool") == "invalid":
                    health.malformed += 1
                    if len(health.malformed_examples) < 5:
                        why = (state.get("input") or {}).get("error") if isinstance(state.get("input"), dict) else None
                        health.malformed_examples.append(str(why or state.get("error") or "invalid tool call")[:200])
        if leaked:
            health.leaked += leaked
            health.leaked_turns.append(turn.message)
    health.finish_reasons = dict(sorted(finishes.items()))
    return health
