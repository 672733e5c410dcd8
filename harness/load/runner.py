"""`llms-benchmark load`: closed-loop load on an OpenAI-compatible server, level by level.

For every prompt shape and concurrency level, `level` workers each send their next
request as soon as the previous one ends, until the level's requests are spent (or
its duration is up); cache-cold prompts, exactly `output_tokens` out (ignore_eos).
Around each level: wait until the server is idle (bounded), read the preemption
counter before and after, and sample running, waiting and KV usage every second.

`check()` does everything that can refuse before anything is written (the server
answers, lists the model, is not busy); `run()` warms up, runs the levels and
writes `bench-results/<UTC>/` after every level.
"""

from __future__ import annotations

import asyncio
import gc
import json
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import httpx

from harness.errors import UserError
from harness.load import metrics
from harness.load.client import CHAT_PATH, Result, StreamClient, chat_payload
from harness.load.prompts import Prompts
from harness.load.results import PERCENTILE_METHOD, Level, ResultsDir
from harness.wire.openai import bearer, is_http_url, models_url, root_url
from harness.wire.tls import tls

DEFAULT_LEVELS = (1, 8, 16, 24, 40)
DEFAULT_SHAPES = {"short": 512, "long": 16_384}
WARMUP_TOKENS, WARMUP_OUTPUT = 64, 8
DEFINITIONS = {
    "ttft": "request start to the first SSE chunk carrying content, reasoning or tool-call text",
    "itl": "gaps between successive token-carrying chunks, over all successful requests",
    "tpot": "(last token chunk - first) / (completion tokens - 1), mean over requests",
    "e2e": "request start to data: [DONE]",
    "tokens": "the server's usage (stream_options.include_usage)",
    "throughput": "server-counted tokens of successful requests / the level's wall time",
}


@dataclass
class LoadOptions:
    base_url: str
    model: str | None = None
    api_key: str | None = None
    levels: list[int] = field(default_factory=lambda: list(DEFAULT_LEVELS))
    shapes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SHAPES))
    output_tokens: int = 256
    requests: int | None = None  # per level; None: max(level * rounds, min_requests)
    rounds: int = 2
    min_requests: int = 8
    duration_s: float | None = None  # per level: no new request after this
    seed: int = 20260929
    warmup: bool = True
    allow_busy: bool = False
    idle_timeout_s: float = 180.0
    idle_poll_s: float = 1.0
    request_timeout_s: float = 900.0
    sample_interval_s: float = 1.0
    out_root: Path = Path("bench-results")

    def level_requests(self, level: int) -> int | None:
        if self.requests is not None:
            return self.requests
        if self.duration_s is not None:
            return None
        return max(level * self.rounds, self.min_requests)


@dataclass
class Target:
    """What `check()` found: the model to load and who serves it."""

    base_url: str
    model: str
    models: list[str]
    identity: dict[str, Any]
    metrics_server: str | None  # vllm | llamacpp | unknown; None: no /metrics
    busy: float | None


class Reporter:
    """Progress callbacks (the CLI draws them with rich); the default says nothing."""

    def note(self, message: str) -> None: ...

    def level_started(self, shape: str, level: int, total: int | None) -> None: ...

    def request_done(self, result: Result) -> None: ...

    def level_done(self, row: dict[str, Any]) -> None: ...


# ---------------------------------------------------------------- option parsing


def parse_levels(items: list[str]) -> list[int]:
    """['1', '8', '16'] (the --concurrency items) -> [1, 8, 16]; a clear UserError otherwise."""
    try:
        levels = [int(p) for p in items]
    except ValueError:
        levels = []
    if not levels or any(n < 1 for n in levels):
        raise UserError(f"'{','.join(items)}' is not a list of concurrency levels", field="--concurrency",
                        fix="give positive integers separated by commas, e.g. --concurrency 1,8,16,24,40")
    return levels


