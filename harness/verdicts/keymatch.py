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

and at least MIN_WORDS words are shared: those are the finding's candidates (`candidates`).
(`name_defects` keeps the older reading of a bundle, for a person's eyes: each further defect
only if the words no named one explains reach THRESHOLD by themselves.) The reason says which
words matched.

The matcher maps, it never confirms, and words credit nothing: a finding is credited with a
planted defect only through its OWN evidence (`harness.verdicts.evidence`):

- no cited query refutes it (each re-runs to what the finding claims), and every number its
  Finding text quotes as measured ("12 spans", "40 %") is one a cited query re-ran to;
- one cited query is evidence of that defect: with the mission's control stores, it reads
  differently on the run than on the store where only that defect is fixed, by more than the
  two unfixed baselines differ (`Discriminator`); without them, it measures a table of the
  defect's key queries and shares a literal only that defect's key uses (or two), and an
  absence is not evidence;
- it accuses the defect's code: its file AND one of its functions, as defined in that file;
- the key's own evidence holds in the run.

One row, one defect: a query credits at most one defect of its row, so a row is credited
with several defects only when it gives separate evidence for each; sub-findings (8a, 8b)
are findings of their own. Candidates are tried best-scoring first; one already credited by
an earlier finding is skipped. A row credited with nothing names its best candidate: if an
earlier finding named or showed it, it is a restatement (counts 0), else it counts 1 and
did not hold up, each failed condition in its reason. Reasons never carry the key's ids.
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
    specific: set[str] = field(default_factory=set)  # those no other defect's key queries use

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
    defects = [Defect.from_key(d) for d in data["defects"]]
    for d in defects:
        others = set().union(*(o.literals for o in defects if o is not d))
        d.specific = d.literals - others  # exact: a stack pattern that contains a logger name is not that name
    return defects


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


def candidates(finding: Finding, defects: list[Defect], weights: dict[str, float] | None = None) -> list[Match]:
    """Every defect a finding's words could name (score and words over the bar), best first.
    Words only propose: a defect is credited through the finding's own evidence (`draft_rulings`)."""
    weights = weights or _weights(defects)
    out = sorted((score(finding, d, weights) for d in defects), key=lambda m: (-m.score, m.defect.id))
    return [m for m in out if m.score >= THRESHOLD and len(m.matched) >= MIN_WORDS]


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


RULE_BUDGET_S = 180.0  # all cited queries of one rule together; past it, the rest are not re-run
MAX_RERUNS = 300  # cited queries re-run per rule


class Store:
    """The run's own telemetry store, read-only and confined (`evidence.open_store`)."""

    def __init__(self, path: Path | None, budget_s: float = RULE_BUDGET_S) -> None:
        self.path = path
        self._con = None
        self.problem: str | None = None
        self.budget_s = budget_s
        self.spent_s = 0.0
        self.reruns = 0
        self.hide: tuple[str, ...] = ()
        if path is None or not Path(path).exists():
            self.problem = "the run has no telemetry store"
            return
        resolved = Path(path).resolve()
        self.hide = tuple(sorted({str(resolved), str(Path(path)), str(resolved.parent), str(Path.home())},
                                 key=len, reverse=True))
        try:
            self._con = ev.open_store(resolved)
        except Exception as exc:  # noqa: BLE001 - a locked or corrupt store is a finding's evidence, not a crash
            self.problem = f"the telemetry store could not be opened read-only: {ev._scrub(str(exc), self.hide)}"

    def rerun(self, defect: Defect) -> list[Rerun]:
        out = []
        for e in defect.evidence:
            sql, expect = " ".join(str(e.get("sql", "")).split()), str(e.get("expect", ""))
            if self._con is None:
                out.append(Rerun(query=sql, result=f"error: {self.problem}", expect=expect, holds=False,
                                 defect=defect.id))
                continue
            try:
                holds, got = check_expectation(expect, self._con.execute(sql).fetchall())
            except Exception as exc:  # noqa: BLE001 - a failing query is recorded, not raised
                holds, got = False, f"error: {ev._scrub(str(exc), self.hide)}"
            if isinstance(got, float) and got.is_integer():
                got = int(got)
            elif not isinstance(got, (int, float, str)):
                got = str(got)
            out.append(Rerun(query=sql, result=got, expect=expect, holds=holds, defect=defect.id))
        return out

    def check(self, cited: ev.Cited) -> ev.QueryCheck:
        """Re-run one query a finding cites, on this store, within the rule's budget."""
        import time

        if self._con is None:
            return ev.QueryCheck(cited, ok=False, result=f"error: {self.problem}",
                                 why=f"the cited query could not be re-run ({self.problem})")
        left = self.budget_s - self.spent_s
        if left <= 0 or self.reruns >= MAX_RERUNS:
            return ev.QueryCheck(cited, ok=False, result="not re-run",
                                 why="the cited query was not re-run: this rule's query budget is spent")
        self.reruns += 1
        t0 = time.monotonic()
        try:
            return ev.rerun(self._con, cited, self.hide, min(ev.QUERY_LIMIT_S, left))
        finally:
            self.spent_s += time.monotonic() - t0

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
    """The key's re-runs, in words, without the key's ids or queries."""
    return "; ".join(f"key query {i + 1}: {r.expect} (got {r.result})" for i, r in enumerate(reruns))


