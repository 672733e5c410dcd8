"""Rulings: one file per run (`rulings/<run-id>.yaml`), one entry per reported finding.

Each finding of the run's report is ruled on evidence, keyed by the report's own finding
number ("3" for an Anomalies row, "G2" for a gap): it *held up* or *did not hold up*, with
a one-sentence reason and the evidence re-run (query and result). Counting follows the
benchmark's rules, decided before grading:

- every row a report makes counts as reported (seed 000), a restatement of a finding already
  counted included (`restates` names the earlier one): restating or enumerating never pays;
- a finding bundling N defects with different causes counts N (a person's ruling);
- any other finding counts 1.

From these alone: `reported` = sum of counts, `confirmed` = sum of counts of held-up
findings, `by_kind` = confirmed split Telemetry / Perf / Behavior (by the finding's kind),
`accuracy` = round(100 * confirmed / reported). `recall` is the planted defects the
held-up findings name, against the number planted.

A draft (the key-matcher's, `final: false`) is a proposal; a person or grader edits it
and sets `final: true`. Written atomically (temp file + os.replace).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.atomic import write_atomic
from harness.errors import UserError
from harness.verdicts.report import KINDS, Report, parse_report_file
from harness.vot.loader import parse_yaml, read_bytes

HELD_UP = "held up"
NOT_HELD_UP = "did not hold up"
VERDICTS = (HELD_UP, NOT_HELD_UP)
Kind = Literal["Telemetry", "Perf", "Behavior"]
Verdict = Literal["held up", "did not hold up"]
_RULED_BY = re.compile(r"^(person|key-matcher|grader:\S+)$")


def _as_text(value: Any) -> Any:
    """Finding numbers are the report's own ("3", "G2"); a YAML `3` is the string "3"."""
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class Rerun(BaseModel):
    """One query re-run by the ruler, and what it returned."""

    model_config = ConfigDict(extra="forbid")

    query: str
    result: Any = None  # the first cell / row count, an error text, or a person's note of what came back
    expect: str | None = None  # the key's expectation (`value > 0`), when the query comes from the key
    holds: bool | None = None  # whether `result` meets `expect`
    defect: str | None = None  # the key defect whose evidence this is


class RuledFinding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    number: str
    text: str = ""
    kind: Kind | None = None  # None only when the report gave none and no ruler has set one
    verdict: Verdict
    reason: str
    evidence: list[Rerun] = Field(default_factory=list)
    ruled_by: str
    defects: list[str] = Field(default_factory=list)
    counts: int = Field(default=1, ge=0)
    restates: str | None = None

    _number = field_validator("number", "restates", mode="before")(_as_text)

    @field_validator("reason")
    @classmethod
    def _reason_sentence(cls, value: str) -> str:
        value = " ".join(value.split())
        if not value:
            raise ValueError("reason is empty: give one sentence saying why the finding held up or not")
        return value

    @field_validator("ruled_by")
    @classmethod
    def _ruled_by(cls, value: str) -> str:
        if not _RULED_BY.match(value):
            raise ValueError(f"ruled_by '{value}' is not 'person', 'key-matcher' or 'grader:<model>'")
        return value

    @field_validator("evidence", mode="before")
    @classmethod
    def _evidence_text(cls, value: Any) -> Any:
        # A person may write the evidence as one line: "`obs sql ...` → 0 rows".
        if isinstance(value, str):
            return [{"query": value}] if value.strip() else []
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RuledFinding:
        # A restatement counts 1 (every row a report makes is reported, issue 59); 0 in rulings ruled
        # before that, which stay readable as they were written.
        if self.restates is not None and self.counts > 1:
            raise ValueError(f"restates finding {self.restates} but counts {self.counts}: a restatement counts 1")
        if self.verdict == HELD_UP and self.kind is None:
            raise ValueError(f"held up but has no kind: set kind to one of {', '.join(KINDS)}")
        return self


class Recall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    found: list[str] = Field(default_factory=list)  # planted defect ids named by held-up findings
    planted: int = 0

    @property
    def ratio(self) -> float | None:
        return len(self.found) / self.planted if self.planted else None


