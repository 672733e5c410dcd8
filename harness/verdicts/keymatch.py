"""The key-matcher: a first, explainable draft of a run's rulings from the hidden key.

Issue 48: which defect a finding is about comes from its stated claim, never its words. The
key states each defect's claims (kind, direction, scope, from the mission's claims.yaml); a
finding states its own in the same closed fields (a record's, or a markdown row's
`[claim: ...]`); `draft_rulings` tries only the defects whose claims it matches, then checks
its code and its evidence as below. The key itself is read in `key`, the run's store in
`rerun_store`.

For each finding of the run's report it proposes the planted defect(s) the finding names,
re-runs those defects' evidence queries against the run's **own** telemetry store
(`telemetry.duckdb` in the run folder, opened read-only: no store process needed), and
proposes `held up` when every expectation holds, else `did not hold up`. It drafts;
a person or a grader rules (`final: false`).

The words a finding and a defect share (`key.candidates`) are shown to a person; they credit
nothing.

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
earlier finding named or showed it, it is a restatement, else it did not hold up, each failed
condition in its reason. Every row counts 1 (seed 000: every row a report makes is reported),
so restating or enumerating never raises a score. Reasons never carry the key's ids, queries,
expectations or descriptions: they describe the finding's own evidence (what its cited query read on
the run, and with the controls on the store with the defect fixed), and the key's own check by a
count (issue 63: a draft reason may be made final as it stands).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.verdicts import accused as ac
from harness.verdicts import claim as cl
from harness.verdicts import cited as ci
from harness.telemetry import claims as cm
from harness.verdicts import evidence as ev
from harness.telemetry import sqlread
from harness.errors import UserError
from harness.records.paths import RunPaths
from harness.records.record import RunRecord
from harness.verdicts.key import Defect, label, load_key
from harness.verdicts.report import Finding, Report, parse_report_file
from harness.verdicts.rerun_store import Store
from harness.verdicts.rulings import HELD_UP, NOT_HELD_UP, Recall, Rerun, RuledFinding, Rulings, now

if TYPE_CHECKING:
    from harness.verdicts.discriminate import Judge

NO_DEFECT_REASON = "names no planted defect the key-matcher knows; a person or grader must rule it"
RULED_BY = "key-matcher"
MAX_RULED = 100  # findings ruled on their evidence; a report listing more has the rest ruled unread

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
    """The key's own check of a defect, in words: how many of its readings came out as the key
    expects. Never the key's queries, expectations, readings or ids: a draft reason is one the agent
    may make final and commit, and the key stays hidden (issue 63)."""
    good = sum(1 for r in reruns if r.holds)
    return f"{good} of {len(reruns)} of its readings as expected"


def _reading(check: ev.QueryCheck) -> str:
    """What a finding's own cited query read on the run's store, in a few words."""
    result = check.result
    if isinstance(result, float):
        result = ev._fmt(round(result, 3))
    text = " ".join(str(result).split())
    return text if len(text) <= 60 else text[:59] + "…"


def _expect(cited: ci.Cited) -> str:
    if cited.claimed is None:
        return "non-empty, a single number non-zero"
    if cited.claimed == 0:
        return "0 / no rows, as the finding claims"
    return f"about {ev._fmt(cited.claimed)}, as the finding claims (±50 % or ±2)"


def own_evidence(finding: Finding, store: Store) -> tuple[list[ev.QueryCheck], list[Rerun], list[str]]:
    """The finding's cited queries (at most `evidence.MAX_CITED`), re-run on the store; as
    recorded on its ruling; and the problems of the citing itself (too many queries)."""
    if finding.queries is not None:  # a structured record: its queries as fields, no text to mine
        cited = [ci.Cited(text=str(q.get("query", ""))[:ci.PROSE_CAP], claimed=_read_number(q.get("read")))
                 for q in finding.queries]
    else:
        cited_text = finding.evidence if finding.section == "anomalies" else finding.text  # a gap bullet is one line
        cited = ci.cited_queries(cited_text)
    problems = []
    if len(cited) > ev.MAX_CITED:
        problems.append(f"it cites {len(cited)} queries; at most {ev.MAX_CITED} are re-run for one finding, "
                        "so it is not ruled on them")
        cited = cited[:ev.MAX_CITED]
    checks = [store.check(c) for c in cited]
    return checks, [Rerun(query=c.cited.text[:2000], result=c.result, expect=_expect(c.cited), holds=c.ok)
                    for c in checks], problems


def _read_number(read) -> float | None:
    """What a structured record says its query read: a number, or a text whose first number is it."""
    if isinstance(read, bool):
        return float(read)
    if isinstance(read, (int, float)):
        return float(read)
    return ci.read_claim(str(read)[:200]) if read is not None else None


def _relative(file: str) -> str:
    return file.removeprefix("workspace/")


def text_claims(text: str) -> list[float]:
    """The numbers a finding's own text quotes as measured (`claim.text_claims`)."""
    return cl.text_claims(text)


