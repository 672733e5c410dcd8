"""Where a grader model is served: `PROVIDER/MODEL` resolved to an OpenAI-compatible
base URL and the NAME of the environment variable holding its key (never the key).

Resolution, first match wins:
1. `--grader-url URL`: any OpenAI-compatible endpoint; PROVIDER is only a label.
2. The provider defined in an opencode config (`--grader-config`, else `$OPENCODE_CONFIG`,
   else `~/.config/opencode/opencode.json[c]`): `provider.<id>.options.baseURL`, with
   `options.apiKey` read as opencode reads it (`{env:NAME}` or a literal).
3. A provider opencode knows by name that speaks the OpenAI API (openai, openrouter, ...).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError

# Providers opencode ships whose chat-completions API is OpenAI's: base URL, key variable.
KNOWN = {
    "openai": ("https://api.openai.com/v1", "OPENAI_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "fireworks": ("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
    "mistral": ("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
}
_ENV_REF = re.compile(r"^\{env:([A-Za-z_][A-Za-z0-9_]*)\}$")
# A JSONC comment outside a string (strings are matched first and kept).
_JSONC = re.compile(r'("(?:\\.|[^"\\])*")|//[^\n]*|/\*.*?\*/', re.S)


@dataclass(frozen=True)
class Endpoint:
    provider: str
    model: str
    base_url: str
    key_env: str | None  # the variable to read the key from at the last moment
    literal_key: bool = False  # the opencode config holds the key itself (read, never copied)
    config: Path | None = None

    @property
    def label(self) -> str:
        return f"{self.provider}/{self.model}"

    def api_key(self) -> str | None:
        if self.literal_key and self.config is not None:
            return str(_provider_entry(self.config, self.provider)["options"]["apiKey"])
        return os.environ.get(self.key_env) if self.key_env else None


def parse_spec(spec: str) -> tuple[str, str]:
    provider, sep, model = spec.partition("/")
    if not sep or not provider or not model:
        raise UserError(f"--grader {spec!r} is not PROVIDER/MODEL", field="--grader",
                        fix="e.g. --grader openai/gpt-5.1, or --grader local/qwen3 --grader-url http://127.0.0.1:8000/v1")
    return provider, model


def _read_config(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot read the opencode config: {exc.strerror}", file=path,
                        fix="pass --grader-config PATH to an opencode config that defines the provider") from None
    try:
        data = json.loads(_JSONC.sub(lambda m: m.group(1) or "", text))
    except ValueError as exc:
        raise UserError(f"not valid JSON(C): {exc}", file=path, fix="fix the opencode config") from None
    if not isinstance(data, dict):
        raise UserError("an opencode config is a JSON object", file=path,
                        fix='give an opencode config: {"provider": {"NAME": {"options": {"baseURL": ...}}}}')
    return data


def _provider_entry(path: Path, provider: str) -> dict:
    entry = (_read_config(path).get("provider") or {}).get(provider)
    return entry if isinstance(entry, dict) else {}


def default_configs() -> list[Path]:
    found = []
    if os.environ.get("OPENCODE_CONFIG"):
        found.append(Path(os.environ["OPENCODE_CONFIG"]))
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "opencode"
    found += [base / "opencode.json", base / "opencode.jsonc"]
    return [p for p in found if p.is_file()]


def resolve(spec: str, *, url: str | None = None, key_env: str | None = None,
            config: Path | None = None) -> Endpoint:
    provider, model = parse_spec(spec)
    if key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key_env):
        raise UserError(f"--grader-key-env {key_env!r} is not an environment variable name", field="--grader-key-env",
                        fix="name the variable that holds the key (never the key itself)")
    if url:
        if not re.match(r"^https?://", url):
            raise UserError(f"--grader-url {url!r} is not an http(s) URL", field="--grader-url",
                            fix="the endpoint's OpenAI-compatible base, e.g. http://127.0.0.1:8000/v1")
        return Endpoint(provider, model, url.rstrip("/"), key_env)
    configs = [config] if config is not None else default_configs()
    for path in configs:
        entry = _provider_entry(path, provider)
        base = (entry.get("options") or {}).get("baseURL")
        if base:
            raw_key = (entry.get("options") or {}).get("apiKey")
            ref = _ENV_REF.match(str(raw_key)) if raw_key is not None else None
            if key_env or ref or raw_key is None:
                return Endpoint(provider, model, str(base).rstrip("/"), key_env or (ref.group(1) if ref else None),
                                config=path)
            return Endpoint(provider, model, str(base).rstrip("/"), None, literal_key=True, config=path)
    if provider in KNOWN:
        base, env_name = KNOWN[provider]
        env_name = key_env or env_name
        if not os.environ.get(env_name):
            raise UserError(f"the grader's provider '{provider}' needs its key in ${env_name}", field="--grader",
                            fix=f"export {env_name}=... (it is read from the environment, never stored)")
        return Endpoint(provider, model, base, env_name)
    where = ", ".join(str(p) for p in configs) or "no opencode config found"
    raise UserError(f"unknown grader provider '{provider}' ({where})", field="--grader",
                    fix="define it in an opencode config (--grader-config), name one of "
                        f"{', '.join(KNOWN)}, or give --grader-url URL")
