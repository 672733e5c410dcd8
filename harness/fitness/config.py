"""The fitness run's configuration: an optional YAML file, then command-line overrides.

Every mistake is one `UserError` naming the file and the field; the CLI prints it and
exits 3 (a pipeline error: nothing was measured).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import UserError
from harness.vot.loader import load_yaml

PHASE_ORDER = ("telemetry", "warmup", "tooluse", "throughput", "capacity", "capability", "judge")
DEFAULT_THRESHOLDS = Path(__file__).parent / "thresholds.yaml"
# The phases whose timings drift with heat and load: run again, in reverse order, by --repeats 2.
REPEATABLE = ("throughput", "capacity")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ThroughputCfg(_Strict):
    contexts: list[int] = Field(default_factory=lambda: [512, 8192, 32768], min_length=1)
    output_tokens: int = Field(default=64, ge=2, le=4096)

    @field_validator("contexts")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(c < 16 for c in v):
            raise ValueError("every context must be at least 16 tokens")
        return v


class CapacityCfg(_Strict):
    levels: list[int] = Field(default_factory=lambda: [1, 2, 4, 8], min_length=1)
    input_tokens: int = Field(default=2048, ge=16)
    output_tokens: int = Field(default=128, ge=2, le=4096)
    requests_per_level: int = Field(default=0, ge=0, description="0: max(2 x level, 4)")
    ttft_slo_s: float = Field(default=10.0, gt=0, description="a level is carried when its p95 TTFT is within this")

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if any(n < 1 or n > 256 for n in v):
            raise ValueError("levels are requests in flight, 1 to 256")
        return v


BFCL_CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")


class ToolUseCfg(_Strict):
    max_tokens: int = Field(default=512, ge=16, le=8192)
    # The BFCL v4 subset, scored by BFCL's own AST checker in the checkers' lean venv
    # (`llms-benchmark fitness data` makes it). Off by default: it needs that one-time setup.
    bfcl: bool = False
    bfcl_categories: list[str] = Field(default_factory=lambda: list(BFCL_CATEGORIES), min_length=1)
    bfcl_per_category: int = Field(default=10, ge=0, le=400, description="evenly spaced items per category (0: all)")

    @field_validator("bfcl_categories")
    @classmethod
    def _categories(cls, v: list[str]) -> list[str]:
        unknown = [c for c in v if c not in BFCL_CATEGORIES]
        if unknown:
            raise ValueError(f"unknown BFCL category {unknown[0]!r} (known: {', '.join(BFCL_CATEGORIES)})")
        return v


class CapabilityCfg(_Strict):
    suites: list[str] = Field(default_factory=lambda: ["humaneval", "gsm8k", "ifbench"])
    limit: int = Field(default=0, ge=0, description="items per suite, the first N of the frozen order (0: all)")
    max_tokens: int = Field(default=768, ge=16, le=16384)
    data_dir: Path | None = None  # default: ~/.cache/llms-benchmark/fitness-data
    exec_timeout_s: float = Field(default=10.0, gt=0, le=120)
    workers: int = Field(default=2, ge=1, le=16)

    @field_validator("suites")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        from harness.fitness.data import SUITES

        unknown = [s for s in v if s not in SUITES]
        if unknown:
            raise ValueError(f"unknown suite {unknown[0]!r} (known: {', '.join(SUITES)})")
        return v


class JudgeEndpointCfg(_Strict):
    url: str | None = None  # an OpenAI-compatible server's base URL (…/v1/chat/completions is asked)
    model: str | None = None
    key_env: str | None = None  # the NAME of the variable holding the judge's key, never the key

    def configured(self) -> bool:
        return bool(self.url and self.model and self.key_env)


class JudgeCfg(JudgeEndpointCfg):
    # cross-judge: a second judge, of another model family, re-grades the same checklists
    cross: JudgeEndpointCfg = Field(default_factory=JudgeEndpointCfg)
    agreement_min: float = Field(default=0.75, gt=0, le=1, description="below it: a loud warning")
    tasks: Path | None = None  # default: the shipped harness/fitness/judge_tasks.jsonl
    limit: int = Field(default=0, ge=0, description="tasks, the first N (0: all)")
    answer_max_tokens: int = Field(default=768, ge=16, le=16384)
    judge_max_tokens: int = Field(default=512, ge=16, le=16384)
    timeout_s: float = Field(default=120.0, gt=0, le=1800)
    request_delay_s: float = Field(default=0.0, ge=0, le=60, description="pause between judge calls (rate limits)")
    attempts: int = Field(default=8, ge=1, le=20)
    retry_after_min_s: float = Field(default=1.0, ge=0, le=600)
    retry_after_max_s: float = Field(default=120.0, gt=0, le=3600)
    retry_after_default_s: float = Field(default=15.0, ge=0, le=3600)


class WebhookCfg(_Strict):
    url_env: str | None = None  # the NAME of the variable holding the webhook URL
    timeout_s: float = Field(default=10.0, gt=0, le=120)
    attempts: int = Field(default=8, ge=1, le=20)
    retry_after_min_s: float = Field(default=1.0, ge=0, le=600)
    retry_after_max_s: float = Field(default=120.0, gt=0, le=3600)
    retry_after_default_s: float = Field(default=15.0, ge=0, le=3600)


class FitnessConfig(_Strict):
    phases: list[str] = Field(default_factory=lambda: list(PHASE_ORDER))
    skip: list[str] = Field(default_factory=list)
    seed: int = 20260929
    repeats: int = Field(default=1, ge=1, le=2)
    thresholds: Path = DEFAULT_THRESHOLDS
    request_timeout_s: float = Field(default=900.0, gt=0)
    checkers_venv: Path | None = None  # default: ~/.cache/llms-benchmark/fitness-checkers
    throughput: ThroughputCfg = Field(default_factory=ThroughputCfg)
    capacity: CapacityCfg = Field(default_factory=CapacityCfg)
    tooluse: ToolUseCfg = Field(default_factory=ToolUseCfg)
    capability: CapabilityCfg = Field(default_factory=CapabilityCfg)
    judge: JudgeCfg = Field(default_factory=JudgeCfg)
    webhook: WebhookCfg = Field(default_factory=WebhookCfg)
    tag: str = "fitness"

    @field_validator("phases", "skip")
    @classmethod
    def _phase_names(cls, v: list[str]) -> list[str]:
        unknown = [p for p in v if p not in PHASE_ORDER]
        if unknown:
            raise ValueError(f"unknown phase {unknown[0]!r} (phases: {', '.join(PHASE_ORDER)})")
        return v

    def checkers(self) -> Path:
        from harness.fitness.checkers import default_dir

        return self.checkers_venv or default_dir()

    def enabled(self) -> list[str]:
        """The phases that run, in the pipeline's order."""
        return [p for p in PHASE_ORDER if p in self.phases and p not in self.skip]

    def public(self) -> dict[str, Any]:
        """The configuration as it goes into results.json (names of secrets only, never values)."""
        data = self.model_dump(mode="json")
        return data


