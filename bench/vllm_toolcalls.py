"""Does the real vLLM (CPU build, `make vllm`) turn Qwen2.5-Coder-1.5B's calls into `tool_calls`?

The same measurement as bench/embedded_toolcalls.py, against vLLM instead of llama.cpp:

1. Captures the real opencode CLI's first chat request (its system prompt and tool list) through
   a loopback recorder (tests/fakes/openai_server.py).
2. For each variant — a `--tool-call-parser` (vLLM's own, or `fenced_json`, ours, loaded with
   `--tool-parser-plugin` from harness/stacks/vllm_plugins), optionally with a `--chat-template`
   (a name under harness/stacks/templates, e.g. our fenced-JSON template) — serves the preset through the
   local-vllm stack (cpu device, the same argv a launch runs), then sends that request with each
   ask, streamed and not, counting the answers whose first `tool_calls` entry names the expected
   tool with arguments that parse as a JSON object holding the tool's required keys.
   A *leak* is an answer with a parsed call whose `content` still carries call syntax (a code
   fence, `<tool_call>`, `"arguments"`); a *raw* answer is one with no parsed call whose content
   holds a call the parser missed.

    .venv/bin/python bench/vllm_toolcalls.py [--variants hermes xlam fenced_json@qwen2.5-coder-fenced-tools.jinja]
        [--asks N] [--out FILE]

Loopback only; every unit is destroyed in a finally; every request has a timeout and a token cap.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from embedded_toolcalls import ASKS, ask_messages, ask_params, capture_request, well_formed  # noqa: E402

from harness import markdown_table  # noqa: E402
from harness.fitness.endpoint import Answer, Endpoint, PhaseError  # noqa: E402
from harness.stacks.local_vllm import LocalVllmStack  # noqa: E402
from harness.run.unitlog import UnitLogCollector, wait_ready  # noqa: E402
from harness.vot.environment import load_environment  # noqa: E402
from harness.vot.preset import load_preset  # noqa: E402

SYNTAX = ("```", "<tool_call>", '"arguments"')
# Parsers of ours, loaded into vLLM with --tool-parser-plugin (harness/stacks/vllm_plugins).
PLUGIN_PARSERS = {"fenced_json": "fenced_json_tool_parser.py"}
REQUEST_TIMEOUT_S = 600


def ask(endpoint: Endpoint, request: dict, text: str, streamed: bool, max_tokens: int) -> tuple[Answer, float]:
    """One ask through the fitness endpoint (the product's own client: its stream fold, its
    non-streamed read) and its wall time; streamed, the answer carries the time to the first
    generated delta — what opencode waits before it sees anything. No decode rate: a parser that
    holds text back until a call parses (`fenced_json`) sends the whole call in one delta at the
    end, so the client cannot time decoding (the launch's probe measures it on plain text). A
    refused request is a row naming the error, not the end of the bench."""
    t0 = time.monotonic()
    try:
        answer = (endpoint.stream if streamed else endpoint.chat)(ask_messages(request, text),
                                                                  **{**ask_params(request), "max_tokens": max_tokens})
    except PhaseError as exc:
        answer = Answer(finish=str(exc)[:300])
    return answer, time.monotonic() - t0


def classify(answer: Answer) -> tuple[bool, bool]:
    """(leak, raw): call syntax left in content beside a parsed call; a call the parser missed."""
    text = answer.content or ""
    has_syntax = any(s in text for s in SYNTAX) or ('"name"' in text and "{" in text)
    return bool(answer.calls) and has_syntax, not answer.calls and has_syntax


def parse_variant(spec: str) -> tuple[str, str | None]:
    parser, _, template = spec.partition("@")
    return parser, template or None


def bench_variant(spec: str, preset_name: str, request: dict, asks: list, tmp: Path, max_tokens: int,
                  modes: list[str], ready_timeout_s: int) -> dict:
    parser, template = parse_variant(spec)
    env = load_environment(ROOT, "cpu-vllm")
    env = env.model_copy(update={"config": {**env.config, "port": 0}})
    base = load_preset(ROOT, preset_name).resolve(env.stack)
    args = {**base.vllm_args, "--tool-call-parser": parser}
    args.pop("--tool-parser-plugin", None)
    if parser in PLUGIN_PARSERS:
        args["--tool-parser-plugin"] = PLUGIN_PARSERS[parser]
    if template:
        args["--chat-template"] = template
    else:
        args.pop("--chat-template", None)
    preset = base.model_copy(update={"vllm_args": args})
    stack = LocalVllmStack(tmp)
    stack.preflight(env, preset)
    unit = stack.serve(stack.plan(env, preset), env, preset)
    log = tmp / f"{spec.replace('/', '_')}.log"
    collector = UnitLogCollector(stack, unit, log)
    collector.start()
    tools = {t["function"]["name"]: t["function"] for t in request["tools"]}
    rows: list[dict] = []
    t_start = time.monotonic()
    try:
        wait_ready(unit, ready_timeout_s, collector)
        ready_s = round(time.monotonic() - t_start, 1)
        collector.drain()
        serving = stack.describe(unit, env, preset, log.read_text())
        endpoint = Endpoint(unit.base_url, unit.served_name, timeout_s=REQUEST_TIMEOUT_S)
        for text, expected in asks:
            for mode in modes:
                answer, wall_s = ask(endpoint, request, text, mode == "streamed", max_tokens)
                good, what = well_formed(answer.calls, tools, expected)
                leak, raw = classify(answer)
                usage = answer.usage or {}
                rows.append({"variant": spec, "mode": mode, "ask": text, "expected": expected, "ok": good,
                             "got": what, "leak": leak, "raw": raw, "finish": answer.finish,
                             "wall_s": round(wall_s, 1),
                             "ttft_s": round(answer.ttft_s, 2) if answer.ttft_s is not None else None,
                             "prompt_tokens": usage.get("prompt_tokens"),
                             "completion_tokens": usage.get("completion_tokens"),
                             "calls": answer.calls[:2], "text": answer.content[:300]})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        collector.stop()
        stack.destroy(unit)
    return {"variant": spec, "parser": parser, "chat_template": template, "preset": preset_name,
            "ready_s": ready_s, "rows": rows, "serving": serving, "tools": len(tools),
            "system_prompt_chars": sum(len(m["content"]) for m in request["messages"] if m["role"] == "system")}


def table(results: list[dict]) -> str:
    cells = []
    for r in results:
        for mode in ("streamed", "non-streamed"):
            rows = [x for x in r["rows"] if x["mode"] == mode]
            if rows:
                cells.append([f"`{r['parser']}`", r["chat_template"] or "model own", mode, len(rows),
                              sum(x["ok"] for x in rows), sum(bool(x["calls"]) for x in rows),
                              sum(x["leak"] for x in rows), sum(x["raw"] for x in rows)])
    return markdown_table.table(["parser", "chat template", "mode", "tries", "well-formed, right tool", "parsed calls",
                                 "leaks", "raw (missed)"], cells, align="lllrrrrr")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="cpu-vllm-qwen2-5-coder-1-5b")
    ap.add_argument("--variants", nargs="+",
                    default=["hermes", "xlam", "xlam@qwen2.5-coder-fenced-tools.jinja"],
                    help="PARSER or PARSER@TEMPLATE (a name under harness/stacks/templates)")
    ap.add_argument("--asks", type=int, default=len(ASKS))
    ap.add_argument("--modes", nargs="+", default=["streamed", "non-streamed"], choices=["streamed", "non-streamed"])
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("--ready-timeout", type=int, default=600)
    ap.add_argument("--request", type=Path, help="a captured opencode request (JSON) instead of capturing one")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "vllm_toolcalls.json")
    args = ap.parse_args()
    if not 1 <= args.asks <= len(ASKS):
        raise SystemExit(f"--asks: 1..{len(ASKS)}")
    results = []
    with tempfile.TemporaryDirectory(prefix="vllm-toolcalls-") as tmp:
        request = json.loads(args.request.read_text()) if args.request else capture_request(Path(tmp))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".request.json").write_text(json.dumps(request))
        for spec in args.variants:
            results.append(bench_variant(spec, args.preset, request, ASKS[:args.asks], Path(tmp) / "v",
                                         args.max_tokens, args.modes, args.ready_timeout))
            args.out.write_text(json.dumps(results, indent=2))
    print(table(results))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
