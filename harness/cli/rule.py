"""`llms-benchmark rule`: draft and settle a run's rulings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from harness.cli.common import JsonOpt, err, out, project_root, user_errors
from harness.verdicts.bounds import memory_capped


ACTIONS = ("set", "check")


@user_errors
@memory_capped()  # what the agent's queries build cannot grow this process past it (`set`, `--final` draft too)
def rule_cmd(run_id: Annotated[str, typer.Argument(help="The run to rule (a folder of .llms-benchmark/runs/).")],
             action: Annotated[str | None, typer.Argument(
                 help="`set N` (rule one finding: --verdict, --reason) or `check` (validate the edited file).",
                 show_default=False)] = None,
             number: Annotated[str | None, typer.Argument(help="The finding `set` rules.", show_default=False)] = None,
             verdict: Annotated[str, typer.Option("--verdict", help="With set: 'held up' or 'did not hold up'.")] = "",
             reason: Annotated[str, typer.Option("--reason", help="With set: why, in one sentence.")] = "",
             kind: Annotated[str, typer.Option("--kind", help="With set: Telemetry, Perf or Behavior.")] = "",
             final: Annotated[bool, typer.Option("--final", help="Make the draft, as it stands, final.")] = False,
             accept: Annotated[bool, typer.Option("--accept", help="Accept every proposal (scripts).")] = False,
             grader: Annotated[str, typer.Option(
                 "--grader", help="PROVIDER/MODEL of a grader model that proposes each verdict.")] = "",
             grader_url: Annotated[str, typer.Option(
                 help="The grader's OpenAI-compatible base URL (else the provider's, from opencode).")] = "",
             grader_key_env: Annotated[str, typer.Option(
                 help="Name of the env var holding the grader's key (never the key).")] = "",
             grader_config: Annotated[Path | None, typer.Option(
                 help="An opencode config defining the grader's provider.")] = None,
             as_json: JsonOpt = False) -> None:
    """Draft RUN_ID's rulings (key-matcher, then an optional grader model); accept or override each finding.

    Without a terminal: `rule RUN set N --verdict 'held up' --reason '...'` rules one finding,
    `rule RUN check` validates a hand-edited rulings file, `rule RUN --final` makes the draft final."""
    import sys

    from harness.errors import UserError
    from harness.verdicts import rule as rules
    if action is not None or final:
        if grader or grader_url or grader_config is not None:  # it would be ignored: said, never dropped
            which = "--final" if final else action
            raise UserError(f"--grader drafts proposals; it does not go with {which} (no grader would run)",
                            field="--grader",
                            fix=f"grade the draft first (llms-benchmark rule {run_id} --grader PROVIDER/MODEL), "
                                f"then `rule {run_id} {'--final' if final else action}` without --grader")
        if action is not None and action not in ACTIONS:
            raise UserError(f"'{action}' is not an action of rule", field="ACTION",
                            fix=f"use one of: {', '.join(ACTIONS)} (or none, to draft)")
        if action == "set":
            if not number or not verdict or not reason.strip():
                raise UserError("set needs the finding's number, --verdict and --reason", field="set",
                                fix=f"llms-benchmark rule {run_id} set 3 --verdict 'did not hold up' "
                                    "--reason 'Its query returns 0 on the store.'")
            rulings, path = rules.set_verdict(project_root(), run_id, number, verdict, reason, kind or None)
        elif action == "check":
            path = rules.rulings_path(project_root(), run_id)
            rulings = rules.check(project_root(), run_id)
        else:
            rulings, path = None, None
        if final:
            rulings, path = rules.finalise(project_root(), run_id)
        summary = {"rulings": str(path), "final": rulings.final, "confirmed": rulings.confirmed,
                   "reported": rulings.reported, "accuracy": rulings.accuracy, "by_kind": rulings.by_kind,
                   "recall": f"{len(rulings.recall.found)}/{rulings.recall.planted}"}
        if as_json:
            out.print_json(json.dumps(summary))
        else:
            out.print(f"{path}: {'final' if rulings.final else 'a draft'}, {rulings.confirmed} / {rulings.reported} "
                      f"held up, accuracy {rulings.accuracy}%, planted defects found {summary['recall']}",
                      highlight=False)
        return

    from rich.prompt import Prompt

    from harness.grader.apply import GraderNotes, grade
    from harness.verdicts.rule import VERDICT_CHOICES, edited, rule

    endpoint = None
    if not grader and (grader_url or grader_key_env or grader_config is not None):
        given = "--grader-url" if grader_url else "--grader-key-env" if grader_key_env else "--grader-config"
        raise UserError(f"{given} is given without --grader: no grader would run", field="--grader",
                        fix=f"name the grader's model too: --grader PROVIDER/MODEL {given} ...")
    if grader:
        from harness.grader.provider import resolve

        endpoint = resolve(grader, url=grader_url or None, key_env=grader_key_env or None, config=grader_config)
    seen: list[str] = []  # the numbers asked so far: a restatement names one of them

    def ask(finding):
        seen.append(finding.number)
        out.print(f"\n[bold]finding {finding.number}[/bold] ({finding.kind or 'no kind'}): {finding.text}")
        out.print(f"  proposed: [bold]{finding.verdict}[/bold] by {finding.ruled_by} — {finding.reason}",
                  highlight=False)
        if finding.number in disagreed:
            out.print(f"  the key-matcher proposed: {disagreed[finding.number]}", highlight=False)
        out.print(f"  defects: {', '.join(finding.defects) or 'none'}; counts {finding.counts}"
                  + (f"; restates {finding.restates}" if finding.restates else ""), highlight=False)
        choice = Prompt.ask("  [a]ccept, [h]eld up, [d]id not hold up, [e]dit verdict and counting",
                            choices=list(VERDICT_CHOICES), default="a")
        if VERDICT_CHOICES[choice] is None:
            return None
        if VERDICT_CHOICES[choice] != "edit":
            return VERDICT_CHOICES[choice], Prompt.ask("  reason, in one sentence")
        while True:  # until the edit is one a rulings file accepts
            changes = ask_edit(finding)
            try:
                edited(finding, changes, seen[:-1])
                return changes
            except ValueError as exc:
                err.print(f"  [red]not accepted:[/red] {escape(str(exc).splitlines()[-1])}", highlight=False)

    def ask_edit(finding) -> dict:
        verdict = Prompt.ask("  verdict: [h]eld up, [d]id not hold up", choices=["h", "d"],
                             default="h" if finding.verdict == "held up" else "d")
        defects = Prompt.ask("  defects it names (comma-separated key ids, '-' for none)",
                             default=",".join(finding.defects) or "-")
        restates = Prompt.ask("  restates finding (number, '-' for none)", default=finding.restates or "-")
        counts = Prompt.ask("  counts", default="0" if restates != "-" else str(finding.counts))
        return {"verdict": VERDICT_CHOICES[verdict], "reason": Prompt.ask("  reason, in one sentence"),
                "defects": [d.strip() for d in defects.split(",") if d.strip() and d.strip() != "-"],
                "restates": None if restates.strip() in ("", "-") else restates.strip(),
                "counts": int(counts) if counts.strip().isdigit() else counts}

    interactive = not accept and sys.stdin.isatty()
    say = (lambda text: None) if as_json else (lambda text: err.print(text, style="dim", highlight=False))
    # The grader runs before the prompts, filling `notes`; each prompt shows its disagreement.
    notes = GraderNotes()
    disagreed = notes.disagreed
    root = project_root()
    graded = (lambda draft: grade(root, run_id, draft, endpoint, say, notes)[0]) if endpoint is not None else None
    rulings, path = rule(root, run_id, ask=ask if interactive else None, accept=accept, grade=graded)
    summary = {"rulings": str(path), "final": rulings.final, "confirmed": rulings.confirmed,
               "reported": rulings.reported, "accuracy": rulings.accuracy, "by_kind": rulings.by_kind,
               "recall": f"{len(rulings.recall.found)}/{rulings.recall.planted}",
               "grader": endpoint.label if endpoint else None,
               "grader_disagreed": notes.disagreed, "grader_failed": notes.failed,
               "grader_refused": notes.refused}
    if as_json:
        out.print_json(json.dumps(summary))
    else:
        table = Table("#", "kind", "verdict", "by", "reason", title=f"rulings for {run_id}")
        for f in rulings.findings:
            table.add_row(f.number, f.kind or "—", f.verdict, f.ruled_by, f.reason)
        out.print(table)
        for number, why in notes.failed.items():
            err.print(f"[yellow]grader gave no proposal for finding {number}:[/yellow] {escape(why)} "
                      "(the key-matcher's stands)", highlight=False)
        for number, why in notes.refused.items():
            err.print(f"[yellow]finding {number}:[/yellow] {escape(why)} (the key-matcher's stands)", highlight=False)
        out.print(f"{summary['confirmed']} / {summary['reported']} held up, accuracy {summary['accuracy']}%, "
                  f"planted defects found {summary['recall']}; written to {path}"
                  + ("" if rulings.final else " — a DRAFT: rerun at a terminal, or with --accept"))


def register(app: typer.Typer) -> None:
    app.command("rule")(rule_cmd)
