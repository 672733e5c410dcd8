"""A grader model's proposals applied to a draft of rulings: it may move a finding down, never
up (`UP_REFUSED`), and what it did beside its proposals is kept (`GraderNotes`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.grader.session import Grader, workspace_and_store
from harness.grader.tools import GraderTools
from harness.verdicts.rule import rulings_report, ruled_findings, run_folder, with_recall
from harness.verdicts.rulings import HELD_UP, Rulings


@dataclass
class GraderNotes:
    """What the grader did beside its proposals: where it disagreed with the key-matcher
    (number → the key-matcher's verdict), where it gave no proposal (number → why), and where
    it would have held up what the mechanical check did not (number → why that was refused)."""

    disagreed: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)


# A grader is a model reading text the agent wrote: it may be talked into a verdict. It can
# therefore only move a finding down; up takes discriminating evidence, which only the
# mechanical check (or a person, with `rule set`) establishes.
UP_REFUSED = ("the grader would hold it up, but the mechanical check found no discriminating evidence for it; "
              "a grader can only move a finding down")


def grade(root: Path, run_id: str, rulings: Rulings, endpoint, say: Callable[[str], None] = lambda _: None,
          notes: GraderNotes | None = None) -> tuple[Rulings, GraderNotes]:
    """The grader model's proposal replaces the key-matcher's verdict, reason and kind, unless it
    would move the finding up (refused: `UP_REFUSED`); its evidence comes first, the key's re-runs
    after. Restatements are not re-graded."""
    folder, rec = run_folder(root, run_id)
    report_path = rulings_report(folder, rec)  # the run's own copy, whatever the file says
    report = ruled_findings(folder, rec, root)
    report_text = report_path.read_text(encoding="utf-8", errors="replace") if report_path.is_file() else \
        "\n".join(f"{f.number}: {f.text}" for f in report.findings)
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
            if p.verdict == HELD_UP and ruled.verdict != HELD_UP:
                notes.refused[ruled.number] = UP_REFUSED
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
