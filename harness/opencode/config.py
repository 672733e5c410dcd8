"""The per-launch opencode provider file (OPENCODE_CONFIG) and the isolated
environment opencode runs in.

The provider block is exactly the oddyssey protocol's (provider `vot`,
`@ai-sdk/openai-compatible`, `{env:VOT_API_KEY}`, `limit.output` 32768, a nested
`opencode` denied). The rest closes every way a headless run could stop silently
(`ask` permissions) or reach outside itself (catalog fetch, autoupdate, sharing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.stacks.base import Unit

OUTPUT_LIMIT = 32768
EFFORTS = ("low", "medium", "high")
# Reasoning parsers whose chat templates read `reasoning_effort` (gpt-oss's harmony).
EFFORT_PARSERS = frozenset({"openai_gptoss"})


def takes_reasoning_effort(reasoning_parser: str | None) -> bool:
    return reasoning_parser in EFFORT_PARSERS


def provider_config(unit: Unit, *, reasoning_parser: str | None, steps: int | None = None,
                    disabled_tools: list[str] | tuple[str, ...] = (), shell: str | None = None) -> dict:
    model: dict = {
        "name": unit.served_name,
        "tool_call": True,
        "limit": {"context": unit.max_model_len, "output": OUTPUT_LIMIT},
    }
    if takes_reasoning_effort(reasoning_parser):
        model["reasoning"] = True
        model["variants"] = {e: {"reasoningEffort": e} for e in EFFORTS}
    served = f"vot/{unit.served_name}"
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "vot": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "vllm-on-tap",
                "options": {"baseURL": f"{unit.base_url}/v1", "apiKey": "{env:VOT_API_KEY}"},
                "models": {unit.served_name: model},
            }
        },
        "model": served,
        "small_model": served,
        "enabled_providers": ["vot"],
        "autoupdate": False,
        "share": "disabled",
        # Later rules win: allow everything, then deny a nested opencode (it would run the
        # user's default model and void the run). No `ask` is left: headless, an `ask`
        # is auto-rejected and silently ends the agent loop.
        "permission": {
            "bash": {"*": "allow", "opencode": "deny", "opencode *": "deny"},
            "read": "allow",
            "edit": "allow",
            "webfetch": "deny",
            "external_directory": "deny",
            "doom_loop": "deny",
            "question": "deny",
        },
        # The mission's step limit, if it sets one: opencode forces a text-only answer after it.
        **({"agent": {"build": {"steps": steps}}} if steps else {}),
        # Tools the mission turns off are left out of every request (and of the prompt).
        **({"tools": {name: False for name in disabled_tools}} if disabled_tools else {}),
        # The shell the bash tool runs commands with (sandboxed: one that puts each tool out of
        # opencode's reach, sandbox/toolshell.py); opencode's default is /bin/sh.
        **({"shell": shell} if shell else {}),
    }


def applied_effort(config: dict, served_name: str, requested: str) -> str | None:
    """The `--variant` to pass, or None (recorded as `default`) when the model has none for it."""
    variants = config["provider"]["vot"]["models"][served_name].get("variants") or {}
    return requested if requested in variants else None


def write_provider_file(config: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def isolated_env(home: Path, provider_file: Path, api_key_env: str | None, *,
                 api_key: str | None = None, tmpdir: Path | None = None) -> dict[str, str]:
    """A fresh HOME, XDG dirs and TMPDIR per launch: no user config, credentials or
    other runs' sessions are visible, and the session store is this run's alone.
    `tmpdir` (default `home/tmp`) is named in opencode's bash tool description, so two runs
    that should share the server's prompt cache (the smoke and the mission) share its path."""
    dirs = {
        "HOME": home / "home",
        "XDG_CONFIG_HOME": home / "xdg" / "config",
        "XDG_DATA_HOME": home / "xdg" / "data",
        "XDG_CACHE_HOME": home / "xdg" / "cache",
        "XDG_STATE_HOME": home / "xdg" / "state",
        "TMPDIR": tmpdir or home / "tmp",
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {k: str(v) for k, v in dirs.items()}
    for name in ("PATH", "LANG", "LC_ALL", "TERM", "TZ"):
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(
        OPENCODE_CONFIG=str(provider_file),
        OPENCODE_DISABLE_PROJECT_CONFIG="1",
        OPENCODE_DISABLE_AUTOUPDATE="1",
        OPENCODE_DISABLE_MODELS_FETCH="1",
        OPENCODE_DISABLE_SHARE="1",
        OPENCODE_DISABLE_LSP_DOWNLOAD="1",
        OPENCODE_DISABLE_CLAUDE_CODE="1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
        # opencode installs its plugin package (@opencode-ai/plugin and ~8 more) into the config
        # dir in the background of every run, from the public npm registry (4.5 MB into HOME,
        # measured). The agent needs no plugin: npm stays offline and that install fails at once.
        npm_config_offline="true",
        # The key reaches opencode through its environment only, never argv or a file.
        # Local stacks check no key; vLLM's convention is then any non-empty value.
        # `api_key` is a key the launch already holds (azure reads it from the app's secret).
        VOT_API_KEY=api_key if api_key is not None else (os.environ.get(api_key_env, "") if api_key_env else "none"),
    )
    return env


def data_dir(env: dict[str, str]) -> Path:
    return Path(env["XDG_DATA_HOME"]) / "opencode"
