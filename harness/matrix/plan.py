"""A matrix plan: environment × presets × efforts, one mission, K trials per cell.

Written as `.vot/matrices/<name>.yaml` (tracked, beside the presets it names) or given as
flags; `--parallel` and `--budget-usd` on the command line override the plan's. Every name
is checked as `launch` checks it, and every file it names is read, before anything runs:
a mistake is one message naming the file, the field and the fix (exit 2).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import UserError
from harness.mission import DEFAULT_MISSION

MATRICES_DIR = Path(".vot") / "matrices"
MAX_CELLS = 64  # presets × efforts: each cell is a served unit
MAX_PARALLEL = 16


class RetryPolicy(BaseModel):
    """How a cell Azure refused for quota or capacity waits before it is tried again."""

    model_config = ConfigDict(extra="forbid")

    backoff_s: float = Field(60.0, gt=0, le=3600, description="the first wait; doubled after each refusal")
    backoff_max_s: float = Field(900.0, gt=0, le=6 * 3600, description="the longest wait")
    max_attempts: int = Field(8, ge=1, le=50, description="launches of one cell before it is given up")
    # A launch that ended in a transient fault (ARM 5xx or throttling past the SDK's own retries,
    # a revision that never became ready, a lost connection) is launched again after the same
    # backoff, at most this many launches in all; any other fault is final at once.
    transient_attempts: int = Field(3, ge=1, le=20, description="launches of one cell ending in transient faults")


class ServeCosts(BaseModel):
    """What a serve bills besides its trials, in seconds, when the preset has no earlier record
    on the environment to read it from (a cell's budget bound; `bound.py`). The defaults are an
    A100 Container App's: image pull and weights, the speed probe, the smoke, setup between
    trials, collect and the destroy."""

    model_config = ConfigDict(extra="forbid")

    cold_start_s: float = Field(900.0, ge=0, le=4 * 3600, description="serve until it lists its model")
    probe_s: float = Field(300.0, ge=0, le=3600, description="the speed probe")
    smoke_s: float = Field(300.0, ge=0, le=3600, description="the smoke test")
    destroy_s: float = Field(300.0, ge=0, le=3600, description="setup and collect around the trials, and the destroy")


class MatrixPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")
    environment: str = Field(min_length=1)
    presets: list[str] = Field(min_length=1, max_length=MAX_CELLS)
    efforts: list[str] = Field(default_factory=lambda: ["medium"], min_length=1, max_length=8)
    mission: str = DEFAULT_MISSION
    trials: int = Field(1, ge=1, le=20)
    parallel: int = Field(1, ge=1, le=MAX_PARALLEL)
    budget_usd: float | None = Field(None, gt=0, allow_inf_nan=False)  # `inf` is no budget: refused (issue 61)
    probe_long_tokens: int = Field(0, ge=0)
    no_sandbox: bool = False
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    serve_costs: ServeCosts = Field(default_factory=ServeCosts)

    def cells(self) -> list[tuple[str, str]]:
        """(preset, effort) in plan order: presets first, so one preset's efforts are adjacent."""
        return [(p, e) for p in self.presets for e in self.efforts]

    def identity(self) -> str:
        """What a resume must agree with: everything but the knobs a re-run may turn
        (parallel, budget, retry, serve_costs)."""
        core = self.model_dump(include={"environment", "presets", "efforts", "mission", "trials",
                                        "probe_long_tokens", "no_sandbox"})
        return hashlib.sha256(json.dumps(core, sort_keys=True).encode()).hexdigest()[:16]


def plan_path(root: Path, name: str) -> Path:
    return root / MATRICES_DIR / f"{name}.yaml"


def _error(exc: ValidationError, path: Path | None) -> UserError:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    fixes = {
        "name": "a lower-case name of letters, digits and '-' (the state folder is named after it)",
        "presets": "a list of .vot/presets/<name>.yaml names, at least one",
        "efforts": "a list of efforts (low, medium, high, max, default)",
        "trials": "a whole number from 1 to 20",
        "parallel": f"a whole number from 1 to {MAX_PARALLEL}",
        "budget_usd": "a positive, finite number of US dollars, or leave it out for no budget",
        "serve_costs": "seconds: cold_start_s, probe_s, smoke_s, destroy_s (each 0 or more)",
        "retry": "backoff_s, backoff_max_s, max_attempts, transient_attempts",
    }
    fix = fixes.get(str(first["loc"][0]) if first["loc"] else "", "see docs: the matrix plan's fields in README")
    if first["type"] == "extra_forbidden":
        fix = (f"remove it; a plan takes: {', '.join(MatrixPlan.model_fields)}")
    return UserError(first["msg"], file=path, field=where, fix=fix)


def load_plan(root: Path, name: str) -> MatrixPlan:
    """`.vot/matrices/<name>.yaml`, its `name` field defaulting to the file's."""
    from harness.run.inputs import NAME

    if not NAME.fullmatch(name):
        raise UserError(f"{name[:120]!r} is not a plan name (never a path)", field="PLAN",
                        fix=f"name a file of {MATRICES_DIR}/ without .yaml: {', '.join(available(root)) or '(none yet)'}")
    path = plan_path(root, name)
    if not path.is_file():
        raise UserError(f"no matrix plan named {name!r}", file=path, field="PLAN",
                        fix=f"write {MATRICES_DIR}/{name}.yaml (environment, presets, efforts, mission, trials), "
                            f"or use one of: {', '.join(available(root)) or '(none yet)'}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        raise UserError(f"not valid YAML: {str(exc).splitlines()[0]}", file=path,
                        line=mark.line + 1 if mark else None, fix="fix the YAML syntax") from None
    if not isinstance(data, dict):
        raise UserError("a plan is a mapping", file=path, fix="write `environment:`, `presets:` ... as top-level keys")
    data.setdefault("name", name)
    if data["name"] != name:
        raise UserError(f"the plan says name {data['name']!r} but its file is {name}.yaml", file=path, field="name",
                        fix=f"set name: {name} (or drop the field)")
    return validate_plan(data, path)


def validate_plan(data: dict, path: Path | None = None) -> MatrixPlan:
    try:
        return MatrixPlan.model_validate(data)
    except ValidationError as exc:
        raise _error(exc, path) from None


def available(root: Path) -> list[str]:
    folder = root / MATRICES_DIR
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def check_plan(root: Path, plan: MatrixPlan, path: Path | None) -> None:
    """Every cell's arguments as `launch` checks them, and the files they name readable."""
    from harness.run.inputs import ACCEPTED_EFFORTS, check_launch_inputs
    from harness.mission import load_mission
    from harness.vot.environment import load_environment
    from harness.vot.preset import load_preset

    for field, values in (("presets", plan.presets), ("efforts", plan.efforts)):
        dupes = sorted({v for v in values if values.count(v) > 1})
        if dupes:
            raise UserError(f"{', '.join(dupes)} listed twice", file=path, field=field, fix="list each once")
    for effort in plan.efforts:
        if effort not in ACCEPTED_EFFORTS:
            raise UserError(f"effort {effort[:60]!r} is not one opencode accepts", file=path, field="efforts",
                            fix=f"use some of: {', '.join(ACCEPTED_EFFORTS)}")
    for preset in plan.presets:
        try:
            check_launch_inputs(root, plan.environment, preset, plan.efforts[0], plan.mission)
        except UserError as exc:
            raise UserError(exc.message, file=path or exc.file,
                            field={"ENVIRONMENT": "environment", "PRESET": "presets",
                                   "--mission": "mission"}.get(exc.field or "", exc.field), fix=exc.fix) from None
    def named(field: str, load):
        """A file the plan names that is missing: said with the plan's file and field."""
        try:
            return load()
        except UserError as exc:
            if exc.field is not None or path is None:
                raise
            raise UserError(f"{exc.message} ({exc.file})", file=path, field=field, fix=exc.fix) from None

    env = named("environment", lambda: load_environment(root, plan.environment))
    for preset in plan.presets:
        named("presets", lambda: load_preset(root, preset).resolve(env.stack))  # noqa: B023 - called at once
    named("mission", lambda: load_mission(root, plan.mission))
    if plan.budget_usd is not None and not env.gpu_hourly_usd:
        raise UserError(f"a budget needs a GPU price, and environment {env.name} has none", file=env.path,
                        field="gpu_hourly_usd",
                        fix="set gpu_hourly_usd in the environment file (your bill's rate), or drop --budget-usd")
