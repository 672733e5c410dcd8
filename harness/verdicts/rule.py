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
from pathlib import Path

from harness.errors import UserError
from harness.verdicts.keymatch import draft_rulings
from harness.records.paths import RUN_RECORD, ProjectPaths
from harness.records.record import RunRecord, Status
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


def ruleable(record: Path, rec: RunRecord) -> None:
    """Only a run that produced a row is ruled: a void, refused or fault run is refused with the
    record's own reason."""
    if rec.status != Status.ok:
        raise UserError(f"run '{rec.run_id}' is {rec.status.value}: {rec.reason or 'no reason recorded'}",
                        file=record, field="status",
                        fix="a run that is not ok yields no row and is never ruled; launch the mission again")


def draft(root: Path, run_id: str) -> Rulings:
    folder, rec = run_folder(root, run_id)
    ruleable(ProjectPaths(root).run(run_id).record, rec)
    key = root / "missions" / rec.mission / "key" / "defects.yaml"
    if not key.is_file():
        raise UserError(f"mission '{rec.mission}' has no hidden key to rule against", file=key,
                        fix="rule missions that ship key/defects.yaml (the observability mission)")
    from harness.verdicts.controls import Controls

    # The mission's control stores (made by `make setup`), when this machine has them for this
    # mission version: then a cited query counts only where it reads differently with the defect fixed.
    from harness.verdicts.drive import run_drive

    # Controls driven as this run was, when such a set was made (`controls build --duration --vus`);
    # else the short mode's, compared per request driven (the rulings say which).
    controls = Controls.for_mission(root / "missions" / rec.mission, run_drive(folder))
    rulings = draft_rulings(folder, key, sources=root / "missions" / rec.mission / "workspace", controls=controls)
    # The rulings file is committed: it names the report relative to the project, never by absolute path.
    return rulings.model_copy(update={"report": _relative_to(folder / rulings.report, root)})


