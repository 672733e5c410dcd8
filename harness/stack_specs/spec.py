"""What a stack declares about itself, so that nothing else lists stacks.

Each stack has one `StackSpec(...)` in harness/stack_specs/catalog.py: its name, the port its
server listens on unless the environment says otherwise, the JSON Schema of its
environment `config:` block, and whether a preset may override it (`stacks.<name>:`).
The environment schema's stack enum and per-stack config checks, `Environment.port` and
preset resolution all read them from the catalog; the registry loads the stack itself.

Deliberately free of imports from the rest of the harness: `harness.vot` reads specs
while the stack modules themselves import `harness.vot`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Port fragments shared by several stacks' config schemas.
VLLM_PORT_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": 65535, "description": "Default 8000."}
ANY_PORT_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 65535, "description": "0 = pick a free port."}


def config_schema(**properties: dict[str, Any]) -> dict[str, Any]:
    """A closed `config:` object: a key the stack does not read is a mistake worth naming."""
    return {"type": "object", "additionalProperties": False, "properties": properties}


@dataclass(frozen=True)
class StackSpec:
    name: str
    # "module:Class", imported only when the stack is used (azure's SDK costs a quarter second).
    implementation: str
    default_port: int  # 0: our own server picks a free port
    config: dict[str, Any] = field(default_factory=lambda: config_schema(port=ANY_PORT_SCHEMA))
    # vllm-on-tap's own stacks take per-stack preset overrides; ours serve one fixed kind of model.
    preset_override: bool = False
    aliases: tuple[str, ...] = ()  # older names read as this one (vllm-on-tap's `aca` for azure)
    # Config keys older vllm-on-tap versions wrote: accepted by the schema, then dropped on load.
    dropped_config_keys: tuple[str, ...] = ()
