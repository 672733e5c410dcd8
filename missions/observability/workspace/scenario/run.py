"""Drive the shop stack with a fixed scenario and record what was sent.

    python -m scenario run [--duration 120] [--vus 5] [--run-id ID]

Targets come from SHOP_API_URL, SHOP_MCP_URL and SHOP_AGENT_URL (or --api/--mcp/--agent).
Each virtual user walks the same shopper path on a fixed pace: list a category,
open a product, order it, read the order back, search, read the category stats; then the same
through the MCP tools. One assistant question is asked every 15 s from the start, and twice a
rush of ten shoppers orders at the same instant (2 s and 5 s in). As in k6, no iteration starts
after the duration (a loaded machine runs fewer, never longer), and the ones under way get
30 s to finish.
Writes scenario/drive.json: UTC start/end, requests and errors by operation.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import itertools
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

CATEGORIES = [
    "kitchen", "garden", "office", "toys", "books", "audio",
    "lighting", "outdoor", "bath", "pets", "tools", "sports",
]
TERMS = ["Lamp", "Chair", "Kettle", "Tent", "Drill", "Speaker", "Towel", "Puzzle", "Leash", "Ball", "Hose", "Atlas"]
QUESTIONS = [
    'I\'m looking for a "Lamp". Is product 3120 still sold? Show me the category stats, then order 2 units of product 27.',
    'Can you find a "Kettle" with a good rating?',
    "Which categories have the most products in stock? Is product 3305 back? Show me the stats.",
    "Tell me about product 128 and product 1205.",
    'Search for a "Tent" and order 2 units of product 710.',
    'Find me a "Drill". What does product 2044 cost?',
    "Please order 1 unit of product 55.",
    'I need a "Towel" - what are the category stats for bath?',
]
PACE_S = 3.0
THINK_S = 1.0  # on the product page before ordering
ASK_EVERY_S = 15.0
TIMEOUT_S = 30.0
GRACEFUL_STOP_S = 30.0  # as k6's gracefulStop: iterations under way get this long after the duration
MCP_PROTOCOL = "2025-06-18"
OUT = Path(__file__).resolve().parent / "drive.json"


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def add(self, op: str, ok: bool) -> None:
        with self.lock:
            self.requests[op] += 1
            if not ok:
                self.errors[op] += 1


class Identity:
    """User-Agent and W3C traceparent for every request: one trace per request.

    When the harness runs the drive (`obs drive`) it passes a per-run key in DRIVE_TAG_KEY:
    each trace id is then the user and request number followed by an HMAC of them, which
    the harness checks in the store. The key never reaches the workspace, so only the
    harness's drive can make such ids; a drive run by hand uses the plain form."""

    def __init__(self, run_id: str, vu: int, key: bytes | None = None) -> None:
        self.user_agent = f"llms-benchmark-scenario/{run_id}"
        self.prefix = hashlib.sha256(run_id.encode()).hexdigest()[:8]
        self.vu = vu
        self.key = key
        self.seq = itertools.count(1)

    def trace_id(self, n: int) -> str:
        if self.key is None:
            return f"0dd5ce4e{self.prefix}{self.vu:08x}{n:08x}"
        head = f"{self.vu:04x}{n:08x}"
        return head + hmac.new(self.key, head.encode(), hashlib.sha256).hexdigest()[:20]

    def headers(self) -> dict[str, str]:
        n = next(self.seq)
        span_id = f"{self.vu:04x}{n:012x}"
        return {"User-Agent": self.user_agent, "traceparent": f"00-{self.trace_id(n)}-{span_id}-01"}


def tag_key() -> bytes | None:
    value = os.environ.get("DRIVE_TAG_KEY")
    return bytes.fromhex(value) if value else None


