"""The hidden key: its planted defects (`load_key`), the labels rulings name them by (`label`),
the check of a key query's expectation, and the word matching a person reads beside a draft.

Matching words credits nothing (issue 48: which defect a finding is about comes from its stated
claim); it is kept for a person's eyes. A defect's words come from its id, its description and
its location (file stem and function name); a finding's words from its text and its evidence.
Words are lower-cased, split on anything not a letter or digit (and on camelCase), lightly
stemmed (`orders` → `order`, `retries` → `retry`), and common English, SQL and stack words are
dropped. Each shared word weighs 1/df, df being the number of defects of the key that have it,
so a word only one defect has weighs 1 and `span` (in many) weighs little. A defect is named when

    score = sum of the shared words' weights (+ KIND_BONUS when the kinds agree) >= THRESHOLD

and at least MIN_WORDS words are shared: those are the finding's candidates (`candidates`).
(`name_defects` keeps the older reading of a bundle: each further defect only if the words no
named one explains reach THRESHOLD by themselves.) The reason says which words matched.
"""

from __future__ import annotations

import hashlib
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.errors import UserError
from harness.telemetry import claims as cm
from harness.verdicts import cited as ci
from harness.verdicts import evidence as ev
from harness.verdicts.report import Finding

THRESHOLD = 2.0
MIN_WORDS = 2
KIND_BONUS = 0.5
BUNDLE_OWN = 1.0  # a further defect of a bundle: weight of the words only it explains
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


# Words of a key location's prose ("complete (module-level operation_duration, called from app.ask)")
# that name no code.
_LOCATION_WORDS = {"module", "level", "called", "from", "app", "setup", "and", "or", "in", "of", "the", "logger"}


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
    claims: list[cm.Claim] = field(default_factory=list)  # what counts as finding it (the key's `claims`)
    # What a claim that lists no targets may still name (issue 59): every target its claims list,
    # and the names of the code at fault (its location's functions).
    scope: tuple[str, ...] = ()

    @classmethod
    def from_key(cls, raw: dict, vocab: cm.Vocabulary | None = None) -> Defect:
        loc = raw.get("location") or {}
        d = cls(id=raw["id"], kind=raw.get("kind", ""), description=raw.get("description", ""),
                file=str(loc.get("file", "")), function=str(loc.get("function", "")),
                evidence=list(raw.get("evidence") or []))
        if vocab is not None:
            d.claims = cm.key_claims(raw.get("claims"), vocab, f"defect {d.id}")
        d.scope = tuple(sorted({t for c in d.claims for t in c.targets}
                               | set(re.findall(r"[A-Za-z_]\w*", d.function)) - _LOCATION_WORDS))
        id_words = words(" ".join(re.split(r"[-_]", raw["id"])[1:]))  # T01-orders-... : drop "T01"
        literals = " ".join(lit for ev in d.evidence for lit in _LITERAL.findall(str(ev.get("sql", ""))))
        d.words = (id_words | words(d.description) | words(Path(d.file).stem) | words(d.function)
                   | words(literals))
        for e in d.evidence:
            d.tables |= ev.tables_of(str(e.get("sql", "")))
            d.literals |= ev.literals_of(str(e.get("sql", "")))
        return d


def load_key(key_path: Path, vocab: cm.Vocabulary | None = None) -> list[Defect]:
    """The key's defects; with the mission's vocabulary, each with the claims that count."""
    try:
        data = yaml.safe_load(Path(key_path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError("no answer key", file=key_path) from None
    except yaml.YAMLError as exc:
        raise UserError(f"the answer key is not valid YAML: {exc}", file=key_path) from None
    if not isinstance(data, dict) or not isinstance(data.get("defects"), list):
        raise UserError("the answer key has no `defects` list", file=key_path)
    try:
        defects = [Defect.from_key(d, vocab) for d in data["defects"]]
    except cm.VocabularyError as exc:
        raise UserError(f"the answer key's claims do not check: {exc}", file=key_path, field="claims",
                        fix="state each defect's claims as {kind, direction, scope} from the mission's claims.yaml "
                            "(llms-benchmark mission check names every problem)") from None
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


def claim_words(finding: Finding) -> str:
    """The finding's own words: its text, the code it accuses and its evidence without the queries
    it cites. A defect is named by what the finding says, never by the SQL it quotes."""
    # A structured record's queries are fields: its evidence text is only their display.
    evidence = ci.prose(finding.evidence) if finding.evidence and finding.queries is None else ""
    return f"{finding.text} {finding.code} {evidence}"[:ci.PROSE_CAP]


def score(finding: Finding, defect: Defect, weights: dict[str, float], said: dict[str, str] | None = None) -> Match:
    said = said if said is not None else surface_words(claim_words(finding))
    shared = set(said) & defect.words
    stems = sorted(shared, key=lambda w: (-weights.get(w, 0), w))
    agrees = finding.kind is not None and finding.kind == defect.kind
    total = sum(weights.get(w, 0) for w in shared) + (KIND_BONUS if agrees and shared else 0.0)
    return Match(defect, round(total, 3), stems, agrees, [said[w] for w in stems])


def name_defects(finding: Finding, defects: list[Defect], weights: dict[str, float] | None = None) -> list[Match]:
    """The defects a finding names, best first (several for a bundle), or []."""
    weights = weights or _weights(defects)
    said = surface_words(claim_words(finding))  # once per finding, not once per defect
    candidates = sorted((score(finding, d, weights, said) for d in defects), key=lambda m: (-m.score, m.defect.id))
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
    said = surface_words(claim_words(finding))
    out = sorted((score(finding, d, weights, said) for d in defects), key=lambda m: (-m.score, m.defect.id))
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


def label(defect_id: str) -> str:
    """How a rulings file names a planted defect: a stable label that does not spell out the hidden
    key (its ids describe the defects); `labels(key)` maps them back for a person with the key."""
    return "defect-" + hashlib.sha256(defect_id.encode()).hexdigest()[:8]


def labels(key_path: Path) -> dict[str, str]:
    """label -> the key's defect id."""
    return {label(d.id): d.id for d in load_key(key_path)}
