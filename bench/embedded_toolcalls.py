"""Does an embedded model drive opencode? Well-formed streamed tool calls on opencode's real request.

1. Captures the real opencode CLI's first chat request (its system prompt and tool list) by
   pointing it at a loopback OpenAI-compatible recorder (tests/fakes/openai_server.py).
2. Serves each embedded preset on the real llama.cpp CPU stack and sends that request with
   ten different asks, streamed, counting the answers that arrive as `tool_calls` whose name
   is the expected tool and whose arguments parse as a JSON object with the tool's required
   keys. llama.cpp's own `timings` give prefill and decode speed.

    .venv/bin/python bench/embedded_toolcalls.py [--presets P ...] [--asks N] [--out FILE]

Loopback only; every unit is destroyed in a finally.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes.openai_server import MODEL, FakeOpenAI, text_only  # noqa: E402

from harness.opencode import config as oc_config  # noqa: E402
from harness.opencode.binary import find_opencode  # noqa: E402
from harness.stacks.base import Unit  # noqa: E402
from harness.stacks.llamacpp import LlamaCppStack  # noqa: E402
from harness.unitlog import UnitLogCollector, wait_ready  # noqa: E402
from harness.vot.environment import load_environment  # noqa: E402
from harness.vot.preset import load_preset  # noqa: E402

ASKS = [
    ("run ls with the bash tool", "bash"),
    ("read the file greet.py", "read"),
    ("create a file REPORT.md containing the line 'hello'", "write"),
    ("run the tests with python3 -m pytest", "bash"),
    ("run python3 numbers.py", "bash"),
    ("find every .py file in this directory with glob", "glob"),
    ("search for the word print in the python files with grep", "grep"),
    ("show the current date with the bash tool", "bash"),
    ("read numbers.py", "read"),
    ("write a file notes.txt that says done", "write"),
]


def capture_request(tmp: Path) -> dict:
    """opencode's own first request of a headless run, as it sends it."""
    workspace = tmp / "ws"
    workspace.mkdir(parents=True)
    for f in (ROOT / "missions" / "hello" / "workspace").iterdir():
        (workspace / f.name).write_bytes(f.read_bytes())
    with FakeOpenAI(reply=text_only) as fake:
        unit = Unit(name="capture", stack="fake", environment="fake", preset="fake",
                    base_url=fake.url.removesuffix("/v1"), served_name=MODEL, max_model_len=65536)
        provider = oc_config.write_provider_file(oc_config.provider_config(unit, reasoning_parser=None),
                                                 tmp / "provider.json")
        env = oc_config.isolated_env(tmp / "oc", provider, None)
        subprocess.run([str(find_opencode(ROOT)), "run", "--model", f"vot/{MODEL}", "--format", "json",
                        "--title", "capture", "say hi"], env=env, cwd=workspace, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=300)
        chats = [c.body for c in fake.chats() if c.body.get("tools")]
    if not chats:
        raise SystemExit("opencode sent no request with tools")
    return chats[0]


def well_formed(calls: dict[int, dict], tools: dict[str, dict], expected: str) -> tuple[bool, str]:
    if not calls:
        return False, "no tool_calls"
    call = calls[min(calls)]
    name = call.get("name")
    try:
        args = json.loads(call.get("arguments") or "")
    except ValueError:
        return False, f"{name}: arguments are not JSON"
    if not isinstance(args, dict):
        return False, f"{name}: arguments are not an object"
    if name not in tools:
        return False, f"unknown tool {name}"
    missing = [k for k in tools[name].get("parameters", {}).get("required", []) if k not in args]
    if missing:
        return False, f"{name}: missing {missing}"
    return name == expected, name


