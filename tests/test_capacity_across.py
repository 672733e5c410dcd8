"""Issue 61: a capacity figure holds across launches or says it does not. Each launch brackets the
capacity (at least what it sustained, below where it failed); launches agree when the brackets
overlap and, at a level two of them measured with repeats, their intervals overlap too. The
results page's cell reads every launch of its preset, effort, CLI and GPU under the row's SLO."""

from __future__ import annotations

import pytest

from harness.load.agents.across import Launch, combine
from harness.records.capacity import CapacityFigures, CapacityLevel


def figures(passed: list[int], failed: int | None = None, ttft: dict[int, list[float]] | None = None,
            slo: tuple[float, float] = (10.0, 120.0)) -> CapacityFigures:
    levels = [CapacityLevel(copies=n, passed=True, turns=3 * n, failed=0, verdict="pass",
                            ttft_interval_s=(ttft or {}).get(n)) for n in passed]
    if failed is not None:
        levels.append(CapacityLevel(copies=failed, passed=False, turns=3 * failed, failed=1, verdict="fail",
                                    ttft_interval_s=(ttft or {}).get(failed)))
    return CapacityFigures(sustained=max(passed) if passed else 0, limit_found=failed is not None,
                           ttft_p99_s=slo[0], turn_p99_s=slo[1], levels=levels)


def test_the_reviews_one_and_six_agents_are_not_repeatable():
    """Two launches of one replay preset under TTFT <= 0.32 s: 1 agent (2 failed) and 6 (8 failed)."""
    across = combine([Launch("a", figures([1], 2)), Launch("b", figures([1, 2, 4, 6], 8))])
    assert not across.repeatable
    cell = across.cell()
    assert cell.startswith("not repeatable across 2 launches: 1, 6") and "b sustained 6 where a failed at 2" in cell


def test_launches_whose_brackets_overlap_give_the_overlap():
    across = combine([Launch("a", figures([1, 2, 4], 8)), Launch("b", figures([1, 2, 4, 5], 6))])
    assert across.repeatable and (across.low, across.high) == (5, 5)
    assert across.cell().startswith("5 across 2 launches (each: 4, 5;")
    wide = combine([Launch("a", figures([1, 2, 4], 8)), Launch("b", figures([1, 2, 4], 8))])
    assert wide.cell().startswith("4-7 across 2 launches")


def test_two_lower_bounds_whose_intervals_at_a_level_do_not_overlap_are_not_repeatable():
    """Under the product SLO both read "≥ 8", but at 8 agents the repeats' intervals are apart."""
    a = figures([1, 2, 4, 8], ttft={8: [0.40, 0.62]})
    b = figures([1, 2, 4, 8], ttft={8: [1.10, 1.90]})
    across = combine([Launch("a", a), Launch("b", b)])
    assert not across.repeatable
    assert "at 8 agents the TTFT intervals do not overlap (0.40-0.62 s and 1.10-1.90 s)" in across.cell()
    same = combine([Launch("a", a), Launch("b", figures([1, 2, 4, 8], ttft={8: [0.55, 0.90]}))])
    assert same.repeatable and same.cell().startswith("≥ 8 across 2 launches")


def test_one_launch_says_it_is_one_and_a_launch_with_no_figure_is_left_out():
    one = combine([Launch("a", figures([1, 2], 4)), Launch("b", CapacityFigures(sustained=None, error="died"))])
    assert len(one.launches) == 1 and one.cell().endswith("; one launch, not yet repeated")
    with pytest.raises(ValueError):
        combine([Launch("b", CapacityFigures(sustained=None))])


def test_the_page_reads_every_launch_of_the_rows_key_under_its_slo(tmp_path):
    """Through the results rows: the row's record and an earlier launch of the same key (a hello
    run: capacity is the serve's), an SLO apart left out, scripted runs left out."""
    from harness.results.rows import capacity_across
    from harness.records.record import RunRecord

    base = RunRecord.model_construct(mission="observability")
    own = base.model_copy(update={"run_id": "r2", "capacity": figures([1, 2, 4], 8)})
    earlier = base.model_copy(update={"run_id": "r1", "capacity": figures([1], 2)})
    other_slo = base.model_copy(update={"run_id": "r0", "capacity": figures([1, 2, 4, 8, 16], 32, slo=(30.0, 300.0))})
    other_work = base.model_copy(update={"run_id": "r3", "mission": "hello", "capacity": figures([1, 2], 4)})
    cell = capacity_across(own, {"r0": other_slo, "r1": earlier, "r2": own, "r3": other_work})
    assert cell.startswith("not repeatable across 2 launches: 1, 4")
    assert capacity_across(own, {"r2": own, "r3": other_work}).endswith("one launch, not yet repeated")


def test_the_committed_capacity_table_is_rebuilt_from_committed_inputs(tmp_path):
    """bench/results/agents-capacity.md names its command; run on the checkout's committed run
    folders it writes the committed file byte for byte (every input it reads is tracked by git)."""
    import re
    import shlex
    import subprocess
    import sys

    from conftest import REPO

    committed = (REPO / "bench" / "results" / "agents-capacity.md").read_text()
    command = shlex.split(re.search(r"`\.venv/bin/python (bench/agents_capacity\.py [^`]+)`", committed).group(1))
    runs = [a for a in command[1:] if not a.startswith("--") and a != "bench/results/agents-capacity.md"]
    tracked = set(subprocess.run(["git", "ls-files", *runs], cwd=REPO, capture_output=True, text=True,
                                 check=True).stdout.split())
    for run in runs:
        assert f"{run}/run.json" in tracked, f"{run}: its record is not committed"
        for name in ("capacity/agents.json", "capacity/trace.jsonl"):
            if (REPO / run / name).exists():
                assert f"{run}/{name}" in tracked, f"{run}/{name} is read but not committed"
    out = tmp_path / "agents-capacity.md"
    done = subprocess.run([sys.executable, *command[:1], *runs], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    expected = committed.replace(f" --out bench/results/agents-capacity.md", "", 1)
    assert done.stdout == expected
