"""One simulated student of the classroom: its clock, its model calls (streamed, retried on
429/503 as Retry-After says) and its agent loop over the lab project (see classroom.py for
the whole story).

Its retry loop is its own, not the harness's policy on tenacity (harness/wire/retry.py): it
runs from a bare `python3 -S` (seed 002), waits on the simulated clock up to the hard stop,
backs off as opencode does, and records each attempt. What it reads off the wire is shared:
the stream by harness/wire/sse.py, Retry-After by harness/wire/retry_after.py."""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

from harness.load import stdlib_http

try:  # the CLI's client; a stock Python (`python3 -m harness.load.classroom_standalone`) has only ours
    import httpx

    HTTP_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, stdlib_http.HTTPError)
except ImportError:  # pragma: no cover - exercised by the stdlib test in a bare interpreter
    httpx = None
    HTTP_ERRORS = (stdlib_http.HTTPError,)

from harness.load.classroom_config import AgentPrompt, ApiKey, ClassroomConfig, message_text
from harness.load.classroom_project import Project
from harness.load.classroom_toolbox import Toolbox
from harness.load.classroom_lab import FOLLOW_UPS
from harness.load.classroom_scenarios import fix_steps, plan, scenario_for
from harness.wire import retry_after, sse
from harness.wire.openai import bearer


RETRY_STATUSES = (429, 503)
TITLE_MAX_TOKENS = 128
MAX_COMPACTIONS_PER_TURN = 3

TITLE_SYSTEM = (
    "You are a title generator. You output ONLY a thread title, nothing else.\n"
    "Write a title of at most six words for the conversation that starts with the user's message. "
    "Keep the user's technical terms, use no quotes and no trailing punctuation."
)
COMPACTION_PROMPT = (
    "Here is the conversation so far. Create a new anchored summary of it that lets another agent "
    "continue the work: what the user asked for, what has been done, which files were changed and how, "
    "what failed, and what the next steps are. Be concise and precise; do not call tools."
)
CONTINUE_PROMPT = "Continue if you have next steps, or stop and ask for clarification if you are unsure how to proceed."


# ---------------------------------------------------------------- time


class Clock:
    """Real seconds since the run began; simulated waits scaled by `scale`."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def sleep_sim(self, sim_s: float, until: float | None = None) -> float:
        return await self.sleep_real(sim_s * self.scale, until)

    async def sleep_real(self, real_s: float, until: float | None = None) -> float:
        if until is not None:
            real_s = min(real_s, until - self.now())
        if real_s > 0:
            await asyncio.sleep(real_s)
        return max(0.0, real_s)


# ---------------------------------------------------------------- one model call


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass
class Reply:
    """One chat completion's outcome (the last attempt, after retries)."""

    ok: bool
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    overflow: bool = False  # HTTP 400 for a context too long
    error: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def estimate_tokens(messages: list[dict], tools: list[dict] | tuple[dict, ...]) -> int:
    """About four characters a token: used only when the server reports no usage."""
    chars = sum(len(message_text(m.get("content"))) + sum(len(c["function"]["arguments"]) for c in m.get("tool_calls", []))
                for m in messages)
    return max(1, math.ceil((chars + len(json.dumps(list(tools)))) / 4))


class Run:
    """What all students share: settings, clock, HTTP client and the records."""

    def __init__(self, cfg: ClassroomConfig, prompt: AgentPrompt, client: httpx.AsyncClient, date: str) -> None:
        self.cfg = cfg
        self.prompt = prompt
        self.client = client
        self.date = date
        self.clock = Clock(cfg.time_scale)
        self.stop_at = cfg.duration_s
        self.hard_stop = cfg.duration_s + cfg.grace_s
        self.requests: list[dict] = []
        self.turns: list[dict] = []
        self.started_users = 0
        self.active_users = 0


