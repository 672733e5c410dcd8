"""A person finishing the key-matcher's draft: accept or override, then final."""

from __future__ import annotations

import pytest

from harness.verdicts.rule import finish
from harness.verdicts.rulings import HELD_UP, NOT_HELD_UP, Recall, RuledFinding, Rulings, now


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


def test_a_person_edits_the_counting():
    # Finding 2 is really a restatement of finding 1; a person says so, and names its defect.
    answers = {"1": None, "2": {"verdict": NOT_HELD_UP, "reason": "Says finding 1 again.", "defects": ["T01"],
                                "restates": "1", "counts": 0}}
    done = finish(_draft(), lambda f: answers[f.number])
    second = done.finding("2")
    assert (second.defects, second.restates, second.counts, second.ruled_by) == (["T01"], "1", 0, "person")
    assert done.reported == 1 and done.confirmed == 1 and done.accuracy == 100
    # A person adds a defect to a held-up finding: recall follows.
    done = finish(_draft(), lambda f: {"defects": ["T01", "T03"], "counts": 2} if f.number == "1" else None)
    assert done.recall.found == ["T01", "T03"] and done.confirmed == 2


@pytest.mark.parametrize(("changes", "message"), [
    ({"restates": "1", "counts": 1}, "restatement counts 0"),
    ({"restates": "9", "counts": 0}, "only restate a finding ruled before it"),
    ({"verdict": HELD_UP, "kind": None}, "held up but has no kind"),
    ({"ruled_by": "key-matcher"}, "cannot edit ruled_by"),
])
def test_an_edit_that_breaks_the_rules_is_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        finish(_draft(), lambda f: changes if f.number == "2" else None)
