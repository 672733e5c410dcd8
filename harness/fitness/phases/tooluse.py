"""`tooluse`: does the server stream well-formed tool calls on opencode-like tools?

Each ask names one action; the answer must arrive as a streamed `tool_calls` delta whose
name is a known tool and whose arguments parse as a JSON object with that tool's required
keys. The same request is then sent non-streamed: both answers must carry the same calls.
A tool call written into the text (`<tool_call>{...}`, or a JSON object naming a tool) is
the classic template/parser trap (llama.cpp without --jinja, vLLM without a tool parser):
counted apart as `text_answers`.

BFCL (`tooluse.bfcl: true`): the BFCL v4 subset (`bfcl-eval` 2026.3.23's own data; simple,
multiple, parallel, parallel-multiple, irrelevance; evenly spaced items per category), each
question asked once, non-streamed, with its functions as tools (BFCL's OpenAI-FC conversion),
and the answer scored by BFCL's own AST checker in the checkers' lean venv
(harness/fitness/checkers.py). Data files are checked against their pinned sha256.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.errors import UserError
from harness.fitness import checkers
from harness.fitness.config import FitnessConfig
from harness.fitness.endpoint import Answer, PhaseError
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


def check_call(call: dict[str, str], specs: dict[str, dict[str, Any]] = TOOL_SPECS) -> tuple[bool, str, Any]:
    """(well formed, why, parsed arguments): a tool of `specs` (name → function spec), arguments a
    JSON object holding that tool's required keys."""
    name = call.get("name") or ""
    if name not in specs:
        return False, f"unknown tool {name!r}", None
    try:
        args = json.loads(call.get("arguments") or "")
    except ValueError:
        return False, f"{name}: arguments are not JSON: {(call.get('arguments') or '')[:120]!r}", None
    if not isinstance(args, dict):
        return False, f"{name}: arguments are not a JSON object", args
    missing = [k for k in (specs[name].get("parameters") or {}).get("required", []) if k not in args]
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


# sha256 of each BFCL file the subset reads (bfcl-eval 2026.3.23): a changed file is refused.
BFCL_SHA256 = {
    "bfcl_eval/data/BFCL_v4_simple_python.json": "82dd63ba502eb2520c6b5d1d9a5c4b590e03ff261565175561f6228a367d1991",
    "bfcl_eval/data/possible_answer/BFCL_v4_simple_python.json":
        "90cd5bc653690ee8e459b5b3f3fc9458606f7f3fcbf795bb51b7dc581f8c86dc",
    "bfcl_eval/data/BFCL_v4_multiple.json": "aef168155ebd74b7ac2401198b201343bc7d16d7a3d7e0d4e6d8ee82c6969b2a",
    "bfcl_eval/data/possible_answer/BFCL_v4_multiple.json":
        "244e00ce9395df948bcafc7bee64e8f9c87ef70887587d83cae45b13699f3047",
    "bfcl_eval/data/BFCL_v4_parallel.json": "19f51a82eff42e5d62541aa500115a056eb78f437c2ba1f10415fd7c8e5dda84",
    "bfcl_eval/data/possible_answer/BFCL_v4_parallel.json":
        "8a6aa19c1adddc6a5a2f7e40f9dbf30cc7e95815e7b830c90589ab318229e0f0",
    "bfcl_eval/data/BFCL_v4_parallel_multiple.json": "8863ea8433239f55c5f016154cf0830853c89f693c6ea270396a2fa121960579",
    "bfcl_eval/data/possible_answer/BFCL_v4_parallel_multiple.json":
        "5ebf24f458c1f16300c05505d83d6f0a1b68b79be273a033febd0d4f840507e3",
    "bfcl_eval/data/BFCL_v4_irrelevance.json": "2b6ed4c2e992cdcf5f1678a701851f944bef7550ee026ed1ddb89efed5be01a6",
}


def check_offline(cfg: FitnessConfig) -> str:
    if not cfg.tooluse.bfcl:
        return f"{len(ASKS)} opencode-like asks; BFCL off (tooluse.bfcl: false)"
    checkers.require(cfg.checkers(), "tooluse.bfcl")
    subset = bfcl_subset(cfg)
    return f"{len(ASKS)} opencode-like asks; BFCL subset of {len(subset['items'])} ({cfg.checkers()})"