class Shopper:
    def __init__(self, vu: int, args, rec: Recorder) -> None:
        self.vu = vu
        self.args = args
        self.rec = rec
        self.ident = Identity(args.run_id, vu, tag_key())
        self.http = httpx.Client(timeout=TIMEOUT_S)
        self.mcp_session: str | None = None
        self.mcp_ids = itertools.count(1)

    # ------------------------------------------------------------------ API
    def api(self, op: str, method: str, path: str, **kw) -> dict | None:
        try:
            r = self.http.request(method, f"{self.args.api}{path}", headers=self.ident.headers(), **kw)
        except httpx.HTTPError:
            self.rec.add(op, False)
            return None
        self.rec.add(op, r.status_code < 400)
        try:
            return r.json()
        except ValueError:
            return None

    # ------------------------------------------------------------------ MCP
    def _mcp_post(self, payload: dict) -> tuple[int, dict | None]:
        headers = self.ident.headers()
        headers["Accept"] = "application/json, text/event-stream"
        if self.mcp_session:
            headers["mcp-session-id"] = self.mcp_session
            headers["mcp-protocol-version"] = MCP_PROTOCOL
        if "params" in payload:
            payload["params"].setdefault("_meta", {})["traceparent"] = headers["traceparent"]
        r = self.http.post(self.args.mcp, json=payload, headers=headers)
        if r.headers.get("mcp-session-id"):
            self.mcp_session = r.headers["mcp-session-id"]
        if r.status_code >= 400 or not r.content:
            return r.status_code, None
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            for line in r.text.splitlines():
                if line.startswith("data:"):
                    data = json.loads(line[5:])
                    if "id" in data:
                        return r.status_code, data
            return r.status_code, None
        return r.status_code, r.json()

    def mcp(self, op: str, method: str, params: dict | None = None, notify: bool = False) -> dict | None:
        payload: dict = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            payload["params"] = params
        if not notify:
            payload["id"] = next(self.mcp_ids)
        try:
            status, body = self._mcp_post(payload)
        except (httpx.HTTPError, ValueError):
            self.rec.add(op, False)
            return None
        if status == 404:
            self.mcp_session = None
        ok = status < 400 and (notify or (body is not None and "error" not in body))
        result = (body or {}).get("result") if body else None
        if isinstance(result, dict) and result.get("isError"):
            ok = False
        self.rec.add(op, ok)
        return result

    def mcp_handshake(self) -> bool:
        init = self.mcp(
            "mcp initialize",
            "initialize",
            {"protocolVersion": MCP_PROTOCOL, "capabilities": {}, "clientInfo": {"name": "shop-scenario", "version": "1"}},
        )
        if init is None:
            return False
        # With (empty) params, so that it carries its trace context in _meta like every other call.
        self.mcp("mcp notifications/initialized", "notifications/initialized", {}, notify=True)
        self.mcp("mcp tools/list", "tools/list", {})
        return True

    def tool(self, name: str, arguments: dict) -> dict | None:
        result = self.mcp(f"mcp tools/call {name}", "tools/call", {"name": name, "arguments": arguments})
        if not result:
            return None
        return result.get("structuredContent") or result

    # ------------------------------------------------------------------ one iteration
    def iteration(self, k: int, start: float) -> None:
        category = CATEGORIES[(self.vu + k) % len(CATEGORIES)]
        term = TERMS[(self.vu * 5 + k) % len(TERMS)]
        listing = self.api("GET /products", "GET", "/products", params={"category": category, "size": 20}) or {}
        items = listing.get("items") or []
        product_id = items[(self.vu * 3 + k) % len(items)]["id"] if items else 1
        detail = self.api("GET /products/{id}", "GET", f"/products/{product_id}") or {}
        think = start + THINK_S - time.monotonic()
        if think > 0:
            time.sleep(think)
        # The first shopper's second visit asks for one unit more than the product has: every
        # drive, however short or loaded, has one order the shop cannot fill.
        quantity = int(detail.get("stock", 1)) + 1 if (self.vu == 1 and k == 1) else 2
        order = self.api("POST /orders", "POST", "/orders", json={"product_id": product_id, "quantity": quantity}) or {}
        if order.get("order_ref"):
            self.api("GET /orders/{ref}", "GET", f"/orders/{order['order_ref']}")
        self.api("GET /search", "GET", "/search", params={"q": term})
        self.api("GET /stats", "GET", "/stats")

        if self.mcp_session is None and not self.mcp_handshake():
            return
        found = self.tool("search_products", {"query": term}) or {}
        hits = found.get("items") or []
        other = items[(self.vu * 3 + k + 1) % len(items)]["id"] if items else 2
        self.tool("get_product", {"product_id": other})
        self.tool("category_stats", {})
        target = hits[0]["id"] if hits else other
        self.tool("place_order", {"product_id": target, "quantity": 2})

    def run(self, t0: float, end: float) -> None:
        try:
            for k in itertools.count():
                start = t0 + k * PACE_S
                if start >= end or time.monotonic() >= end:  # as k6: no iteration starts after the duration
                    break
                delay = start - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                self.iteration(k, start)
        finally:
            self.http.close()


