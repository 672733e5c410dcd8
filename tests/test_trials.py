"""`launch --trials K`: one serve, probed and smoked once, the mission K times, each trial its
own record; the results row is the median trial with the spread (harness/results/trials.py).

The launches run the real console script and the real opencode CLI against the replay stack;
the row tests build records and rulings as a launch and `rule` would write them."""

from __future__ import annotations

import json
import random
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

from conftest import REPO, Project
from harness.records.record import RunRecord, Status, Trial
from harness.results.render import render_results
from harness.results.trials import median_interval
from test_launch_e2e import SMALL_PROBE, assert_destroyed, dump
from test_results import PAGE_TEXT, QWEN_SERVING, T0, _run

LAUNCH = ["launch", "local", "replay", "replay-hello", "--mission", "hello", *SMALL_PROBE]


# -- the interval ------------------------------------------------------------------------------
def test_the_median_interval_is_min_max_below_six_and_says_its_coverage():
    assert median_interval([1.0, 2.0]) is None  # two trials: min–max covers the median only half the time
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0, 0.75)
    assert median_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0, 0.9375)
    # From 6 on min–max passes 95 %; from 10 on a narrower pair of order statistics does.
    assert median_interval(list(range(6))) == (0, 5, 0.96875)
    low, high, cover = median_interval(list(range(10)))
    assert (low, high) == (1, 8) and cover == pytest.approx(1 - 2 * 11 / 1024)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_interval_covers_the_median_as_often_as_it_says_whatever_the_distribution(n):
    """A skewed distribution (lognormal, median 1): the stated coverage is what sampling gives."""
    rng = random.Random(7)
    draws = 4000
    stated = median_interval([float(x) for x in range(n)])[2]
    hits = 0
    for _ in range(draws):
        low, high, _ = median_interval([rng.lognormvariate(0, 1.5) for _ in range(n)])
        hits += low <= 1.0 <= high
    # Binomial standard error at 4000 draws is under 0.007: four of them.
    assert abs(hits / draws - stated) < 0.03, (hits / draws, stated)


# -- the row -----------------------------------------------------------------------------------
def _trial(root: Path, run_id: str, group: str, index: int, of: int, total_s: int, held: int, missed: int,
           *, status=Status.ok, final=True, mission="observability") -> None:
    """A ruled run (test_results._run, the serve priced: $8.41 for it) made trial `index` of `of` of `group`."""
    _run(root, run_id, "odd-trials", T0 + timedelta(minutes=index), total_s, ["Telemetry"] * held, missed,
         status=status, final=final, serving=QWEN_SERVING)
    path = root / ".llms-benchmark" / "runs" / run_id / "run.json"
    record = RunRecord.load(path)
    record.trial, record.mission = Trial(group=group, index=index, of=of), mission
    record.save(path.parent)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    bench = tmp_path / ".llms-benchmark"
    bench.mkdir()
    (bench / "README.md").write_text(PAGE_TEXT)
    return tmp_path


def _rows(root: Path, preset: str = "odd-trials") -> list[list[str]]:
    body = render_results(root)
    return [[c.replace("**", "").strip() for c in line.strip("|").split("|")] for line in body.splitlines()
            if line.startswith("|") and f"`{preset}`" in line]


def test_three_trials_make_one_row_the_median_trial_with_the_spread(root: Path):
    # Scores rise with confirmed findings: trial 2 (3 held) is the median of 1, 3 and 6 held.
    _trial(root, "t1", "t1", 1, 4, 3000, 1, 2)
    _trial(root, "t2", "t1", 2, 4, 2400, 3, 1)
    _trial(root, "t3", "t1", 3, 4, 1800, 6, 0)
    _trial(root, "t4", "t1", 4, 4, 900, 0, 0, status=Status.void)  # ran, no row: named, not scored
    head, detail = _rows(root)
    assert head[1].endswith("(median of 3 trials)")
    assert head[7] == "3 / 4" and head[9] == "40m00s"  # trial 2's own cells
    trials = detail[detail.index("[run record](runs/t2/run.json)") + 6]
    assert trials.startswith("trial 2 of 4 (median of 3 with a row)")
    assert "without a row: 1 void" in trials
    assert "Confirmed 1–6" in trials and "Total 30m00s–50m00s" in trials
    low, high = trials.split("Scoring ")[1].split(" (")[0].split("–")
    assert float(low) < float(head[6]) < float(high)  # the median's score inside the interval
    assert trials.endswith("(75 % interval of the median)")
    assert "2.70 (the serve's, shared by 4 trials)" in detail
    # GPU cost: the serve's, over all 10 findings confirmed on it (1 + 3 + 6), not trial 2's 3.
    assert detail[-2:] == ["$8.41 (the serve's)", "$0.841 (over 10 confirmed in 3 trials)"]