def _expect(cited: ev.Cited) -> str:
    if cited.claimed is None:
        return "non-empty, a single number non-zero"
    if cited.claimed == 0:
        return "0 / no rows, as the finding claims"
    return f"about {ev._fmt(cited.claimed)}, as the finding claims (±50 % or ±2)"


def own_evidence(finding: Finding, store: Store) -> tuple[list[ev.QueryCheck], list[Rerun], list[str]]:
    """The finding's cited queries (at most `evidence.MAX_CITED`), re-run on the store; as
    recorded on its ruling; and the problems of the citing itself (too many queries)."""
    cited_text = finding.evidence if finding.section == "anomalies" else finding.text  # a gap bullet is one line
    cited = ev.cited_queries(cited_text)
    problems = []
    if len(cited) > ev.MAX_CITED:
        problems.append(f"it cites {len(cited)} queries; at most {ev.MAX_CITED} are re-run for one finding, "
                        "so it is not ruled on them")
        cited = cited[:ev.MAX_CITED]
    checks = [store.check(c) for c in cited]
    return checks, [Rerun(query=c.cited.text[:2000], result=c.result, expect=_expect(c.cited), holds=c.ok)
                    for c in checks], problems


def _relative(file: str) -> str:
    return file.removeprefix("workspace/")


# A number the Finding text quotes as a measurement: "12 spans", "40 % self", "returned 0", "→ 259".
_MEASURED = re.compile(
    r"(?:(?:→|->|=|\breturn(?:ed|s)?|\bgives?|\bgave|\bshows?|\bshowed|\bcounts?|\bonly|\ball)\s*)?"
    r"(?<![\w./{-])(\d[\d,]*(?:\.\d+)?)\s*(%|ms\b|s\b|"
    r"(?:spans?|rows?|traces?|records?|log\s+(?:lines|records)|lines|requests|points|samples|series|calls|"
    r"orders|errors|times|metrics|logs|children|child\s+spans|distinct|values|refs|references|hits)\b)",
    re.IGNORECASE)


def text_claims(text: str) -> list[float]:
    """The numbers a finding's own text quotes as measured (a count with its unit), never ids,
    HTTP statuses or code constants."""
    out = []
    for m in _MEASURED.finditer(ev.prose(text or "")):
        try:
            out.append(float(m.group(1).replace(",", "")))
        except ValueError:
            continue
    return out


def claim_problems(finding: Finding, checks: list[ev.QueryCheck]) -> list[str]:
    """Item 2: every number the Finding text quotes must be one a cited query re-ran to."""
    got = [v for c in checks if c.ok or c.values for v in c.values]
    problems = []
    for n in text_claims(finding.text):
        if not any(ev.within(n, v) for v in got):
            shown = ", ".join(ev._fmt(v) for v in got[:5]) or "nothing"
            problems.append(f"its text says {ev._fmt(n)}, which no cited query re-ran to (they gave {shown})")
    return problems


def reads_defect(check: ev.QueryCheck, defect: Defect) -> bool:
    """A cited query that is evidence reads the defect's own telemetry: one of the tables its key
    queries read, and a literal only this defect's key queries use (or two it shares with them)."""
    if not (check.evidence and check.tables & defect.tables):
        return False
    shared = ev.literals_meet(check.literals, defect.literals)
    return bool(shared & defect.specific) or len(shared) >= 2


def general_problems(finding: Finding, checks: list[ev.QueryCheck], citing: list[str],
                     accused: ev.Accused) -> list[str]:
    """Why the finding holds up for no defect at all, whichever it names ([] when none)."""
    problems = list(citing)
    if not checks:
        problems.append("no telemetry evidence cited (its Evidence names no `obs` command or SQL query)")
    problems += [c.why for c in checks if not c.ok]
    problems += claim_problems(finding, checks)
    if accused.missing:
        problems.append(f"accuses {', '.join(accused.missing)}, which the mission's sources lack")
    return problems