def assistant(args, rec: Recorder, t0: float, end: float, asked: list) -> None:
    ident = Identity(args.run_id, 0xFFFF, tag_key())
    with httpx.Client(timeout=120) as http:
        for i in itertools.count():
            at = t0 + i * ASK_EVERY_S
            if at >= end or time.monotonic() >= end:
                break
            delay = at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            question = QUESTIONS[i % len(QUESTIONS)]
            try:
                r = http.post(f"{args.agent}/ask", json={"question": question}, headers=ident.headers())
                ok = r.status_code < 400
            except httpx.HTTPError:
                ok = False
            rec.add("POST /ask", ok)
            asked.append(question)


RUSH_AT_S = (2.0, 5.0)  # a sale opens: from the start, inside even a 10-second drive
RUSH_ORDERS = 10
RUSH_PRODUCTS = range(1001, 1001 + RUSH_ORDERS)


def rush(args, rec: Recorder, t0: float, end: float) -> None:
    """Twice, at fixed times, RUSH_ORDERS shoppers order one unit each at the same instant
    (released together, on connections opened beforehand)."""
    ident = Identity(args.run_id, 0xFFFE, tag_key())
    clients = [httpx.Client(timeout=TIMEOUT_S) for _ in range(RUSH_ORDERS)]
    try:
        for i, client in enumerate(clients):
            try:
                client.get(f"{args.api}/products/{RUSH_PRODUCTS[i]}", headers=ident.headers())
            except httpx.HTTPError:
                pass
        for at in RUSH_AT_S:
            delay = t0 + at - time.monotonic()
            if t0 + at >= end:
                break
            if delay > 0:
                time.sleep(delay)
            gate = threading.Barrier(RUSH_ORDERS)

            def order(i: int, headers: dict[str, str]) -> None:
                gate.wait()
                try:
                    r = clients[i].post(f"{args.api}/orders", json={"product_id": RUSH_PRODUCTS[i], "quantity": 1},
                                        headers=headers)
                    rec.add("POST /orders (rush)", r.status_code < 400)
                except httpx.HTTPError:
                    rec.add("POST /orders (rush)", False)

            buyers = [threading.Thread(target=order, args=(i, ident.headers()), daemon=True)
                      for i in range(RUSH_ORDERS)]
            for b in buyers:
                b.start()
            for b in buyers:
                b.join(timeout=TIMEOUT_S + 5)
    finally:
        for client in clients:
            client.close()


def run(args) -> dict:
    rec = Recorder()
    asked: list[str] = []
    started = utc_now()
    t0 = time.monotonic() + 0.2
    end = t0 + args.duration
    threads = [
        threading.Thread(target=Shopper(vu, args, rec).run, args=(t0, end), daemon=True)
        for vu in range(1, args.vus + 1)
    ]
    threads.append(threading.Thread(target=rush, args=(args, rec, t0, end), daemon=True))
    if not args.no_ask:
        threads.append(threading.Thread(target=assistant, args=(args, rec, t0, end, asked), daemon=True))
    for t in threads:
        t.start()
    hard_stop = end + GRACEFUL_STOP_S
    for t in threads:
        t.join(timeout=max(0.0, hard_stop - time.monotonic()))
    record = {
        "run_id": args.run_id,
        "user_agent": f"llms-benchmark-scenario/{args.run_id}",
        "start": started,
        "end": utc_now(),
        "duration_s": args.duration,
        "vus": args.vus,
        "targets": {"api": args.api, "mcp": args.mcp, "agent": args.agent},
        "requests": dict(sorted(rec.requests.items())),
        "errors": dict(sorted(rec.errors.items())),
        "questions": asked,
        "unfinished_threads": sum(1 for t in threads if t.is_alive()),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scenario", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="drive the stack")
    p.add_argument("--duration", type=float, default=120.0, help="seconds (default 120)")
    p.add_argument("--vus", type=int, default=5, help="virtual users (default 5)")
    p.add_argument("--run-id", default=dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    p.add_argument("--api", default=os.environ.get("SHOP_API_URL", "http://127.0.0.1:8010"))
    p.add_argument("--mcp", default=os.environ.get("SHOP_MCP_URL", "http://127.0.0.1:8011/mcp"))
    p.add_argument("--agent", default=os.environ.get("SHOP_AGENT_URL", "http://127.0.0.1:8012"))
    p.add_argument("--no-ask", action="store_true", help="skip the assistant questions")
    p.add_argument("--out", default=str(OUT))
    args = parser.parse_args(argv)
    args.api, args.agent = args.api.rstrip("/"), args.agent.rstrip("/")
    if not 1 <= args.vus <= 50 or not 0 < args.duration <= 1800:
        parser.error("--vus must be 1..50 and --duration 0..1800")
    record = run(args)
    print(json.dumps({k: record[k] for k in ("start", "end", "requests", "errors")}, indent=2))
    return 0
