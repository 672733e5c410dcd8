"""vllm-on-tap environments: where presets are served (`.vot/environments/<name>.yaml`).

Same format as vllm-on-tap, plus two stacks of ours: `local-llamacpp` (the
embedded CPU default) and `replay` (a scripted server for tests and demos).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.vot.loader import VOT_FILE_CAP, available, check, check_name_matches_file, load_yaml, named_file

ENVIRONMENTS_DIR = Path(".vot") / "environments"


class Environment(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    stack: str  # `aca` already read as `azure`
    was_aca: bool = False  # so a rewrite or a message can mention the old name
    otlp_endpoint: str | None = None
    gpu_hourly_usd: float | None = None  # the GPU's price per hour (a cloud profile's, a box's amortised rate)
    gpu_price_source: str | None = None  # where that price comes from, and its date
    gpu_memory_gb: float | None = None  # per GPU, for the KV-fit check when the stack cannot say
    config: dict[str, Any] = Field(default_factory=dict)
    path: Path

    @property
    def port(self) -> int:
        """The configured port, else the stack's default (0: its server picks a free one)."""
        from harness.stack_specs.catalog import get_spec

        return int(self.config.get("port", get_spec(self.stack).default_port))


def load_environment_file(path: Path) -> Environment:
    path = Path(path)
    data = load_yaml(path, cap=VOT_FILE_CAP, kind="environment")  # a huge file refused unparsed
    check(data, "environment", path)
    check_name_matches_file(data, path)
    from harness.stack_specs.catalog import get_spec

    spec = get_spec(data["stack"])  # the schema has already refused an unknown one
    stack = spec.name
    config = {k: v for k, v in (data.get("config") or {}).items() if k not in spec.dropped_config_keys}
    return Environment(
        name=data["name"],
        stack=stack,
        was_aca=data["stack"] == "aca",
        otlp_endpoint=data.get("otlp_endpoint") or None,
        gpu_hourly_usd=data.get("gpu_hourly_usd"),
        gpu_price_source=data.get("gpu_price_source"),
        gpu_memory_gb=data.get("gpu_memory_gb"),
        config=config,
        path=path,
    )


def available_environments(root: Path) -> list[str]:
    return available(root, ENVIRONMENTS_DIR)


def load_environment(root: Path, name: str) -> Environment:
    fix = f"pick one of the available environments, or write .vot/environments/{name}.yaml"
    return load_environment_file(named_file(root, ENVIRONMENTS_DIR, name, "environment", fix))
