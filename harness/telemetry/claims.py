"""The closed claims a finding is credited on (issue 48): what the mission's vocabulary allows,
what the hidden key says each planted defect's claims are, and whether a record's stated claim
matches one of them.

The mission declares the vocabulary (`claims.yaml` beside its mission.yaml): kinds (each with the
results-table category it counts under), directions, services. The key states, per planted defect,
one or more claims in it (`claims: [{kind, direction, scope, targets}]`). A finding states its own
claim as fields (`obs finding add --kind --direction --scope`); credit needs those fields to match
one of the defect's claims. Words never decide a claim: `text_direction` only reads the finding's
prose to *flag* a contradiction for the person ruling, and reads nothing where a clause negates.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

VOCABULARY_FILE = "claims.yaml"
ENV = "OBS_CLAIMS"  # the vocabulary as JSON, for `obs finding add` inside the sandbox
VOCABULARY_CAP = 64_000  # bytes of a vocabulary read (file or environment)
AMBIGUOUS = ("ambiguous — state it as a record (obs finding add --kind KIND --direction DIRECTION "
             "--scope SERVICE): its kind or direction cannot be read without guessing, so it is never credited")
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")
_TARGET = re.compile(r"^[^|`\n\]]{1,120}$")
TARGET_HELP = ("A target is optional: the route (`POST /orders` or `/orders`), span, metric, log scope, attribute or "
               "function (`place_order`) the claim is about, written as the telemetry or the code names it; a "
               "target that is not about the defect the claim states is never credited.")


class VocabularyError(ValueError):
    """The vocabulary or the key's claims are malformed: the message names the field and the fix."""


@dataclass(frozen=True)
class Vocabulary:
    kinds: dict[str, str]  # kind -> category (Telemetry / Perf / Behavior)
    directions: tuple[str, ...]
    services: tuple[str, ...]
    means: dict[str, str] = field(default_factory=dict, compare=False)

    def as_env(self) -> str:
        return json.dumps({"kinds": {k: {"category": c, "means": self.means.get(k, "")} for k, c in self.kinds.items()},
                           "directions": list(self.directions), "services": list(self.services)})

    def help(self) -> str:
        return (f"kinds: {', '.join(self.kinds)}; directions: {', '.join(self.directions)}; "
                f"scope: one of {', '.join(self.services)}, optionally SERVICE:TARGET. {TARGET_HELP}")


def vocabulary_from(data: object, where: str) -> Vocabulary:
    """A vocabulary from its parsed YAML/JSON, every field checked."""
    if not isinstance(data, dict):
        raise VocabularyError(f"{where}: not a mapping; give kinds, directions and services")
    kinds_raw = data.get("kinds")
    if not isinstance(kinds_raw, dict) or not kinds_raw:
        raise VocabularyError(f"{where}: kinds: give a mapping of kind -> {{category, means}}")
    kinds, means = {}, {}
    for name, spec in list(kinds_raw.items())[:100]:
        category = spec.get("category") if isinstance(spec, dict) else None
        if not (isinstance(name, str) and _NAME.match(name)):
            raise VocabularyError(f"{where}: kinds.{str(name)[:40]}: a kind is lower-case words joined by '-'")
        if category not in ("Telemetry", "Perf", "Behavior"):
            raise VocabularyError(f"{where}: kinds.{name}.category: give Telemetry, Perf or Behavior")
        kinds[name] = category
        means[name] = str(spec.get("means", ""))[:300]
    out = []
    for key in ("directions", "services"):
        values = data.get(key)
        if not (isinstance(values, list) and values and all(isinstance(v, str) and _NAME.match(v) for v in values)):
            raise VocabularyError(f"{where}: {key}: give a list of lower-case names")
        out.append(tuple(values[:100]))
    return Vocabulary(kinds=kinds, directions=out[0], services=out[1], means=means)


