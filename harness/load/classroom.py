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
import email.utils
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from harness.errors import UserError
from harness.load.classroom_project import Project, Toolbox, tool_schemas
from harness.load.classroom_scenarios import FOLLOW_UPS, ROOT, SCENARIO_CHOICES, Scenario, fix_steps, plan, scenario_for

RETRY_STATUSES = (429, 503)
TITLE_MAX_TOKENS = 128
MAX_COMPACTIONS_PER_TURN = 3
PROGRESS_EVERY_S = 30.0
METRICS_EVERY_S = 1.0

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

SYSTEM_PROMPT = """You are opencode, an interactive CLI coding agent that helps students with software \
engineering tasks. Use the instructions below and the tools available to you to assist the user.

# Tone and style
Be concise and direct. Answer in fewer than four lines unless the user asks for detail. Do not add \
preamble or a summary of what you did unless asked. Use GitHub-flavored markdown.

# Doing tasks
- Understand the code first: search the project with glob and grep, and read the files you will change.
- Make the change with the edit tool (exact string replacement) or write a new file.
- Verify it: run the project's tests with bash ({test_command}). If they fail, fix the cause and rerun them.
- Never invent file contents you have not read. Keep to the project's style.

# Tool usage
- Use absolute paths under {root}.
- Call several independent tools in one response when that saves steps.
- Use bash only for builds, tests and git; use the dedicated tools to read, search and edit files.

Here is some useful information about the environment you are running in:
<env>
  Working directory: {root}
  Is directory a git repo: yes
  Platform: linux
  Today's date: {date}
</env>
<files>
{tree}
</files>"""


# ---------------------------------------------------------------- configuration


@dataclass
class ClassroomConfig:
    base_url: str
    model: str
    users: int = 40
    scenario: str = "mixed"
    duration_s: float = 900.0
    ramp_up_s: float = 120.0
    grace_s: float = 300.0
    think_s: tuple[float, float] = (20.0, 90.0)
    tool_s: tuple[float, float] = (3.0, 12.0)
    test_fail_rate: float = 0.3
    max_turns: int = 4
    max_steps: int = 40
    max_output: int = 8192
    context_limit: int = 65536
    max_retries: int = 5
    max_retry_after_s: float = 60.0
    title: bool = True
    metrics: bool = True
    seed: int = 20260929
    time_scale: float = 1.0
    read_timeout_s: float = 600.0
    keys_file: Path | None = None
    api_key_env: str | None = None
    prompt_file: Path | None = None
    out_dir: Path = Path("bench-results")

    @property
    def root_url(self) -> str:
        return normalize_base_url(self.base_url)

    @property
    def compact_at(self) -> int:
        """opencode's trigger: a step's total tokens reach context − min(output, 32000)."""
        return self.context_limit - min(self.max_output, 32000)

    def check(self) -> None:
        """Refuse impossible settings, naming the option."""
        def need(ok: bool, option: str, message: str, fix: str | None = None) -> None:
            if not ok:
                raise UserError(message, field=option, fix=fix)

        normalize_base_url(self.base_url)
        need(bool(self.model.strip()), "--model", "the model name is empty", "pass the served model name")
        need(self.users >= 1, "--users", "at least one user is needed")
        need(self.scenario in SCENARIO_CHOICES, "--scenario", f"unknown scenario {self.scenario!r}",
             f"use one of {', '.join(SCENARIO_CHOICES)}")
        need(self.duration_s > 0, "--duration", "the duration must be positive")
        need(self.ramp_up_s >= 0 and self.grace_s >= 0, "--ramp-up/--grace", "ramp-up and grace cannot be negative")
        for option, (low, high) in (("--think-min/--think-max", self.think_s), ("--tool-min/--tool-max", self.tool_s)):
            need(0 <= low <= high, option, f"the range {low}..{high} is empty or negative",
                 "give min <= max, both >= 0")
        need(0 <= self.test_fail_rate <= 1, "--test-fail-rate", "a rate must lie between 0 and 1")
        need(1 <= self.max_turns <= 1 + len(FOLLOW_UPS), "--max-turns",
             f"a session has 1 to {1 + len(FOLLOW_UPS)} requests (the exercise and its follow-ups)")
        need(self.max_steps >= 1, "--max-steps", "at least one step per request is needed")
        need(self.max_output >= 1, "--max-output", "max output must be at least 1 token")
        need(self.compact_at > 0, "--context-limit",
             f"the context limit {self.context_limit} leaves no room once {self.max_output} output tokens are reserved",
             "raise --context-limit or lower --max-output")
        need(self.max_retries >= 0 and self.max_retry_after_s >= 0, "--max-retries", "retries cannot be negative")
        need(self.time_scale > 0, "--time-scale", "the time scale must be positive", "use 1.0 for real seconds")
        need(self.read_timeout_s > 0, "--timeout", "the read timeout must be positive")


