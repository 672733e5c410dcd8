"""`llms-benchmark rule RUN_ID`: draft a run's rulings and have a person finish them.

The key-matcher proposes a verdict per finding (the planted defect it names, that
defect's evidence re-run on the run's own telemetry). A person accepts or overrides
each proposal at a prompt, or `--accept` takes them all in a script. Nothing is
final until one of the two says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.errors import UserError
from harness.keymatch import draft_rulings
from harness.launch import runs_dir
from harness.record import RunRecord
from harness.rulings import HELD_UP, NOT_HELD_UP, RuledFinding, Rulings, load_rulings, save_rulings

# ask(finding, proposal) -> None to accept, or (verdict, reason) to override.
Ask = Callable[[RuledFinding], tuple[str, str] | None]


def rulings_path(root: Path, run_id: str) -> Path:
    return root / "rulings" / f"{run_id}.yaml"


def run_folder(root: Path, run_id: str) -> tuple[Path, RunRecord]:
    folder = runs_dir(root) / run_id
    record = folder / "run.json"
    if not record.is_file():
        known = sorted(p.parent.name for p in runs_dir(root).glob("*/run.json"))[-3:] if runs_dir(root).is_dir() else []
        raise UserError(f"no run '{run_id}'", file=record,
                        fix="pass a run id from .llms-benchmark/runs/" + (f" (latest: {', '.join(known)})" if known else ""))
    return folder, RunRecord.load(record)


def draft(root: Path, run_id: str) -> Rulings:
    folder, rec = run_folder(root, run_id)
    key = root / "missions" / rec.mission / "key" / "defects.yaml"
    if not key.is_file():
        raise UserError(f"mission '{rec.mission}' has no hidden key to rule against", file=key,
                        fix="rule missions that ship key/defects.yaml (the observability mission)")
    return draft_rulings(folder, key)


def finish(rulings: Rulings, ask: Ask | None) -> Rulings:
    """Apply a person's decisions (or accept every proposal when `ask` is None) and mark final."""
    findings = []
    for finding in rulings.findings:
        decision = ask(finding) if ask else None
        if decision is not None:
            verdict, reason = decision
            finding = finding.model_copy(update={"verdict": verdict, "reason": reason, "ruled_by": "person"})
        findings.append(finding)
    return rulings.model_copy(update={"findings": findings, "final": True})


def rule(root: Path, run_id: str, *, ask: Ask | None, accept: bool) -> tuple[Rulings, Path]:
    path = rulings_path(root, run_id)
    if path.is_file():
        existing = load_rulings(path)
        if existing.final:
            return existing, path
    rulings = draft(root, run_id)
    if accept or ask is not None:
        rulings = finish(rulings, None if accept else ask)
    # A round trip through the validating loader: what is written is what loads.
    save_rulings(rulings, path)
    return load_rulings(path), path


VERDICT_CHOICES = {"a": None, "h": HELD_UP, "d": NOT_HELD_UP}