def parse_shapes(items: list[str], short: int, long: int) -> dict[str, int]:
    """The --shapes items: short, long (sized by --short-input/--long-input) or NAME=TOKENS."""
    known = {"short": short, "long": long}
    shapes: dict[str, int] = {}
    for part in items:
        name, _, size = part.partition("=")
        try:
            tokens = int(size) if size else known[name]
        except (KeyError, ValueError):
            tokens = 0
        if not name or tokens < 1:
            raise UserError(f"'{part}' is not a prompt shape", field="--shapes",
                            fix="use short, long, or NAME=TOKENS items separated by commas, e.g. short,long")
        shapes[name] = tokens
    if not shapes:
        raise UserError("--shapes names no prompt shape", field="--shapes",
                        fix="use short, long, or NAME=TOKENS items separated by commas, e.g. short,long")
    return shapes


# ---------------------------------------------------------------- before anything is written


def check(opts: LoadOptions) -> Target:
    """The server answers, serves the model, and is idle (unless --allow-busy); else a UserError."""
    root = root_url(opts.base_url)
    if not is_http_url(root):
        raise UserError(f"'{opts.base_url}' is not an http(s) URL", field="base URL",
                        fix="give the server's base URL, e.g. http://127.0.0.1:8000")
    headers = bearer(opts.api_key)
    try:
        resp = httpx.get(models_url(root), headers=headers, timeout=10, verify=tls())
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach {root}: {exc or type(exc).__name__}", field="base URL",
                        fix="start the server, or correct the URL (GET <url>/v1/models must answer)") from None
    if resp.status_code != 200:
        fix = ("pass the API key's variable with --api-key-env" if resp.status_code in (401, 403)
               else "is this an OpenAI-compatible server? GET /v1/models must list its models")
        raise UserError(f"{root}/v1/models answered HTTP {resp.status_code}", field="base URL", fix=fix)
    try:
        listing = resp.json()
        models = [m["id"] for m in listing.get("data", [])]
    except (ValueError, AttributeError, KeyError, TypeError):
        raise UserError(f"{root}/v1/models did not answer with a model list", field="base URL",
                        fix="point at an OpenAI-compatible server") from None
    model = opts.model or (models[0] if models else None)
    if model is None:
        raise UserError(f"{root} lists no model", field="--model", fix="wait until the server has loaded its model")
    if model not in models:
        raise UserError(f"the server does not serve model '{model}' (it lists: {', '.join(models) or 'none'})",
                        field="--model", fix=f"pass one it lists, e.g. --model {models[0]}" if models else None)
    identity: dict[str, Any] = {"models": listing}
    try:
        v = httpx.get(f"{root}/version", headers=headers, timeout=5, verify=tls())
        if v.status_code == 200:
            identity["version"] = v.json()
    except (httpx.HTTPError, ValueError):
        pass
    snap = metrics.scrape(root, api_key=opts.api_key, timeout=5)
    busy = snap.busy if snap else None
    if busy and not opts.allow_busy:
        raise UserError(f"the server is busy: {snap.running or 0:g} running and {snap.waiting or 0:g} waiting",
                        field="base URL", fix="wait until it is idle, or pass --allow-busy to measure anyway")
    return Target(root, model, models, identity, snap.server if snap else None, busy)


