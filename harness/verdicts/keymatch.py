"""The key-matcher: a first, explainable draft of a run's rulings from the hidden key.

For each finding of the run's report it proposes the planted defect(s) the finding names,
re-runs those defects' evidence queries against the run's **own** telemetry store
(`telemetry.duckdb` in the run folder, opened read-only: no store process needed), and
proposes `held up` when every expectation holds, else `did not hold up`. It drafts;
a person or a grader rules (`final: false`).

Matching is token overlap, nothing cleverer. A defect's words come from its id, its
description and its location (file stem and function name); a finding's words from its
text and its evidence. Words are lower-cased, split on anything not a letter or digit
(and on camelCase), lightly stemmed (`orders` → `order`, `retries` → `retry`), and
common English, SQL and stack words are dropped. Each shared word weighs 1/df, df being
the number of defects of the key that have it, so a word only one defect has weighs 1 and
`span` (in many) weighs little. A defect is named when

    score = sum of the shared words' weights (+ KIND_BONUS when the kinds agree) >= THRESHOLD

and at least MIN_WORDS words are shared. A finding may bundle defects: the best-scoring
defect is named first; each further one is named only if the words it shares that no
already-named defect explains reach THRESHOLD by themselves (so two defects at the same
location, which share location words, are not both named by a finding about one of them).
The reason says which words matched.

Counting: a finding whose defects all are named by an earlier finding is a restatement
(counts 0, `restates` the earliest such finding, `did not hold up`); one naming defects
partly named before counts only the new ones.

The matcher maps, it never confirms: naming a defect whose key evidence holds is not
enough. A proposal of `held up` also needs the finding's OWN evidence (`harness.verdicts.evidence`):
it cites at least one query (`obs ...` or SQL); every cited query re-runs on the run's
store to what the finding claims; for each defect it names, one of them touches that
defect's evidence (a table and an identifying literal of the key's queries); and it
accuses code the mission's own sources hold, at each named defect's location (its file
or function). Each failed condition is a reason of the `did not hold up` proposal; the
finding's re-runs are recorded before the key's.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.verdicts import evidence as ev
from harness.errors import UserError
from harness.paths import RunPaths
from harness.record import RunRecord
from harness.verdicts.report import Finding, parse_report_file
from harness.verdicts.rulings import HELD_UP, NOT_HELD_UP, Recall, Rerun, RuledFinding, Rulings, now

THRESHOLD = 2.0
MIN_WORDS = 2
KIND_BONUS = 0.5
BUNDLE_OWN = 1.0  # a further defect of a bundle: weight of the words only it explains
NO_DEFECT_REASON = "names no planted defect the key-matcher knows; a person or grader must rule it"
RULED_BY = "key-matcher"

_OPS = {">": operator.gt, ">=": operator.ge, "==": operator.eq, "<": operator.lt, "<=": operator.le,
        "!=": operator.ne}
_EXPECT = re.compile(r"^\s*(value|rows)\s*(>=|<=|==|!=|>|<)\s*(-?\d+(?:\.\d+)?)\s*$")
_STOP = set("""
a an and are as at be been being but by can could did do does each every for from get gets got had has have
how if in into is it its itself just more most no not of on once one only or other our so some such than that
the their them then there these they this those through to too two three up use used uses using very via was
we were what when where which while who why will with within without would yet all any also both each few
same own out over under again further per after before instead because
select count sum max min avg coalesce cast as bigint integer varchar json extract string extract_string
where group order by having limit join exists distinct null is like union case when then else end left inner
true false value values row rows attributes attribute resource
c p s l a1 x id ids obs sql query queries result results shows show showed shown see seen found
shop workspace src py module level traces
""".split())
_LITERAL = re.compile(r"'([^']*)'")  # the string literals of a key's evidence query: names, attributes, frames
# `order` (a SQL keyword) is a domain word here: keep it.
_STOP.discard("order")


def _stem(word: str) -> str:
    """A light stemmer: orders/order, retries/retried/retry, rendered/rendering/render."""
    if len(word) > 4 and word.endswith(("ies", "ied")):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        word = word[:-3]
    elif len(word) > 4 and word.endswith("ed"):
        word = word[:-2]
    elif len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


def words(text: str) -> set[str]:
    """The matchable words (stems) of a text."""
    return set(surface_words(text))


def surface_words(text: str) -> dict[str, str]:
    """Each matchable stem of a text, with the first word of the text that gave it."""
    text = re.sub(r"([a-z])([A-Z])", r"\1 \2", text or "")
    out: dict[str, str] = {}
    for raw in re.split(r"[^A-Za-z0-9]+", text.lower()):
        if len(raw) < 2 or raw.isdigit():
            continue
        w = _stem(raw)
        if raw in _STOP or w in _STOP:
            continue
        out.setdefault(w, raw)
        if raw.startswith("un") and len(raw) >= 7:  # unexported / exports, unrecorded / recorded
            out.setdefault(_stem(raw[2:]), raw)
    return out


@dataclass
class Defect:
    id: str
    kind: str
    description: str
    file: str
    function: str
    evidence: list[dict]
    words: set[str] = field(default_factory=set)
    tables: set[str] = field(default_factory=set)  # what its key evidence reads ...
    literals: set[str] = field(default_factory=set)  # ... and the names it looks for

    @classmethod
    def from_key(cls, raw: dict) -> Defect:
        loc = raw.get("location") or {}
        d = cls(id=raw["id"], kind=raw.get("kind", ""), description=raw.get("description", ""),
                file=str(loc.get("file", "")), function=str(loc.get("function", "")),
                evidence=list(raw.get("evidence") or []))
        id_words = words(" ".join(re.split(r"[-_]", raw["id"])[1:]))  # T01-orders-... : drop "T01"
        literals = " ".join(lit for ev in d.evidence for lit in _LITERAL.findall(str(ev.get("sql", ""))))
        d.words = (id_words | words(d.description) | words(Path(d.file).stem) | words(d.function)
                   | words(literals))
        for e in d.evidence:
            d.tables |= ev.tables_of(str(e.get("sql", "")))
            d.literals |= ev.literals_of(str(e.get("sql", "")))
        return d


def load_key(key_path: Path) -> list[Defect]:
    try:
        data = yaml.safe_load(Path(key_path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("no answer key", file=key_path) from None
    except yaml.YAMLError as exc:
        raise UserError(f"the answer key is not valid YAML: {exc}", file=key_path) from None
    if not isinstance(data, dict) or not isinstance(data.get("defects"), list):
        raise UserError("the answer key has no `defects` list", file=key_path)
    return [Defect.from_key(d) for d in data["defects"]]


@dataclass
class Match:
    defect: Defect
    score: float
    matched: list[str]  # shared stems, heaviest first
    kind_agrees: bool
    said: list[str] = field(default_factory=list)  # the finding's own words for them, same order


def _weights(defects: list[Defect]) -> dict[str, float]:
    df: dict[str, int] = {}
    for d in defects:
        for w in d.words:
            df[w] = df.get(w, 0) + 1
    return {w: 1.0 / n for w, n in df.items()}


def score(finding: Finding, defect: Defect, weights: dict[str, float]) -> Match:
    said = surface_words(f"{finding.text} {finding.evidence}")
    shared = set(said) & defect.words
    stems = sorted(shared, key=lambda w: (-weights.get(w, 0), w))
    agrees = finding.kind is not None and finding.kind == defect.kind
    total = sum(weights.get(w, 0) for w in shared) + (KIND_BONUS if agrees and shared else 0.0)
    return Match(defect, round(total, 3), stems, agrees, [said[w] for w in stems])


def name_defects(finding: Finding, defects: list[Defect], weights: dict[str, float] | None = None) -> list[Match]:
    """The defects a finding names, best first (several for a bundle), or []."""
    weights = weights or _weights(defects)
    candidates = sorted((score(finding, d, weights) for d in defects), key=lambda m: (-m.score, m.defect.id))
    named: list[Match] = []
    explained: set[str] = set()
    for m in candidates:
        if m.score < THRESHOLD or len(m.matched) < MIN_WORDS:
            break
        own = [w for w in m.matched if w not in explained]
        own_score = sum(weights.get(w, 0) for w in own) + (KIND_BONUS if m.kind_agrees else 0.0)
        if named and (own_score < BUNDLE_OWN or len(own) < MIN_WORDS):
            continue
        named.append(m)
        explained.update(m.matched)
    return named


def check_expectation(expect: str, rows: list[tuple]) -> tuple[bool, Any]:
    """As key/selftest.py: `value OP N` on the first cell (NULL reads 0), or `rows OP N`."""
    m = _EXPECT.match(expect or "")
    if not m:
        raise ValueError(f"bad expect: {expect!r}")
    what, op, n = m.group(1), m.group(2), float(m.group(3))
    if what == "rows":
        got: Any = len(rows)
    else:
        got = rows[0][0] if rows and rows[0] else None
        if got is None:
            got = 0
    return _OPS[op](float(got), n), got


class Store:
    """The run's own telemetry store, read-only."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._con = None
        self.problem: str | None = None
        if path is None or not Path(path).exists():
            self.problem = f"the run has no telemetry store ({path})"
            return
        try:
            import duckdb

            self._con = duckdb.connect(str(path), read_only=True)
        except Exception as exc:  # noqa: BLE001 - a locked or corrupt store is a finding's evidence, not a crash
            self.problem = f"the telemetry store could not be opened read-only: {exc}"

    def rerun(self, defect: Defect) -> list[Rerun]:
        out = []
        for ev in defect.evidence:
            sql, expect = " ".join(str(ev.get("sql", "")).split()), str(ev.get("expect", ""))
            if self._con is None:
                out.append(Rerun(query=sql, result=f"error: {self.problem}", expect=expect, holds=False,
                                 defect=defect.id))
                continue
            try:
                holds, got = check_expectation(expect, self._con.execute(sql).fetchall())
            except Exception as exc:  # noqa: BLE001 - a failing query is recorded, not raised
                holds, got = False, f"error: {exc}".splitlines()[0]
            if isinstance(got, float) and got.is_integer():
                got = int(got)
            elif not isinstance(got, (int, float, str)):
                got = str(got)
            out.append(Rerun(query=sql, result=got, expect=expect, holds=holds, defect=defect.id))
        return out

    def check(self, cited: ev.Cited) -> ev.QueryCheck:
        """Re-run one query a finding cites, on this store."""
        if self._con is None:
            return ev.QueryCheck(cited, ok=False, result=f"error: {self.problem}",
                                 why=f"the cited query could not be re-run ({self.problem})")
        return ev.rerun(self._con, cited)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def _run_files(run_dir: Path) -> tuple[str, Path, Path]:
    paths = RunPaths(run_dir)
    run_id, report, store, record = run_dir.name, paths.report, paths.telemetry, paths.record
    if record.exists():
        rec = RunRecord.load(record)
        run_id = rec.run_id
        if (path := rec.artifacts.path(run_dir, "agent_output")) and path.exists():
            report = path
        if (path := rec.artifacts.path(run_dir, "telemetry")) and path.exists():
            store = path
    return run_id, report, store


