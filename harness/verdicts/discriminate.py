"""Does a cited query single out the defect its finding names? Read against the control stores.

A query is evidence of planted defect D only when, read on the run's store and on D's
control store (the stack with only D fixed):

- it reads differently, by more than run-to-run noise (the two unfixed baselines' spread),
- in the direction the finding claims (higher, lower, absent, present) against the healthy
  reading, and
- it does NOT move the same way beyond that noise with any other defect fixed, that control
  read against the unfixed ones (the baselines) it was driven beside (specificity,
  issue 59: a count of every shop-api span moves with several fixes and singles out none; a
  query that moves with another fix by less than the named one's still measures that other
  defect too). Two exceptions, one other fix at most: the query's own literals look at the named
  defect and not the other (a cause and its consequence: the whole-table read and the rendering
  of what it read), or the finding's own claim matches the other defect too (a latency claim on
  a route two defects slow down: the claim cannot tell them apart, the query need not either).

Controls valid for any drive: the run's drive (duration × users) seldom equals the controls'
(the short mode). When a set of controls driven as the run was is on this machine, it is used
("drive-matched"); otherwise readings that grow with traffic (counts and sums, row counts) are
compared per request driven, each store's requests counted in the store itself ("normalised").
Time filters (`now()`, absolute times, in any form) read the same moment of the drive on every
store: each control's timeline is laid onto the run's (`timeshift`). The mode is written into the rulings; a control the named defect lacks is a
named refusal, never a fallback.

Every cited query has one time budget across all the stores it is read on (QUERY_BUDGET_S),
and the rule as a whole one more (the run store's `budget_s`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from harness.verdicts import claim as cl
from harness.verdicts import evidence as ev
from harness.verdicts import timeshift

QUERY_BUDGET_S = 6.0  # one cited query, read on the run's store and on every control store together
NOISE_FACTOR = 3.0  # three times the two baselines' own relative difference,
MIN_RELATIVE = 0.5  # half the larger of the two readings,
MIN_ABSOLUTE = 1.0  # and one (a single rejected order, 1 vs 0, is a difference; 1 vs 1 is not)
MAX_EXCUSED = 2  # other fixes moving it as far that its literals may not excuse (one may: cause and consequence)

# The run's request count and the controls': server traces the services answered.
_REQUESTS = "SELECT count(DISTINCT trace_id) FROM spans WHERE kind = 'SERVER'"


MAX_LIVENESS_LITERALS = 4  # literals naming the defect tried for whether they change the reading


def _norm(text: str) -> str:
    return " ".join(text.strip("%").replace(":", ".").lower().split())


def _names(literal: str, scope: tuple[str, ...]) -> bool:
    """Whether a literal names one of the defect's scope: equal, or one inside the other when the
    shorter has 4+ characters (`%shop_api.app:stats;json:dumps%` names `stats`), `:` read as `.`; a
    JSON path by its key (`$."shop.order.ref"`)."""
    lit = _norm(ev._JSON_KEY.sub(lambda m: m.group(1), literal))
    if not lit:
        return False
    for target in scope:
        t = _norm(target)
        short, long_ = sorted((lit, t), key=len)
        if t and (lit == t or (len(short) >= 4 and short in long_)):
            return True
    return False


def _changed(literal: str) -> str:
    """The literal made to name nothing: a JSON path's key, or the text, with a suffix no name has."""
    m = ev._JSON_KEY.search(literal)
    if m:
        return literal[:m.end(1)] + ".qqnothingzz" + literal[m.end(1):]
    return literal + "qqnothingzz"


def _rows(con, sql: str, limit_s: float, rewrite) -> object:
    """The rows a statement reads (an error's text when it fails: a change that breaks it changed it)."""
    try:
        return ev._ReadOnlyClient(con, (), max(limit_s, 0.01), rewrite).sql(sql, limit=ev.ROW_CAP).rows
    except Exception as exc:  # noqa: BLE001 - what fails is an answer too
        return f"error: {type(exc).__name__}"


