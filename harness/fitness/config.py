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

PHASE_ORDER = ("telemetry", "warmup", "tooluse", "throughput", "capacity", "capability", "kl", "judge")
# The seed's phase names, for a clearer error than "unknown" (they are not aliases: the phases differ).
SEED_NAMES = {"perf": "throughput", "lmeval": "capability", "coding": "capability",
              "coding_thinking": "capability", "cross-judge": "judge (judge.cross)"}
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
    # seed 003's lm-eval lane beside our own scorers: lm-eval[api] (the tools venv, `fitness tools`)
    # over the same frozen files, /v1/completions, greedy; the suites it has a task for (gsm8k)
    lmeval: bool = False
    # seed 003's opt-in thinking lane: HumanEval asked in thinking mode (chat with
    # chat_template_kwargs.enable_thinking, the vendor's sampling: temperature 1.0, top_p 0.95)
    # with its own budget; ~10x slower than the canonical (greedy, non-thinking) lane
    thinking: bool = False
    thinking_max_tokens: int = Field(default=8192, ge=256, le=32768)

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


class CrossJudgeCfg(JudgeEndpointCfg):
    # The seed's schedule: the first run (of this model, in the history log), then every n-th.
    every_n_runs: int = Field(default=1, ge=1, le=1000, description="1: every run")


class JudgeCfg(JudgeEndpointCfg):
    # cross-judge: a second judge, of another model family, re-grades the same checklists
    cross: CrossJudgeCfg = Field(default_factory=CrossJudgeCfg)
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


class RetryCfg(_Strict):
    """Requests to the served model (the seed's policy: Retry-After clamped 1-120 s, default 15, 8 attempts)."""
    attempts: int = Field(default=8, ge=1, le=20)
    retry_after_min_s: float = Field(default=1.0, ge=0, le=600)
    retry_after_max_s: float = Field(default=120.0, gt=0, le=3600)
    retry_after_default_s: float = Field(default=15.0, ge=0, le=3600)
    # 429 and the answers of a gateway that is swapping a model in; a 500 is the server's
    # answer about this very request ("tool parser not loaded") and is not asked again.
    statuses: list[int] = Field(default_factory=lambda: [408, 429, 502, 503, 504])
    connect_errors: bool = True  # a refused or dropped connection (a server restarting) is retried too
    budget_s: float = Field(default=600.0, ge=0, le=7200, description="most seconds of waiting per request")

    @field_validator("statuses")
    @classmethod
    def _statuses(cls, v: list[int]) -> list[int]:
        if any(s < 400 or s > 599 for s in v):
            raise ValueError("retry statuses are HTTP error codes, 400 to 599")
        return v


class KlEndpointCfg(_Strict):
    url: str | None = None  # the reference server's base URL (the same gateway with another model works)
    model: str | None = None
    key_env: str | None = None  # the NAME of the variable holding its key (none: no key)


class KlCfg(_Strict):
    """The quant check: the served model against a reference of the same tokenizer."""
    reference: KlEndpointCfg = Field(default_factory=KlEndpointCfg)
    prompts: Path | None = None  # default: the shipped harness/fitness/kl_prompts.jsonl
    limit: int = Field(default=0, ge=0, description="prompts, the first N (0: all)")
    positions: int = Field(default=64, ge=1, le=4096, description="teacher-forced positions per prompt, at most")
    skip_first: int = Field(default=4, ge=0, le=1024, description="positions with too little context, not compared")
    top_k: int = Field(default=20, ge=2, le=100)
    api: str = Field(default="auto", pattern="^(auto|llamacpp|vllm)$")

    def configured(self) -> bool:
        return bool(self.reference.url)


class HistoryCfg(_Strict):
    log: Path | None = None  # default: <project>/bench-results/fitness/pipeline.log
    regression_se: float = Field(default=2.0, gt=0, le=10, description="a drop beyond this many SE is flagged")
    drift: float = Field(default=0.10, gt=0, le=1, description="metrics without an SE: a relative change flagged")


