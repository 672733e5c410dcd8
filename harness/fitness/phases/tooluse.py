"""`tooluse`: does the server stream well-formed tool calls on opencode-like tools?

Each ask names one action; the answer must arrive as a streamed `tool_calls` delta whose
name is a known tool and whose arguments parse as a JSON object with that tool's required
keys. The same request is then sent non-streamed: both answers must carry the same calls.
A tool call written into the text (`<tool_call>{...}`, or a JSON object naming a tool) is
the classic template/parser trap (llama.cpp without --jinja, vLLM without a tool parser):
counted apart as `text_answers`.

BFCL (`bfcl-eval`, scored by its own AST checker) needs a lean venv of its own: its pins
clash with ours and a plain install pulls CUDA torch. Not wired in this build: with
`tooluse.bfcl: true` the BFCL part is reported as skipped with that reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.fitness.endpoint import Answer
from harness.fitness.phases import Ctx

SYSTEM = ("You are a coding agent working in a software repository. Act only through the provided tools: "
          "answer every request with exactly one tool call and no prose.")


def _tool(name: str, description: str, props: dict[str, dict], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


S = {"type": "string"}
# The shape of opencode's own tools (names, argument names, required keys).
TOOLS = [
    _tool("bash", "Run a shell command in the repository.",
          {"command": {**S, "description": "The command to run"},
           "description": {**S, "description": "What the command does, in 5-10 words"}}, ["command", "description"]),
    _tool("read", "Read a file.", {"filePath": {**S, "description": "Path of the file"},
                                   "offset": {"type": "number"}, "limit": {"type": "number"}}, ["filePath"]),
    _tool("write", "Write a file (replacing it).", {"filePath": S, "content": S}, ["filePath", "content"]),
    _tool("edit", "Replace text in a file.", {"filePath": S, "oldString": S, "newString": S},
          ["filePath", "oldString", "newString"]),
    _tool("glob", "Find files by glob pattern.", {"pattern": S, "path": S}, ["pattern"]),
    _tool("grep", "Search file contents with a regular expression.", {"pattern": S, "path": S, "include": S},
          ["pattern"]),
]
TOOL_SPECS = {t["function"]["name"]: t["function"] for t in TOOLS}
# (ask, the tool it names) — fixed and ordered; the replay trajectory matches on these texts.
ASKS = [
    ("Run the shell command `ls -la` to list the files in the working directory.", "bash"),
    ("Read the file src/app.py.", "read"),
    ("Create a file notes.txt containing the single line: done", "write"),
    ("In config.yaml replace the text `debug: false` with `debug: true`.", "edit"),
    ("Find every Python file under the src directory.", "glob"),
    ("Search the repository for the string TODO.", "grep"),
]
_TEXT_CALL = re.compile(r"<tool_call>|<function[=>]|\"name\"\s*:\s*\"(" + "|".join(TOOL_SPECS) + r")\"")


def check_call(call: dict[str, str]) -> tuple[bool, str, Any]:
    """(well formed, why, parsed arguments)."""
    name = call.get("name") or ""
    if name not in TOOL_SPECS:
        return False, f"unknown tool {name!r}", None
    try:
        args = json.loads(call.get("arguments") or "")
    except ValueError:
        return False, f"{name}: arguments are not JSON: {(call.get('arguments') or '')[:120]!r}", None
    if not isinstance(args, dict):
        return False, f"{name}: arguments are not a JSON object", args
    missing = [k for k in TOOL_SPECS[name]["parameters"]["required"] if k not in args]
    if missing:
        return False, f"{name}: missing required {', '.join(missing)}", args
    return True, name, args


def calls_key(answer: Answer) -> list[tuple[str, Any]]:
    """What two answers must share to agree: each call's name and parsed (or raw) arguments."""
    out = []
    for call in answer.calls:
        try:
            args = json.loads(call["arguments"])
        except ValueError:
            args = call["arguments"]
        out.append((call["name"], args))
    return out


def text_call(answer: Answer) -> bool:
    return not answer.calls and bool(_TEXT_CALL.search(answer.content or ""))


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    ep, cfg = ctx.endpoint, ctx.cfg.tooluse
    rows = []
    for ask, expected in ASKS:
        if ctx.cancelled():
            break
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ask}]
        params = {"tools": TOOLS, "tool_choice": "auto", "temperature": 0, "max_tokens": cfg.max_tokens,
                  "seed": ctx.cfg.seed}
        streamed = ep.stream(messages, **params)
        whole = ep.chat(messages, **params)
        if streamed.calls:
            good, why, _ = check_call(streamed.calls[0])
        else:
            good, why = False, "answered as text with a tool call in it" if text_call(streamed) else "no tool call"
        rows.append({"ask": ask, "expected": expected, "wellformed": good, "why": why,
                     "expected_tool": good and streamed.calls[0]["name"] == expected,
                     "text_answer": text_call(streamed), "agree": calls_key(streamed) == calls_key(whole),
                     "streamed": {"calls": streamed.calls, "content": streamed.content[:300],
                                  "finish": streamed.finish},
                     "whole": {"calls": whole.calls, "content": whole.content[:300], "finish": whole.finish}})
    n = len(rows) or 1
    metrics: dict[str, float | None] = {
        "tooluse.wellformed_rate": round(sum(r["wellformed"] for r in rows) / n, 4),
        "tooluse.expected_tool_rate": round(sum(r["expected_tool"] for r in rows) / n, 4),
        "tooluse.stream_agreement_rate": round(sum(r["agree"] for r in rows) / n, 4),
        "tooluse.text_answers": float(sum(r["text_answer"] for r in rows)),
        "tooluse.bfcl_accuracy": None,
    }
    details = {"asks": rows, "tools": sorted(TOOL_SPECS),
               "bfcl": ("skipped: the BFCL subset needs bfcl-eval in a lean venv of its own (its pins clash "
                        "with ours; a plain install pulls CUDA torch); not wired in this build")
               if cfg.bfcl else "off (tooluse.bfcl: false)"}
    return metrics, details
