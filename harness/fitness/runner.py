"""One fitness run: check the config offline, serve `ENV PRESET` once (destroyed in a
finally, exactly as `load` does) or take a base URL, run the enabled phases in order,
repeat the timing phases in reverse order with `--repeats 2`, turn metrics into verdicts,
and write the report folder; then the webhook, whose failure is only a warning.

Exit code: 0 all PASS, 1 WARN only, 2 any FAIL, 3 pipeline error (bad config, the unit
did not serve, a phase failed to measure, the run was cancelled).
"""

from __future__ import annotations

import os
import platform
import secrets
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from harness.errors import StackError, UserError
from harness.fitness import data
from harness.fitness.config import REPEATABLE, FitnessConfig
from harness.fitness.endpoint import Endpoint, discover, engine_of
from harness.fitness.phases import Ctx, PhaseResult, check_offline, run_phase
from harness.fitness.thresholds import exit_code, load_thresholds, overall, verdicts

Say = Callable[[str], None]
DISAGREE = 0.10  # --repeats 2: a metric whose passes differ by more than this is flagged


@dataclass
class Target:
    kind: str  # url | unit
    base_url: str | None = None
    environment: str | None = None
    preset: str | None = None
    model: str | None = None
    api_key_env: str | None = None  # the NAME of the variable, never the key

    def label(self) -> str:
        return self.base_url if self.kind == "url" else f"{self.preset} on {self.environment}"


@dataclass
class Outcome:
    exit_code: int
    results: dict[str, Any]
    report_dir: Path | None = None
    warnings: list[str] = field(default_factory=list)


def resolve_target(args: list[str], base_url: str | None, model: str | None, api_key_env: str | None) -> Target:
    from harness.load.load import resolve_target as load_resolve

    where = load_resolve(args, base_url)
    if where[0] == "url":
        return Target("url", base_url=where[1], model=model, api_key_env=api_key_env)
    return Target("unit", environment=where[1], preset=where[2], model=model, api_key_env=api_key_env)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def dry_run(cfg: FitnessConfig) -> dict[str, Any]:
    """Config, thresholds and data files, offline; raises UserError on the first problem."""
    thresholds = load_thresholds(cfg.thresholds)
    notes = check_offline(cfg)
    return {"ok": True, "phases": cfg.enabled(), "thresholds": str(thresholds.path),
            "bars": sorted(thresholds.bars), "checks": notes}


def run_fitness(root: Path, target: Target, cfg: FitnessConfig, *, say: Say, report_dir: Path | None = None,
                baseline: Path | None = None, run_id: str | None = None) -> Outcome:
    """The whole pipeline. Config problems raise UserError before anything is served."""
    thresholds = load_thresholds(cfg.thresholds)
    offline = check_offline(cfg)
    base = _load_baseline(baseline)
    run_id = run_id or new_run_id()
    folder = Path(report_dir) if report_dir else root / "bench-results" / "fitness" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    started = now()
    results: list[PhaseResult] = []
    errors: list[str] = []
    repro: dict[str, Any] = {}
    t0 = time.monotonic()

    def measure(endpoint: Endpoint) -> None:
        repro.update(_endpoint_facts(endpoint))
        ctx = Ctx(endpoint, cfg, folder, say)
        for name in cfg.enabled():
            say(f"phase {name}")
            results.append(run_phase(name, ctx))
            say(f"phase {name}: {results[-1].status} in {results[-1].wall_s:.1f}s"
                + (f" ({results[-1].reason})" if results[-1].reason else ""))
        if cfg.repeats == 2:
            again = [p for p in reversed(cfg.enabled()) if p in REPEATABLE]
            ctx2 = Ctx(endpoint, cfg, folder, say, reverse=True)
            for name in again:
                say(f"phase {name}, second pass (reverse order)")
                results.append(run_phase(name, ctx2, repeat=2))

    from harness.launch import Interrupted

    try:
        if target.kind == "url":
            from harness.probe import api_key_from_env

            endpoint = discover(target.base_url, target.model, api_key_from_env(target.api_key_env),
                                cfg.request_timeout_s)
            measure(endpoint)
        else:
            from harness.load.serve import preflight, served

            pf = preflight(root, target.environment, target.preset, say)
            repro.update({"preset": pf.preset.name, "preset_sha256": pf.preset.sha256, "environment": pf.env.name,
                          "stack": pf.env.stack, "gpu": pf.gpu.label, "model_id": pf.preset.model})
            with served(root, pf, say, lambda: folder) as (unit, api_key):
                endpoint = discover(unit.base_url, target.model or unit.served_name, api_key, cfg.request_timeout_s,
                                    max_model_len=unit.max_model_len, scripted=unit.scripted)
                repro["unit"] = unit.name
                try:
                    measure(endpoint)
                except (KeyboardInterrupt, Interrupted) as exc:
                    errors.append(f"cancelled ({exc or 'interrupted'}); the unit is destroyed")
    except (KeyboardInterrupt, Interrupted) as exc:
        errors.append(f"cancelled ({exc or 'interrupted'})")
    except UserError as exc:
        if not results and target.kind == "url":
            raise  # nothing measured: the CLI prints it as one clear error
        errors.append(exc.render())
    except StackError as exc:
        errors.append(f"the unit failed to serve: {exc}")

    errors += [f"phase {r.name} failed: {r.reason}" for r in results if r.status == "error"]
    metrics, passes, disagreements = merge(results)
    rows = verdicts(thresholds, metrics, cfg.enabled())
    code = exit_code(rows, pipeline_error=bool(errors))
    doc = {
        "run_id": run_id, "tag": cfg.tag, "started_utc": started, "finished_utc": now(),
        "wall_s": round(time.monotonic() - t0, 3), "target": target.label(), "model": repro.get("model"),
        "exit_code": code, "verdict": overall(code), "errors": errors,
        "warnings": [w for r in results for w in (r.details.get("warnings") or [])],
        "reproducibility": {**repro, "harness": _version(), "python": sys.version.split()[0],
                            "platform": platform.platform(), "seed": cfg.seed, "repeats": cfg.repeats,
                            "thresholds": {"path": str(thresholds.path), "sha256": thresholds.sha256},
                            "data_manifest": _manifest(cfg, results),
                            "checkers": _checkers(cfg),
                            "config": cfg.public(), "offline_checks": offline},
        "phases": [_phase_doc(r) for r in results],
        "metrics": metrics, "verdicts": rows,
        "repeats": {"passes": passes, "disagreements": disagreements, "threshold": DISAGREE},
        "baseline": _compare(base, results),
        "percentiles": "numpy linear interpolation (Hyndman-Fan type 7); never means",
    }
    from harness.fitness.report import write_report

    write_report(folder, doc)
    outcome = Outcome(code, doc, folder, warnings=list(doc["warnings"]))
    if cfg.webhook.url_env:
        from harness.fitness.webhook import send

        warning = send(cfg.webhook, doc, say, report_dir=folder)
        if warning:
            outcome.warnings.append(warning)
    return outcome