def plan_text(opts: LoadOptions, model: str, where: str) -> str:
    counts = {level: opts.level_requests(level) for level in opts.levels}
    per_shape = sum(n for n in counts.values() if n) if all(counts.values()) else None
    total = per_shape * len(opts.shapes) if per_shape else None
    tokens = (sum(total // len(opts.shapes) * (size + opts.output_tokens) for size in opts.shapes.values())
              if total else None)
    shapes = ", ".join(f"{k} (~{v:,} tokens in)" for k, v in opts.shapes.items())
    lines = [
        f"target: {where}, model {model}",
        f"levels: {', '.join(map(str, opts.levels))} requests in flight; shapes: {shapes}; "
        f"{opts.output_tokens} tokens out each (ignore_eos)",
    ]
    if total:
        lines.append(f"requests: {', '.join(f'{counts[lv]} at {lv}' for lv in opts.levels)} per shape, "
                     f"{total:,} in all, about {tokens:,} tokens")
    else:
        lines.append(f"each level runs {opts.duration_s:g} s (closed loop)")
    return "\n".join(lines)


# ---------------------------------------------------------------- the run


class Runner:
    def __init__(self, opts: LoadOptions, target: Target, reporter: Reporter | None = None) -> None:
        self.opts, self.target = opts, target
        self.reporter = reporter or Reporter()
        self.run_tag = secrets.token_hex(4)
        self.started = datetime.now(timezone.utc)
        self.results = ResultsDir(opts.out_root, self.started.strftime("%Y%m%dT%H%M%SZ"))
        self.interrupted = False

    @property
    def path(self) -> Path:
        return self.results.path

    def run(self) -> list[dict[str, Any]]:
        """Warm up, run every level, write the results; the summary rows."""
        try:
            asyncio.run(self._run())
        except BaseException as exc:
            self.interrupted = not isinstance(exc, Exception)  # Ctrl-C, SIGTERM, a cancelled run
            raise
        finally:
            if self.results.rows:
                self.finish()
        return self.results.rows

    async def _run(self) -> None:
        opts = self.opts
        client = StreamClient(self.target.base_url, api_key=opts.api_key, idle_timeout=opts.request_timeout_s)
        scraper = StreamClient(self.target.base_url, api_key=opts.api_key, idle_timeout=10)
        try:
            if opts.warmup:
                await self._warmup(client)
            for shape, size in opts.shapes.items():
                prompts = Prompts(self.run_tag, opts.seed, shape, size)
                for level in opts.levels:
                    await self._level(client, scraper, prompts, shape, size, level)
        finally:
            await client.aclose()
            await scraper.aclose()

    async def _warmup(self, client: StreamClient) -> None:
        prompts = Prompts(self.run_tag, self.opts.seed, "warmup", WARMUP_TOKENS)
        _, prompt = prompts.make(0, 0)
        prompt = prompt.replace(f"[{prompts.tag(0, 0)}]", f"[{self.run_tag}-warmup]", 1)
        self.reporter.note("warm-up: one short request")
        result = await client.stream(CHAT_PATH, chat_payload(self.target.model, prompt, WARMUP_OUTPUT))
        if not result.ok:
            raise UserError(f"the warm-up request failed: {result.error}" + (f": {result.detail}" if result.detail
                                                                               else ""),
                            field="base URL", fix="check that the server can answer a chat completion "
                                                  "(its log says why not); nothing was measured")

    async def _level(self, client: StreamClient, scraper: StreamClient, prompts: Prompts, shape: str, size: int,
                     level_n: int) -> None:
        opts = self.opts
        level = Level(shape, level_n, size)
        if not opts.allow_busy:
            level.idle, level.idle_wait_s = await self._wait_idle(scraper)
            if not level.idle:
                self.reporter.note(f"the server was not idle after {opts.idle_timeout_s:g} s; measuring anyway")
        total = opts.level_requests(level_n)
        payloads = None
        if total is not None:  # made before the clock starts: a 16k-word prompt is not free
            payloads = [self._payload(client, prompts, level_n, i) for i in range(total)]
        await client.preconnect(level_n)  # TCP setup is not the server's latency
        before = await self._scrape(scraper)
        self.reporter.level_started(shape, level_n, total)

        stop = asyncio.Event()
        sampler = asyncio.create_task(self._sample(scraper, level, stop))
        loop = asyncio.get_running_loop()
        deadline = None
        counter = iter(range(total if total is not None else 1 << 62))

        async def worker() -> None:
            for i in counter:
                if deadline is not None and loop.time() >= deadline:
                    return
                tag, body = payloads[i] if payloads is not None else self._payload(client, prompts, level_n, i)
                result = await client.send(body)
                if result.ok and not result.token_ns:
                    result.ok, result.error = False, "no output tokens received"
                level.requests.append((i, tag, result))
                self.reporter.request_done(result)

        gc.collect()
        gc.disable()  # no collector pause lands inside a timed stream
        if opts.duration_s is not None:
            deadline = loop.time() + opts.duration_s
        t0 = time.perf_counter_ns()
        try:
            await asyncio.gather(*(worker() for _ in range(level_n)))
        finally:
            level.wall_s = (time.perf_counter_ns() - t0) / 1e9
            gc.enable()
            stop.set()
            await sampler
        after = await self._scrape(scraper)
        level.preemptions = metrics.delta(before, after, "preemptions_total")
        row = self.results.add(level, t0)
        self.results.write_summary(self.meta())
        self.reporter.level_done(row)

    def _payload(self, client: StreamClient, prompts: Prompts, level: int, index: int) -> tuple[str, bytes]:
        tag, prompt = prompts.make(level, index)
        body = json.dumps(chat_payload(self.target.model, prompt, self.opts.output_tokens)).encode()
        return tag, client.request_bytes("POST", CHAT_PATH, body)

    async def _scrape(self, scraper: StreamClient) -> metrics.MetricsSnapshot | None:
        result = await scraper.get("/metrics")
        if result.status != 200:
            return None
        try:
            return metrics.parse(result.body.decode("utf-8", "replace"), figures_only=True)
        except ValueError:
            return None

    async def _sample(self, scraper: StreamClient, level: Level, stop: asyncio.Event) -> None:
        """Every interval from shortly after the level starts (when its first requests are in)."""
        interval = self.opts.sample_interval_s
        wait = min(interval / 2, 0.25)
        while True:
            try:
                await asyncio.wait_for(stop.wait(), wait)
                return
            except asyncio.TimeoutError:
                pass
            snap = await self._scrape(scraper)
            if snap is not None:
                level.peaks.see(snap.running, snap.waiting, snap.kv_usage)
            wait = interval

    async def _wait_idle(self, scraper: StreamClient) -> tuple[bool | None, float]:
        t0 = time.monotonic()
        while True:
            snap = await self._scrape(scraper)
            busy = snap.busy if snap else None
            if busy is None:
                return None, time.monotonic() - t0  # cannot tell: go ahead
            if busy == 0:
                return True, time.monotonic() - t0
            if time.monotonic() - t0 >= self.opts.idle_timeout_s:
                return False, time.monotonic() - t0
            await asyncio.sleep(self.opts.idle_poll_s)

    def meta(self) -> dict[str, Any]:
        opts = self.opts
        params = asdict(opts)
        params.pop("api_key")
        params["out_root"] = str(opts.out_root)
        params["requests_per_level"] = {str(lv): opts.level_requests(lv) for lv in opts.levels}
        return {
            "tool": "llms-benchmark load",
            "tool_version": _version(),
            "started": self.started.isoformat(),
            "finished": datetime.now(timezone.utc).isoformat(),
            "interrupted": self.interrupted,
            "target": self.target.base_url,
            "model": self.target.model,
            "server": {**self.target.identity, "metrics": self.target.metrics_server,
                       "busy_at_start": self.target.busy},
            "parameters": params,
            "run_tag": self.run_tag,
            "client_host": socket.gethostname(),
            "percentile_method": PERCENTILE_METHOD,
            "definitions": DEFINITIONS,
        }

    def finish(self) -> None:
        self.results.write_summary(self.meta())
        try:
            from harness.load.plots import plot
        except ImportError as exc:  # the `plots` extra: the figures are written, the PNGs are not
            from harness.extras import extra_of

            if extra_of(exc) is None:
                raise
            self.reporter.note("no plots: matplotlib is not installed (pip install -e '.[plots]')")
            return
        plot(self.results.rows, self.results.path, f"{self.target.model} at {self.target.base_url}")


def _version() -> str:
    try:
        return version("llms-benchmark")
    except PackageNotFoundError:
        return "unknown"