def claim_problems(finding: Finding, checks: list[ev.QueryCheck]) -> list[str]:
    """Every number the Finding text quotes must be one a cited query re-ran to."""
    got = [v for c in checks if c.ok or c.values for v in c.values]
    problems = []
    for n in text_claims(finding.text):
        if not any(ev.within(n, v) for v in got):
            shown = ", ".join(ev._fmt(v) for v in got[:5]) or "nothing"
            problems.append(f"its text says {ev._fmt(n)}, which no cited query re-ran to (they gave {shown})")
            break
    return problems


def reads_defect(check: ev.QueryCheck, defect: Defect) -> bool:
    """Without control stores: a cited query that is evidence reads the defect's own telemetry: one
    of the tables its key queries read, and a literal only this defect's key queries use (or two).
    A reading equal to a number written in its own select list is not shown to be measured here."""
    if not (check.evidence and check.tables & defect.tables) or check.constant_claim:
        return False
    shared = ev.literals_meet(check.literals, defect.literals)
    return bool(shared & defect.specific) or len(shared) >= 2


def general_problems(finding: Finding, checks: list[ev.QueryCheck], citing: list[str],
                     accused: ac.Accused) -> list[str]:
    """Why the finding holds up for no defect at all, whichever it names ([] when none)."""
    problems = [finding.problem] if finding.problem else []
    problems += list(citing)
    if not checks:
        problems.append("no telemetry evidence cited (its Evidence names no `obs` command or SQL query)")
    problems += [c.why for c in checks if not c.ok]
    if finding.queries is None:  # a markdown row's quoted numbers; a record's reads are its fields
        problems += claim_problems(finding, checks)
    if accused.missing:
        problems.append(f"accuses {', '.join(accused.missing[:5])}, which the mission's sources lack")
    return problems


def defect_problems(d: Defect, checks: list[ev.QueryCheck], accused: ac.Accused, sources: Path | None,
                    free: set[int], judge: Judge | None = None, finding: Finding | None = None,
                    spent: dict[str, str] | None = None,
                    by_id: dict[str, Defect] | None = None,
                    same_claim: frozenset[str] = frozenset()) -> tuple[list[str], int | None, str]:
    """Why the finding does not show this defect, the cited query (its index among `free`, those
    not already spent on another defect of the row or on an earlier finding) that shows it, and
    what that query read where. With control stores: it reads differently with the defect fixed,
    in the claimed direction, and with no other defect's fix as far (`discriminate.Judge`)."""
    problems: list[str] = []
    note = ""
    spent = spent if spent is not None else {}
    usable = [i for i in sorted(free) if " ".join(checks[i].cited.text.split()) not in spent]
    if len(usable) < len(free) and not usable:
        problems.append("its cited queries are already evidence of a finding ruled before it (one query, one defect)")
    supporting: list[int] = []
    if judge is not None:
        if not judge.has(d.id):
            problems.append("the control store of the defect it names is missing on this machine, so no query can be "
                            "shown to single it out (build it: python -m harness.verdicts.controls build)")
        else:
            whys = []
            for i in usable:
                def looks_at(other: str, c: ev.QueryCheck = checks[i]) -> bool:
                    o = (by_id or {}).get(other)
                    return reads_defect(c, d) and (o is None or not reads_defect(c, o))

                # The stated direction (issue 59): a higher or lower claim reads that way against the
                # fix, or switches the thing off or on (spans *without* a child read high where it is
                # absent); an absent or present claim may count either side.
                out = judge.shows(checks[i], d.id, finding.direction if finding is not None else None, looks_at,
                                  same_claim)
                if out.shows:
                    # And it reads the defect's own telemetry, by a name that changes what it reads.
                    off = judge.about(checks[i], d.id, d.scope + tuple(_scope_extra(d)))
                    if not off:
                        supporting, note = [i], out.note
                        break
                    whys.append(off)
                    continue
                whys.append(out.why)
            if not supporting and not problems:
                problems.append("no cited query singles out the named defect against the control stores"
                                + (f" ({whys[0]})" if whys else ""))
    else:
        supporting = [i for i in usable if reads_defect(checks[i], d)]
        if not supporting and not problems:
            unused = [c.not_evidence for c in checks if c.ok and not c.evidence]
            if any(c.constant_claim for c in checks):
                unused.insert(0, "the number it claims is a constant written into its own select list")
            problems.append("no cited query is evidence of the defect it names" +
                            (f" ({unused[0]})" if unused else
                             " (none that re-ran to its claim reads what that defect shows)"))
    if not _accuses(accused, d, sources):
        problems.append("it does not accuse the defect's code (its file and the function there)")
    return problems, (supporting[0] if supporting else None), note