def parse_phase_list(text: str, option: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PHASE_ORDER]
    if unknown or not names:
        raise UserError(f"unknown phase {unknown[0]!r}" if unknown else "no phase named", field=option,
                        fix=f"name phases from: {', '.join(PHASE_ORDER)} (comma-separated)")
    return names


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> FitnessConfig:
    """The file's settings (if any) with `overrides` (dotted keys: `throughput.contexts`) on top."""
    data: dict[str, Any] = {}
    if path is not None:
        raw = load_yaml(Path(path))
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise UserError("must be a mapping of settings", file=path, fix="see harness/fitness/fitness.example.yaml")
        data = raw
        # a relative thresholds / data path is relative to the config file
        base = Path(path).resolve().parent
        for key in ("thresholds", "checkers_venv"):
            if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
                data[key] = str(base / data[key])
        for section, key in (("capability", "data_dir"), ("judge", "tasks")):
            node = data.get(section)
            if isinstance(node, dict) and isinstance(node.get(key), str) and not Path(node[key]).is_absolute():
                node[key] = str(base / node[key])
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, leaf = dotted.split(".")
        node = data
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise UserError(f"'{key}' must be a mapping", file=path, field=key)
        node[leaf] = value
    try:
        return FitnessConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            message = "unknown setting"
        raise UserError(message, file=path or "(command line)", field=field,
                        fix="see harness/fitness/fitness.example.yaml for every setting") from None