# A reading differs "beyond noise" when |run - control| reaches all three bars. Measured on the
# observability mission (short drive, 2 cores shared with other jobs): the two unfixed baselines
# agree exactly on every count of spans, logs and metrics and differ by ~8 % on profile samples,
# while a loaded machine drove ~22 % fewer requests in one control (GET /products with a child:
# 109 vs 85): hence half the larger reading, not only the baselines' spread. The spread is
# taken relative (|b1 - b2| / the larger) and applied at the readings' own scale: a run on a
# busier machine reads fewer profile samples than its baselines did (measured in a parallel
# test run: P04's samples 47 on the run, 0 with it fixed, baselines 88/71 -- an absolute
# spread of 17 x 3 = 51 would have hidden a defect that reads 47 vs 0).
NOISE_FACTOR = 3.0  # three times the two baselines' own relative difference,
MIN_RELATIVE = 0.5  # half the larger of the two readings,
MIN_ABSOLUTE = 1.0  # and one (a single rejected order, 1 vs 0, is a difference; 1 vs 1 is not)


class Discriminator:
    """Item 1 of issue 20: a cited query is evidence of a planted defect only when it reads
    differently on that defect's control store (the stack with only that defect fixed) than on
    the run's store, by more than the run-to-run noise (the two unfixed baselines' relative difference)."""

    def __init__(self, controls) -> None:
        self.controls = controls
        self._read: dict[tuple[str, str], float | None] = {}
        self.notes: dict[tuple[int, str], str] = {}

    def has(self, defect: Defect) -> bool:
        return self.controls.has(defect.id)

    def _value(self, name: str, cited: ev.Cited) -> float | None:
        key = (name, cited.text)
        if key not in self._read:
            c = ev.rerun(self.controls.connection(name), cited)
            self._read[key] = c.values[0] if c.values and not str(c.result).startswith("error") else None
        return self._read[key]

    def shows(self, index: int, check: ev.QueryCheck, defect: Defect) -> bool:
        from harness.verdicts.controls import BASELINES

        if not (check.ok and (check.evidence or check.absence)) or not check.values:
            return False
        run = check.values[0]
        control = self._value(defect.id, check.cited)
        b1, b2 = (self._value(b, check.cited) for b in BASELINES)
        if control is None or b1 is None or b2 is None:
            return False
        spread = abs(b1 - b2) / max(abs(b1), abs(b2)) if max(abs(b1), abs(b2)) else 0.0
        larger = max(abs(run), abs(control))
        diff = abs(run - control)
        bar = max(NOISE_FACTOR * spread * larger, MIN_RELATIVE * larger, MIN_ABSOLUTE)
        self.notes[(index, defect.id)] = (f"reads {ev._fmt(run)} on this run and {ev._fmt(control)} with that defect "
                                          f"fixed, baselines {ev._fmt(b1)}/{ev._fmt(b2)}")
        # Present in every unfixed drive (the run and both baselines) and absent with the fix, or
        # the reverse: the fix switched the thing off or on, whatever the counts' spread (two
        # colliding orders in one drive, one in another, none fixed).
        split = (control == 0) != (run == 0) and (b1 == 0) == (b2 == 0) == (run == 0)
        return diff >= bar or split


def defect_problems(d: Defect, checks: list[ev.QueryCheck], accused: ev.Accused, sources: Path | None,
                    free: set[int], discriminator: Discriminator | None = None) -> tuple[list[str], int | None]:
    """Why the finding does not show this defect, and the cited query (its index among `free`,
    those not already spent on another defect of the row) that shows it. With the mission's
    control stores, "shows" means: reads differently had the defect not been planted."""
    problems = []
    if discriminator is not None and discriminator.has(d):
        supporting = [i for i in sorted(free) if discriminator.shows(i, checks[i], d)]
        if not supporting:
            seen = [discriminator.notes[(i, d.id)] for i in sorted(free) if (i, d.id) in discriminator.notes]
            unused = [c.not_evidence for c in checks if c.ok and not c.evidence and not c.absence]
            problems.append("no cited query reads differently with the named defect fixed than on this run"
                            + (f" ({seen[0]})" if seen else f" ({unused[0]})" if unused else ""))
    else:
        supporting = [i for i in sorted(free) if reads_defect(checks[i], d)]
    if not supporting and not problems:
        unused = [c.not_evidence for c in checks if c.ok and not c.evidence]
        problems.append("no cited query is evidence of the defect it names" +
                        (f" ({unused[0]})" if unused else
                         " (none that re-ran to its claim reads what that defect shows)"))
    if not accused.accuses(_relative(d.file), ev.location_functions(d.function, sources)):
        problems.append("it does not accuse the defect's code (its file and the function there)")
    return problems, (supporting[0] if supporting else None)