def merge(results: list[PhaseResult]) -> tuple[dict[str, float | None], dict[str, list], list[dict[str, Any]]]:
    """The metrics of all phases; a metric measured twice (--repeats 2) keeps the worse pass
    (never an average) and is flagged when the passes differ by more than 10 %."""
    from harness.fitness.metrics import lookup

    seen: dict[str, list[float | None]] = {}
    for r in results:
        for key, value in r.metrics.items():
            seen.setdefault(key, []).append(value)
    metrics, passes, flagged = {}, {}, []
    for key, values in seen.items():
        present = [v for v in values if v is not None]
        if len(values) == 1 or not present:
            metrics[key] = values[0] if len(values) == 1 else None
            continue
        passes[key] = values
        m = lookup(key)
        metrics[key] = (min(present) if m and m.better == "higher" else max(present)) if present else None
        if len(present) == 2:
            a, b = present
            scale = max(abs(a), abs(b))
            if scale and abs(a - b) / scale > DISAGREE:
                flagged.append({"metric": key, "passes": values, "difference": round(abs(a - b) / scale, 4)})
    return metrics, passes, flagged


def _manifest(cfg: FitnessConfig, results: list[PhaseResult]) -> dict[str, Any]:
    """Source and sha256 of every frozen file the run read (capability suites, BFCL, judge tasks)."""
    doc: dict[str, Any] = {}
    if "capability" in cfg.enabled():
        doc.update(data.manifest(cfg.capability.data_dir or data.default_dir(), cfg.capability.suites))
    for r in results:
        if r.name == "tooluse" and r.repeat == 1 and (r.details.get("bfcl") or {}).get("manifest"):
            doc["bfcl"] = r.details["bfcl"]["manifest"]
        if r.name == "judge" and r.repeat == 1 and r.details.get("manifest"):
            doc["judge"] = r.details["manifest"]
    return doc


def _checkers(cfg: FitnessConfig) -> dict[str, Any] | None:
    """The checkers' venv (BFCL, IFBench) when the run uses it: where, and the versions in it."""
    if not ((cfg.tooluse.bfcl and "tooluse" in cfg.enabled())
            or ("ifbench" in cfg.capability.suites and "capability" in cfg.enabled())):
        return None
    from harness.fitness import checkers

    return {"venv": str(cfg.checkers()), **checkers.versions(cfg.checkers())}


def _phase_doc(r: PhaseResult) -> dict[str, Any]:
    return {"name": r.name, "repeat": r.repeat, "status": r.status, "reason": r.reason, "wall_s": r.wall_s,
            "metrics": r.metrics, "details": r.details}


def _endpoint_facts(ep: Endpoint) -> dict[str, Any]:
    engine = engine_of(ep.identity)
    return {"endpoint": ep.base_url, "model": ep.model, "served_context": ep.max_model_len,
            "engine": engine["engine"], "engine_version": engine["version"], "scripted": ep.scripted,
            "models": [m.get("id") for m in (ep.identity.get("models") or {}).get("data", [])]}


def _load_baseline(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    import json

    try:
        return json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise UserError("baseline file not found", file=path, field="--baseline",
                        fix="give a results.json of an earlier fitness run") from None
    except ValueError:
        raise UserError("not a results.json (not JSON)", file=path, field="--baseline") from None


def _compare(base: dict[str, Any] | None, results: list[PhaseResult]) -> dict[str, Any]:
    """Capability deltas against a baseline run; |delta| < 2·SE is marked as noise."""
    if not base:
        return {}
    from harness.fitness.stats import delta

    def suites(phases: list[dict[str, Any]]) -> dict[str, Any]:
        for p in phases:
            if p.get("name") == "capability" and p.get("status") == "ran":
                return {k: v for k, v in p["details"]["suites"].items() if v.get("status") == "ran"}
        return {}

    now_s = suites([_phase_doc(r) for r in results])
    then = suites(base.get("phases", []))
    return {"run_id": base.get("run_id"), "deltas": {s: delta(now_s[s], then[s]) for s in now_s if s in then}}


def _version() -> str:
    try:
        return version("llms-benchmark")
    except PackageNotFoundError:
        return "unknown"


def env_set(name: str | None) -> bool:
    return bool(name and os.environ.get(name))
