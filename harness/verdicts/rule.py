"""`llms-benchmark rule RUN_ID`: draft a run's rulings and have a person finish them.

The key-matcher proposes a verdict per finding (the planted defect it names, that
defect's evidence re-run on the run's own telemetry). With `--grader PROVIDER/MODEL` a
grader model then proposes its own verdict and reason for each finding, having re-run
the cited telemetry and read the code; the key-matcher's counting decisions (which
defects a finding names, restatements, bundles) stand. A person accepts or overrides
each proposal at a prompt, or `--accept` takes them all in a script. Nothing is final
until one of the two says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError
from harness.verdicts.keymatch import draft_rulings
from harness.paths import RUN_RECORD, ProjectPaths
from harness.record import RunRecord
from harness.verdicts.report import parse_report_file
from harness.verdicts.rulings import HELD_UP, NOT_HELD_UP, Recall, RuledFinding, Rulings, load_rulings, save_rulings
from harness.vot.loader import is_file

# ask(finding) -> None to accept the proposal, (verdict, reason) to override it, or a dict
# of the fields a person sets (verdict, reason, kind, defects, restates, counts).
Ask = Callable[[RuledFinding], "tuple[str, str] | dict | None"]
EDITABLE = ("verdict", "reason", "kind", "defects", "restates", "counts")


def rulings_path(root: Path, run_id: str) -> Path:
    return ProjectPaths(root).rulings_file(run_id)


def _check_run_id(root: Path, run_id: str) -> None:
    """A run id is a folder name under .llms-benchmark/runs/, never a path that leads elsewhere."""
    if run_id in ("", ".", "..") or "/" in run_id or "\\" in run_id:
        raise UserError(f"'{run_id}' is not a run id", file=ProjectPaths(root).runs,
                        fix="pass the name of one folder under .llms-benchmark/runs/")


def run_folder(root: Path, run_id: str) -> tuple[Path, RunRecord]:
    _check_run_id(root, run_id)
    paths = ProjectPaths(root).run(run_id)
    folder, record = paths.dir, paths.record
    if not is_file(record):
        runs = ProjectPaths(root).runs
        known = sorted(p.parent.name for p in runs.glob(f"*/{RUN_RECORD}"))[-3:] if runs.is_dir() else []
        raise UserError(f"no run '{run_id}'", file=record,
                        fix="pass a run id from .llms-benchmark/runs/" + (f" (latest: {', '.join(known)})" if known else ""))
    try:
        return folder, RunRecord.load(record)
    except ValueError as exc:  # pydantic's ValidationError and UnicodeDecodeError included
        raise UserError(f"not a valid run record: {exc}", file=record,
                        fix="restore run.json from git, or launch the run again") from None


def draft(root: Path, run_id: str) -> Rulings:
    folder, rec = run_folder(root, run_id)
    key = root / "missions" / rec.mission / "key" / "defects.yaml"
    if not key.is_file():
        raise UserError(f"mission '{rec.mission}' has no hidden key to rule against", file=key,
                        fix="rule missions that ship key/defects.yaml (the observability mission)")
    return draft_rulings(folder, key, sources=root / "missions" / rec.mission / "workspace")


def with_recall(rulings: Rulings) -> Rulings:
    """Recall follows the verdicts: the planted defects that held-up findings name."""
    found = sorted({d for f in rulings.findings if f.verdict == HELD_UP for d in f.defects})
    return rulings.model_copy(update={"recall": Recall(found=found, planted=rulings.recall.planted)})


def edited(finding: RuledFinding, changes: dict, earlier: list[str] | None = None) -> RuledFinding:
    """A person's edit of one finding, validated (a restatement counts 0 and restates one of
    the `earlier` findings, held up needs a kind)."""
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise ValueError(f"cannot edit {', '.join(unknown)}: editable are {', '.join(EDITABLE)}")
    restates = changes.get("restates")
    if restates is not None and earlier is not None and str(restates) not in earlier:
        raise ValueError(f"finding {finding.number} can only restate a finding ruled before it "
                         f"({', '.join(earlier) or 'none'}), not {restates}")
    return RuledFinding.model_validate({**finding.model_dump(), **changes, "ruled_by": "person"})


def finish(rulings: Rulings, ask: Ask | None) -> Rulings:
    """Apply a person's decisions (or accept every proposal when `ask` is None: `--accept`
    takes the proposals as they stand) and mark final."""
    findings = []
    for finding in rulings.findings:
        decision = ask(finding) if ask else None
        if isinstance(decision, tuple):
            decision = dict(zip(("verdict", "reason"), decision, strict=True))
        if decision:
            finding = edited(finding, decision, [f.number for f in findings])
        findings.append(finding)
    return with_recall(rulings.model_copy(update={"findings": findings, "final": True}))


@dataclass
class GraderNotes:
    """What the grader did beside its proposals: where it disagreed with the key-matcher
    (number → the key-matcher's verdict) and where it gave no proposal (number → why)."""

    disagreed: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


def grade(root: Path, run_id: str, rulings: Rulings, endpoint, say: Callable[[str], None] = lambda _: None,
          notes: GraderNotes | None = None) -> tuple[Rulings, GraderNotes]:
    """The grader model's proposal replaces the key-matcher's verdict, reason and kind;
    its evidence comes first, the key's re-runs after. Restatements are not re-graded."""
    from harness.grader.session import Grader, workspace_and_store
    from harness.grader.tools import GraderTools

    folder, rec = run_folder(root, run_id)
    report = parse_report_file(Path(rulings.report))
    report_text = Path(rulings.report).read_text(encoding="utf-8")
    by_number = {f.number: f for f in report.findings}
    grader = Grader(endpoint, GraderTools(*workspace_and_store(folder, rec, root)))
    notes = notes if notes is not None else GraderNotes()
    findings = []
    try:
        for ruled in rulings.findings:
            finding = by_number.get(ruled.number)
            if finding is None or ruled.restates is not None:
                findings.append(ruled)
                continue
            say(f"grading finding {ruled.number} with {endpoint.label}")
            outcome = grader.grade(finding, report_text)
            if outcome.proposal is None:
                notes.failed[ruled.number] = outcome.problem or "no proposal"
                findings.append(ruled)
                continue
            p = outcome.proposal
            kind = p.kind or ruled.kind
            if p.verdict == HELD_UP and kind is None:
                notes.failed[ruled.number] = "the grader held it up without a kind"
                findings.append(ruled)
                continue
            if p.verdict != ruled.verdict:
                notes.disagreed[ruled.number] = ruled.verdict
            findings.append(ruled.model_copy(update={
                "verdict": p.verdict, "reason": p.reason, "kind": kind, "evidence": [*p.evidence, *ruled.evidence],
                "ruled_by": f"grader:{endpoint.label}"}))
    finally:
        grader.close()
    return with_recall(rulings.model_copy(update={"findings": findings})), notes


def rule(root: Path, run_id: str, *, ask: Ask | None, accept: bool, grader=None,
         say: Callable[[str], None] = lambda _: None, notes: GraderNotes | None = None) -> tuple[Rulings, Path]:
    """Draft (key-matcher), grade (optional grader model, its notes into `notes`), finish, save."""
    _check_run_id(root, run_id)
    path = rulings_path(root, run_id)
    if is_file(path):
        existing = load_rulings(path)
        if existing.final:
            return existing, path
    rulings = draft(root, run_id)
    if grader is not None:
        rulings, _ = grade(root, run_id, rulings, grader, say, notes)
    if accept or ask is not None:
        rulings = finish(rulings, None if accept else ask)
    # A round trip through the validating loader: what is written is what loads.
    save_rulings(rulings, path)
    return load_rulings(path), path


VERDICT_CHOICES = {"a": None, "h": HELD_UP, "d": NOT_HELD_UP, "e": "edit"}