def _result_text(reruns: list[Rerun]) -> str:
    return "; ".join(f"{r.defect}: {r.expect} (got {r.result})" for r in reruns)


def _expect(cited: ev.Cited) -> str:
    if cited.claimed is None:
        return "non-empty, a single number non-zero"
    if cited.claimed == 0:
        return "0 / no rows, as the finding claims"
    return f"about {ev._fmt(cited.claimed)}, as the finding claims (±50 % or ±2)"


def own_evidence(finding: Finding, store: Store) -> tuple[list[ev.QueryCheck], list[Rerun]]:
    """The finding's cited queries, re-run on the store, and as recorded on its ruling."""
    cited = finding.evidence if finding.section == "anomalies" else finding.text  # a gap bullet is one line
    checks = [store.check(c) for c in ev.cited_queries(cited)]
    return checks, [Rerun(query=c.cited.text, result=c.result, expect=_expect(c.cited), holds=c.ok) for c in checks]


def _relative(file: str) -> str:
    return file.removeprefix("workspace/")


def own_problems(finding: Finding, matches: list[Match], checks: list[ev.QueryCheck],
                 sources: Path | None) -> list[str]:
    """Why the finding's own evidence does not establish the defects it names ([] when it does)."""
    problems: list[str] = []
    if not checks:
        problems.append("no telemetry evidence cited (its Evidence names no `obs` command or SQL query)")
    problems += [c.why for c in checks if not c.ok]
    for m in matches:
        d = m.defect
        if checks and not any(c.ok and c.tables & d.tables and ev.literals_meet(c.literals, d.literals)
                              for c in checks):
            names = ", ".join(sorted(d.literals)[:3])
            where = f"{'/'.join(sorted(d.tables))}: {names}"
            problems.append(f"no cited query that holds reads {d.id}'s evidence ({where})")
    accused = ev.accused_code(f"{finding.text} {finding.evidence}", sources)
    if accused.missing:
        problems.append(f"accuses {', '.join(accused.missing)}, which the mission's sources lack")
    for m in matches:
        d = m.defect
        if _relative(d.file) not in accused.files and not (ev.location_functions(d.function, sources)
                                                           & accused.functions):
            problems.append(f"names no code location of {d.id} ({_relative(d.file)}: {d.function})")
    return problems


