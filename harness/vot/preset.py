"""vllm-on-tap presets: what is served (model + `vllm serve` flags), never where.

The file format is vllm-on-tap's own (checked against its schema), so a preset
written here still validates there. Resolution, the name == file-name rule and
the per-stack merge follow its load-preset skill.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Union

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import UserError
from harness.vot.loader import (
    VOT_FILE_CAP, available, check, check_name_matches_file, load_yaml_bytes, named_file,
)

# bool first: YAML `true` must stay a bool (a bare flag), never become 1 or "True".
ArgValue = Union[bool, int, float, str]

PRESETS_DIR = Path(".vot") / "presets"


class StackOverride(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str | None = None
    gpu_memory_gb: float | None = None
    vllm_args: dict[str, ArgValue] = Field(default_factory=dict)


class ResolvedPreset(BaseModel):
    """A preset merged for one stack: what the stack actually serves."""

    model_config = ConfigDict(frozen=True)

    name: str
    model: str
    served_name: str
    gpu_memory_gb: float | None
    vllm_args: dict[str, ArgValue]
    env: list[str]
    stack: str
    path: Path
    sha256: str

    @property
    def max_model_len(self) -> int | None:
        value = self.vllm_args.get("--max-model-len")
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, float):
            return int(value) if value.is_integer() else None
        try:
            return int(value)
        except ValueError:
            return None

    @property
    def tool_calling(self) -> bool:
        # vLLM only emits tool calls with both flags; either alone serves plain chat.
        parser = self.vllm_args.get("--tool-call-parser")
        auto = self.vllm_args.get("--enable-auto-tool-choice")
        return auto is True and isinstance(parser, str) and parser != ""

    @property
    def reasoning_parser(self) -> str | None:
        value = self.vllm_args.get("--reasoning-parser")
        return value if isinstance(value, str) and value else None


class Preset(BaseModel):
    """The preset file as written."""

    model_config = ConfigDict(frozen=True)

    name: str
    description: str | None = None
    model: str
    served_model_name: str | None = None
    gpu_memory_gb: float | None = None
    vllm_args: dict[str, ArgValue] = Field(default_factory=dict)
    env: list[str] = Field(default_factory=list)
    stacks: dict[str, StackOverride] = Field(default_factory=dict)
    path: Path
    sha256: str

    def override_for(self, stack: str) -> StackOverride | None:
        """The preset's `stacks.<stack>:` block, under the stack's name or an older one
        (vllm-on-tap still reads `aca` as azure); None for a stack without overrides."""
        from harness.stack_specs.catalog import SPECS, canonical

        spec = next((s for s in SPECS if s.name == canonical(stack)), None)
        if spec is None:
            raise ValueError(f"unknown stack {stack!r}")
        if not spec.preset_override:
            return None
        for name in (spec.name, *spec.aliases):
            if (found := self.stacks.get(name)) is not None:
                return found
        return None

    def resolve(self, stack: str) -> ResolvedPreset:
        """Merge the stack's override: model and gpu replaced, vllm_args key by key.

        `false` values are kept here (the override's way to remove a flag) and
        dropped by the renderer.
        """
        from harness.stack_specs.catalog import canonical

        over = self.override_for(stack) or StackOverride()
        return ResolvedPreset(
            name=self.name,
            model=over.model or self.model,
            served_name=self.served_model_name or self.name,
            gpu_memory_gb=over.gpu_memory_gb if over.gpu_memory_gb is not None else self.gpu_memory_gb,
            vllm_args={**self.vllm_args, **over.vllm_args},
            env=list(self.env),
            stack=canonical(stack),
            path=self.path,
            sha256=self.sha256,
        )


# vllm_args whose value is a count of tokens: an integer, or `false` (a stack override removing it).
INTEGER_ARGS = ("--max-model-len",)


def _is_integer(value: ArgValue) -> bool:
    if value is False or (isinstance(value, int) and not isinstance(value, bool)):
        return True
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, str):
        try:
            int(value)
        except ValueError:
            return False
        return True
    return False


def check_integer_args(preset: Preset) -> None:
    """`--max-model-len: abc` is refused as what it is, not read later as "not set"."""
    blocks = [("vllm_args", preset.vllm_args)]
    blocks += [(f"stacks.{name}.vllm_args", over.vllm_args) for name, over in preset.stacks.items()]
    for where, args in blocks:
        for flag in INTEGER_ARGS:
            if flag in args and not _is_integer(args[flag]):
                raise UserError(f"{flag} is {args[flag]!r}, not an integer (a number of tokens)", file=preset.path,
                                field=f"{where}.{flag}", fix=f"write `{flag}: 32768` (tokens, digits only)")


def load_preset_file(path: Path) -> Preset:
    path = Path(path)
    data, raw = load_yaml_bytes(path, cap=VOT_FILE_CAP, kind="preset")  # a huge file refused unparsed
    check(data, "preset", path)
    check_name_matches_file(data, path)
    preset = Preset(**data, path=path, sha256=hashlib.sha256(raw).hexdigest())
    check_integer_args(preset)
    return preset


def available_presets(root: Path) -> list[str]:
    return available(root, PRESETS_DIR)


def load_preset(root: Path, name: str) -> Preset:
    """`<root>/.vot/presets/<name>.yaml`. vllm-on-tap would then fetch a builtin from
    GitHub; we work offline, so only local presets exist."""
    fix = (f"pick one of the available presets, or write .vot/presets/{name}.yaml (only local presets are "
           "supported: vllm-on-tap's builtins come from GitHub and this harness does not fetch them)")
    return load_preset_file(named_file(root, PRESETS_DIR, name, "preset", fix))


def missing_env(resolved: ResolvedPreset) -> list[str]:
    """Names the preset needs that are not exported. Presence only: values are never read."""
    return [name for name in resolved.env if name not in os.environ]
