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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes.openai_server import MODEL, FakeOpenAI, text_only  # noqa: E402

from harness.fitness.endpoint import Answer, Endpoint  # noqa: E402
from harness.fitness.phases.tooluse import check_call  # noqa: E402
from harness.opencode import config as oc_config  # noqa: E402
from harness.opencode.binary import find_opencode  # noqa: E402
from harness.stacks.base import Unit  # noqa: E402
from harness.stacks.llamacpp import LlamaCppStack  # noqa: E402
from harness.run.unitlog import UnitLogCollector, wait_ready  # noqa: E402
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


def well_formed(calls: list[dict], tools: dict[str, dict], expected: str) -> tuple[bool, str]:
    """The first call is the expected tool, well formed by the fitness phase's own check."""
    if not calls:
        return False, "no tool_calls"
    good, why, _ = check_call(calls[0], tools)
    return good and why == expected, why


def ask_messages(request: dict, text: str) -> list[dict]:
    """opencode's system messages, then one ask of ours."""
    return [m for m in request["messages"] if m["role"] == "system"] + [{"role": "user", "content": text}]


def ask_params(request: dict) -> dict:
    """The rest of opencode's request (tools, tool_choice, sampling...), sent as it sent them;
    the endpoint sets model, messages and streaming itself."""
    return {k: v for k, v in request.items() if k not in ("model", "messages", "stream", "stream_options")}


def ask(endpoint: Endpoint, request: dict, text: str, temperature: float | None = None) -> Answer:
    """One streamed ask, folded by the fitness endpoint (the product's own client)."""
    params = {**ask_params(request), "max_tokens": 512}
    if temperature is not None:
        params["temperature"] = temperature
    return endpoint.stream(ask_messages(request, text), **params)


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
        endpoint = Endpoint(unit.base_url, unit.served_name, timeout_s=1800)
        plan = [(t, a) for t in temperatures for a in [*ASKS[:asks], *[SMOKE_ASK] * smoke_repeats]]
        for temperature, (text, expected) in plan:
            t0 = time.monotonic()
            out = ask(endpoint, request, text, temperature)
            good, what = well_formed(out.calls, tools, expected)
            ok += good
            t = out.timings or {}
            rows.append({"temperature": temperature, "ask": text, "expected": expected, "ok": good, "got": what,
                         "finish": out.finish,
                         "wall_s": round(time.monotonic() - t0, 1), "prompt_n": t.get("prompt_n"),
                         "cached_n": t.get("cache_n"), "prefill_tps": t.get("prompt_per_second"),
                         "decode_tps": t.get("predicted_per_second"), "text": out.content[:200]})
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
