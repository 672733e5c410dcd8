"""The classroom's inputs: its configuration, the students' API keys and the agent's
prompt (the built-in opencode-like one, or one captured from opencode), each checked
before anything is sent."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.load.classroom_project import tool_schemas
from harness.load.classroom_lab import FOLLOW_UPS, ROOT
from harness.load.classroom_scenarios import SCENARIO_CHOICES, Scenario
from harness.wire.openai import is_http_url, root_url


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
    scenario: str = "java"  # the seed's default (Maven and JUnit); python, or mixed (alternating)
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
    cacert: Path | None = None  # a private CA's PEM bundle the server's certificate chains to
    stdlib: bool = False  # HTTP through harness/load/stdlib_http.py (a stock Python), not httpx
    out_dir: Path = Path("bench-results")

    @property
    def root_url(self) -> str:
        return normalize_base_url(self.base_url)

    def verify(self) -> ssl.SSLContext | bool:
        """What every request of the run verifies the server's certificate with: `--cacert`'s CA
        bundle, else the system's (httpx's default). A missing or unreadable bundle is refused by name."""
        if self.cacert is None:
            return True
        try:
            return ssl.create_default_context(cafile=str(self.cacert))
        except FileNotFoundError:
            raise UserError("no such CA bundle", file=self.cacert, field="--cacert",
                            fix="give the PEM file of the CA that signed the server's certificate") from None
        except (ssl.SSLError, OSError, ValueError) as exc:
            raise UserError(f"not a PEM CA bundle: {exc}", file=self.cacert, field="--cacert",
                            fix="give the PEM file (-----BEGIN CERTIFICATE-----) of the server's CA") from None

    @property
    def compact_at(self) -> int:
        """opencode's trigger: a step's total tokens reach context − min(output, 32000)."""
        return self.context_limit - min(self.max_output, 32000)

    def check(self) -> None:
        """Refuse impossible settings, naming the option."""
        def need(ok: bool, option: str, message: str, fix: str) -> None:
            if not ok:
                raise UserError(message, field=option, fix=fix)

        normalize_base_url(self.base_url)
        need(self.users >= 1, "--users", f"at least one user is needed, not {self.users}",
             "give --users 1 or more (the default is 40)")
        need(self.scenario in SCENARIO_CHOICES, "--scenario", f"unknown scenario {self.scenario!r}",
             f"use one of {', '.join(SCENARIO_CHOICES)}")
        need(self.duration_s > 0, "--duration", "the duration must be positive",
             "give the real seconds students start requests in, e.g. --duration 900")
        need(self.ramp_up_s >= 0 and self.grace_s >= 0, "--ramp-up/--grace", "ramp-up and grace cannot be negative",
             "give 0 or more seconds, e.g. --ramp-up 120 --grace 300")
        for option, (low, high) in (("--think-min/--think-max", self.think_s), ("--tool-min/--tool-max", self.tool_s)):
            need(0 <= low <= high, option, f"the range {low}..{high} is empty or negative",
                 "give min <= max, both >= 0")
        need(0 <= self.test_fail_rate <= 1, "--test-fail-rate", "a rate must lie between 0 and 1",
             "give a fraction, e.g. --test-fail-rate 0.3")
        need(1 <= self.max_turns <= 1 + len(FOLLOW_UPS), "--max-turns",
             f"a session has 1 to {1 + len(FOLLOW_UPS)} requests (the exercise and its follow-ups)",
             f"give --max-turns between 1 and {1 + len(FOLLOW_UPS)}")
        need(self.max_steps >= 1, "--max-steps", "at least one step per request is needed",
             "give --max-steps 1 or more (the default is 40)")
        need(self.max_output >= 1, "--max-output", "max output must be at least 1 token",
             "give --max-output 1 or more tokens (the default is 8192)")
        need(self.compact_at > 0, "--context-limit",
             f"the context limit {self.context_limit} leaves no room once {self.max_output} output tokens are reserved",
             "raise --context-limit or lower --max-output")
        need(self.max_retries >= 0 and self.max_retry_after_s >= 0, "--max-retries", "retries cannot be negative",
             "give --max-retries 0 or more (the default is 5)")
        need(self.time_scale > 0, "--time-scale", "the time scale must be positive", "use 1.0 for real seconds")
        need(self.read_timeout_s > 0, "--timeout", "the read timeout must be positive",
             "give seconds, e.g. --timeout 600")


def normalize_base_url(url: str) -> str:
    """`http://host:port[/v1][/]` -> `http://host:port` (the tools add `/v1/...` and `/metrics`)."""
    text = url.strip()
    if not is_http_url(text):
        raise UserError(f"{url!r} is not an http(s) URL", field="BASE_URL", fix="give e.g. http://127.0.0.1:8000")
    return root_url(text)


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
        raise UserError("no such keys file", file=path, field="--api-keys-file",
                        fix="give the file of API keys (one a line, or user_id,api_key)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the keys file: {exc}", file=path, field="--api-keys-file",
                        fix="give a readable UTF-8 text file of API keys (one a line, or user_id,api_key)") from None
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
        raise UserError("no such prompt file", file=path, field="--prompt-file",
                        fix="give a captured opencode {system, tools} JSON, or leave --prompt-file out for the built-in one") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"not valid JSON: {exc.msg}", file=path, line=exc.lineno,
                        fix="give {\"system\": ..., \"tools\": [...]} captured from an opencode session") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read the prompt file: {exc}", file=path, field="--prompt-file",
                        fix="give a readable UTF-8 JSON file") from None
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
        system = [message_text(m.get("content")) for m in messages if isinstance(m, dict) and m.get("role") == "system"]
        where = "messages"
    if not isinstance(system, list) or not system or not all(isinstance(s, str) and s.strip() for s in system):
        raise UserError("the system prompt must be a non-empty string or list of strings", file=path, field=where,
                        fix="give {\"system\": \"...\", \"tools\": [...]}")
    raw_tools = data.get("tools")
    if not isinstance(raw_tools, list) or not raw_tools:
        raise UserError("the tool list must be a non-empty list", file=path, field="tools",
                        fix="tools in the OpenAI format: [{\"type\": \"function\", \"function\": {\"name\": ...}}]")
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


def message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""

