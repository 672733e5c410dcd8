"""The stacks this version serves, collected from their own declarations (`SPEC` in each
stack file; harness/stacks/spec.py says what one holds).

Everything that lists stacks asks here: `get_stack`, the environment schema's `stack`
enum and per-stack `config:` checks (`environment_schema`), `Environment.port`, and the
stacks a preset may override. A new stack is its file plus one entry in SPECS.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.stacks import azure_spec, llamacpp, local_vllm, local_vllm_docker, local_vllm_metal, replay
from harness.stacks.base import Stack
from harness.stacks.spec import StackSpec
from harness.stacks.unsupported import UnsupportedStack

# The order is the order of the schema's enum, so of every "allowed: ..." message.
SPECS: tuple[StackSpec, ...] = (
    local_vllm.SPEC,
    local_vllm_metal.SPEC,
    local_vllm_docker.SPEC,
    azure_spec.SPEC,
    llamacpp.SPEC,
    replay.SPEC,
)
# Recognised (vllm-on-tap has them) but refused by preflight until their issue lands.
NOT_YET: tuple[str, ...] = ()

_BY_NAME = {spec.name: spec for spec in SPECS}
_ALIASES = {alias: spec.name for spec in SPECS for alias in spec.aliases}


def canonical(name: str) -> str:
    """The stack's current name (`aca` → `azure`); an unknown name is returned as it is."""
    return _ALIASES.get(name, name)


def get_spec(name: str) -> StackSpec:
    spec = _BY_NAME.get(canonical(name))
    if spec is None:
        raise UserError(f"unknown stack '{name}'", field="stack",
                        fix=f"use one of: {', '.join([*_BY_NAME, *NOT_YET])}")
    return spec


def get_stack(name: str, root: Path) -> Stack:
    if canonical(name) in NOT_YET:
        return UnsupportedStack(name)
    module, _, cls = get_spec(name).implementation.partition(":")
    try:
        loaded = importlib.import_module(module)
    except ImportError as exc:  # a stack whose SDK is an extra (azure): one clear refusal
        from harness.extras import extra_of, missing

        extra = extra_of(exc)
        if extra is None:
            raise
        raise missing(extra, f"the {canonical(name)} stack", exc) from None
    return getattr(loaded, cls)(root)


def override_stacks() -> tuple[str, ...]:
    """Stacks a preset may carry an override for (`stacks.<name>:`), current names only."""
    return tuple(spec.name for spec in SPECS if spec.preset_override)


def environment_schema(base: dict[str, Any]) -> dict[str, Any]:
    """`base` (environment.schema.json, which names no stack) with the `stack` enum and one
    `config:` check per stack filled in from the specs."""
    names = [name for spec in SPECS for name in (spec.name, *spec.aliases)]
    schema = {**base, "properties": {**base["properties"], "stack": {**base["properties"]["stack"], "enum": names}}}
    schema["allOf"] = [
        {"if": {"required": ["stack"], "properties": {"stack": {"enum": [spec.name, *spec.aliases]}}},
         "then": {"properties": {"config": spec.config}}}
        for spec in SPECS
    ]
    return schema