def load_vocabulary(mission_dir: Path) -> Vocabulary | None:
    """The mission's vocabulary (`claims.yaml` beside mission.yaml); None when it declares none."""
    import yaml

    path = Path(mission_dir) / VOCABULARY_FILE
    if not path.is_file() or path.is_symlink():
        return None
    try:
        data = yaml.safe_load(path.read_bytes()[:VOCABULARY_CAP].decode("utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise VocabularyError(f"{path.name}: cannot be read as YAML ({str(exc).splitlines()[0][:120]})") from None
    return vocabulary_from(data, path.name)


def vocabulary_from_env(environ: dict | None = None) -> Vocabulary | None:
    """The vocabulary `obs finding add` checks against: OBS_CLAIMS, set by the harness at launch."""
    raw = (environ if environ is not None else os.environ).get(ENV)
    if not raw:
        return None
    try:
        return vocabulary_from(json.loads(raw[:VOCABULARY_CAP]), ENV)
    except ValueError:
        return None


@dataclass(frozen=True)
class Claim:
    """A stated claim: a record's (one direction) or one of the key's (the directions it accepts)."""

    kind: str
    directions: tuple[str, ...]
    service: str
    targets: tuple[str, ...] = ()  # the key's: the routes/metrics/attributes it may name; a record's: 0 or 1

    def text(self) -> str:
        scope = self.service + (f":{self.targets[0]}" if len(self.targets) == 1 else "")
        return f"{self.kind}, {'/'.join(self.directions)}, {scope}"


def _norm_target(target: str) -> str:
    return " ".join(target.strip().strip("'\"`").lower().split())


_METHOD = re.compile(r"^(?:get|post|put|patch|delete|head|options) (?=/)")
_PARAM = re.compile(r"\{[^{}/]{0,40}\}|(?<=/):[a-z_]{1,40}")


def target_forms(target: str, code_names: bool = False) -> set[str]:
    """The ways one target may be written: `POST /orders`, `/orders`, `orders`; a route's
    parameters whatever their names (`/products/{id}` = `/products/{product_id}`); with
    `code_names`, a code path's last name (`src/shop_mcp/api.py:call`, `shop_mcp.api.call()` name
    `call`), never an attribute's (`http.method` is not `http.request.method`'s `method`).
    Linear: no backtracking."""
    t = _norm_target(target)[:120]
    called = t.endswith("()")
    if called:
        t = t[:-2]
    forms = {t}
    bare = _METHOD.sub("", t)
    forms.add(bare)
    forms |= {_PARAM.sub("{}", f) for f in list(forms)}
    forms |= {f.lstrip("/") for f in list(forms) if f.startswith("/")}
    dotted = t.split(".")
    code_like = called or ":" in t or ".py" in t or any("_" in part for part in dotted[:-1])
    if code_names and code_like and " " not in t:
        last = re.split(r"[:.]", t.removesuffix(".py"))[-1]
        if last and last != "py":
            forms.add(last)
    return {f for f in forms if f}


def target_matches(stated: str, allowed) -> bool:
    """Whether a finding's target names one of `allowed` in any of the forms it may be written in
    (a code path by its last name, matched against the allowed names as the key writes them)."""
    mine = target_forms(stated, code_names=True)
    return any(mine & target_forms(a) for a in allowed)


def split_scope(scope: str) -> tuple[str, str | None]:
    service, _, target = scope.partition(":")
    return service.strip(), (_norm_target(target) or None) if target else None


def record_claim_problems(kind: object, direction: object, scope: object, vocab: Vocabulary | None) -> list[str]:
    """Each closed field of a record checked against the vocabulary: one problem per field, each
    naming the field and its fix. [] when the claim is stated in full."""
    if vocab is None:
        return ["kind: this mission declares no claim vocabulary (claims.yaml), so no claim can be stated"]
    problems = []
    if not (isinstance(kind, str) and kind in vocab.kinds):
        shown = repr(kind)[:40] if kind is not None else "missing"
        hint = " (that is a category; state the claim's kind)" if kind in ("Telemetry", "Perf", "Behavior") else ""
        problems.append(f"kind: {shown}{hint}; give --kind one of {', '.join(vocab.kinds)}")
    if not (isinstance(direction, str) and direction in vocab.directions):
        shown = repr(direction)[:40] if direction is not None else "missing"
        problems.append(f"direction: {shown}; give --direction one of {', '.join(vocab.directions)}")
    if not isinstance(scope, str) or not scope:
        problems.append(f"scope: missing; give --scope one of {', '.join(vocab.services)} (or SERVICE:TARGET)")
    else:
        service, target = split_scope(scope[:200])
        if service not in vocab.services:
            problems.append(f"scope: service {service[:40]!r} is not one of {', '.join(vocab.services)}; "
                            "give --scope SERVICE or SERVICE:TARGET")
        elif ":" in scope and not (target and _TARGET.match(target)):
            problems.append("scope: the target after ':' is empty or holds '|', '`' or ']'; give --scope SERVICE:TARGET "
                            "(a route, span, metric or attribute name)")
    return problems


def record_claim(kind: object, direction: object, scope: object, vocab: Vocabulary | None) -> Claim | None:
    if record_claim_problems(kind, direction, scope, vocab):
        return None
    service, target = split_scope(str(scope))
    return Claim(kind=str(kind), directions=(str(direction),), service=service, targets=(target,) if target else ())


def key_claims(raw: object, vocab: Vocabulary, where: str) -> list[Claim]:
    """A defect's `claims:` from the key, each field checked against the vocabulary."""
    if not isinstance(raw, list) or not raw:
        raise VocabularyError(f"{where}: claims: state at least one claim "
                              "({kind, direction, scope}) in the mission's vocabulary")
    out = []
    for i, c in enumerate(raw):
        at = f"{where}: claims[{i}]"
        if not isinstance(c, dict):
            raise VocabularyError(f"{at}: give a mapping with kind, direction and scope")
        unknown = sorted(set(c) - {"kind", "direction", "scope", "targets"})
        if unknown:
            raise VocabularyError(f"{at}: unknown field {unknown[0]}; the fields are kind, direction, scope, targets")
        directions = c.get("direction")
        directions = [directions] if isinstance(directions, str) else directions
        scopes = c.get("scope")
        scopes = [scopes] if isinstance(scopes, str) else scopes
        targets = c.get("targets") or []
        if c.get("kind") not in vocab.kinds:
            raise VocabularyError(f"{at}.kind: {c.get('kind')!r} is not one of {', '.join(vocab.kinds)}")
        if not (isinstance(directions, list) and directions and all(d in vocab.directions for d in directions)):
            raise VocabularyError(f"{at}.direction: give one or a list of {', '.join(vocab.directions)}")
        if not (isinstance(scopes, list) and scopes and all(s in vocab.services for s in scopes)):
            raise VocabularyError(f"{at}.scope: give one or a list of {', '.join(vocab.services)}")
        if not (isinstance(targets, list) and all(isinstance(t, str) and _TARGET.match(t) for t in targets)):
            raise VocabularyError(f"{at}.targets: give a list of route, span, metric or attribute names")
        for s in scopes:
            out.append(Claim(kind=c["kind"], directions=tuple(directions), service=s,
                             targets=tuple(_norm_target(t) for t in targets)))
    return out


def matches(stated: Claim, claims: list[Claim], scope: tuple[str, ...] = ()) -> Claim | None:
    """The key claim a record's claim matches: same kind, a direction it accepts, the same service,
    and, where the finding names a target, one the claim lists, or, for a claim that lists none
    (an open claim), one of the defect's own `scope` (every target its claims list and the code at
    fault): a target is optional, but a named one must be about the defect (issue 59)."""
    for c in claims:
        if stated.kind != c.kind or stated.directions[0] not in c.directions or stated.service != c.service:
            continue
        if stated.targets and not target_matches(stated.targets[0], c.targets or scope):
            continue
        return c
    return None


def check_key(key_path: Path, vocab: Vocabulary | None) -> list[str]:
    """`mission check`'s reading of the key's claims: every defect states at least one, in the
    vocabulary. Problems, each naming the defect and the field."""
    import yaml

    try:
        data = yaml.safe_load(Path(key_path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        return [f"{Path(key_path).name}: cannot be read ({str(exc).splitlines()[0][:120]})"]
    defects = data.get("defects") if isinstance(data, dict) else None
    if not isinstance(defects, list):
        return [f"{Path(key_path).name}: no `defects` list"]
    if vocab is None:
        return [f"the mission declares no {VOCABULARY_FILE}: its key's claims cannot be checked; "
                "declare kinds, directions and services there"]
    problems = []
    for d in defects:
        where = f"defect {d.get('id', '?') if isinstance(d, dict) else '?'}"
        try:
            key_claims(d.get("claims") if isinstance(d, dict) else None, vocab, where)
        except VocabularyError as exc:
            problems.append(str(exc))
    return problems


# --- markdown rows: a claim stated in the closed form, never guessed ---------------------------

_STATED = re.compile(r"\[claim:\s{0,3}([a-z][a-z0-9-]{0,39}),\s{0,3}([a-z]{1,20}),\s{0,3}([a-z][a-z0-9-]{0,39}(?::[^\]|`\n]{1,120})?)\]")


def stated_in_text(text: str, vocab: Vocabulary | None) -> tuple[str, str, str] | None:
    """A markdown row's claim where it states one in the closed form `obs finding report` writes
    (`[claim: KIND, DIRECTION, SCOPE]`) with values of the vocabulary; else None (ambiguous)."""
    m = _STATED.search((text or "")[:8000])
    if m is None or vocab is None:
        return None
    kind, direction, scope = m.groups()
    return (kind, direction, scope) if not record_claim_problems(kind, direction, scope, vocab) else None


# --- a contradiction between the words and the fields, flagged (never decisive) ----------------

_NEGATION = re.compile(r"\b(?:not|no|never|nor|neither|without|cannot|isn't|aren't|doesn't|don't|didn't|wasn't|"
                       r"weren't|hardly|instead)\b|n't\b", re.IGNORECASE)
_LOWER = re.compile(r"\b(?:lower|fewer|less|below|too few|under-\w{2,12}|under(?:reports?|counts?|states?)|"
                    r"smaller|drops?|missing|absent|lacks?)\b", re.IGNORECASE)
_HIGHER = re.compile(r"\b(?:higher|above|too many|excess\w{0,4}|inflated|over-\w{2,12}|over(?:reports?|counts?|"
                     r"states?)|larger|duplicat\w{1,4}|extra)\b", re.IGNORECASE)
_CLAUSE = re.compile(r"[.;:,()!?\n]")


def text_direction(text: str) -> str | None:
    """Which way the prose alone says the thing lies ("lower"/"higher"), read only from clauses
    that negate nothing and only when every such clause agrees; else None. Linear regexes on a
    capped text: never quadratic on what the agent wrote."""
    seen = set()
    for clause in _CLAUSE.split((text or "")[:4000]):
        if _NEGATION.search(clause):
            continue
        if _LOWER.search(clause):
            seen.add("lower")
        if _HIGHER.search(clause):
            seen.add("higher")
    return seen.pop() if len(seen) == 1 else None


def contradiction(text: str, direction: str | None) -> str | None:
    """A note for the person ruling where the prose says the opposite of the record's direction."""
    said = text_direction(text)
    if said is None or direction is None:
        return None
    opposite = (said == "lower" and direction in ("higher", "present")) or \
        (said == "higher" and direction in ("lower", "absent"))
    if not opposite:
        return None
    return (f"its text reads {said}, its direction field says {direction}: ruled on the field (the text never "
            f"overrides it); a person should read which it claims")
