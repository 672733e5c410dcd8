"""The matrix's loop: cells as launches, each its own process, as many at once as the engine
and `--parallel` allow, within the budget.

A cell is `llms-benchmark launch local ENV PRESET EFFORT --mission M --trials K --json` in a
session of its own (a cell's crash cannot take the matrix down; the launch keeps its own
serve-once claim, ledger entry, run folders and signal handling). The matrix

- caps how many run at once: `--parallel`, and on Azure the free GPUs of the quota read at
  preflight (`quota.py`); two cells of one preset never run together (one unit `vot-<preset>`);
- queues a cell Azure refused for quota or capacity (its record's reason says so; the folder
  moves to `.llms-benchmark/refused/`, out of git) and tries it again after a backoff that
  doubles up to `retry.backoff_max_s`, at most `retry.max_attempts` times. A 429 never gets
  here: the SDK's retry policy waits it out inside the launch (Retry-After honoured, bounded);
  a 409 for quota is not retryable there, so the matrix is what waits;
- starts a cell only if what was spent (the cells' GPU-hours × the environment's price) plus
  the bounds of the cells in flight plus its own bound (mission cap × trials × price) fit the
  budget; once spent + its bound alone exceeds it, the cell is recorded as over budget;
- writes the state after every change; on SIGINT/SIGTERM it forwards the signal to every
  launch in flight (each destroys its unit), waits for them, records each cell, and exits
  128+N. The launches die with it if it is killed (PR_SET_PDEATHSIG: SIGTERM, same path).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psutil

from harness.errors import UserError
from harness.matrix.plan import MatrixPlan
from harness.matrix.state import Attempt, Cell, CellStatus, MatrixState, StateFolder
from harness.run.paths import ProjectPaths
from harness.run.record import RunRecord, Status, utcnow

Say = Callable[[str], None]
# A stand-in for `-m harness.cli` (a script path), for tests and demos: the cell's argv is
# [python, <this>, "launch", "local", ...]. Unset: the real console entry.
CELL_ENTRY_VAR = "LLMS_BENCHMARK_MATRIX_CELL"
TICK_S = 0.25
DRAIN_TIMEOUT_S = 20 * 60  # a launch's destroy is bounded at 15 minutes (azure) plus its retries
# What Azure says when it has no room for one more GPU app: a refusal to queue, not a fault.
QUOTA_REFUSAL = re.compile(
    r"quota|QuotaExceeded|InsufficientQuota|capacity|cannot take another replica|SkuNotAvailable|"
    r"ManagedEnvironment\w*Capacity", re.IGNORECASE)


def cell_bound_usd(plan: MatrixPlan, cap_minutes: float, price: float | None, gpus: int = 1) -> float:
    """The most a cell can bill: its mission's time cap × trials, on its GPUs, at the price."""
    return cap_minutes / 60 * plan.trials * gpus * (price or 0.0)