def _scope_extra(d: Defect) -> list[str]:
    """The defect's code as its telemetry names it too: its file's module (`shop_api.app`)."""
    module = _relative(d.file).removeprefix("src/").removesuffix(".py").replace("/", ".")
    return [module] if module else []


def _defs_warm(sources: Path | None) -> None:
    if sources is not None and Path(sources).is_dir():
        ac._defs(Path(sources))


def _accuses(accused: ac.Accused, d: Defect, sources: Path | None) -> bool:
    return accused.accuses(_relative(d.file), ac.location_functions(d.function, sources),
                           ac.location_is_module_level(d.function))


def _unread(finding: Finding, kind: str | None) -> RuledFinding:
    return RuledFinding(number=finding.number, text=finding.text[:2000], kind=kind, verdict=NOT_HELD_UP,
                        reason=f"not ruled on its evidence: the report lists more than {MAX_RULED} findings, and only "
                               f"the first {MAX_RULED} are read", ruled_by=RULED_BY, counts=1)


def load_findings(run_dir: Path, report_path: Path, sources: Path | None = None, vocab=None) -> Report:
    """The findings a run is ruled on: the structured records (findings.json, collected by the
    harness) when the run has them, else the markdown report, whose rows carry a claim only where
    they state it in the closed form (`[claim: KIND, DIRECTION, SCOPE]`, as `obs finding report`
    writes it): never guessed from their words."""
    from harness.verdicts.findings import FINDINGS_FILE, report_from_records

    if vocab is None and sources is not None:
        try:
            vocab = cm.load_vocabulary(Path(sources).parent)
        except cm.VocabularyError:
            vocab = None
    records = Path(run_dir) / FINDINGS_FILE
    if records.is_file() and not records.is_symlink():
        report = report_from_records(records, sources, vocab)
        if report.findings:
            return report
        fallback = _stated_rows(parse_report_file(report_path), vocab)
        return fallback.model_copy(update={"problems": [*report.problems, *fallback.problems]})
    return _stated_rows(parse_report_file(report_path), vocab)


def _stated_rows(report: Report, vocab) -> Report:
    """Each markdown row's claim, from what it shows: the form's Kind (a kind of the vocabulary),
    Direction and Scope columns, else a `[claim: KIND, DIRECTION, SCOPE]` in its visible text (as
    older `obs finding report`s wrote it). A row whose columns state no claim in the vocabulary
    has none (ambiguous), its columns' problem named."""
    rows = []
    for f in report.findings:
        columns = (f.claim_kind, f.direction, f.scope)
        stated = None
        problem = f.problem
        if any(columns):
            bad = cm.record_claim_problems(*columns, vocab) if all(columns) else \
                ["kind, direction and scope: fill the Kind (a kind of the vocabulary), Direction and Scope columns"]
            if not bad:
                stated = columns
            elif problem is None:
                problem = "its claim columns state no claim: " + "; ".join(bad[:3])
        if stated is None:
            stated = cm.stated_in_text(f.text, vocab)
        if stated is not None:
            claim = cm.record_claim(*stated, vocab)
            f = f.model_copy(update={"claim_kind": claim.kind, "direction": claim.directions[0], "scope": stated[2],
                                     "kind": vocab.kinds.get(claim.kind, f.kind), "problem": f.problem})
        else:
            f = f.model_copy(update={"claim_kind": None, "direction": None, "scope": None, "problem": problem})
        rows.append(f)
    return report.model_copy(update={"findings": rows})