def test_two_trials_with_a_row_take_the_lower_middle_and_give_no_interval(root: Path):
    _trial(root, "a1", "a1", 1, 2, 3000, 4, 0)
    _trial(root, "a2", "a1", 2, 2, 3000, 1, 0)
    head, detail = _rows(root)
    assert head[7] == "1 / 1"  # the lower of the two: a row is always a real trial, never an average
    trials = next(c for c in detail if c.startswith("trial "))
    assert trials == "trial 2 of 2 (median of 2 with a row) · Confirmed 1–4 · Total 50m00s"


def test_a_trial_stopped_by_a_fault_is_named_and_the_rest_never_ran(root: Path):
    _trial(root, "f1", "f1", 1, 3, 3000, 2, 0)
    _trial(root, "f2", "f1", 2, 3, 100, 0, 0, status=Status.fault)
    _, detail = _rows(root)
    trials = next(c for c in detail if c.startswith("trial "))
    assert trials == "trial 1 of 3 (median of 1 with a row) · without a row: 1 fault · 1 never ran"


def test_trials_without_a_final_ruling_make_no_row_and_a_hello_group_is_not_on_the_table(root: Path):
    _trial(root, "d1", "d1", 1, 2, 3000, 2, 0, final=False)
    _trial(root, "d2", "d1", 2, 2, 3000, 2, 0, status=Status.void)
    _trial(root, "h1", "h1", 1, 2, 3000, 2, 0, mission="hello")
    _trial(root, "h2", "h1", 2, 2, 3000, 2, 0, mission="hello")
    assert _rows(root) == []


def test_a_later_single_run_of_the_key_replaces_an_older_group(root: Path):
    _trial(root, "g1", "g1", 1, 2, 3000, 2, 0)
    _trial(root, "g2", "g1", 2, 2, 3000, 2, 0)
    _run(root, "later", "odd-trials", T0 + timedelta(days=1), 1000, ["Perf"], 0)
    head, detail = _rows(root)
    assert not head[1].endswith("trials)") and "[run record](runs/later/run.json)" in detail


# -- the launch --------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_three_trials_serve_once_and_leave_three_records(project: Project):
    code, out, err = project.run_cli([*LAUNCH, "--trials", "3"], timeout=540)
    assert code == 0, dump(out, err)
    dirs = project.run_dirs()
    records = sorted((json.loads((d / "run.json").read_text()) for d in dirs), key=lambda r: r["trial"]["index"])
    assert [r["trial"]["index"] for r in records] == [1, 2, 3] and len(dirs) == 3
    first = records[0]
    assert {r["trial"]["group"] for r in records} == {first["run_id"]} and {r["trial"]["of"] for r in records} == {3}
    assert all(r["status"] == "ok" and r["run"]["report_found"] for r in records), [r["reason"] for r in records]
    # One serve: one unit, one start, one destroy, its GPU-hours on every record.
    assert {r["unit"] for r in records} == {"vot-replay-hello"}
    for key in ("serve_start", "ready", "probed", "smoked", "destroyed"):
        assert len({r["times"][key] for r in records}) == 1, key
    assert len({r["gpu_hours"] for r in records}) == 1
    assert err.count("destroyed vot-replay-hello") == 1 and err.count("ready after") == 1
    assert err.count("smoke passed") == 1
    assert_destroyed(project, records[-1])
    # The first trial's folder holds the serve's log; what the script served: one smoke, three missions.
    by_id = {d.name: d for d in dirs}
    first_dir = by_id[first["run_id"]]
    assert (first_dir / "unit.log").is_file() and (first_dir / "smoke").is_dir()
    served = Project.served(first_dir)
    missions = [s for s in served if s.get("trajectory") == "hello" and s.get("step") == 0]
    smokes = [s for s in served if s.get("trajectory") == "smoke" and s.get("step") == 0]
    assert len(missions) == 3 and len(smokes) == 1, served
    # Each later trial: its own provider file, workspace, opencode store and report; no smoke, no unit log.
    for rec in records[1:]:
        d = by_id[rec["run_id"]]
        assert not (d / "unit.log").exists() and not (d / "smoke").exists()
        assert (d / "opencode-provider.json").is_file() and (d / "report.md").is_file()
        assert rec["session"]["root_session"] != first["session"]["root_session"]
        assert rec["artifacts"]["workspace"] == "workspace"  # relative to its own folder
        assert rec["probe"] == first["probe"] and rec["engine"] == first["engine"]
    # The trials' mission windows follow one another.
    for a, b in zip(records, records[1:]):
        assert a["times"]["mission_end"] <= b["times"]["mission_start"]