def draft_rulings(run_dir: Path, key_path: Path, sources: Path | None = None) -> Rulings:
    """The key-matcher's proposals for one run folder (`final: false`). `sources`: the
    mission's own workspace template (default: the `workspace` folder beside the key's),
    where accused code is looked up; never the run's workspace, which the agent wrote."""
    run_dir = Path(run_dir)
    sources = Path(sources) if sources is not None else Path(key_path).resolve().parents[1] / "workspace"
    run_id, report_path, store_path = _run_files(run_dir)
    if not report_path.exists():
        raise UserError("the run has no report to rule", file=report_path,
                        fix="a run that never persisted its report is graded from its draft by a person")
    report = parse_report_file(report_path)
    defects = load_key(key_path)
    weights = _weights(defects)
    store = Store(store_path)
    verdict_of: dict[str, tuple[bool, list[Rerun]]] = {}  # per defect id, re-run once
    first_naming: dict[str, str] = {}  # defect id -> number of the earliest finding naming it
    ruled: list[RuledFinding] = []
    try:
        for finding in report.findings:
            matches = name_defects(finding, defects, weights)
            kind = finding.kind or (matches[0].defect.kind if matches else None)
            if not matches:
                _, own = own_evidence(finding, store)
                ruled.append(RuledFinding(number=finding.number, text=finding.text, kind=kind, verdict=NOT_HELD_UP,
                                          reason=NO_DEFECT_REASON, evidence=own, ruled_by=RULED_BY, counts=1))
                continue
            ids = [m.defect.id for m in matches]
            new = [i for i in ids if i not in first_naming]
            if not new:
                earlier = min((first_naming[i] for i in ids), key=lambda n: [f.number for f in ruled].index(n))
                ruled.append(RuledFinding(
                    number=finding.number, text=finding.text, kind=kind, verdict=NOT_HELD_UP,
                    reason=f"restates finding {earlier} ({', '.join(ids)}), already counted",
                    ruled_by=RULED_BY, defects=ids, counts=0, restates=earlier))
                continue
            for i in new:
                first_naming[i] = finding.number
            reruns: list[Rerun] = []
            for m in matches:
                if m.defect.id not in verdict_of:
                    runs = store.rerun(m.defect)
                    verdict_of[m.defect.id] = (bool(runs) and all(r.holds for r in runs), runs)
                reruns += verdict_of[m.defect.id][1]
            checks, own = own_evidence(finding, store)
            problems = own_problems(finding, matches, checks, sources)
            failed = [i for i in ids if not verdict_of[i][0]]
            if failed:
                bad = [r for r in reruns if not r.holds]
                problems.append(f"the key's evidence does not hold in this run's telemetry ({_result_text(bad)})")
            words_said = "; ".join(f"{m.defect.id} (matched: {', '.join(m.said)})" for m in matches)
            if problems:
                verdict, why = NOT_HELD_UP, "; ".join(problems)
            else:
                verdict = HELD_UP
                why = (f"its {len(checks)} cited quer{'y' if len(checks) == 1 else 'ies'} re-ran to the claim, "
                       f"it accuses the defect's code, and the key's evidence holds ({_result_text(reruns)})")
            extra = f", {len(ids) - len(new)} of them already counted" if len(new) < len(ids) else ""
            bundle = f" (a bundle of {len(ids)} defects{extra})" if len(ids) > 1 else ""
            ruled.append(RuledFinding(
                number=finding.number, text=finding.text, kind=kind, verdict=verdict,
                reason=f"names {words_said}{bundle}: {why}.",
                evidence=[*own, *reruns], ruled_by=RULED_BY, defects=ids, counts=len(new)))
    finally:
        store.close()
    found = sorted({i for f in ruled if f.verdict == HELD_UP for i in f.defects})
    return Rulings(run_id=run_id, report=str(report_path), ruled_at=now(), findings=ruled,
                   recall=Recall(found=found, planted=len(defects)), final=False)
