"""Does a cited query single out the defect its finding names? Read against the control stores.

A query is evidence of planted defect D only when, read on the run's store and on D's
control store (the stack with only D fixed):

- it reads differently, by more than run-to-run noise (the two unfixed baselines' spread),
- in the direction the finding claims (higher, lower, absent, present) against the healthy
  reading, and
- it does NOT move the same way beyond that noise with any other defect fixed (specificity,
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

    def readings(self, check: ev.QueryCheck) -> tuple | None:
        """What the query read on the run and on every control store read so far (None: none read):
        two queries reading alike on all of them are one observation."""
        q = self._queries.get(check.cited.text)
        run, _ = ev.reading(check)
        if q is None or not q.readings:
            return None
        return (run, *sorted(q.readings.items()))

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
        if not cl.moved(direction, mine, control):
            said = direction or "differently"
            return Outcome(False, note, f"it reads the other way from the claim: the claim says {said} than a "
                                        f"healthy system, but {note}")
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
            at = self._scaled(run, other, check)
            moved_too = abs(at - theirs)
            if moved_too >= bar(at, theirs) and (at > theirs) == (mine > control):
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