def test_a_failpoint_on_a_trial_that_never_runs_is_refused_before_serving(project: Project):
    project.env["LLMS_BENCHMARK_FAILPOINT"] = "smoke#2:raise"  # the smoke runs once, in trial 1
    code, out, err = project.run_cli([*LAUNCH, "--trials", "2"], timeout=120)
    assert code == 2 and "never runs" in err, dump(out, err)
    assert project.ledger() == {}
    project.env["LLMS_BENCHMARK_FAILPOINT"] = "run#3:raise"
    code, out, err = project.run_cli([*LAUNCH, "--trials", "2"], timeout=120)
    assert code == 2 and "runs 2 trial(s)" in " ".join(err.split()), dump(out, err)


@pytest.mark.parametrize("value", ["0", "21", "two"])
def test_a_bad_trial_count_is_refused_before_anything_is_served(project: Project, value: str):
    code, out, err = project.run_cli([*LAUNCH, "--trials", value], timeout=60)
    assert code == 2 and "--trials" in err and "Traceback" not in err, dump(out, err)
    assert project.run_dirs() == [] and project.ledger() == {}


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_three_observability_trials_make_one_row_with_the_spread(project: Project):
    """The acceptance: `--trials 3` on the replay stack's observability mission, each trial ruled
    (the key-matcher's proposals accepted), one row on a page of scripted rows: the median trial."""
    shutil.copytree(REPO / "missions" / "observability", project.root / "missions" / "observability",
                    ignore=shutil.ignore_patterns("__pycache__", "*.db", "drive.json", ".obs"))
    shutil.copy2(REPO / "replay" / "observability.yaml", project.root / "replay")
    shutil.copy2(REPO / ".vot" / "presets" / "replay-observability.yaml", project.root / ".vot" / "presets")
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-observability", "--mission",
                                      "observability", *SMALL_PROBE, "--trials", "3"], timeout=1200)
    assert code == 0, dump(out, err)
    records = sorted(project.records(), key=lambda r: r["trial"]["index"])
    assert len(records) == 3 and all(r["status"] == "ok" for r in records)
    assert err.count("ready after") == 1 and err.count("destroyed vot-replay-observability") == 1
    # Each trial drove its own mission stack: its own drive, telemetry store and report.
    for rec in records:
        d = project.runs_dir / rec["run_id"]
        assert rec["drive"]["problem"] is None and (d / "telemetry.duckdb").is_file() and (d / "report.md").is_file()
    from harness.verdicts import controls as ctl

    ctl.build(project.root / "missions" / "observability")
    for rec in records:
        code, out, err = project.run_cli(["rule", rec["run_id"], "--accept", "--json"], timeout=180)
        assert code == 0, dump(out, err)
    page = project.root / "page.md"
    page.write_text("# scripted results\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    code, out, err = project.run_cli(["render", "--page", str(page), "--include-scripted"], timeout=60)
    assert code == 0, dump(out, err)
    rows = [[c.replace("**", "").strip() for c in line.strip("|").split("|")] for line in page.read_text().splitlines()
            if line.startswith("|") and "replay-observability" in line]
    assert len(rows) == 2, rows  # one headline row, one detail row: three trials, one row
    head, detail = rows
    assert "(median of 3 trials)" in head[1]
    trials = next(c for c in detail if c.startswith("trial "))
    assert "of 3 (median of 3 with a row)" in trials and "Confirmed 1 ·" in trials, trials
    assert trials.endswith("(75 % interval of the median)")
    assert "shared by 3 trials" in " ".join(detail)