@dataclass
class Outcome:
    shows: bool
    note: str = ""  # what it read where (no key id, no key SQL)
    why: str = ""  # when it does not show the defect: why, in words


@dataclass
class _Query:
    spent_s: float = 0.0
    readings: dict[str, float | None] = field(default_factory=dict)
    over: bool = False


class Judge:
    """The control stores' answer for the cited queries of one rule."""

    def __init__(self, controls, store, drive: dict | None) -> None:
        from harness.verdicts.controls import BASELINES

        self.controls = controls
        self.store = store  # rerun_store.Store: the run's, with the rule's budget
        self.baselines = BASELINES
        self.others = [name for name in controls.fixes if controls.has(name)]
        control_drive = getattr(controls, "drive", {"duration": 10, "vus": 2})
        same = drive is not None and drive.get("drives") == 1 and \
            float(drive["duration"]) == float(control_drive["duration"]) and int(drive["vus"]) == int(control_drive["vus"])
        self.normalised = not same
        cd = f"{control_drive['duration']:g} s × {control_drive['vus']} users"
        if same:
            self.mode = f"drive-matched: the control stores were driven as the run was ({cd})"
        else:
            rd = f"{drive['duration']:g} s × {drive['vus']} users" if drive else "an unknown drive"
            self.mode = (f"normalised: the control stores were driven {cd}, the run {rd}; counts and sums are "
                         f"compared per request driven, each control's timeline laid onto the run's")
        self._queries: dict[str, _Query] = {}
        self._requests: dict[str, float | None] = {}
        self.run_clock = timeshift.store_clock(store._con) if store._con is not None else None
        self.run_requests = self._count(store._con)
        clock = self.run_clock
        # The run's store reads `now()` as its own last instant; a control's, laid onto the run's.
        self.store_rewrite = (lambda sql: timeshift.mapped(sql, clock)) if clock is not None else None
        self.control_rewrite = self.store_rewrite

    def has(self, defect_id: str) -> bool:
        return self.controls.has(defect_id) and all(self.controls.has(b) for b in self.baselines)

    @staticmethod
    def _count(con) -> float | None:
        if con is None:
            return None
        try:
            return float(con.execute(_REQUESTS).fetchone()[0] or 0)
        except Exception:  # noqa: BLE001
            return None

    def _con(self, name: str):
        con = self.controls.connection(name, align=self.run_clock)
        if name not in self._requests:
            self._requests[name] = self._count(con)
        return con

    def _read(self, name: str, check: ev.QueryCheck, mode: tuple) -> float | None:
        """The query's comparable reading on one control store, within the query's budget and the
        rule's; None when it could not be read (error, over budget)."""
        q = self._queries.setdefault(check.cited.text, _Query(spent_s=getattr(check, "spent_s", 0.0)))
        if name in q.readings:
            return q.readings[name]
        left = min(QUERY_BUDGET_S - q.spent_s, self.store.budget_s - self.store.spent_s)
        if left <= 0:
            q.over = True
            return None
        con = self._con(name)  # the control's timeline laid onto the run's (`timeshift.aligned`)
        rewrite = None
        if self.run_clock is not None:
            rewrite = lambda sql, c=self.run_clock: timeshift.mapped(sql, c)  # noqa: E731
        t0 = time.monotonic()
        try:
            got = ev.rerun(con, check.cited, limit_s=left, rewrite=rewrite)
        finally:
            took = time.monotonic() - t0
            q.spent_s += took
            self.store.spent_s += took
        if "ran over" in str(got.result):
            q.over = True
        value, _ = ev.reading(got, mode)
        q.readings[name] = value
        return value

    def _scaled(self, run: float, name: str, check: ev.QueryCheck) -> float:
        """The run's reading at a control's scale (normalised mode, a reading that grows with traffic)."""
        if not (self.normalised and check.scales):
            return run
        theirs, ours = self._requests.get(name), self.run_requests
        if not theirs or not ours:
            return run
        return run * theirs / ours

    def prefetch(self, checks: list[ev.QueryCheck]) -> None:
        """Every check's reading on every control store, store by store: each store opened once
        (the connections are kept a few at a time), each query within its own budget as in `_read`."""
        wanted = [(c, ev.reading(c)[1]) for c in checks if c.ok and (c.evidence or c.absence)
                  and ev.reading(c)[0] is not None]
        if not wanted:
            return
        for name in [*self.baselines, *self.others]:
            if not self.controls.has(name):
                continue
            for check, mode in wanted:
                self._read(name, check, mode)

    def readings(self, check: ev.QueryCheck) -> tuple | None:
        """What the query read on the run and on every control store read so far (None: none read):
        two queries reading alike on all of them are one observation."""
        q = self._queries.get(check.cited.text)
        run, _ = ev.reading(check)
        if q is None or not q.readings:
            return None
        return (run, *sorted(q.readings.items()))

    def about(self, check: ev.QueryCheck, defect_id: str, scope: tuple[str, ...]) -> str:
        """Why the query does not read the defect's own telemetry ("" when it does): one of its
        literals names what the defect's claims name (a route, span, metric, attribute, log scope,
        the function at fault) and changing that literal changes what the query reads on the run's
        store or on the defect's control (a literal that selects nothing is not read); or it reads
        a table the claims name (`logs`). A count of a whole service measures the drive, not a
        defect (issue 59)."""
        if check.tables & {t.lower() for t in scope}:
            return ""
        named = [lit for lit in sorted(check.raw_literals) if _names(lit, scope)]
        if not named:
            return ("it reads nothing its claim is about (no route, span, metric, attribute, log scope or function "
                    "of it): a reading of a whole service measures the drive, not the defect")
        for lit in named[:MAX_LIVENESS_LITERALS]:
            if self._live(check, lit, defect_id):
                return ""
        return ("what it names of the defect changes nothing it reads (a literal that selects nothing): it measures "
                "something else")

    def _live(self, check: ev.QueryCheck, literal: str, defect_id: str) -> bool:
        """Whether reading with `literal` changed changes any statement's rows, on the run's store or
        on the defect's control, within the query's budget."""
        quoted = "'" + literal.replace("'", "''") + "'"
        changed = "'" + _changed(literal).replace("'", "''") + "'"
        sqls = [sql for sql in check.sql_run if quoted in sql][:3]
        if not sqls:
            return False
        q = self._queries.setdefault(check.cited.text, _Query(spent_s=getattr(check, "spent_s", 0.0)))
        stores = [(self.store._con, self.store_rewrite), (self._con(defect_id), self.control_rewrite)]
        for con, rewrite in stores:
            if con is None:
                continue
            for sql in sqls:
                left = min(QUERY_BUDGET_S - q.spent_s, self.store.budget_s - self.store.spent_s)
                if left <= 0:
                    return False
                t0 = time.monotonic()
                try:
                    before = _rows(con, sql, left, rewrite)
                    after = _rows(con, sql.replace(quoted, changed), left, rewrite)
                finally:
                    took = time.monotonic() - t0
                    q.spent_s += took
                    self.store.spent_s += took
                if before != after:
                    return True
        return False

    def shows(self, check: ev.QueryCheck, defect_id: str, direction: str | None, looks_at=None,
              same_claim: frozenset[str] = frozenset()) -> Outcome:
        """`looks_at(other_id)`: whether the query itself looks at the named defect's telemetry and
        not at `other`'s (the key's literals): what excuses another fix moving it too (a cause and
        its consequence: the whole-table read and the rendering of what it read). `same_claim`: the
        other defects the finding's stated claim matches as well, which excuse it likewise."""
        if not (check.ok and (check.evidence or check.absence)):
            return Outcome(False, why=check.not_evidence or "it did not re-run to its claim")
        run, mode = ev.reading(check)
        if run is None:
            return Outcome(False, why="its result cannot be read as one number")
        control = self._read(defect_id, check, mode)
        b1, b2 = (self._read(b, check, mode) for b in self.baselines)
        q = self._queries.get(check.cited.text)
        if q is not None and q.over:
            return Outcome(False, why=f"reading it on the run's and the control stores took over its "
                                      f"{QUERY_BUDGET_S:g} s budget")
        if control is None or b1 is None or b2 is None:
            return Outcome(False, why="it could not be read on the control stores")
        mine = self._scaled(run, defect_id, check)
        spread = abs(b1 - b2) / max(abs(b1), abs(b2)) if max(abs(b1), abs(b2)) else 0.0

        def bar(a: float, b: float) -> float:
            return max(NOISE_FACTOR * spread * max(abs(a), abs(b)), MIN_RELATIVE * max(abs(a), abs(b)), MIN_ABSOLUTE)

        note = (f"reads {ev._fmt(round(mine, 3))} on this run{' (per request, at the controls’ scale)' if mine != run else ''} "
                f"and {ev._fmt(control)} with that defect fixed, baselines {ev._fmt(b1)}/{ev._fmt(b2)}")
        # Present in every unfixed drive and absent with the fix, or the reverse: the fix switched
        # the thing off or on, whatever the counts' spread.
        split = (control == 0) != (mine == 0) and (b1 == 0) == (b2 == 0) == (mine == 0)
        diff = abs(mine - control)
        if not (diff >= bar(mine, control) or split):
            return Outcome(False, note, f"it does not read differently with the named defect fixed ({note})")
        # And the fix moved it that way against the unfixed stores driven beside it: a run that reads
        # apart from every control (its drive, its box) shows no fix at work (issue 59).
        reference = (b1 + b2) / 2
        if not split and (abs(reference - control) < bar(reference, control) or (reference > control) != (mine > control)):
            return Outcome(False, note, "the named defect's fix does not move it against the unfixed controls "
                                        f"driven beside it: the run reads apart from all of them ({note})")
        # The claimed direction (issue 59): the reading lies on the claimed side of the fixed one
        # (higher or present: above it; lower or absent: below it), or the thing switches off or on
        # (a count of what lacks the thing reads high where the thing is absent: either side).
        side = {"present": "higher", "absent": "lower"}.get(direction or "", direction)
        if side in ("higher", "lower") and not split and not cl.moved(side, mine, control):
            return Outcome(False, note, f"it reads the other way from the claim: the claim says {direction} than a "
                                        f"healthy system, but {note}")
        # Another fix is judged against the unfixed controls (the baselines' mean), driven as it was,
        # on the same box, in the same hour: not against the run, whose drive and box differ (issue 64:
        # a profile's samples read 68 on a run and 43/44 on the baselines; every control read near 43).
        excused = 0
        for other in self.others:
            if other == defect_id:
                continue
            theirs = self._read(other, check, mode)
            if q is not None and q.over:
                return Outcome(False, note, f"reading it on the run's and the control stores took over its "
                                            f"{QUERY_BUDGET_S:g} s budget")
            if theirs is None:
                continue
            moved_too = abs(reference - theirs)
            if moved_too >= bar(reference, theirs) and (reference > theirs) == (mine > control):
                if not (other in same_claim or (looks_at is not None and looks_at(other))):
                    return Outcome(False, note, "it moves the same way with another planted defect fixed, so it "
                                                f"does not single out the defect it names ({note})")
                excused += 1
                # Its literals may excuse one other fix (a cause and its consequence: the whole-table
                # read and the rendering of what it read); moving with several, it measures the drive
                # (a count not scaled to the run's traffic, a LIMIT), not the defect (issue 48).
                if excused >= MAX_EXCUSED:
                    return Outcome(False, note, f"it moves the same way with {excused} other planted defects fixed: "
                                                f"it measures how the stores were driven, not the defect ({note})")
        return Outcome(True, note)