def elapsed_text(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _pdeathsig() -> Callable[[], None] | None:
    """In the child, before exec: SIGTERM when the matrix dies (Linux); no threads run here."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def arm() -> None:
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return arm


@dataclass
class Running:
    cell: Cell
    attempt: Attempt
    proc: subprocess.Popen
    announce: Path
    out: Path
    bound_usd: float
    started: float
    signalled: bool = False


class MatrixRun:
    def __init__(self, root: Path, plan: MatrixPlan, folder: StateFolder, state: MatrixState, *, cap: int,
                 cap_minutes: float, say: Say, view=None) -> None:
        self.root, self.plan, self.folder, self.state = root, plan, folder, state
        self.cap, self.say, self.view = cap, say, view
        self.bound_usd = cell_bound_usd(plan, cap_minutes, state.gpu_hourly_usd)
        self.running: dict[str, Running] = {}
        self.stop_signal: int | None = None
        self.paths = ProjectPaths(root)
        self._deathsig = _pdeathsig()

    # -- signals ---------------------------------------------------------------------------
    def _on_signal(self, signum, _frame) -> None:
        if self.stop_signal is None:
            self.stop_signal = signum
        else:
            self.say(f"{signal.Signals(signum).name} again: still waiting for the launches to destroy their units")

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.save()
            while True:
                self._reap()
                if self.stop_signal is not None:
                    self._drain()
                    break
                self._start_what_fits()
                self._show()
                if not self.running and not any(self._startable(c) or c.status == CellStatus.queued
                                                 for c in self.state.cells):
                    break
                time.sleep(TICK_S)
        finally:
            if self.running:  # an exception in the loop itself: never leave a launch unwatched
                self.stop_signal = self.stop_signal or signal.SIGTERM
                self._drain()
            for s, h in previous.items():
                signal.signal(s, h)
        self._show(final=True)
        if self.stop_signal is not None:
            self.state.interrupted = signal.Signals(self.stop_signal).name
            self.save()
            return 128 + self.stop_signal
        self.state.interrupted = None
        self.save()
        return 0 if all(c.status == CellStatus.done for c in self.state.cells) else 1

    def save(self) -> None:
        self.folder.save(self.state)

    def _startable(self, cell: Cell) -> bool:
        return cell.status in (CellStatus.pending, CellStatus.interrupted)

    def _due(self, cell: Cell) -> bool:
        if self._startable(cell):
            return True
        return cell.status == CellStatus.queued and (cell.retry_at is None or cell.retry_at <= utcnow())

    # -- starting --------------------------------------------------------------------------
    def _start_what_fits(self) -> None:
        busy_presets = {r.cell.preset for r in self.running.values()}
        for cell in self.state.cells:
            if len(self.running) >= self.cap:
                return
            if not self._due(cell) or cell.preset in busy_presets:
                continue
            if not self._budget_allows(cell):
                continue
            self._start(cell)
            busy_presets.add(cell.preset)

    def _budget_allows(self, cell: Cell) -> bool:
        budget = self.state.budget_usd
        if budget is None:
            return True
        spent, bound = self.state.spent_usd(), self.bound_usd
        if spent + bound > budget + 1e-9:
            cell.status = CellStatus.over_budget
            cell.retry_at = None
            cell.reason = (f"not started: spent ${spent:.2f} + this cell's bound ${bound:.2f} (mission cap × "
                           f"{self.plan.trials} trial(s) × ${self.state.gpu_hourly_usd:g}/GPU-h) exceeds the budget "
                           f"${budget:.2f}")
            self.say(f"{cell.id}: {cell.reason}")
            self.save()
            return False
        in_flight = sum(r.bound_usd for r in self.running.values())
        return spent + in_flight + bound <= budget + 1e-9  # else: wait for a cell in flight to end

    def _start(self, cell: Cell) -> None:
        from harness.cli.launch import ANNOUNCE_VAR

        index = len(cell.attempts) + 1
        self.folder.cells.mkdir(parents=True, exist_ok=True)
        stem = f"{cell.id}-{index}"
        log, out, announce = (self.folder.cells / f"{stem}.log", self.folder.cells / f"{stem}.json",
                              self.folder.cells / f"{stem}.run-id")
        announce.unlink(missing_ok=True)
        entry = os.environ.get(CELL_ENTRY_VAR)
        argv = [sys.executable, *([entry] if entry else ["-m", "harness.cli"]), "launch", "local",
                self.plan.environment, cell.preset, cell.effort, "--mission", self.plan.mission,
                "--trials", str(self.plan.trials), "--json",
                *(["--probe-long-tokens", str(self.plan.probe_long_tokens)] if self.plan.probe_long_tokens else []),
                *(["--no-sandbox"] if self.plan.no_sandbox else [])]
        env = {**os.environ, "LLMS_BENCHMARK_ROOT": str(self.root), ANNOUNCE_VAR: str(announce),
               "PYTHONUNBUFFERED": "1"}
        with open(log, "wb") as err_fh, open(out, "wb") as out_fh:
            proc = subprocess.Popen(argv, cwd=self.root, env=env, stdin=subprocess.DEVNULL, stdout=out_fh,
                                    stderr=err_fh, start_new_session=True, preexec_fn=self._deathsig)
        attempt = Attempt(index=index, started=utcnow(), pid=proc.pid, log=self._rel(log))
        cell.attempts.append(attempt)
        cell.status, cell.retry_at, cell.reason = CellStatus.running, None, None
        self.running[cell.id] = Running(cell, attempt, proc, announce, out, self.bound_usd, time.monotonic())
        self.say(f"{cell.id}: launch {index} started (pid {proc.pid})")
        self.save()

    # -- ending ----------------------------------------------------------------------------
    def _reap(self) -> None:
        for cell_id, run in list(self.running.items()):
            if not run.attempt.run_ids and run.announce.is_file():
                run.attempt.run_ids = [run.announce.read_text().strip()]
                self.save()
            if run.proc.poll() is None:
                continue
            del self.running[cell_id]
            self._ended(run)
            self.save()

    def _ended(self, run: Running) -> None:
        cell, attempt, rc = run.cell, run.attempt, run.proc.returncode
        attempt.ended, attempt.exit_code, attempt.pid = utcnow(), rc, None
        records = self._records(run)
        if records:
            attempt.run_ids = [r.run_id for r in records]
            attempt.gpu_hours = max((r.gpu_hours or 0.0) for r in records)
        bad = next((r for r in records if r.status != Status.ok), None)
        reason = (bad.reason if bad is not None else None) or (None if rc == 0 else self._tail(run))
        if rc == 0:
            cell.status, cell.reason = CellStatus.done, None
        elif run.signalled:
            cell.status, cell.reason = CellStatus.interrupted, f"interrupted ({reason})" if reason else "interrupted"
        elif rc == 3 and reason and QUOTA_REFUSAL.search(reason) and (bad is None or bad.stopped_at in (None, "serve")):
            self._queue(cell, attempt, reason)
            return
        else:
            cell.status = {1: CellStatus.void, 2: CellStatus.refused}.get(rc, CellStatus.fault)
            cell.reason = reason or f"the launch process ended with exit code {rc}"
            if rc not in (1, 2, 3):
                cell.reason = f"the launch process ended with exit code {rc}: {cell.reason}"
        attempt.reason = cell.reason
        self.say(f"{cell.id}: {cell.status.value}" + (f" — {cell.reason}" if cell.reason else "")
                 + f" ({elapsed_text(time.monotonic() - run.started)})")

    def _queue(self, cell: Cell, attempt: Attempt, reason: str) -> None:
        attempt.reason = f"quota: {reason}"
        # A refusal is not a run: its folders go where a launch puts a refused one, out of git
        # (`.llms-benchmark/refused/`); its GPU-hours, if any, stay counted on the attempt.
        for run_id in attempt.run_ids:
            source = self.paths.run(run_id).dir
            if source.is_dir():
                self.paths.refused.mkdir(parents=True, exist_ok=True)
                os.replace(source, self.paths.refused / run_id)
        refusals, retry = cell.quota_refusals, self.plan.retry
        if refusals >= retry.max_attempts:
            cell.status, cell.retry_at = CellStatus.gave_up, None
            cell.reason = f"refused for quota or capacity {refusals} times; last: {reason}"
            self.say(f"{cell.id}: gave up — {cell.reason}")
            return
        wait = min(retry.backoff_s * 2 ** (refusals - 1), retry.backoff_max_s)
        cell.status, cell.retry_at = CellStatus.queued, utcnow() + timedelta(seconds=wait)
        cell.reason = f"queued: Azure refused it for quota or capacity ({reason}); next try in {wait:.0f}s"
        self.say(f"{cell.id}: {cell.reason}")

    def _records(self, run: Running) -> list[RunRecord]:
        """The launch's records: from its `--json` output, else found by its announced run id."""
        try:
            data = json.loads(run.out.read_text(encoding="utf-8") or "null")
            items = data if isinstance(data, list) else [data] if isinstance(data, dict) else []
            return [RunRecord.model_validate(item) for item in items]
        except (OSError, ValueError):
            pass
        first = run.attempt.run_ids[0] if run.attempt.run_ids else None
        return records_of(self.paths, first) if first else []

    def _tail(self, run: Running) -> str | None:
        try:
            lines = [ln for ln in Path(self.root / (run.attempt.log or "")).read_text(errors="replace").splitlines()
                     if ln.strip()]
        except OSError:
            return None
        return lines[-1].strip()[:400] if lines else None

    # -- stopping --------------------------------------------------------------------------
    def _drain(self) -> None:
        """Every launch in flight gets the signal (it destroys its unit), then is waited for."""
        name = signal.Signals(self.stop_signal).name
        for run in self.running.values():
            if not run.signalled:
                run.signalled = True
                self.say(f"{run.cell.id}: {name} forwarded to its launch (pid {run.proc.pid}); destroying its unit")
                try:
                    os.killpg(run.proc.pid, signal.SIGINT)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self.running and time.monotonic() < deadline:
            self._reap()
            self._show()
            time.sleep(TICK_S)
        for run in self.running.values():  # still destroying when we gave up: the ledger keeps it
            run.cell.status = CellStatus.interrupted
            run.cell.reason = (f"its launch (pid {run.proc.pid}) was still destroying when the matrix stopped "
                               "waiting; the unit stays in the ledger until a later command sweeps it")
        self.save()

    # -- the view ----------------------------------------------------------------------------
    def live_cost(self, cell: Cell) -> float:
        """The cell's GPU $ so far: finished launches', plus the one running now since its serve began."""
        hours = cell.gpu_hours
        run = self.running.get(cell.id)
        if run is not None and run.attempt.run_ids:
            try:
                rec = RunRecord.load(self.paths.run(run.attempt.run_ids[0]).record)
                if rec.times.serve_start is not None:
                    end = rec.times.destroyed or utcnow()
                    gpus = 1 if rec.gpus is None else rec.gpus  # known from its preflight on
                    hours += (end - rec.times.serve_start).total_seconds() / 3600 * gpus
            except (OSError, ValueError):
                pass
        return hours * (self.state.gpu_hourly_usd or 0.0)

    def elapsed(self, cell: Cell) -> float:
        run = self.running.get(cell.id)
        if run is not None:
            return time.monotonic() - run.started
        return sum(((a.ended or utcnow()) - a.started).total_seconds() for a in cell.attempts)

    def _show(self, final: bool = False) -> None:
        if self.view is not None:
            self.view(self, final)

    def _rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)