def normalize_base_url(url: str) -> str:
    """`http://host:port[/v1][/]` -> `http://host:port` (the tools add `/v1/...` and `/metrics`)."""
    text = url.strip().rstrip("/")
    if not text.startswith(("http://", "https://")):
        raise UserError(f"{url!r} is not an http(s) URL", field="BASE_URL", fix="give e.g. http://127.0.0.1:8000")
    return text.removesuffix("/v1")


# ---------------------------------------------------------------- inputs: keys and prompt file


@dataclass(frozen=True)
class ApiKey:
    label: str  # what records show (the file's user id, or its line): never the key
    secret: str | None = field(repr=False)


def load_keys(path: Path) -> list[ApiKey]:
    """One key a line, or CSV `user_id,api_key` (an optional header line). `#` comments
    and blank lines after the last key are ignored; any other empty key is an error."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UserError("no such keys file", file=path, field="--keys-file",
                        fix="give the file of API keys (one a line, or user_id,api_key)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the keys file: {exc}", file=path, field="--keys-file") from None
    while lines and not lines[-1].strip():
        lines.pop()
    keys: list[ApiKey] = []
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if line.startswith("#"):
            continue
        if "," in line:
            label, key = (part.strip() for part in line.split(",", 1))
            if not keys and key.lower() in ("api_key", "key", "apikey") and not label.startswith("cdm_"):
                continue  # a header
        else:
            label, key = f"line{number}", line
        if not key:
            raise UserError("this line has an empty API key", file=path, line=number,
                            fix="put the key on that line (user_id,api_key or the key alone), or delete the line")
        if any(ch.isspace() for ch in key) or "," in key:
            raise UserError("an API key cannot contain spaces or commas", file=path, line=number,
                            fix="one key a line, or user_id,api_key")
        keys.append(ApiKey(label or f"line{number}", key))
    if not keys:
        raise UserError("the keys file holds no API key", file=path, fix="one key a line, or user_id,api_key")
    return keys


@dataclass(frozen=True)
class AgentPrompt:
    """The agent's system messages and tool list."""

    system: tuple[str, ...]
    tools: tuple[dict, ...]
    source: str  # "built-in" or the prompt file's path

    def system_messages(self, scenario: Scenario, date: str, tree: str) -> list[dict]:
        if self.source == "built-in":
            text = SYSTEM_PROMPT.format(root=ROOT, date=date, tree=tree, test_command=scenario.test_command)
            return [{"role": "system", "content": text}]
        return [{"role": "system", "content": text} for text in self.system]


def builtin_prompt() -> AgentPrompt:
    return AgentPrompt(system=(SYSTEM_PROMPT,), tools=tuple(tool_schemas()), source="built-in")


def load_prompt_file(path: Path) -> AgentPrompt:
    """A captured opencode prompt: `{system: str | [str], tools: [...]}`, or a captured
    chat request body `{messages: [...], tools: [...]}` whose system messages are taken.
    Tools are OpenAI `{type: function, function: {name, ...}}` or bare `{name, ...}`."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("no such prompt file", file=path, field="--prompt-file") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"not valid JSON: {exc.msg}", file=path, line=exc.lineno,
                        fix="give {\"system\": ..., \"tools\": [...]} captured from an opencode session") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the prompt file: {exc}", file=path) from None
    if not isinstance(data, dict):
        raise UserError("the prompt file must hold a JSON object", file=path,
                        fix="{\"system\": \"...\", \"tools\": [...]}")
    if "system" in data:
        system = data["system"]
        system = [system] if isinstance(system, str) else system
        where = "system"
    else:
        messages = data.get("messages")
        if not isinstance(messages, list):
            raise UserError("no system prompt: neither `system` nor `messages` is there", file=path, field="system",
                            fix="give {\"system\": \"...\", \"tools\": [...]}")
        system = [_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "system"]
        where = "messages"
    if not isinstance(system, list) or not system or not all(isinstance(s, str) and s.strip() for s in system):
        raise UserError("the system prompt must be a non-empty string or list of strings", file=path, field=where)
    raw_tools = data.get("tools")
    if not isinstance(raw_tools, list) or not raw_tools:
        raise UserError("the tool list must be a non-empty list", file=path, field="tools")
    tools = []
    for i, tool in enumerate(raw_tools):
        if isinstance(tool, dict) and "function" not in tool and "name" in tool:
            tool = {"type": "function", "function": tool}
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise UserError("a tool needs a function name", file=path, field=f"tools[{i}].function.name",
                            fix="tools in the OpenAI format: {\"type\": \"function\", \"function\": {\"name\": ...}}")
        tools.append({"type": "function", **tool})
    return AgentPrompt(system=tuple(system), tools=tuple(tools), source=str(path))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


# ---------------------------------------------------------------- checking the server


def check_server(cfg: ClassroomConfig, key: ApiKey | None) -> list[str]:
    """GET /v1/models once: the URL answers and lists the model. Returns the served names."""
    url = f"{cfg.root_url}/v1/models"
    headers = {"Authorization": f"Bearer {key.secret}"} if key and key.secret else {}
    try:
        resp = httpx.get(url, headers=headers, timeout=10.0)
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach {url}: {type(exc).__name__}: {exc}", field="BASE_URL",
                        fix="start the server, or give the URL it listens on (it must answer GET /v1/models)") from None
    if resp.status_code in (401, 403):
        raise UserError(f"{url} refused the API key (HTTP {resp.status_code})", field="--keys-file/--api-key-env",
                        fix="give a key the server accepts")
    if resp.status_code != 200:
        raise UserError(f"{url} answered HTTP {resp.status_code}", field="BASE_URL",
                        fix="give the base URL of an OpenAI-compatible server")
    try:
        names = [m["id"] for m in resp.json()["data"]]
    except (ValueError, KeyError, TypeError):
        raise UserError(f"{url} did not answer with a model list", field="BASE_URL",
                        fix="give the base URL of an OpenAI-compatible server") from None
    if cfg.model not in names:
        raise UserError(f"the server at {cfg.root_url} does not list model {cfg.model!r} "
                        f"(it lists: {', '.join(names) or 'nothing'})", field="--model",
                        fix="pass one of the listed names")
    return names


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
    chars = sum(len(_text(m.get("content"))) + sum(len(c["function"]["arguments"]) for c in m.get("tool_calls", []))
                for m in messages)
    return max(1, math.ceil((chars + len(json.dumps(list(tools)))) / 4))


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds from `retry-after-ms`, or `Retry-After` as seconds or an HTTP date."""
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


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
        headers = {"x-session-affinity": self.session}
        if self.key and self.key.secret:
            headers["Authorization"] = f"Bearer {self.key.secret}"
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
                    wait = retry_after(resp.headers)
                    record["retry_after_s"] = wait
                    too_long = resp.status_code == 400 and any(
                        s in raw.lower() for s in ("context length", "maximum context", "too long", "context window"))
                    return Reply(ok=False, overflow=too_long, error=record["error"]), wait
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
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
        except httpx.HTTPError as exc:
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