class FitnessConfig(_Strict):
    phases: list[str] = Field(default_factory=lambda: list(PHASE_ORDER))
    skip: list[str] = Field(default_factory=list)
    seed: int = 20260929
    repeats: int = Field(default=1, ge=1, le=2)
    thresholds: Path = DEFAULT_THRESHOLDS
    request_timeout_s: float = Field(default=900.0, gt=0)
    checkers_venv: Path | None = None  # default: ~/.cache/llms-benchmark/fitness-checkers
    tools_venv: Path | None = None  # lm-eval's venv; default: ~/.cache/llms-benchmark/fitness-tools
    throughput: ThroughputCfg = Field(default_factory=ThroughputCfg)
    capacity: CapacityCfg = Field(default_factory=CapacityCfg)
    tooluse: ToolUseCfg = Field(default_factory=ToolUseCfg)
    capability: CapabilityCfg = Field(default_factory=CapabilityCfg)
    judge: JudgeCfg = Field(default_factory=JudgeCfg)
    webhook: WebhookCfg = Field(default_factory=WebhookCfg)
    retry: RetryCfg = Field(default_factory=RetryCfg)
    kl: KlCfg = Field(default_factory=KlCfg)
    history: HistoryCfg = Field(default_factory=HistoryCfg)
    # the seed's guard: a phase where more than this share of completions came back empty fails
    empty_max_share: float = Field(default=0.25, ge=0, le=1)
    tag: str = "fitness"

    @field_validator("phases", "skip")
    @classmethod
    def _phase_names(cls, v: list[str]) -> list[str]:
        unknown = [p for p in v if p not in PHASE_ORDER]
        if unknown:
            raise ValueError(unknown_phase(unknown[0]))
        return v

    def checkers(self) -> Path:
        from harness.fitness.checkers import default_dir

        return self.checkers_venv or default_dir()

    def tools(self) -> Path:
        from harness.fitness.lmeval import default_dir

        return self.tools_venv or default_dir()

    def enabled(self) -> list[str]:
        """The phases that run, in the pipeline's order."""
        return [p for p in PHASE_ORDER if p in self.phases and p not in self.skip]

    def public(self) -> dict[str, Any]:
        """The configuration as it goes into results.json (names of secrets only, never values)."""
        data = self.model_dump(mode="json")
        return data


def unknown_phase(name: str) -> str:
    seed = f"; the seed's {name!r} is {SEED_NAMES[name]} here" if name in SEED_NAMES else ""
    return f"unknown phase {name!r} (phases: {', '.join(PHASE_ORDER)}{seed})"


def parse_phase_list(names: list[str], option: str) -> list[str]:
    """The --phases / --skip items (harness.cli.common.comma_list split them), checked."""
    unknown = [p for p in names if p not in PHASE_ORDER]
    if unknown or not names:
        raise UserError(unknown_phase(unknown[0]) if unknown else "no phase named", field=option,
                        fix=f"name phases from: {', '.join(PHASE_ORDER)} (comma-separated)")
    return names


def refuse_nothing_to_measure(cfg: FitnessConfig) -> None:
    """`--phases warmup --skip warmup`, or only phases whose endpoint is not configured (kl,
    judge): the run would measure nothing and read as PASS. Refused (a UserError: exit 3)."""
    enabled = cfg.enabled()
    fix = f"name at least one phase that runs here (phases: {', '.join(PHASE_ORDER)})"
    if not enabled:
        raise UserError("--phases and --skip leave no phase to run: the run would measure nothing",
                        field="--phases", fix=fix + ", and leave it out of --skip")
    unconfigured = {"kl": (cfg.kl.configured(), "kl.reference.url"),
                    "judge": (cfg.judge.configured(), "judge.url, judge.model and judge.key_env")}
    missing = [(p, unconfigured[p][1]) for p in enabled if p in unconfigured and not unconfigured[p][0]]
    if len(missing) == len(enabled):
        needs = "; ".join(f"{p} needs {what}" for p, what in missing)
        raise UserError(f"every phase named is one this configuration cannot run ({needs}): the run would "
                        "measure nothing", field="--phases", fix=f"set those in --config, or {fix}")


def _require_config_file(path: Path) -> None:
    """--config names a file that is there: said with the option and the way out."""
    try:
        found, folder = path.is_file(), path.is_dir()
    except OSError:  # a name the OS refuses (too long, ...)
        found = folder = False
    if not found:
        raise UserError("is a folder, not a fitness YAML" if folder else "no fitness config at this path",
                        file=path, field="--config",
                        fix="give the path of a fitness YAML (harness/fitness/fitness.example.yaml shows every "
                            "setting), or leave --config out to run with the defaults")


def load_config(path: Path | None, overrides: dict[str, Any] | None = None) -> FitnessConfig:
    """The file's settings (if any) with `overrides` (dotted keys: `throughput.contexts`) on top."""
    data: dict[str, Any] = {}
    if path is not None:
        _require_config_file(Path(path))
        raw = load_yaml(Path(path))
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise UserError("must be a mapping of settings", file=path, fix="see harness/fitness/fitness.example.yaml")
        data = raw
        # a relative thresholds / data path is relative to the config file
        base = Path(path).resolve().parent
        for key in ("thresholds", "checkers_venv", "tools_venv"):
            if isinstance(data.get(key), str) and not Path(data[key]).is_absolute():
                data[key] = str(base / data[key])
        for section, key in (("capability", "data_dir"), ("judge", "tasks"), ("kl", "prompts"), ("history", "log")):
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
                raise UserError(f"'{key}' must be a mapping", file=path or "(command line)", field=key,
                                fix="see harness/fitness/fitness.example.yaml for every setting")
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
