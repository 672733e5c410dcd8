"""`launch … --capacity`: how many concurrent agents the serve sustains, measured on the unit
the mission ran on, after its trials and before the destroy — one serve gives the quality
row and the capacity.

The trace replayed is the run's own (the first trial's wire log, its session tree from
opencode's store where the folder keeps it: harness/load/agents/trace.py), or a trace file
given with `--capacity-trace`. The sweep is `load-agents`' (harness/load/agents/sweep.py:
ascending levels of N copies, stop at the first failing one, bisect; each copy's prompts
sized on the server's own tokenizer where it offers one, exact.py; each session's first-turn
cached prefix warmed, and each appending turn carrying the copy's previous answer, as the
agent's did: replay.py's warm_prefixes and feed_answers, so a copy reads from the cache what
the agent read). What it found goes on
every trial's record (`capacity`: the serve's, as GPU-hours are) and every turn of every
level into the first trial's `capacity/` folder (trace.jsonl, agents.json).

The capacity is a figure beside the row, never part of it: a sweep that cannot run (no wire
log, a fault in the sweep) records why in `capacity.error` and leaves the status alone; an
interrupt still ends the launch.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from harness.errors import UserError
from harness.records.capacity import CapacityFigures, CapacityLevel
from harness.load.agents.slo import PRODUCT_MEASURE, PRODUCT_SLO, Measure, check_measure
from harness.load.agents.trace import AgentTrace
from harness.records.record import RunRecord, utcnow
from harness.stages.context import LaunchContext

FOLDER = "capacity"  # in the first trial's run folder
MAX_COPIES = 256


@dataclass(frozen=True)
class CapacityOptions:
    copies: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    ttft_p99_s: float = PRODUCT_SLO.ttft_p99_s
    turn_p99_s: float = PRODUCT_SLO.turn_p99_s
    stagger_s: float = 1.0
    limit_s: float = 900.0  # one level's wall clock (one repeat)
    trace: Path | None = None  # None: the run's own wire log
    measure: Measure = PRODUCT_MEASURE

    def describe(self) -> str:
        return (f"copies {','.join(map(str, self.copies))}, TTFT p99 <= {self.ttft_p99_s:g} s, turn p99 <= "
                f"{self.turn_p99_s:g} s, {self.measure.describe()}, "
                f"trace {self.trace.name if self.trace else 'the run’s own wire log'}")


def parse_copies(text: str) -> list[int]:
    try:
        levels = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UserError(f"--capacity-copies {text!r} is not a list of integers", field="--capacity-copies",
                        fix="e.g. 1,2,4,8") from None
    if not levels or levels[0] < 1 or levels[-1] > MAX_COPIES:
        raise UserError(f"--capacity-copies {text!r}: each level must be 1..{MAX_COPIES}", field="--capacity-copies",
                        fix="e.g. 1,2,4,8")
    return levels


def check_options(opts: CapacityOptions) -> None:
    """Refused before anything is served: a bad number, or a trace file that does not read."""
    for name, value in {"--capacity-ttft-p99": opts.ttft_p99_s, "--capacity-turn-p99": opts.turn_p99_s,
                        "--capacity-limit": opts.limit_s}.items():
        if not value > 0:
            raise UserError(f"{name} must be positive (got {value})", field=name, fix=f"give {name} above 0")
    if opts.stagger_s < 0:
        raise UserError("--capacity-stagger cannot be negative", field="--capacity-stagger",
                        fix="give 0 or more seconds")
    m = opts.measure
    check_measure(m.duration_s, m.warmup_s, m.repeats, opts.limit_s, prefix="--capacity-")
    if opts.trace is not None:
        from harness.load.agents.trace import load

        load(opts.trace)


def _trace(opts: CapacityOptions, trials: list[tuple[RunRecord, LaunchContext]]) -> tuple[AgentTrace, str]:
    from harness.load.agents.trace import from_run, load

    if opts.trace is not None:
        # named by its file and the run it came from, never by where it lies here: the record is committed
        # (the trace itself is copied into the run folder, capacity/trace.jsonl)
        trace = load(opts.trace)
        return trace, opts.trace.name + (f" (from {trace.source})" if trace.source else "")
    for rec, ctx in trials:
        if (ctx.paths.dir / "wire.jsonl").is_file():
            trace = from_run(ctx.paths.dir)
            return trace, f"run {rec.run_id}'s own wire log"
    raise UserError("no trial kept a wire log to replay", field="--capacity",
                    fix="run with the sandbox (its bridge writes wire.jsonl), or give --capacity-trace FILE")


def _last_parts(source: str) -> str:
    return ",".join(p.rstrip("/").rsplit("/", 1)[-1] for p in source.split(",")) if source else ""


def _probe_again(ctx: LaunchContext) -> dict | None:
    """The launch's speed probe once more, on the same serve just before the sweep, at the same long
    context (harness/stages/serving.py's target): how fast the box is now, beside how fast it was
    when the mission ran. A probe that fails says why and the sweep goes on (it finds a dead server)."""
    from harness.probe import LONG_TARGET, run_probe

    cap = getattr(ctx.pf.stack, "probe_long_cap", None) if ctx.pf is not None else None
    long_target = ctx.opts.probe_long_tokens or cap or LONG_TARGET
    try:
        probe = run_probe(ctx.unit.base_url, ctx.unit.served_name, max_model_len=ctx.unit.max_model_len,
                          api_key=ctx.api_key, long_target=long_target)
    except (httpx.HTTPError, OSError) as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return probe.model_dump(mode="json")


def _unit_alive(ctx: LaunchContext) -> Callable[[], bool] | None:
    """The stack's own word on whether the unit still runs (a crash, an exit), where the launch has one."""
    if ctx.pf is None:
        return None
    stack, unit = ctx.pf.stack, ctx.unit
    return lambda: stack.alive(unit)


def run_capacity(opts: CapacityOptions, trials: list[tuple[RunRecord, LaunchContext]]) -> CapacityFigures:
    """The sweep on the unit the trials ran on; its figures on every trial's record (and saved)."""
    from harness.load.agents.run import run_agents
    from harness.load.agents.slo import Slo
    from harness.load.agents.trace import dump

    first, ctx = trials[0]
    folder = ctx.paths.dir / FOLDER
    figures = CapacityFigures(started=utcnow(), host_load=[round(os.getloadavg()[0], 2)])
    ctx.say(f"capacity: the agents sweep on {ctx.unit.name} ({opts.describe()})")
    try:
        figures.probe = _probe_again(ctx)
        trace, named = _trace(opts, trials)
        folder.mkdir(parents=True, exist_ok=True)
        # committed with the record: named by the run or file it came from, never where it lay here
        dump(trace.model_copy(update={"source": _last_parts(trace.source)}), folder / "trace.jsonl")
        slo = Slo(ttft_p99_s=opts.ttft_p99_s, turn_p99_s=opts.turn_p99_s)
        figures.trace, figures.sessions, figures.own_trace = named, len(trace.sessions), opts.trace is None
        figures.ttft_p99_s, figures.turn_p99_s = opts.ttft_p99_s, opts.turn_p99_s
        figures.turns_per_copy = sum(len(s.turns) for s in trace.sessions)
        outcome, path = run_agents(
            trace, base_url=ctx.unit.base_url, model=ctx.unit.served_name, levels=opts.copies, slo=slo,
            stagger_s=opts.stagger_s, limit_s=opts.limit_s, out_root=folder, folder=folder, api_key=ctx.api_key,
            exact_tokens=True, warm_prefixes=True, feed_answers=True, measure=opts.measure,
            unit_alive=_unit_alive(ctx),
            on_level=lambda lv: ctx.say(f"capacity: {lv.copies} agents {lv.verdict.upper()} ({lv.why})"))
        figures.sustained, figures.limit_found, figures.slo, figures.rule = (
            outcome.figure, outcome.limit_found, outcome.slo, outcome.rule)
        figures.ended_by, figures.slo_def, figures.measure = outcome.ended_by, outcome.slo_def, outcome.measure
        if outcome.figure is None:
            figures.error = f"the sweep ended before any level passed: {outcome.ended_by}"
        keep = set(CapacityLevel.model_fields)
        figures.levels = [CapacityLevel(**{k: v for k, v in asdict(lv).items() if k in keep})
                          for lv in outcome.levels]
        figures.results = str(path.relative_to(ctx.paths.dir))
        import json

        figures.exact_tokens = (json.loads(path.read_text()).get("exact_tokens_by_level") or {}).get(
            str(min(opts.copies)))
    except KeyboardInterrupt:  # Ctrl-C, and SIGINT/SIGTERM as harness.errors.Interrupted
        raise
    except UserError as exc:
        figures.error = exc.render()
    except Exception as exc:  # noqa: BLE001 - the quality row stands; the fault is kept beside it
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "fault.txt").write_text(traceback.format_exc())
        figures.error = f"{type(exc).__name__}: {exc} (traceback in {FOLDER}/fault.txt)"
    figures.ended = utcnow()
    figures.host_load.append(round(os.getloadavg()[0], 2))
    ctx.say(f"capacity: {figures.headline()}")
    for rec, trial_ctx in trials:
        rec.capacity = figures
        rec.save(trial_ctx.paths.dir)
    return figures
