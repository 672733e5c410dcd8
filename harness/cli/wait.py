"""`llms-benchmark wait <run> [--timeout S]`: wait for a launch to end; exit as the launch did.

For a launch started with `launch local … --detach` (the slash command's way): the run's
record is read until its launch process is gone, then the run's own exit code is returned
(0 a row, 1 void, 2 refused, 3 fault; K trials: the worst, as `launch` exits). Still running
after S seconds: exit 124 and the run goes on (call `wait` again). A launch run in another
terminal (no background process on file) is done when its record says it ended.

What it prints is what the slash command asks the agent to report, per run: its status and
reason, the probe's speeds, the turns and tokens, where its report is, and what it ends in (`next`:
a row once ruled, a non-conclusive entry, a check that makes no row, or "scripted trajectory: no
row"). Still running, it says whether the mission's report is persisted yet (what `stop` needs).
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Annotated

import psutil
import typer
from rich.markup import escape

from harness.cli.common import JsonOpt, err, out, project_root, user_errors
from harness.errors import UserError
from harness.records.paths import RUN_RECORD, ProjectPaths
from harness.records.record import COLLECT_PENDING, RunRecord, Status

STILL_RUNNING = 124  # as coreutils' timeout: the wait ran out, the run did not
POLL_S = 1.0


REPORT_SETTLED_S = 600  # the slash command's cue for `stop`: the report unchanged this long


class LaunchDied(UserError):
    """The background launch is gone and its record never ended: a harness fault (exit 3)."""

    exit_code = 3


def locate(root: Path, run: str) -> Path:
    """The run's folder: under .llms-benchmark/runs/ or, refused at preflight, .llms-benchmark/refused/."""
    paths = ProjectPaths(root)
    if run in ("", ".", "..") or "/" in run or "\\" in run or len(run) > 200:
        raise UserError(f"{run[:120]!r} is not a run id", file=paths.runs, field="RUN",
                        fix="pass the run id `launch` printed (a folder name under .llms-benchmark/runs/)")
    for folder in (paths.runs, paths.refused):
        if (folder / run).is_dir():
            return folder / run
    launcher = paths.launches / f"{run}.json"
    if launcher.is_file():  # announced, its folder not made yet
        return paths.run(run).dir
    known = sorted(p.name for p in paths.runs.iterdir() if p.is_dir())[-3:] if paths.runs.is_dir() else []
    raise UserError(f"no run '{run}'", file=paths.runs / run, field="RUN",
                    fix="pass the run id `launch` printed" + (f" (latest: {', '.join(known)})" if known else ""))


def _launcher_alive(root: Path, run: str) -> bool | None:
    """Whether the background launch of `run` still runs; None: it was not started with --detach."""
    path = ProjectPaths(root).launches / f"{run}.json"
    try:
        facts = json.loads(path.read_text())
        pid, created = int(facts["pid"]), facts.get("created")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        proc = psutil.Process(pid)
        if created is not None and abs(proc.create_time() - float(created)) > 1:
            return False  # the pid was reused: ours is gone
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _load(path: Path) -> RunRecord | None:
    try:
        return RunRecord.load(path)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise UserError(f"not a valid run record: {str(exc).splitlines()[0]}", file=path,
                        fix="restore run.json from git, or launch the run again") from None


def _group(root: Path, record: RunRecord, folder: Path) -> list[RunRecord]:
    """The run's record, or with --trials K every trial's record so far, in order."""
    if record.trial is None:
        return [record]
    records = []
    for path in sorted(folder.parent.glob(f"*/{RUN_RECORD}")):
        try:
            other = RunRecord.load(path)
        except (OSError, ValueError):
            continue
        if other.trial is not None and other.trial.group == record.trial.group:
            records.append(other)
    return sorted(records, key=lambda r: r.trial.index) or [record]


def _ended(records: list[RunRecord]) -> bool:
    """A launch's records say it ended: the last trial's end is written (after the destroy),
    and it was the last asked for or the one the launch stopped at."""
    last = records[-1]
    if last.times.end is None or last.reason == COLLECT_PENDING:  # a trial awaiting its collect (after the destroy)
        return False
    return last.trial is None or last.trial.index == last.trial.of or last.status != Status.ok