def _relative_to(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path.name  # never a host path


def with_recall(rulings: Rulings) -> Rulings:
    """Recall follows the verdicts: the planted defects that held-up findings name."""
    found = sorted({d for f in rulings.findings if f.verdict == HELD_UP for d in f.defects})
    return rulings.model_copy(update={"recall": Recall(found=found, planted=rulings.recall.planted)})


def edited(finding: RuledFinding, changes: dict, earlier: list[str] | None = None) -> RuledFinding:
    """A person's edit of one finding, validated (a restatement counts 1 and restates one of
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


def rule(root: Path, run_id: str, *, ask: Ask | None, accept: bool,
         grade: Callable[[Rulings], Rulings] | None = None) -> tuple[Rulings, Path]:
    """Draft (key-matcher), grade (optional: a grader model's proposals, `harness.grader.apply`),
    finish, save."""
    _check_run_id(root, run_id)
    path = rulings_path(root, run_id)
    existing = None
    if is_file(path):
        existing = load_rulings(path)
        if existing.final:
            if grade is not None:  # never "graded" when no grader was asked: a final ruling is not re-ruled
                raise UserError("these rulings are final: the grader was not run and nothing was changed",
                                file=path, field="--grader",
                                fix="a final ruling is changed only by hand, in review (set `final: false` in it to "
                                    "reopen it, then grade again); or leave --grader out to show it")
            return existing, path
    rulings = draft(root, run_id)
    if existing is not None:  # a draft a person has edited (`rule RUN set N ...`): their rulings stand
        rulings = _keep_person(rulings, existing)
    if grade is not None:
        rulings = grade(rulings)
    if accept or ask is not None:
        rulings = finish(rulings, None if accept else ask)
    # A round trip through the validating loader: what is written is what loads.
    save_rulings(rulings, path)
    return load_rulings(path), path


VERDICT_CHOICES = {"a": None, "h": HELD_UP, "d": NOT_HELD_UP, "e": "edit"}
VERDICT_WORDS = {"held up": HELD_UP, "held-up": HELD_UP, "held": HELD_UP, "did not hold up": NOT_HELD_UP,
                 "did-not-hold-up": NOT_HELD_UP, "not held up": NOT_HELD_UP, "not-held-up": NOT_HELD_UP}


def _keep_person(fresh: Rulings, existing: Rulings) -> Rulings:
    mine = {f.number: f for f in existing.findings if f.ruled_by == "person"}
    findings = [mine.get(f.number, f) for f in fresh.findings]
    return with_recall(fresh.model_copy(update={"findings": findings}))


def _existing_draft(root: Path, run_id: str) -> tuple[Rulings, Path]:
    """The run's rulings file, drafted first when there is none; refused once final."""
    _check_run_id(root, run_id)
    path = rulings_path(root, run_id)
    if not is_file(path):
        rulings = draft(root, run_id)
        save_rulings(rulings, path)
    else:
        folder, rec = run_folder(root, run_id)
        ruleable(ProjectPaths(root).run(run_id).record, rec)
    rulings = check(root, run_id, path)
    if rulings.final:
        raise UserError("these rulings are final and are not edited", file=path, field="final",
                        fix="a final ruling is changed only by hand, in review (set `final: false` to reopen it)")
    return rulings, path


def set_verdict(root: Path, run_id: str, number: str, verdict: str, reason: str, kind: str | None = None,
                restates: str | None = None) -> tuple[Rulings, Path]:
    """`rule RUN set N --verdict ... --reason ...`: a person's ruling of one finding, without a
    terminal; the file stays a draft until `rule RUN --final`."""
    rulings, path = _existing_draft(root, run_id)
    word = VERDICT_WORDS.get(" ".join(str(verdict or "").lower().split()))
    if word is None:
        raise UserError(f"verdict '{verdict}' is not one of: '{HELD_UP}', '{NOT_HELD_UP}'", field="--verdict",
                        fix=f"rule {run_id} set {number} --verdict '{HELD_UP}' --reason 'one sentence'")
    numbers = [f.number for f in rulings.findings]
    if str(number) not in numbers:
        raise UserError(f"finding {number} is not ruled in {path.name} (its findings: {', '.join(numbers) or 'none'})",
                        file=path, field="findings.number", fix="name a finding by the report's own number")
    changes: dict = {"verdict": word, "reason": reason or ""}
    if kind:
        changes["kind"] = kind
    if restates is not None:
        changes.update(restates=restates or None, counts=1)  # every row counts as reported (issue 59)
    findings = []
    for f in rulings.findings:
        if f.number == str(number):
            try:
                f = edited(f, changes, [g.number for g in findings])
            except ValueError as exc:
                raise UserError(f"finding {number}: {_first(exc)}", file=path,
                                fix="a held-up finding needs a kind (--kind Telemetry|Perf|Behavior) and "
                                    "every ruling a one-sentence --reason") from None
        findings.append(f)
    rulings = with_recall(rulings.model_copy(update={"findings": findings}))
    save_rulings(rulings, path)
    return load_rulings(path), path


def _first(exc: Exception) -> str:
    text = str(exc)
    for line in text.splitlines():
        if line.strip() and not line.startswith(("1 validation error", " ", "For further")):
            return line.strip().removeprefix("Value error, ")
    return text.splitlines()[0] if text else type(exc).__name__


def check(root: Path, run_id: str, path: Path | None = None) -> Rulings:
    """`rule RUN check`: validate the (hand-)edited rulings file against its run and report:
    one error naming the file, the finding and the fix, or the rulings."""
    _check_run_id(root, run_id)
    path = path or rulings_path(root, run_id)
    if not is_file(path):
        raise UserError("no rulings file to check", file=path, fix=f"draft one first: llms-benchmark rule {run_id}")
    folder, rec = run_folder(root, run_id)
    report = Path(rulings_report(folder, rec))
    known = ruled_findings(folder, rec, root) if report.is_file() or (folder / "findings.json").is_file() else None
    rulings = load_rulings(path, report=known)
    if rulings.run_id != rec.run_id:
        raise UserError(f"run_id is '{rulings.run_id}', but the file rules run '{rec.run_id}'", file=path,
                        field="run_id", fix=f"set run_id: {rec.run_id}")
    return rulings


def ruled_findings(folder: Path, rec: RunRecord, root: Path):
    """The findings the run is ruled on: its structured records, else its markdown report."""
    from harness.verdicts.keymatch import load_findings

    return load_findings(folder, rulings_report(folder, rec), root / "missions" / rec.mission / "workspace")


def rulings_report(folder: Path, rec: RunRecord) -> Path:
    path = rec.artifacts.path(folder, "agent_output")
    return path if path is not None else folder / "report.md"


def finalise(root: Path, run_id: str) -> tuple[Rulings, Path]:
    """`rule RUN --final`: the draft as it stands (validated), made final."""
    path = rulings_path(root, run_id)
    _check_run_id(root, run_id)
    if not is_file(path):
        raise UserError("no draft to make final", file=path,
                        fix=f"draft first (llms-benchmark rule {run_id}), rule what needs a person "
                            f"(rule {run_id} set N --verdict ... --reason ...), then --final")
    rulings, path = _existing_draft(root, run_id)
    rulings = with_recall(rulings.model_copy(update={"final": True}))
    save_rulings(rulings, path)
    return load_rulings(path), path
