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
    ({"restates": "1", "counts": 2}, "restatement counts 1"),
    ({"restates": "9", "counts": 0}, "only restate a finding ruled before it"),
    ({"verdict": HELD_UP, "kind": None}, "held up but has no kind"),
    ({"ruled_by": "key-matcher"}, "cannot edit ruled_by"),
])
def test_an_edit_that_breaks_the_rules_is_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        finish(_draft(), lambda f: changes if f.number == "2" else None)


# --- `rule` without a terminal: set, check, --final; void runs refused ------------------------------

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import yaml  # noqa: E402

from harness.records.record import RowKey, RunRecord, Status, Timestamps  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CLI = ROOT / ".venv" / "bin" / "llms-benchmark"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    from test_rulings import REPORT, _store

    (tmp_path / ".vot").mkdir()
    (tmp_path / "missions").symlink_to(ROOT / "missions")
    for run_id, status, reason in (("r-ok", Status.ok, None),
                                   ("r-void", Status.void, "the scenario never drove the stack inside the mission")):
        run = tmp_path / ".llms-benchmark" / "runs" / run_id
        RunRecord(run_id=run_id, key=RowKey(preset="p", effort="medium", effort_requested="medium", gpu="g"),
                  environment="cpu", stack="replay", mission="observability", status=status, reason=reason,
                  times=Timestamps(launch=datetime(2026, 11, 30, 1, tzinfo=UTC))).save(run)
        (run / "report.md").write_text(REPORT)
        _store(run / "telemetry.duckdb")
    return tmp_path


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "rule", *args], capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "LLMS_BENCHMARK_ROOT": str(root), "COLUMNS": "200",
                               "LLMS_BENCHMARK_CACHE": str(root / "cache")})  # no control stores here


def test_rule_set_check_final_without_a_terminal(project: Path):
    path = project / "rulings" / "r-ok.yaml"
    draft = _cli(project, "r-ok")
    assert draft.returncode == 0, draft.stderr
    assert yaml.safe_load(path.read_text())["final"] is False
    done = _cli(project, "r-ok", "set", "5", "--verdict", "held up", "--kind", "Perf",
                "--reason", "The five slowest spans are all shop-api's, as it says.", "--json")
    assert done.returncode == 0, done.stderr
    five = next(f for f in yaml.safe_load(path.read_text())["findings"] if f["number"] == "5")
    assert (five["verdict"], five["ruled_by"], five["kind"]) == ("held up", "person", "Perf")
    # Drafting again keeps the person's ruling.
    assert _cli(project, "r-ok").returncode == 0
    five = next(f for f in yaml.safe_load(path.read_text())["findings"] if f["number"] == "5")
    assert five["ruled_by"] == "person"
    # Bad input: one clear message naming what to fix, exit 2, no traceback.
    for args, message in ((("set", "9", "--verdict", "held up", "--reason", "x."), "finding 9 is not ruled"),
                          (("set", "5", "--verdict", "maybe", "--reason", "x."), "verdict 'maybe' is not one of"),
                          (("set", "5", "--verdict", "held up"), "set needs the finding's number, --verdict and --reason"),
                          (("frobnicate",), "'frobnicate' is not an action of rule")):
        bad = _cli(project, "r-ok", *args)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)
    # A hand edit that breaks the file: `check` names the file, the finding and the field.
    data = yaml.safe_load(path.read_text())
    data["findings"][1]["verdict"] = "sort of"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    bad = _cli(project, "r-ok", "check")
    assert bad.returncode == 2 and "r-ok.yaml" in bad.stderr and "finding 2" in bad.stderr and "sort of" in bad.stderr
    assert "--final" not in bad.stderr and "Traceback" not in bad.stderr
    assert _cli(project, "r-ok", "--final").returncode == 2  # not made final while invalid
    data["findings"][1]["verdict"] = "did not hold up"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    ok = _cli(project, "r-ok", "check", "--json")
    assert ok.returncode == 0 and '"final": false' in ok.stdout
    final = _cli(project, "r-ok", "--final", "--json")
    assert final.returncode == 0 and '"final": true' in final.stdout, final.stderr
    assert yaml.safe_load(path.read_text())["final"] is True
    again = _cli(project, "r-ok", "set", "5", "--verdict", "did not hold up", "--reason", "Changed my mind.")
    assert again.returncode == 2 and "final" in again.stderr


def test_rule_refuses_a_void_run_with_its_reason(project: Path):
    for args in (("r-void", "--accept"), ("r-void",), ("r-void", "set", "1", "--verdict", "held up", "--reason", "x.")):
        res = _cli(project, *args)
        assert res.returncode == 2, res.stdout
        said = " ".join(res.stderr.split())  # the console wraps long lines where it likes
        assert "is void: the scenario never drove the stack inside the mission" in said, res.stderr
    assert not (project / "rulings" / "r-void.yaml").exists()
    assert "no draft to make final" in _cli(project, "r-void", "--final").stderr


# --- issue 59, item 5: `rule` never exits 1 on anything an agent can write ---------------------------

def _with_records(project: Path, records: list[dict]) -> None:
    run = project / ".llms-benchmark" / "runs" / "r-ok"
    (run / "findings.json").write_text(json.dumps({"findings": records}))


GOOD_RECORD = {"number": "1", "claim": "POST /orders spans never get a sqlite child span", "kind": "missing-signal",
               "direction": "absent", "scope": "shop-api", "code": {"file": "src/shop_api/app.py",
                                                                    "function": "place_order"}}


@pytest.mark.parametrize("records", [
    # A reading in words, as `obs finding add --read "72 rows"` stores it and `obs finding check` accepts.
    [{**GOOD_RECORD, "queries": [{"query": "SELECT count(*) FROM spans", "read": "72 rows"}]}],
    [{**GOOD_RECORD, "queries": [{"query": "SELECT count(*) FROM spans", "read": "x" * 5000}]}],
    # Odd fields: a list for a file, a number for a scope, a query that is a number.
    [{**GOOD_RECORD, "scope": 7, "code": {"file": ["a", "b"]}, "queries": [{"query": 5, "read": None}]}],
    # Ten string-building queries in one record: each fails alone on the rule's memory.
    [{**GOOD_RECORD, "queries": [{"query": "SELECT length(string_agg(repeat(name, 3000000), '')) FROM spans",
                                  "read": 1}] * 10}],
])
def test_rule_never_exits_1_on_what_an_agent_writes(project: Path, records: list[dict]):
    _with_records(project, records)
    done = _cli(project, "r-ok", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    ruled = yaml.safe_load((project / "rulings" / "r-ok.yaml").read_text())
    assert [f["verdict"] for f in ruled["findings"]] == ["did not hold up"] * len(records)


def test_a_finding_that_runs_out_of_memory_fails_alone(project: Path):
    """Under a rule memory cap too small for DuckDB's answers, the findings are still each ruled."""
    _with_records(project, [{**GOOD_RECORD, "number": str(i), "queries": [
        {"query": "SELECT length(string_agg(repeat(name, 3000000), '')) FROM spans", "read": 1}] * 3}
        for i in range(1, 4)])
    done = subprocess.run([str(CLI), "rule", "r-ok", "--json"], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "LLMS_BENCHMARK_ROOT": str(project), "LLMS_BENCHMARK_CACHE":
                               str(project / "cache"), "LLMS_BENCHMARK_RULE_MEMORY": str(450 << 20)})
    assert done.returncode == 0, done.stderr[-2000:]
    ruled = yaml.safe_load((project / "rulings" / "r-ok.yaml").read_text())
    assert [f["number"] for f in ruled["findings"]] == ["1", "2", "3"]
