"""`llms-benchmark classroom`: a class of simulated students, each with an opencode-like
agent, working on a small lab project against a real OpenAI-compatible endpoint.

The model and the server load are real; the students, their project, its builds and
tests are simulated (see `classroom_project` and `classroom_scenarios`). Each student:

1. waits a random part of the ramp-up, then gets a private copy of the lab project;
2. sends opencode's title request (optional), then the lab exercise and up to three
   follow-ups, pausing between them;
3. per request, loops agent steps: a streaming chat completion with the tools; the
   model's tool calls run against the in-memory project; when the model calls no tool
   at all in a request (a replay server, a small model), the request's scripted steps
   are taken instead, so the load keeps a real agent's shape;
4. compacts the conversation (one summary call, as opencode does) when a step's tokens
   come near the context limit;
5. retries a 429 or 503, waiting what Retry-After says (otherwise a growing backoff).

Simulated client-side waits (ramp-up, pauses, builds and tests, backoff without
Retry-After) are multiplied by `time_scale`; the server's Retry-After, `duration` and
`grace` are real seconds. Every random draw comes from the student's own source,
`Random(f"{seed}:{index}")`.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.load import stdlib_http

try:  # the CLI's client; the stdlib entry point (classroom_standalone) runs without it
    import httpx
except ImportError:  # pragma: no cover - exercised by the stdlib test in a bare interpreter
    httpx = None

from harness.errors import UserError
from harness.load.classroom_config import (
    AgentPrompt,
    ApiKey,
    ClassroomConfig,
    builtin_prompt,
    load_keys,
    load_prompt_file,
)
from harness.load.classroom_report import Outcome, summarize, write_results
from harness.load.classroom_student import Run, Student
from harness.wire.openai import bearer, model_ids, models_url


PROGRESS_EVERY_S = 30.0
METRICS_EVERY_S = 1.0


# ---------------------------------------------------------------- checking the server


def check_server(cfg: ClassroomConfig, key: ApiKey | None) -> list[str]:
    """GET /v1/models once: the URL answers and lists the model. Returns the served names."""
    url = models_url(cfg.root_url)
    headers = bearer(key.secret if key else None)
    try:
        if cfg.stdlib:
            resp = asyncio.run(_stdlib_get(cfg, url, headers))
        else:
            resp = httpx.get(url, headers=headers, timeout=10.0, verify=cfg.verify())
    except (stdlib_http.HTTPError, *((httpx.HTTPError,) if httpx else ())) as exc:
        raise UserError(f"cannot reach {url}: {type(exc).__name__}: {exc}", field="BASE_URL",
                        fix="start the server, or give the URL it listens on (it must answer GET /v1/models)") from None
    if resp.status_code in (401, 403):
        raise UserError(f"{url} refused the API key (HTTP {resp.status_code})", field="--api-keys-file/--api-key-env",
                        fix="give a key the server accepts")
    if resp.status_code != 200:
        raise UserError(f"{url} answered HTTP {resp.status_code}", field="BASE_URL",
                        fix="give the base URL of an OpenAI-compatible server")
    try:
        names = model_ids(resp.json())
    except ValueError:
        raise UserError(f"{url} did not answer with a model list", field="BASE_URL",
                        fix="give the base URL of an OpenAI-compatible server") from None
    if not cfg.model and names:  # the seed's command line names no model: the one the server lists first
        cfg.model = names[0]
    if cfg.model not in names:
        raise UserError(f"the server at {cfg.root_url} does not list model {cfg.model!r} "
                        f"(it lists: {', '.join(names) or 'nothing'})", field="--model",
                        fix="pass one of the listed names")
    return names



async def _stdlib_get(cfg: ClassroomConfig, url: str, headers: dict[str, str]):
    async with stdlib_http.AsyncClient(verify=cfg.verify(), read_timeout=10.0) as client:
        return await client.get(url, headers=headers)


# ---------------------------------------------------------------- server metrics


class MetricsWatch:
    """/metrics before, during (every second) and after the run: peaks and counters."""

    def __init__(self, base_url: str, api_key: str | None, verify: ssl.SSLContext | bool = True) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.verify = verify
        self.before = None
        self.after = None
        self.samples = 0
        self.peaks: dict[str, float | None] = {"running": None, "waiting": None, "kv_usage": None}

    def _scrape(self):
        """The server's /metrics, verified as the run's requests are (`--cacert`); None if unreadable."""
        from harness.load.metrics import metrics_url, parse

        try:
            resp = httpx.get(metrics_url(self.base_url), headers=bearer(self.api_key), timeout=2.0, verify=self.verify)
            resp.raise_for_status()
            return parse(resp.text)
        except (httpx.HTTPError, ValueError, UnicodeDecodeError):
            return None

    async def read(self):
        snap = await asyncio.to_thread(self._scrape)
        if snap is not None:
            self.samples += 1
            for name in self.peaks:
                value = getattr(snap, name)
                if value is not None:
                    self.peaks[name] = max(value, self.peaks[name] or 0.0)
        return snap

    async def sample(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.read()
            try:
                await asyncio.wait_for(stop.wait(), METRICS_EVERY_S)
            except TimeoutError:
                pass

    def summary(self) -> dict[str, Any]:
        from harness.load.metrics import delta

        if self.before is None or self.after is None:
            return {"available": False, "reason": f"{self.base_url}/metrics was not readable before and after the run"}
        hits = delta(self.before, self.after, "prefix_cache_hits_total")
        queries = delta(self.before, self.after, "prefix_cache_queries_total")
        kv = self.peaks["kv_usage"]
        return {
            "available": True,
            "server": self.after.server,
            "samples": self.samples,
            "running_peak": self.peaks["running"],
            "waiting_peak": self.peaks["waiting"],
            "kv_usage_peak_percent": None if kv is None else round(kv * 100, 2),
            "preemptions": delta(self.before, self.after, "preemptions_total"),
            "prefix_cache_hit_rate_percent": round(100 * hits / queries, 2) if hits is not None and queries else None,
            "prompt_tokens": delta(self.before, self.after, "prompt_tokens_total"),
            "generation_tokens": delta(self.before, self.after, "generation_tokens_total"),
        }


# ---------------------------------------------------------------- the whole run


async def simulate(cfg: ClassroomConfig, keys: list[ApiKey], prompt: AgentPrompt,
                   say: Callable[[str], None] = lambda _: None) -> Outcome:
    """Run the class until every student is done or the hard stop (duration + grace)."""
    started = datetime.now(UTC)
    metrics_key = keys[0].secret if keys else None
    verify = cfg.verify()
    watch = MetricsWatch(cfg.root_url, metrics_key, verify) if cfg.metrics else None
    if cfg.stdlib:
        client = stdlib_http.AsyncClient(verify=verify, read_timeout=cfg.read_timeout_s)
    else:
        limits = httpx.Limits(max_connections=cfg.users + 8, max_keepalive_connections=cfg.users + 8)
        timeout = httpx.Timeout(connect=10.0, read=cfg.read_timeout_s, write=60.0, pool=None)
        client = httpx.AsyncClient(limits=limits, timeout=timeout, verify=verify)
    async with client:
        run = Run(cfg, prompt, client, started.strftime("%a %b %d %Y"))
        background: list[asyncio.Task] = []
        stop = asyncio.Event()
        if watch is not None:
            watch.before = await watch.read()
            if watch.before is not None:
                background.append(asyncio.create_task(watch.sample(stop)))
        background.append(asyncio.create_task(progress(run, stop, say)))
        students = [Student(run, i, keys[i % len(keys)] if keys else None) for i in range(cfg.users)]
        tasks = [asyncio.create_task(s.simulate(), name=f"student-{s.index}") for s in students]
        interrupted = False
        try:
            await asyncio.wait(tasks, timeout=max(0.0, run.hard_stop - run.clock.now()))
        except asyncio.CancelledError:  # Ctrl-C: record what was done
            interrupted = True
        finally:
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            stop.set()
            await asyncio.gather(*background, return_exceptions=True)
        wall = run.clock.now()
        if watch is not None and watch.before is not None:
            watch.after = await watch.read()
    faults = [r for r in results if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError)]
    if faults:
        raise faults[0]
    server = watch.summary() if watch is not None else {"available": False, "reason": "--no-metrics"}
    return Outcome(requests=run.requests, turns=run.turns, server=server, wall_s=round(wall, 3),
                   started_users=run.started_users, started=started.isoformat(timespec="seconds"),
                   finished=datetime.now(UTC).isoformat(timespec="seconds"), interrupted=interrupted)


async def progress(run: Run, stop: asyncio.Event, say: Callable[[str], None]) -> None:
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), PROGRESS_EVERY_S)
            return
        except TimeoutError:
            pass
        ok = sum(r["ok"] for r in run.requests)
        retries = sum(r["kind"] == "retry" for r in run.requests)
        say(f"{run.clock.now():.0f}s: {run.active_users} users active, {ok} requests ok, "
            f"{len(run.requests) - ok - retries} failed, {retries} retries")


@dataclass
class ClassroomResult:
    summary: dict[str, Any]
    folder: Path


def prepare(cfg: ClassroomConfig) -> tuple[list[ApiKey], AgentPrompt, list[str]]:
    """Every check that can refuse, before anything is sent or written."""
    cfg.check()
    cfg.verify()  # a --cacert that cannot be read: refused before anything is sent
    keys: list[ApiKey] = []
    if cfg.keys_file is not None:
        keys = load_keys(cfg.keys_file)
    elif cfg.api_key_env:
        import os

        secret = os.environ.get(cfg.api_key_env)
        if not secret:
            raise UserError(f"the environment variable {cfg.api_key_env} is not set or empty", field="--api-key-env",
                            fix=f"export {cfg.api_key_env}=<key>, or give --api-keys-file")
        keys = [ApiKey("env", secret)]
    prompt = load_prompt_file(cfg.prompt_file) if cfg.prompt_file is not None else builtin_prompt()
    notes = []
    if keys and len(keys) < cfg.users:
        notes.append(f"{len(keys)} keys for {cfg.users} users: user i uses key i mod {len(keys)}")
    check_server(cfg, keys[0] if keys else None)
    return keys, prompt, notes


def run_classroom(cfg: ClassroomConfig, say: Callable[[str], None] = lambda _: None) -> ClassroomResult:
    """Check the inputs and the server, simulate the class, write the results folder."""
    keys, prompt, notes = prepare(cfg)
    for note in notes:
        say(note)
    say(f"{cfg.users} simulated users ({cfg.scenario}) against {cfg.model} at {cfg.root_url}; "
        f"new requests for {cfg.duration_s:g}s, hard stop after {cfg.duration_s + cfg.grace_s:g}s")
    outcome = asyncio.run(simulate(cfg, keys, prompt, say))
    summary = summarize(cfg, outcome, keys=len(keys), prompt=prompt.source, notes=notes)
    folder = write_results(cfg.out_dir, outcome, summary)
    return ClassroomResult(summary=summary, folder=folder)