def bfcl_subset(cfg: FitnessConfig) -> dict[str, Any]:
    """The subset's items (question, tools, ground truth), its data files verified."""
    python = checkers.require(cfg.checkers(), "tooluse.bfcl")
    try:
        got = checkers.call(python, "bfcl_items", {"categories": cfg.tooluse.bfcl_categories,
                                                   "per_category": cfg.tooluse.bfcl_per_category}, timeout_s=120)
    except RuntimeError as exc:
        raise UserError(str(exc), field="tooluse.bfcl", fix="remake the venv: delete it and run "
                                                            "`llms-benchmark fitness data`") from None
    for member, entry in got["files"].items():
        if BFCL_SHA256.get(member) != entry["sha256"]:
            raise UserError(f"the BFCL data file {member} changed: sha256 {entry['sha256'][:16]}…",
                            file=cfg.checkers(), field="tooluse.bfcl",
                            fix="delete the checkers' venv and run `llms-benchmark fitness data`")
    got["manifest"] = {m: {**e, "source": f"pypi:bfcl-eval==2026.3.23#{m}"} for m, e in got["files"].items()}
    return got


def run_bfcl(ctx: Ctx) -> dict[str, Any]:
    """Ask each subset question with its tools; score every answer with BFCL's AST checker."""
    subset = bfcl_subset(ctx.cfg)
    items = subset["items"]
    if ctx.reverse:
        items = items[::-1]
    asked = []
    for item in items:
        if ctx.cancelled():
            break
        answer = ctx.endpoint.chat(item["messages"], tools=item["tools"], tool_choice="auto", temperature=0,
                                   max_tokens=ctx.cfg.tooluse.max_tokens, seed=ctx.cfg.seed)
        asked.append({**item, "calls": answer.calls, "content": answer.content})
    try:
        scored = checkers.call(checkers.require(ctx.cfg.checkers(), "tooluse.bfcl"), "bfcl_score",
                               {"items": asked}, timeout_s=300)["results"]
    except RuntimeError as exc:
        raise PhaseError(f"BFCL's checker failed: {exc}") from None
    rows, by_cat = [], {}
    for item, verdict in zip(asked, scored):
        rows.append({"id": item["id"], "category": item["category"], "valid": verdict["valid"],
                     "error_type": verdict["error_type"], "error": json.dumps(verdict["error"])[:300]
                     if verdict["error"] else None, "calls": item["calls"], "content": item["content"][:300]})
        cat = by_cat.setdefault(item["category"], {"n": 0, "correct": 0})
        cat["n"] += 1
        cat["correct"] += bool(verdict["valid"])
    for cat in by_cat.values():
        cat["accuracy"] = round(cat["correct"] / cat["n"], 4)
    correct = sum(r["valid"] for r in rows)
    from harness.fitness.stats import binomial_se

    se = binomial_se(correct, len(rows))
    with open(ctx.out_dir / "bfcl.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return {"status": "ran", "n": len(rows), "correct": correct,
            "accuracy": round(correct / len(rows), 4) if rows else None, "se": round(se, 4) if se is not None else None,
            "by_category": by_cat, "per_category": ctx.cfg.tooluse.bfcl_per_category,
            "manifest": subset["manifest"], "checkers": checkers.versions(ctx.cfg.checkers()),
            "transcripts": str(ctx.out_dir / "bfcl.jsonl")}


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
    details: dict[str, Any] = {"asks": rows, "tools": sorted(TOOL_SPECS)}
    if cfg.bfcl and not ctx.cancelled():
        bfcl = run_bfcl(ctx)
        metrics["tooluse.bfcl_accuracy"] = bfcl["accuracy"]
        details["bfcl"] = bfcl
    else:
        details["bfcl"] = {"status": "off", "reason": "tooluse.bfcl: false" if not cfg.bfcl else "cancelled"}
    return metrics, details