def records_of(paths: ProjectPaths, first: str) -> list[RunRecord]:
    """A launch's records by its first run id: that run, and the trials grouped under it."""
    found: list[RunRecord] = []
    for folder in (paths.runs, paths.refused):
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*/run.json")):
            if path.parent.name < first[:16]:
                continue  # run ids begin with their UTC start: a later trial's sorts after the first
            try:
                rec = RunRecord.load(path)
            except (OSError, ValueError):
                continue
            if rec.run_id == first or (rec.trial is not None and rec.trial.group == first):
                found.append(rec)
    return sorted(found, key=lambda r: r.trial.index if r.trial else 1)


def prepare(state: MatrixState, plan: MatrixPlan) -> list[str]:
    """A resumed state made ready to run again: cells the plan gained are added, interrupted or
    over-budget ones (the budget may have changed) and queued ones go back to pending; a cell
    left `running` by a matrix that died is checked: its launch must have ended. Returns notes."""
    notes = []
    known = {c.id for c in state.cells}
    for preset, effort in plan.cells():
        cell = Cell(preset=preset, effort=effort)
        if cell.id not in known:
            state.cells.append(cell)
    for cell in state.cells:
        if cell.status == CellStatus.running:
            pid = cell.attempts[-1].pid if cell.attempts else None
            if pid and psutil.pid_exists(pid):
                try:
                    alive = "launch" in " ".join(psutil.Process(pid).cmdline())
                except psutil.Error:
                    alive = False
                if alive:
                    raise UserError(f"cell {cell.id}'s launch (pid {pid}) from an earlier matrix run is still running",
                                    field="PLAN", fix=f"wait for it, or `kill -INT {pid}` (it destroys its unit), "
                                                      "then run the matrix again")
            cell.status = CellStatus.interrupted
            cell.reason = "the matrix process died while it ran (its unit, if any, is swept from the ledger)"
            if cell.attempts:
                cell.attempts[-1].pid = None
            notes.append(f"{cell.id}: its launch ended with the matrix that started it; it runs again")
        if cell.status in (CellStatus.interrupted, CellStatus.over_budget, CellStatus.queued):
            cell.status, cell.retry_at = CellStatus.pending, None
    return notes