class Rulings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    report: str  # path of the report ruled
    ruled_at: datetime
    findings: list[RuledFinding] = Field(default_factory=list)
    recall: Recall = Field(default_factory=Recall)
    final: bool = False
    # How the cited queries were judged: against control stores driven as the run was, normalised
    # per request driven, or with none on the machine (issue 34, item 3); None in older files.
    controls: str | None = None
    source: str | None = None  # what was ruled: "findings.json" (structured records) or "report.md"

    @model_validator(mode="after")
    def _numbers(self) -> Rulings:
        seen: set[str] = set()
        for f in self.findings:
            if f.number in seen:
                raise ValueError(f"finding {f.number} is ruled twice")
            if f.restates is not None and f.restates not in seen:
                raise ValueError(f"finding {f.number} restates finding {f.restates}, which is not ruled before it")
            seen.add(f.number)
        return self

    # Derived figures: never stored, always computed from the findings.
    @property
    def reported(self) -> int:
        return sum(f.counts for f in self.findings)

    @property
    def confirmed(self) -> int:
        return sum(f.counts for f in self.findings if f.verdict == HELD_UP)

    @property
    def by_kind(self) -> dict[str, int]:
        split = {kind: 0 for kind in KINDS}
        for f in self.findings:
            if f.verdict == HELD_UP and f.kind:
                split[f.kind] += f.counts
        return split

    @property
    def accuracy(self) -> int | None:
        """round(100 * confirmed / reported); None when nothing was reported."""
        return round(100 * self.confirmed / self.reported) if self.reported else None

    def finding(self, number: str) -> RuledFinding | None:
        return next((f for f in self.findings if f.number == str(number)), None)


def _problem(raw: Any, error: dict) -> tuple[str, str | None]:
    """One pydantic error as (text, field), naming the finding by the report's number."""
    loc = list(error.get("loc", ()))
    field = ".".join(str(p) for p in loc) or None
    where = ""
    if len(loc) >= 2 and loc[0] == "findings" and isinstance(loc[1], int):
        number = None
        items = raw.get("findings") if isinstance(raw, dict) else None
        if isinstance(items, list) and loc[1] < len(items) and isinstance(items[loc[1]], dict):
            number = items[loc[1]].get("number")
        where = f"finding {number if number is not None else '#' + str(loc[1] + 1)}"
        field = ".".join(str(p) for p in loc[2:]) or None
    message = error.get("msg", "invalid")
    kind = error.get("type")
    if field == "verdict" and kind in ("literal_error", "string_type"):
        message = f"verdict {error.get('input')!r} is not one of: {', '.join(repr(v) for v in VERDICTS)}"
    elif kind == "missing":
        message = f"{field} is missing" + (": give one sentence saying why" if field == "reason" else "")
    elif message.startswith("Value error, "):
        message = message[len("Value error, "):]
    return (f"{where}: {message}" if where else message), field


def load_rulings(path: Path, report: Path | Report | None = None) -> Rulings:
    """Read and validate a rulings file. Every problem is gathered into ONE UserError that
    names the file and the finding number. With `report` (its path or parsed Report), a
    ruled finding number the report lacks is refused too."""
    path = Path(path)
    if not path.exists():
        raise UserError("no rulings file", file=path, fix="draft one with the key-matcher, or write it")
    raw = parse_yaml(read_bytes(path), path)  # unreadable, not UTF-8, not YAML: one UserError
    if not isinstance(raw, dict):
        raise UserError("a rulings file is a mapping (run_id, report, ruled_at, findings, recall, final)", file=path,
                        fix="restore it from git, or correct it by hand (`llms-benchmark rule RUN check` checks it)")
    try:
        rulings = Rulings.model_validate(raw)
    except ValidationError as exc:
        problems = [_problem(raw, e) for e in exc.errors()]
        text = problems[0][0]
        if len(problems) > 1:
            text = f"{len(problems)} problems:\n  " + "\n  ".join(p for p, _ in problems)
        raise UserError(text, file=path, field=problems[0][1] if len(problems) == 1 else None,
                        fix="verdict is 'held up' or 'did not hold up'; every finding needs a one-sentence reason") from None
    if report is not None:
        parsed = report if isinstance(report, Report) else parse_report_file(Path(report))
        known = [f.number for f in parsed.findings]
        unknown = [f.number for f in rulings.findings if f.number not in known]
        if unknown:
            where = str(report) if not isinstance(report, Report) else rulings.report
            raise UserError(
                f"finding {', '.join(unknown)} is not in the report {where} (its findings: {', '.join(known) or 'none'})",
                file=path, field="findings.number",
                fix="key each ruling by the report's own finding number")
    return rulings


def save_rulings(rulings: Rulings, path: Path) -> Path:
    """Write atomically: a temp file in the same folder, then os.replace."""
    data = rulings.model_dump(mode="json")
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)
    return write_atomic(path, text)


def now() -> datetime:
    return datetime.now(UTC)
