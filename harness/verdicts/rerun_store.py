"""The run's own telemetry store as a rule reads it: read-only and confined (`evidence.open_store`),
the key's queries re-run on it (`rerun`) and each query a finding cites (`check`), all within one
budget per rule (RULE_BUDGET_S, MAX_RERUNS)."""

from __future__ import annotations

import time
from pathlib import Path

from harness.verdicts import evidence as ev
from harness.verdicts import cited as ci
from harness.verdicts import timeshift
from harness.verdicts.key import Defect, check_expectation
from harness.verdicts.rulings import Rerun

RULE_BUDGET_S = 30.0  # all cited queries of one rule together, on every store; past it, the rest are not re-run
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

    def check(self, cited: ci.Cited) -> ev.QueryCheck:
        """Re-run one query a finding cites, on this store, within the rule's budget."""
        if self._con is None:
            return ev.QueryCheck(cited, ok=False, result=f"error: {self.problem}",
                                 why=f"the cited query could not be re-run ({self.problem})")
        left = self.budget_s - self.spent_s
        if left <= 0 or self.reruns >= MAX_RERUNS:
            return ev.QueryCheck(cited, ok=False, result="not re-run",
                                 why="the cited query was not re-run: this rule's query budget is spent")
        self.reruns += 1
        t0 = time.monotonic()
        from harness.verdicts.discriminate import QUERY_BUDGET_S  # discriminate reads this store

        if not hasattr(self, "_clock"):
            self._clock = timeshift.store_clock(self._con)
        clock = self._clock
        # `now()` in a cited query is the run's last recorded instant, not the hour the rule runs at.
        rewrite = (lambda sql: timeshift.mapped(sql, clock)) if clock is not None else None
        try:
            check = ev.rerun(self._con, cited, self.hide, min(ev.QUERY_LIMIT_S, QUERY_BUDGET_S, left), rewrite)
        finally:
            took = time.monotonic() - t0
            self.spent_s += took
        check.spent_s = took  # the query's budget (QUERY_BUDGET_S) counts the run's store too
        return check

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None