# ---------------------------------------------------------------- server metrics


class MetricsWatch:
    """/metrics before, during (every second) and after the run: peaks and counters."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.before = None
        self.after = None
        self.samples = 0
        self.peaks: dict[str, float | None] = {"running": None, "waiting": None, "kv_usage": None}

    async def read(self):
        from harness.load.metrics import scrape

        snap = await asyncio.to_thread(scrape, self.base_url, api_key=self.api_key, timeout=2.0)
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


@dataclass
class Outcome:
    requests: list[dict]
    turns: list[dict]
    server: dict[str, Any]
    wall_s: float
    started_users: int
    started: str
    finished: str
    interrupted: bool = False


async def simulate(cfg: ClassroomConfig, keys: list[ApiKey], prompt: AgentPrompt,
                   say: Callable[[str], None] = lambda _: None) -> Outcome:
    """Run the class until every student is done or the hard stop (duration + grace)."""
    started = datetime.now(UTC)
    limits = httpx.Limits(max_connections=cfg.users + 8, max_keepalive_connections=cfg.users + 8)
    timeout = httpx.Timeout(connect=10.0, read=cfg.read_timeout_s, write=60.0, pool=None)
    metrics_key = keys[0].secret if keys else None
    watch = MetricsWatch(cfg.root_url, metrics_key) if cfg.metrics else None
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
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
    keys: list[ApiKey] = []
    if cfg.keys_file is not None:
        keys = load_keys(cfg.keys_file)
    elif cfg.api_key_env:
        import os

        secret = os.environ.get(cfg.api_key_env)
        if not secret:
            raise UserError(f"the environment variable {cfg.api_key_env} is not set or empty", field="--api-key-env",
                            fix=f"export {cfg.api_key_env}=<key>, or give --keys-file")
        keys = [ApiKey("env", secret)]
    prompt = load_prompt_file(cfg.prompt_file) if cfg.prompt_file is not None else builtin_prompt()
    notes = []
    if keys and len(keys) < cfg.users:
        notes.append(f"{len(keys)} keys for {cfg.users} users: user i uses key i mod {len(keys)}")
    check_server(cfg, keys[0] if keys else None)
    return keys, prompt, notes


def run_classroom(cfg: ClassroomConfig, say: Callable[[str], None] = lambda _: None) -> ClassroomResult:
    """Check the inputs and the server, simulate the class, write the results folder."""
    from harness.load.classroom_report import summarize, write_results

    keys, prompt, notes = prepare(cfg)
    for note in notes:
        say(note)
    say(f"{cfg.users} simulated users ({cfg.scenario}) against {cfg.model} at {cfg.root_url}; "
        f"new requests for {cfg.duration_s:g}s, hard stop after {cfg.duration_s + cfg.grace_s:g}s")
    outcome = asyncio.run(simulate(cfg, keys, prompt, say))
    summary = summarize(cfg, outcome, keys=len(keys), prompt=prompt.source, notes=notes)
    folder = write_results(cfg.out_dir, outcome, summary)
    return ClassroomResult(summary=summary, folder=folder)