class Student:
    def __init__(self, run: Run, index: int, key: ApiKey | None) -> None:
        self.run = run
        self.cfg = run.cfg
        self.index = index
        self.key = key
        self.rng = random.Random(f"{self.cfg.seed}:{index}")
        self.scenario = scenario_for(self.cfg.scenario, index)
        self.session = f"classroom-{self.cfg.seed}-{index:03d}"
        self.messages: list[dict] = []
        self.turn_state: dict[str, Any] = {}

    # -- the session

    async def simulate(self) -> None:
        clock, run = self.run.clock, self.run
        await clock.sleep_sim(self.rng.uniform(0, self.cfg.ramp_up_s), until=run.stop_at)
        if clock.now() >= run.stop_at:
            return
        run.started_users += 1
        run.active_users += 1
        try:
            await self.session_requests()
        finally:
            run.active_users -= 1

    async def session_requests(self) -> None:
        clock, run, cfg = self.run.clock, self.run, self.cfg
        project = Project(self.scenario.files)
        self.toolbox = Toolbox(project, self.scenario, self.rng, test_fail_rate=cfg.test_fail_rate,
                               tool_time=cfg.tool_s)
        system = run.prompt.system_messages(self.scenario, run.date, project.tree())
        task = self.scenario.tasks[self.index % len(self.scenario.tasks)]
        follow_ups = self.rng.sample(FOLLOW_UPS, cfg.max_turns - 1)
        requests = [("lab", task), *follow_ups]
        self.system = system
        self.messages = list(system)
        if cfg.title:
            title_messages = [{"role": "system", "content": TITLE_SYSTEM}, {"role": "user", "content": task}]
            await self.call("title", title_messages, (), TITLE_MAX_TOKENS, turn=0, step=0)
        for number, (kind, text) in enumerate(requests, 1):
            if clock.now() >= run.stop_at:
                break
            if not await self.turn(number, kind, text):
                break  # an error ended the session, as it ends an opencode run
            if number < len(requests):
                await clock.sleep_sim(self.rng.uniform(*cfg.think_s), until=run.stop_at)

    async def turn(self, number: int, kind: str, text: str) -> bool:
        """One user request, up to its final answer. False if an error ends the session."""
        cfg, clock, tb = self.cfg, self.run.clock, self.toolbox
        state = self.turn_state = {
            "user": self.index, "user_id": self.key.label if self.key else None, "scenario": self.scenario.name,
            "turn": number, "kind": kind, "completed": False, "end": "cut_off", "steps": 0, "requests": 0,
            "tool_calls": 0, "scripted_tool_calls": 0, "tool_errors": 0, "compactions": 0, "test_runs": 0,
            "test_failures": 0, "model_s": 0.0, "tool_s": 0.0, "retry_wait_s": 0.0, "prompt_tokens_max": 0,
            "start_s": round(clock.now(), 3), "turn_s": None,
        }
        self.messages.append({"role": "user", "content": text})
        script = plan(self.scenario, kind, number)
        model_used_tools = False
        compactions = 0
        try:
            while state["steps"] < cfg.max_steps:
                state["steps"] += 1
                reply = await self.call("agent", self.messages, self.run.prompt.tools, cfg.max_output,
                                        turn=number, step=state["steps"])
                if reply.overflow and compactions < MAX_COMPACTIONS_PER_TURN:
                    compactions += 1
                    if not await self.compact(number, text, overflow=True):
                        state["end"] = "error"
                        return False
                    continue
                if not reply.ok:
                    state["end"] = "error"
                    return False
                calls = reply.tool_calls
                model_used_tools |= bool(calls)
                scripted = False
                if not calls and script and not model_used_tools:
                    name, args = script.pop(0)(self.toolbox.project.files)
                    calls = [ToolCall(f"call_scripted_{number}_{state['steps']}", name, json.dumps(args))]
                    scripted = True
                message: dict[str, Any] = {"role": "assistant", "content": reply.content or (None if calls else "")}
                if calls:
                    message["tool_calls"] = [{"id": c.id, "type": "function",
                                              "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
                self.messages.append(message)
                if not calls:
                    state["completed"], state["end"] = True, "done"
                    break
                for call in calls:
                    result = tb.run(call.name, call.arguments)
                    state["tool_calls"] += 1
                    state["scripted_tool_calls"] += scripted
                    state["tool_errors"] += result.error
                    state["test_runs"] += result.run == "test"
                    state["test_failures"] += result.failed
                    state["tool_s"] += await clock.sleep_sim(result.seconds)
                    self.messages.append({"role": "tool", "tool_call_id": call.id, "content": result.output})
                    if scripted and result.failed:
                        script[0:0] = fix_steps(self.scenario, number)
                if reply.total_tokens >= cfg.compact_at:
                    if compactions >= MAX_COMPACTIONS_PER_TURN:
                        state["end"] = "context"  # compaction cannot bring it under the limit
                        break
                    compactions += 1
                    if not await self.compact(number, text, overflow=False):
                        state["end"] = "error"
                        return False
            else:
                state["end"] = "step_limit"
            return True
        finally:
            state["turn_s"] = round(clock.now() - state["start_s"], 3)
            state["model_s"] = round(state["model_s"], 3)
            state["tool_s"] = round(state["tool_s"], 3)
            state["retry_wait_s"] = round(state["retry_wait_s"], 3)
            self.run.turns.append(state)

    async def compact(self, number: int, text: str, *, overflow: bool) -> bool:
        """opencode's compaction: one summary call without tools, then the history is the
        system prompt, the request, the summary and a nudge to continue."""
        self.turn_state["compactions"] += 1
        messages = [*self.messages, {"role": "user", "content": COMPACTION_PROMPT}]
        reply = await self.call("compaction", messages, (), self.cfg.max_output, turn=number,
                                step=self.turn_state["steps"], overflow=overflow)
        if not reply.ok:
            return False
        summary = reply.content.strip() or f"The user asked: {text} Work on it is under way."
        self.messages = [*self.system, {"role": "user", "content": text},
                         {"role": "assistant", "content": summary}, {"role": "user", "content": CONTINUE_PROMPT}]
        return True

    # -- one chat completion, with retries

    async def call(self, kind: str, messages: list[dict], tools: tuple[dict, ...] | list[dict], max_tokens: int,
                   *, turn: int, step: int, overflow: bool = False) -> Reply:
        cfg, clock = self.cfg, self.run.clock
        body: dict[str, Any] = {
            "model": cfg.model, "messages": messages, "stream": True,
            "stream_options": {"include_usage": True}, "max_tokens": max_tokens,
        }
        if tools:
            body["tools"] = list(tools)
            body["tool_choice"] = "auto"
        headers = {"x-session-affinity": self.session, **bearer(self.key.secret if self.key else None)}
        for attempt in range(cfg.max_retries + 1):
            record = {
                "user": self.index, "user_id": self.key.label if self.key else None, "scenario": self.scenario.name,
                "kind": kind, "turn": turn, "step": step, "attempt": attempt, "start_s": round(clock.now(), 4),
                "messages": len(messages), "ok": False, "status": None, "error": None, "ttft_s": None, "e2e_s": None,
                "prompt_tokens": None, "completion_tokens": None, "cached_tokens": None, "usage_reported": False,
                "finish_reason": None, "tool_calls": 0, "tools": [], "retry_after_s": None, "wait_s": None,
            }
            if kind == "compaction":
                record["overflow"] = overflow
            self.run.requests.append(record)
            reply, wait = await self.attempt(body, headers, record, messages, tools)
            if kind in ("agent", "compaction") and self.turn_state:
                self.turn_state["requests"] += 1
                if record["e2e_s"] is not None:
                    self.turn_state["model_s"] += record["e2e_s"]
                if record["prompt_tokens"]:
                    self.turn_state["prompt_tokens_max"] = max(self.turn_state["prompt_tokens_max"],
                                                               record["prompt_tokens"])
            if record["status"] in RETRY_STATUSES and attempt < cfg.max_retries:
                record["kind"], record["retry_of"] = "retry", kind
                if wait is None:  # no Retry-After: opencode's backoff, 2 s doubling to 30 s, ±25 %
                    waited = await clock.sleep_sim(min(30.0, 2.0 * 2**attempt) * self.rng.uniform(0.75, 1.25),
                                                   until=self.run.hard_stop)
                else:
                    waited = await clock.sleep_real(min(wait, cfg.max_retry_after_s), until=self.run.hard_stop)
                record["wait_s"] = round(waited, 4)
                if self.turn_state and kind != "title":
                    self.turn_state["retry_wait_s"] += waited
                continue
            return reply
        raise AssertionError("unreachable: the last attempt returns")

    async def attempt(self, body: dict, headers: dict, record: dict, messages: list[dict],
                      tools: tuple[dict, ...] | list[dict]) -> tuple[Reply, float | None]:
        """One HTTP request, streamed; fills `record`. Returns the reply and Retry-After."""
        clock = self.run.clock
        url = f"{self.cfg.root_url}/v1/chat/completions"
        t0 = clock.now()
        first: float | None = None
        content, finish, usage, done = "", None, None, False
        calls: dict[int, dict] = {}
        try:
            async with self.run.client.stream("POST", url, json=body, headers=headers) as resp:
                record["status"] = resp.status_code
                if resp.status_code != 200:
                    raw = (await resp.aread()).decode(errors="replace")
                    record["e2e_s"] = round(clock.now() - t0, 4)
                    record["error"] = f"HTTP {resp.status_code}"
                    wait = retry_after.from_headers(resp.headers)
                    record["retry_after_s"] = wait
                    too_long = resp.status_code == 400 and any(
                        s in raw.lower() for s in ("context length", "maximum context", "too long", "context window"))
                    return Reply(ok=False, overflow=too_long, error=record["error"]), wait
                async for data in sse.aevents(resp.aiter_bytes()):
                    if data == sse.DONE:
                        done = True
                        break
                    chunk = json.loads(data)
                    if chunk.get("error"):
                        err = chunk["error"]
                        record["error"] = f"stream error: {err.get('message', err) if isinstance(err, dict) else err}"
                        break
                    usage = chunk.get("usage") or usage
                    for choice in chunk.get("choices") or []:
                        delta = choice.get("delta") or {}
                        if first is None and (delta.get("content") or delta.get("reasoning_content")
                                              or delta.get("reasoning") or delta.get("tool_calls")):
                            first = clock.now()
                        content += delta.get("content") or ""
                        for tc in delta.get("tool_calls") or []:
                            call = calls.setdefault(tc.get("index", len(calls)),
                                                    {"id": None, "name": "", "arguments": ""})
                            call["id"] = tc.get("id") or call["id"]
                            fn = tc.get("function") or {}
                            call["name"] += fn.get("name") or ""
                            call["arguments"] += fn.get("arguments") or ""
                        finish = choice.get("finish_reason") or finish
        except asyncio.CancelledError:
            record["error"] = "cut off at the hard stop"
            record["cut_off"] = True
            record["e2e_s"] = round(clock.now() - t0, 4)
            raise
        except HTTP_ERRORS as exc:
            record["error"] = f"{type(exc).__name__}: {exc}"[:300]
        except (json.JSONDecodeError, AttributeError, TypeError) as exc:
            record["error"] = f"bad stream data: {exc}"[:300]
        record["e2e_s"] = round(clock.now() - t0, 4)
        if record["error"] is None and not (done or finish):
            record["error"] = "the stream ended before [DONE]"
        tool_calls = [ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"]) for i, c in sorted(calls.items())]
        record.update(ttft_s=None if first is None else round(first - t0, 4), finish_reason=finish,
                      tool_calls=len(tool_calls), tools=[c.name for c in tool_calls])
        if usage:
            record.update(prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                          cached_tokens=(usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                          usage_reported=True)
        elif record["error"] is None:
            record.update(prompt_tokens=estimate_tokens(messages, tools), completion_tokens=None)
        record["ok"] = record["error"] is None
        return Reply(ok=record["ok"], content=content, tool_calls=tool_calls,
                     prompt_tokens=record["prompt_tokens"] or 0, completion_tokens=record["completion_tokens"] or 0,
                     error=record["error"]), None

