"""A grader model's proposals applied to a draft of rulings: it may move a finding down, never
up (`UP_REFUSED`), and what it did beside its proposals is kept (`GraderNotes`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UserError
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
GRADER_FIX = ("start the grader, or give the URL it answers on (--grader-url, or the provider's baseURL in "
              "--grader-config); or rule without --grader to take the key-matcher's proposals")

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
    graded = proposed = 0
    failed: dict[str, str] = {}
    try:
        for ruled in rulings.findings:
            finding = by_number.get(ruled.number)
            if finding is None or ruled.restates is not None:
                findings.append(ruled)
                continue
            say(f"grading finding {ruled.number} with {endpoint.label}")
            outcome = grader.grade(finding, report_text)
            graded += 1
            if outcome.unreachable:  # nothing is graded, so nothing is claimed as graded (or saved)
                raise UserError(f"the grader {endpoint.label} could not be reached at {endpoint.base_url} "
                                f"({outcome.problem}); nothing was ruled or written", field="--grader",
                                fix=GRADER_FIX)
            if outcome.proposal is None:
                failed[ruled.number] = notes.failed[ruled.number] = outcome.problem or "no proposal"
                findings.append(ruled)
                continue
            proposed += 1
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
    if graded and not proposed:  # asked for every finding and proposed for none: not graded
        first = next(iter(failed.items()))
        raise UserError(f"the grader {endpoint.label} gave no proposal for any of the {graded} finding(s) it was "
                        f"asked to rule (finding {first[0]}: {first[1]}); nothing was ruled or written",
                        field="--grader", fix=GRADER_FIX)
    return with_recall(rulings.model_copy(update={"findings": findings})), notes
