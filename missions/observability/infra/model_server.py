"""A deterministic OpenAI-compatible chat model for the shop assistant (keyword tool planning).

    python model_server.py --port 0      # prints "model server listening on http://127.0.0.1:PORT"

Every question maps to a fixed plan of tool calls, decided by keywords; one tool call per turn,
then a canned answer. Token usage is a pure function of the request, so every run is identical.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LATENCY_S = 0.25
BANNER = "model server listening on http://{host}:{port}"


def plan(question: str) -> list[tuple[str, dict]]:
    q = question.lower()
    steps: list[tuple[str, dict]] = []
    term = re.search(r'"([^"]+)"', question)
    if term and ("looking for" in q or "search" in q or "find" in q):
        steps.append(("search_products", {"query": term.group(1)}))
    order = re.search(r"order (\d+) (?:units? )?of product (\d+)", q)
    for pid in re.findall(r"product (\d+)", q):
        if order and pid == order.group(2):
            continue
        steps.append(("get_product", {"product_id": int(pid)}))
    if "stats" in q or "categor" in q:
        steps.append(("category_stats", {}))
    if order:
        steps.append(("place_order", {"product_id": int(order.group(2)), "quantity": int(order.group(1))}))
    return steps


def reply(body: dict) -> dict:
    messages = body.get("messages", [])
    question = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
    done = sum(1 for m in messages if m.get("role") == "tool")
    steps = plan(question)
    prompt_tokens = sum(len(json.dumps(m)) // 4 for m in messages) + 40 * len(body.get("tools", []))
    if done < len(steps):
        name, args = steps[done]
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call_{done + 1}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            ],
        }
        finish, completion_tokens = "tool_calls", 16 + len(json.dumps(args)) // 4
    else:
        message = {"role": "assistant", "content": f"Done: I used {done} tool call(s) to answer."}
        finish, completion_tokens = "stop", 24
    return {
        "id": f"chatcmpl-{len(messages)}-{done}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "shop-assistant-small"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def _send(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "shop-assistant-small", "object": "model"}]})
        elif self.path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": "bad json"})
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": "not found"})
            return
        time.sleep(LATENCY_S)
        self._send(200, reply(body))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8013)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    print(BANNER.format(host=args.host, port=server.server_address[1]), flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    sys.exit(main())