def _rel(root: Path, path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def outcome(root: Path, record: RunRecord) -> str:
    """What the run ends in, in the slash command's words."""
    from harness.results.inconclusive import NO_ROW_SCRIPTED, is_scripted
    from harness.results.rows import RESULTS_MISSION

    if is_scripted(root, record):
        return NO_ROW_SCRIPTED
    if record.status != Status.ok:
        return f"no row: enter it as non-conclusive (llms-benchmark inconclusive {record.run_id})"
    if record.mission != RESULTS_MISSION:
        return f"the {record.mission} check passed: no row"  # only RESULTS_MISSION runs make one
    return f"a row once ruled (llms-benchmark rule {record.run_id})"


def figures(root: Path, record: RunRecord, folder: Path) -> dict:
    """One ended run, in the figures the slash command asks for (None where the run never got there)."""
    probe = record.probe
    session = record.session
    turns = session.turns if session is not None else (record.wire.turns if record.wire is not None else None)
    tokens = session.tokens if session is not None else (record.wire.tokens if record.wire is not None else None)
    report = record.artifacts.path(folder, "agent_output") if record.run and record.run.report_found else None
    return {
        "run_id": record.run_id, "status": record.status.value, "reason": record.reason,
        "stopped_at": record.stopped_at,
        "probe": None if probe is None else {"decode_tps": probe.decode_short_tps,
                                             "decode_long_tps": probe.decode_long_tps,
                                             "prefill_tps": probe.prefill_tps},
        "turns": turns,
        "tokens": None if tokens is None else {"input": tokens.input, "output": tokens.output},
        "report": _rel(root, report) if report is not None and report.is_file() else None,
        "record": _rel(root, folder / RUN_RECORD),
        "next": outcome(root, record),
    }


def _tps(value: float | None) -> str:
    return "—" if value is None else f"{value:,.1f}"


def plain(s: dict) -> list[str]:
    """The figures as a few lines (the reason goes to stderr, as every command's does)."""
    lines = [f"run {s['run_id']}: {s['status']}" + (f" at {s['stopped_at']}" if s["stopped_at"] else "")
             + f" — {s['record']}"]
    if s["probe"] is not None:
        p = s["probe"]
        lines.append(f"  probe: decode {_tps(p['decode_tps'])} tok/s (long context {_tps(p['decode_long_tps'])}), "
                     f"prefill {_tps(p['prefill_tps'])} tok/s")
    if s["turns"] is not None or s["tokens"] is not None:
        t = s["tokens"] or {}
        lines.append(f"  turns: {s['turns'] if s['turns'] is not None else '—'}; tokens: "
                     f"{t.get('input', 0):,} in, {t.get('output', 0):,} out")
    if s["report"]:
        lines.append(f"  report: {s['report']}")
    lines.append(f"  next: {s['next']}")
    return lines


def report_state(root: Path, folder: Path) -> dict | None:
    """A running run's mission report: persisted in its workspace yet, and for how long unchanged
    (what `stop` needs: it ends the run once a report exists). None before the mission is known."""
    from harness.mission import load_mission

    record = _load_quiet(folder / RUN_RECORD)
    if record is None:
        return None
    try:
        relative = load_mission(root, record.mission).manifest.report
    except (UserError, OSError, ValueError):
        return None
    path = folder / "workspace" / relative
    try:
        st = os.lstat(path)  # the agent's file: never followed through a link
    except OSError:
        return {"persisted": False, "file": _rel(root, path), "unchanged_s": None, "settled": False}
    persisted = stat.S_ISREG(st.st_mode) and st.st_size > 0
    unchanged = max(0, int(time.time() - st.st_mtime)) if persisted else None
    return {"persisted": persisted, "file": _rel(root, path), "unchanged_s": unchanged,
            "settled": unchanged is not None and unchanged >= REPORT_SETTLED_S}


def _load_quiet(path: Path) -> RunRecord | None:
    try:
        return RunRecord.load(path)
    except (OSError, ValueError):
        return None


@user_errors
def wait(run: Annotated[str, typer.Argument(help="The run id `launch` printed.")],
         timeout: Annotated[float, typer.Option(
             "--timeout", min=0, help="Give up after S seconds (exit 124; the run goes on). 0: no limit.")] = 0,
         as_json: JsonOpt = False) -> None:
    """Wait until RUN's launch ends; exit with its code (0 row, 1 void, 2 refused, 3 fault; 124 still running)."""
    root = project_root()
    deadline = time.monotonic() + timeout if timeout else None
    while True:
        folder = locate(root, run)  # a refused launch's folder moves while we wait
        alive = _launcher_alive(root, run)
        record = _load(folder / RUN_RECORD)
        records = _group(root, record, folder) if record is not None else []
        if alive is False:
            folder = locate(root, run)
            record = _load(folder / RUN_RECORD)
            records = _group(root, record, folder) if record is not None else []
            break
        if alive is None and records and _ended(records):
            break
        if deadline is not None and time.monotonic() >= deadline:
            # the trial running now (with --trials K, the latest one): its own workspace
            current = records[-1].run_id if records else run
            report = report_state(root, folder.parent / current)
            if as_json:
                out.print_json(json.dumps({"run_id": run, "running": True, "record": _rel(root, folder / RUN_RECORD),
                                           "report": report}))
            if report is None:
                said = ""
            elif report["persisted"]:
                said = (f"; report persisted ({report['file']}), unchanged for {report['unchanged_s']} s"
                        + (f" — settled: `llms-benchmark stop {current}` ends the run now, keeping it"
                           if report["settled"] else ""))
            else:
                said = "; no report persisted yet"
            err.print(f"run {run} is still running after {timeout:g}s{said} (the run goes on; wait again)",
                      highlight=False, markup=False)
            raise typer.Exit(STILL_RUNNING)
        time.sleep(POLL_S)

    if not records or records[-1].times.end is None:
        raise LaunchDied(f"the launch of run {run} ended without finishing its record (killed?)",
                         file=folder / RUN_RECORD,
                         fix="check `llms-benchmark units` is empty (the next launch destroys a leftover); launch again")
    code = max(r.status.exit_code for r in records)
    summary = [figures(root, r, folder.parent / r.run_id) for r in records]
    if as_json:
        out.print_json(json.dumps(summary[0] if len(summary) == 1 else summary))
    else:
        for s in summary:
            out.print("\n".join(plain(s)), highlight=False, markup=False, soft_wrap=True)
            if s["reason"]:
                err.print(f"[bold red]{s['status']}:[/bold red] {escape(s['reason'])}", highlight=False)
    raise typer.Exit(code)


def register(parent: typer.Typer) -> None:
    parent.command("wait")(wait)