def draft_rulings(run_dir: Path, key_path: Path, sources: Path | None = None, controls=None) -> Rulings:
    """The key-matcher's proposals for one run folder (`final: false`). `sources`: the
    mission's own workspace template (default: the `workspace` folder beside the key's),
    where accused code is looked up; never the run's workspace, which the agent wrote.

    One row, one defect: a finding is credited with a planted defect only through a cited
    query that is evidence of it (and the defect's code, accused by file and function); a row
    is credited with several only when each has its own such query. Words alone credit nothing.
    """
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
    discriminator = Discriminator(controls) if controls else None
    key_holds: dict[str, tuple[bool, list[Rerun]]] = {}  # per defect id, re-run once
    credited_by: dict[str, str] = {}  # defect id -> the finding that showed it
    named_by: dict[str, str] = {}  # defect id -> the earliest finding whose words named it
    ruled: list[RuledFinding] = []

    def key(d: Defect) -> tuple[bool, list[Rerun]]:
        if d.id not in key_holds:
            runs = store.rerun(d)
            key_holds[d.id] = (bool(runs) and all(r.holds for r in runs), runs)
        return key_holds[d.id]

    try:
        for finding in report.findings:
            matches = candidates(finding, defects, weights)
            checks, own, citing = own_evidence(finding, store)
            accused = ev.accused_code(f"{finding.text} {finding.evidence}", sources)
            general = general_problems(finding, checks, citing, accused)
            kind = finding.kind or (matches[0].defect.kind if matches else None)
            if not matches:
                ruled.append(RuledFinding(number=finding.number, text=finding.text, kind=kind, verdict=NOT_HELD_UP,
                                          reason=NO_DEFECT_REASON, evidence=own, ruled_by=RULED_BY, counts=1))
                continue
            credited: list[tuple[Match, int]] = []
            first_problems: list[str] = []
            free = set(range(len(checks)))
            for m in matches:
                d = m.defect
                if d.id in credited_by:
                    continue  # shown by an earlier finding: this one cannot count it again
                problems, used = defect_problems(d, checks, accused, sources, free, discriminator)
                holds, runs = key(d)
                if not holds:
                    bad = [r for r in runs if not r.holds]
                    problems.append(f"the key's evidence does not hold in this run's telemetry ({_result_text(bad)})")
                if general or problems:
                    if not first_problems:
                        first_problems = problems
                    continue
                credited.append((m, used))
                free.discard(used)
            if credited:
                ids = [m.defect.id for m, _ in credited]
                for i in ids:
                    credited_by[i] = finding.number
                    named_by.setdefault(i, finding.number)
                reruns = [r for m, _ in credited for r in key(m.defect)[1]]
                said = "; ".join(f"a planted defect (matched: {', '.join(m.said)}) by cited query {u + 1}"
                                 + (f" (it {discriminator.notes[(u, m.defect.id)]})"
                                    if discriminator and (u, m.defect.id) in discriminator.notes else "")
                                 for m, u in credited)
                many = f" (separate evidence for each of {len(ids)} defects)" if len(ids) > 1 else ""
                ruled.append(RuledFinding(
                    number=finding.number, text=finding.text, kind=kind, verdict=HELD_UP,
                    reason=(f"shows {said}{many}: its cited queries re-ran to the claim, the query measures what "
                            f"that defect shows, it accuses the defect's code (file and function), and the key's "
                            f"evidence holds ({_result_text(reruns)})."),
                    evidence=[*own, *reruns], ruled_by=RULED_BY, defects=ids, counts=len(ids)))
                continue
            primary = matches[0]
            earlier = credited_by.get(primary.defect.id) or named_by.get(primary.defect.id)
            if earlier is not None:
                ruled.append(RuledFinding(
                    number=finding.number, text=finding.text, kind=kind, verdict=NOT_HELD_UP,
                    reason=f"restates finding {earlier}, already counted (the same planted defect)",
                    evidence=own, ruled_by=RULED_BY, defects=[primary.defect.id], counts=0, restates=earlier))
                continue
            named_by[primary.defect.id] = finding.number
            problems = general + (first_problems if not general else [])
            if not problems:
                problems = ["the defects its words name are shown by earlier findings"]
            ruled.append(RuledFinding(
                number=finding.number, text=finding.text, kind=kind, verdict=NOT_HELD_UP,
                reason=f"names a planted defect (matched: {', '.join(primary.said)}): {'; '.join(problems)}.",
                evidence=own, ruled_by=RULED_BY, defects=[primary.defect.id], counts=1))
    finally:
        store.close()
        if controls:
            controls.close()
    found = sorted({i for f in ruled if f.verdict == HELD_UP for i in f.defects})
    return Rulings(run_id=run_id, report=str(report_path), ruled_at=now(), findings=ruled,
                   recall=Recall(found=found, planted=len(defects)), final=False)
