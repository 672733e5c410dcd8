"""The `load` command's one function: against a base URL, or against `<env> <preset>` served for it.

Order matters: every refusal (bad options, an unreachable server, a model it does
not list, a busy server, no confirmation) comes before the results folder exists;
with `<env> <preset>` the confirmation also comes before anything bills.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.load.runner import LoadOptions, Reporter, Runner, check, plan_text

Say = Callable[[str], None]
Confirm = Callable[[str], bool]


@dataclass
class LoadOutcome:
    path: Path | None
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0 when every request succeeded, 1 when a level had failures (or nothing ran)."""
        if not self.rows:
            return 1
        return 0 if all(r["failed"] == 0 for r in self.rows) else 1


def resolve_target(args: list[str], base_url: str | None) -> tuple[str, ...]:
    """('url', URL) or ('unit', ENVIRONMENT, PRESET) from the command line."""
    args = list(args or [])
    if base_url:
        if args:
            raise UserError("give either --base-url or a positional target, not both", field="target",
                            fix="llms-benchmark load http://127.0.0.1:8000  or  llms-benchmark load ENV PRESET")
        return ("url", base_url)
    if len(args) == 1 and "://" in args[0]:
        return ("url", args[0])
    if len(args) == 2 and "://" not in args[0]:
        return ("unit", args[0], args[1])
    raise UserError(f"'{' '.join(args) or '(nothing)'}' is neither a base URL nor ENVIRONMENT PRESET", field="target",
                    fix="llms-benchmark load http://127.0.0.1:8000  (a running server)  or  "
                        "llms-benchmark load ENVIRONMENT PRESET  (served for the run, then destroyed)")


def run_load(root: Path, target: tuple[str, ...], opts: LoadOptions, *, confirm: Confirm, reporter: Reporter,
             say: Say) -> LoadOutcome:
    if target[0] == "url":
        opts.base_url = target[1]
        found = check(opts)
        if not confirm(plan_text(opts, found.model, found.base_url)):
            return LoadOutcome(None)
        runner = Runner(opts, found, reporter)
        try:
            runner.run()
        finally:
            say(f"results in {runner.path}" if runner.results.rows else "no level finished: nothing written")
        return LoadOutcome(runner.path, runner.results.rows)

    from harness.run.served import preflight, served

    _, environment, preset = target
    pf = preflight(root, environment, preset, say)
    where = f"{pf.preset.name} served on {pf.env.name} ({pf.env.stack}) for this run, destroyed after"
    if not confirm(plan_text(opts, opts.model or pf.preset.served_name, where)):
        return LoadOutcome(None)
    holder: dict[str, Runner] = {}

    def log_dest() -> Path | None:
        runner = holder.get("runner")
        return runner.path if runner is not None and runner.path.is_dir() else None

    with served(root, pf, say, log_dest) as (unit, api_key):
        opts.base_url, opts.api_key = unit.base_url, api_key
        opts.model = opts.model or unit.served_name
        found = check(opts)
        runner = holder["runner"] = Runner(opts, found, reporter)
        try:
            runner.run()
        finally:
            say(f"results in {runner.path}" if runner.results.rows else "no level finished: nothing written")
    return LoadOutcome(runner.path, runner.results.rows)
