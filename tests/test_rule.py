"""A person finishing the key-matcher's draft: accept or override, then final."""

from __future__ import annotations

from harness.rule import finish
from harness.rulings import HELD_UP, NOT_HELD_UP, Recall, RuledFinding, Rulings, now


def _draft() -> Rulings:
    findings = [
        RuledFinding(number="1", text="orders bypass the db layer", kind="Telemetry", verdict=HELD_UP,
                     reason="names T01: the key's evidence holds.", ruled_by="key-matcher", defects=["T01"]),
        RuledFinding(number="2", text="search is slow", kind="Perf", verdict=NOT_HELD_UP,
                     reason="names no planted defect the key-matcher knows.", ruled_by="key-matcher"),
    ]
    return Rulings(run_id="r", report="report.md", ruled_at=now(), findings=findings,
                   recall=Recall(found=["T01"], planted=15), final=False)


def test_a_person_overrides_one_and_accepts_the_other():
    answers = {"1": None, "2": (HELD_UP, "The search spans average 800 ms and the code scans the catalog.")}
    done = finish(_draft(), lambda f: answers[f.number])
    assert done.final is True
    first, second = done.findings
    assert (first.verdict, first.ruled_by) == (HELD_UP, "key-matcher")
    assert (second.verdict, second.ruled_by) == (HELD_UP, "person")
    assert second.reason.startswith("The search spans average")
    assert done.confirmed == 2 and done.accuracy == 100


def test_accept_takes_every_proposal():
    done = finish(_draft(), None)
    assert done.final and [f.ruled_by for f in done.findings] == ["key-matcher", "key-matcher"]
    assert done.confirmed == 1 and done.reported == 2 and done.accuracy == 50