def ask(base_url: str, request: dict, served: str, text: str, temperature: float | None = None) -> dict:
    body = {**request, "model": served, "stream": True, "max_tokens": 512,
            **({"temperature": temperature} if temperature is not None else {}),
            "messages": [m for m in request["messages"] if m["role"] == "system"] + [{"role": "user", "content": text}]}
    body.pop("stream_options", None)
    calls: dict[int, dict] = {}
    content, timings, finish = "", {}, None
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=httpx.Timeout(1800)) as resp:
        resp.raise_for_status()
        for line in resp.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            timings = chunk.get("timings") or timings
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                content += delta.get("content") or ""
                finish = choice.get("finish_reason") or finish
                for tc in delta.get("tool_calls") or []:
                    slot = calls.setdefault(tc.get("index", 0), {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    slot["name"] += fn.get("name") or ""
                    slot["arguments"] += fn.get("arguments") or ""
    return {"calls": calls, "content": content, "timings": timings, "finish": finish}


SMOKE_ASK = ("run the shell command date and reply with its output", "bash")


def bench_preset(name: str, request: dict, asks: int, tmp: Path, temperatures: list[float | None],
                 smoke_repeats: int) -> dict:
    env = load_environment(ROOT, "cpu")
    preset = load_preset(ROOT, name).resolve(env.stack)
    stack = LlamaCppStack(tmp)
    stack.preflight(env, preset)
    unit = stack.serve(stack.plan(env, preset), env, preset)
    collector = UnitLogCollector(stack, unit, tmp / f"{name}.log")
    collector.start()
    tools = {t["function"]["name"]: t["function"] for t in request["tools"]}
    rows, ok = [], 0
    try:
        wait_ready(unit, stack.ready_timeout_s, collector)
        collector.drain()
        serving = stack.describe(unit, env, preset, (tmp / f"{name}.log").read_text())
        plan = [(t, a) for t in temperatures for a in [*ASKS[:asks], *[SMOKE_ASK] * smoke_repeats]]
        for temperature, (text, expected) in plan:
            t0 = time.monotonic()
            out = ask(unit.base_url, request, unit.served_name, text, temperature)
            good, what = well_formed(out["calls"], tools, expected)
            ok += good
            t = out["timings"]
            rows.append({"temperature": temperature, "ask": text, "expected": expected, "ok": good, "got": what, "finish": out["finish"],
                         "wall_s": round(time.monotonic() - t0, 1), "prompt_n": t.get("prompt_n"),
                         "cached_n": t.get("cache_n"), "prefill_tps": t.get("prompt_per_second"),
                         "decode_tps": t.get("predicted_per_second"), "text": out["content"][:200]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        collector.stop()
        stack.destroy(unit)
    return {"preset": name, "ok": ok, "asks": len(rows), "rows": rows,
            "system_prompt_chars": sum(len(m["content"]) for m in request["messages"] if m["role"] == "system"),
            "tools": len(tools), "serving": serving}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", nargs="+", default=["cpu-qwen2-5-coder-1-5b"])
    ap.add_argument("--asks", type=int, default=len(ASKS))
    ap.add_argument("--temperatures", type=float, nargs="*", default=[],
                    help="sampling temperatures to compare (default: the server's own)")
    ap.add_argument("--smoke-repeats", type=int, default=0, help="extra asks of the smoke's own prompt")
    ap.add_argument("--disabled-tools", nargs="*", default=[], help="tools left out of the request, as a mission may")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "embedded_toolcalls.json")
    args = ap.parse_args()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="toolcalls-") as tmp:
        request = capture_request(Path(tmp))
        request["tools"] = [t for t in request["tools"] if t["function"]["name"] not in args.disabled_tools]
        results = [bench_preset(p, request, args.asks, Path(tmp) / p, args.temperatures or [None],
                                args.smoke_repeats) for p in args.presets]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    for r in results:
        for t in sorted({row["temperature"] for row in r["rows"]}, key=str):
            rows = [row for row in r["rows"] if row["temperature"] == t]
            print(f"{r['preset']} temperature {t if t is not None else 'server default'}: "
                  f"{sum(row['ok'] for row in rows)}/{len(rows)} well-formed streamed tool calls of the expected tool")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