def stated_claim(finding: Finding, vocab) -> cm.Claim | None:
    """The claim a finding states in the closed fields; None when it states none in full."""
    if vocab is None or finding.claim_kind is None:
        return None
    return cm.record_claim(finding.claim_kind, finding.direction, finding.scope, vocab)


def _observation(check: ev.QueryCheck, judge: Judge | None) -> set[str]:
    """What makes two cited queries one observation: the same query once DuckDB has parsed it
    (comments, spacing and case gone), or, with the controls, the same reading on every store."""
    keys = {"sql:" + sqlread.canonical(check.cited.text)}
    if judge is not None:
        readings = judge.readings(check)
        if readings:
            keys.add("read:" + repr(readings))
    return keys


def draft_rulings(run_dir: Path, key_path: Path, sources: Path | None = None, controls=None) -> Rulings:
    """The key-matcher's proposals for one run folder (`final: false`). `sources`: the
    mission's own workspace template (default: the `workspace` folder beside the key's),
    where accused code is looked up; never the run's workspace, which the agent wrote.

    Credit follows the key's claims (issue 48): a finding is credited with a planted defect only
    when its stated claim (kind, direction, scope: closed fields) matches one the key states for
    that defect, it accuses that defect's code (file and function), and one of its cited queries
    singles that defect out (`discriminate`). Its words decide nothing: a finding that states no
    claim is "ambiguous", and prose contradicting the fields is flagged for the person ruling.
    One observation is evidence of one defect once, in the whole report.
    """
    from harness.verdicts.discriminate import Judge

    run_dir = Path(run_dir)
    sources = Path(sources) if sources is not None else Path(key_path).resolve().parents[1] / "workspace"
    run_id, report_path, store_path = _run_files(run_dir)
    if not report_path.exists() and not (run_dir / "findings.json").is_file():
        raise UserError("the run has no report to rule", file=report_path,
                        fix="a run that never persisted its report is graded from its draft by a person")
    mission_dir = Path(key_path).resolve().parents[1]
    try:
        vocab = cm.load_vocabulary(mission_dir)
    except cm.VocabularyError as exc:
        raise UserError(str(exc), file=mission_dir / cm.VOCABULARY_FILE,
                        fix="declare kinds (each with a category), directions and services") from None
    report = load_findings(run_dir, report_path, sources, vocab)
    defects = load_key(key_path, vocab)
    by_id = {d.id: d for d in defects}
    store = Store(store_path)
    from harness.verdicts.drive import run_drive

    judge = Judge(controls, store, run_drive(run_dir)) if controls else None
    mode = judge.mode if judge else ("none: no control stores on this machine; a cited query counts where it reads "
                                     "the named defect's own telemetry, and an absence is not evidence")
    key_holds: dict[str, tuple[bool, list[Rerun]]] = {}  # per defect id, re-run once
    credited_by: dict[str, str] = {}  # defect id -> the finding that showed it
    named_by: dict[str, str] = {}  # defect id -> the earliest finding whose stated claim matched it
    spent: dict[str, str] = {}  # an observation's key -> the finding it is evidence for
    ruled: list[RuledFinding] = []

    def key(d: Defect) -> tuple[bool, list[Rerun]]:
        if d.id not in key_holds:
            runs = store.rerun(d)
            key_holds[d.id] = (bool(runs) and all(r.holds for r in runs), runs)
        return key_holds[d.id]

    def not_held(finding: Finding, reason: str, own: list[Rerun], **extra) -> RuledFinding:
        return RuledFinding(number=finding.number, text=finding.text, kind=finding.kind, verdict=NOT_HELD_UP,
                            reason=reason, evidence=own, ruled_by=RULED_BY, counts=extra.pop("counts", 1), **extra)

    def rule_one(finding: Finding) -> RuledFinding:
        """One finding's ruling, from its claim, its code and its cited queries."""
        stated = stated_claim(finding, vocab)
        if stated is None:  # no query is re-run for it: nothing it cites could credit it
            return (not_held(finding, cm.AMBIGUOUS + (f" ({finding.problem})" if finding.problem else ""), []))
        matched = [d for d in defects if cm.matches(stated, d.claims, d.scope)]
        checks, own, citing = evidence_of.pop(finding.number, None) or own_evidence(finding, store)
        # One finding, one code location (issue 59): a record's by its fields alone; a markdown
        # row's the first its Code column names, else the first its words name.
        if finding.code_fields is not None:
            accused = ac.record_code(finding.code_fields, sources)
        else:
            said = finding.code if finding.code.strip() else f"{finding.text} {finding.evidence}"
            accused = ac.accused_code(said, sources, first_only=True)
        # Of several defects with the same claim, the one whose code it accuses first.
        matched.sort(key=lambda d: not _accuses(accused, d, sources))
        general = general_problems(finding, checks, citing, accused)
        flag = cm.contradiction(finding.text, finding.direction)
        flagged = f" Note for the person ruling: {flag}." if flag else ""
        if not matched:
            return (not_held(finding, f"its stated claim ({stated.text()}) is not one the key states for any "
                                           f"planted defect" + (f" ({general[0]})" if general else "") + "."
                                  + flagged, own))
        credited: list[tuple[Defect, int, str]] = []
        first_problems: list[str] = []
        free = set(range(len(checks)))
        # First without any excuse; then with the other defects this claim matches at the code it
        # accuses excusing a query that moves with their fixes too (no less evidence of what the
        # finding states): the defect a query singles out on its own is the one it is credited with.
        for excuse in ((False, True) if judge is not None else (False,)):
            for d in matched:
                if d.id in credited_by:
                    continue  # shown by an earlier finding
                same_claim = frozenset(o.id for o in matched if excuse and o.id != d.id
                                       and _accuses(accused, o, sources))
                if excuse and not same_claim:
                    continue  # nothing to excuse: ruled as it was in the first pass
                problems, used, note = defect_problems(d, checks, accused, sources, free, judge, finding, spent,
                                                       by_id, same_claim)
                if used is not None and not problems:
                    taken = _observation(checks[used], judge) & set(spent)
                    if taken:
                        problems.append(f"its cited query is the observation finding {spent[next(iter(taken))]} "
                                        "is evidence of already (one observation, one defect)")
                if not general and not problems:
                    holds, runs = key(d)
                    if not holds:
                        problems.append("the planted defect does not show in this run's telemetry as the key "
                                        f"checks it ({_result_text(runs)})")
                if general or problems:
                    if not first_problems:
                        first_problems = problems
                    continue
                credited.append((d, used, note))
                free.discard(used)
                for k in _observation(checks[used], judge):
                    spent[k] = finding.number
                break  # one record states one claim: it is credited with one defect at most
            if credited:
                break
        if credited:
            d, u, note = credited[0]
            credited_by[d.id] = finding.number
            named_by.setdefault(d.id, finding.number)
            how = ("reads differently with that defect fixed, beyond the baselines' noise, and singles it out"
                   if judge else "measures what that defect shows")
            # The evidence in its own terms: what its cited query read on the run (and, with the
            # controls, with the defect fixed); the key's check by its count alone.
            read = note if note else f"reads {_reading(checks[u])} on this run"
            return (RuledFinding(
                number=finding.number, text=finding.text, kind=vocab.kinds.get(stated.kind, finding.kind),
                verdict=HELD_UP,
                reason=(f"its stated claim ({stated.text()}) is one the key states for a planted defect, shown by "
                        f"cited query {u + 1} (it {read})"
                        + f": its cited queries re-ran to what it recorded, the query {how}, it accuses the "
                        f"defect's code (file and function), and the defect shows in this run as the key checks it "
                        f"({_result_text(key(d)[1])}).{flagged}"),
                evidence=own, ruled_by=RULED_BY, defects=[label(d.id)], counts=1))
        fresh = [d for d in matched if d.id not in credited_by and d.id not in named_by]
        if not fresh:
            order = {f.number: i for i, f in enumerate(ruled)}
            first = min(matched, key=lambda d: order.get(credited_by.get(d.id) or named_by[d.id], 0))
            earlier = credited_by.get(first.id) or named_by[first.id]
            # Every row a report makes counts as reported (seed 000, issue 59): a restatement or an
            # enumerated row costs accuracy like any false row.
            return (not_held(finding, f"restates finding {earlier} (the same stated claim of the same "
                                           f"planted defect): every row counts as reported", own, counts=1,
                                  restates=earlier,
                                  defects=[label(first.id)]))
        named_by[fresh[0].id] = finding.number
        problems = general + (first_problems if not general else [])
        if not problems:
            problems = ["the planted defect its claim matches is shown by an earlier finding"]
        return (not_held(finding, f"its stated claim ({stated.text()}) matches a planted defect, but: "
                                       f"{'; '.join(problems[:4])}.{flagged}", own,
                              defects=[label(fresh[0].id)]))

    _defs_warm(sources)  # what every finding's code is looked up in, read before any query can fill the memory
    # Every cited query of the findings a claim makes rulable, re-run on the run's store first, then
    # read on each control store in one visit (store by store: each store opened once, not once a
    # query; 17 stores at ~55 ms an opening made a 30-finding report take 20 s of its 30 s budget).
    evidence_of: dict[str, tuple] = {}
    try:
        for finding in report.findings[:MAX_RULED]:
            stated = stated_claim(finding, vocab)
            if stated is not None and any(cm.matches(stated, d.claims, d.scope) for d in defects):
                evidence_of[finding.number] = own_evidence(finding, store)
        if judge is not None:
            judge.prefetch([c for checks, _, _ in evidence_of.values() for c in checks])
    except MemoryError:
        evidence_of.clear()  # ruled one by one below, each alone in its memory
    try:
        for position, finding in enumerate(report.findings):
            if position >= MAX_RULED:  # read no further than its kind: the bound holds whatever follows
                ruled.append(_unread(finding, finding.kind))
                continue
            try:
                ruled.append(rule_one(finding))
            except MemoryError:
                # What one finding's queries took (a string of gigabytes held by DuckDB) ends that
                # finding's ruling, never the rule's (issue 59: `rule` never exits 1 on what an agent wrote).
                import gc

                gc.collect()
                ruled.append(not_held(finding, "ruling it ran out of the rule's memory (its cited queries hold more "
                                               "than the rule may): not held up", []))
    finally:
        store.close()
        if controls:
            controls.close()
    found = sorted({i for f in ruled if f.verdict == HELD_UP for i in f.defects})
    rulings = Rulings(run_id=run_id, report=report_path.name if report.source == "report.md" else "findings.json",
                      ruled_at=now(), findings=ruled, recall=Recall(found=found, planted=len(defects)), final=False,
                      controls=mode, source=report.source)
    return scrub(rulings, store.hide + (str(Path(sources).resolve()), str(run_dir.resolve())))


def scrub(rulings: Rulings, hide: tuple[str, ...]) -> Rulings:
    """No host path in what is written: every text of the rulings with the store's, the run's, the
    sources' and the home folder's paths taken out (the agent's own text included)."""
    hide = tuple(sorted({h for h in (*hide, str(Path.home())) if h and len(h) > 1}, key=len, reverse=True))

    def clean(text):
        if not isinstance(text, str):
            return text
        for h in hide:
            text = text.replace(h, "<host path>")
        return text

    findings = []
    for f in rulings.findings:
        evidence = [r.model_copy(update={"query": clean(r.query), "result": clean(r.result)}) for r in f.evidence]
        findings.append(f.model_copy(update={"text": clean(f.text), "reason": clean(f.reason), "evidence": evidence}))
    return rulings.model_copy(update={"findings": findings})
