"""Every stack this version serves, as declared (harness/stack_specs/spec.py says what a spec holds),
and what is read from the declarations alone: the names and aliases, the environment schema's
`stack` enum and per-stack `config:` checks, the stacks a preset may override.

Data only: it imports neither a stack module nor `harness.vot`, so the schema (`harness.vot`)
reads it while the stack modules import `harness.vot` — no circle. The stack itself is loaded
only when it serves (harness/stacks/registry.py). A new stack is its file plus its spec here.
"""

from __future__ import annotations

from typing import Any

from harness.errors import UserError
from harness.stack_specs.azure import SPEC as AZURE
from harness.stack_specs.spec import ANY_PORT_SCHEMA, VLLM_PORT_SCHEMA, StackSpec, config_schema

DOCKER_DEFAULT_IMAGE = "vllm/vllm-openai:v0.30.0"

LOCAL_VLLM = StackSpec("local-vllm", "harness.stacks.local_vllm:LocalVllmStack", default_port=8000,
                       config=config_schema(
                           port=VLLM_PORT_SCHEMA,
                           device={"enum": ["cuda", "cpu"],
                                   "description": "Default cuda. cpu: vLLM's CPU build from `make vllm`."},
                           vllm={"type": "string", "minLength": 1,
                                 "description": "The vllm executable (default: `vllm` on PATH; "
                                                "on cpu, the `make vllm` venv's)."},
                           kv_cache_gib={"type": "integer", "minimum": 1,
                                         "description": "cpu only: the KV cache in GiB "
                                                        "(VLLM_CPU_KVCACHE_SPACE). Default 2."},
                       ), preset_override=True)

LOCAL_VLLM_METAL = StackSpec("local-vllm-metal", "harness.stacks.local_vllm_metal:LocalVllmMetalStack",
                             default_port=8000, config=config_schema(port=VLLM_PORT_SCHEMA), preset_override=True)

LOCAL_VLLM_DOCKER = StackSpec("local-vllm-docker", "harness.stacks.local_vllm_docker:LocalVllmDockerStack",
                              default_port=8000, preset_override=True,
                              config=config_schema(port=VLLM_PORT_SCHEMA, image={
                                  "type": "string", "minLength": 1, "description": f"Default {DOCKER_DEFAULT_IMAGE}."}))

LLAMACPP = StackSpec("local-llamacpp", "harness.stacks.llamacpp:LlamaCppStack", default_port=0, config=config_schema(
    port=ANY_PORT_SCHEMA,
    threads={"type": "integer", "minimum": 1,
             "description": "llama-server's threads (default: the cores free when the serve starts)."},
    server={"type": "string", "minLength": 1,
            "description": "A llama-server binary of your own (default: the portable one `make setup` builds)."},
))

REPLAY = StackSpec("replay", "harness.stacks.replay:ReplayStack", default_port=0)


# The order is the order of the schema's enum, so of every "allowed: ..." message.
SPECS: tuple[StackSpec, ...] = (LOCAL_VLLM, LOCAL_VLLM_METAL, LOCAL_VLLM_DOCKER, AZURE, LLAMACPP, REPLAY)
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
