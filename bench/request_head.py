"""What reading a request as it streams costs the relay (harness/wire/request_head.py), against
the json.loads of the whole body the wire tap did before.

    .venv/bin/python bench/request_head.py [--mib 1] [--repeat 20]

A body shaped like opencode's chat requests (a system prompt, a dozen tool schemas, tool
calls and outputs of source text with its quotes, backslashes and newlines) of about --mib
MiB, fed in the relay's 64 KiB reads; prints the median seconds and MiB/s of each reading,
and the peak bytes each allocated (tracemalloc) while reading one body."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.wire.request_head import RequestHead  # noqa: E402

CHUNK = 65536  # harness/sandbox/net.CHUNK


def body(mib: float) -> bytes:
    source = Path(__file__).read_text() + '\n\tprint("a \\"quoted\\" path: C:\\\\x")\n'
    tools = [{"type": "function", "function": {"name": f"tool{i}", "description": "d" * 300,
                                               "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}}
             for i in range(12)]
    messages = [{"role": "system", "content": "You are opencode. " * 200}]
    while len(json.dumps(messages)) < mib * (1 << 20):
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": json.dumps({"filePath": "/x.py"})}}]})
        messages.append({"role": "tool", "tool_call_id": "c1", "content": source})
    return json.dumps({"model": "vot", "stream": True, "messages": messages, "tools": tools}).encode()


def streamed(raw: bytes) -> dict | None:
    head = RequestHead()
    for at in range(0, len(raw), CHUNK):
        head.feed(raw[at:at + CHUNK])
    return head.result()


def whole(raw: bytes) -> dict:
    kept = bytearray()
    for at in range(0, len(raw), CHUNK):
        kept += raw[at:at + CHUNK]
    doc = json.loads(bytes(kept))
    return {"model": doc["model"], "stream": doc["stream"], "messages": len(doc["messages"]), "tools": len(doc["tools"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    raw = body(args.mib)
    assert streamed(raw) == whole(raw), (streamed(raw), whole(raw))
    escapes = raw.count(b"\\")
    print(f"body: {len(raw) / (1 << 20):.2f} MiB, {escapes} backslashes; python {sys.version.split()[0]}")
    print("| reading | median s | MiB/s | peak allocated while reading |")
    print("|---|---:|---:|---:|")
    for name, read in (("as it streams (request_head)", streamed), ("whole, then json.loads", whole)):
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            read(raw)
            times.append(time.perf_counter() - t0)
        tracemalloc.start()
        read(raw)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        median = statistics.median(times)
        print(f"| {name} | {median:.4f} | {len(raw) / (1 << 20) / median:.0f} | {peak / (1 << 20):.2f} MiB |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
