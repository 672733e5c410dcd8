"""RunPaths / ProjectPaths: the only place a run's files are named, and the tree their
docstring draws; the launch's failpoint stages come from its own stage list."""

from __future__ import annotations

import re
from pathlib import Path

import harness.records.paths as paths
from harness.launcher.launch import AFTER_DESTROY, FAILPOINT_STAGES, STAGES
from harness.records.paths import ProjectPaths, RunPaths

RUN_PROPERTIES = [n for n, v in vars(RunPaths).items() if isinstance(v, property)]


def test_every_run_file_is_a_distinct_direct_child_of_the_run_folder(tmp_path: Path):
    run = ProjectPaths(tmp_path).run("r1")
    assert run == RunPaths(tmp_path / ".llms-benchmark" / "runs" / "r1")
    files = [getattr(run, name) for name in RUN_PROPERTIES]
    assert all(f.parent == run.dir for f in files)
    assert len({f.name for f in files}) == len(files)


def test_the_docstring_tree_names_every_run_file_and_no_other():
    """The tree in harness/records/paths.py is documentation people read: it must not drift."""
    doc = paths.__doc__
    in_run = doc[doc.index("RunPaths:"):doc.index("Frozen")]
    drawn = {m.group(1).rstrip("/") for m in re.finditer(r"^\s{8}(\S+)\s", in_run, re.M)}
    named = {getattr(RunPaths(Path("x")), n).name for n in RUN_PROPERTIES}
    assert drawn == named


def test_failpoint_stages_are_the_stage_list_then_destroy_then_what_runs_after_it():
    after = [s.name for s in AFTER_DESTROY]
    assert after == ["collect"]  # what reads the agent's leftovers: after the unit is gone
    assert list(FAILPOINT_STAGES) == [*(s.name for s in STAGES if s.failpoint), "destroy", *after]
    # the fault matrix covers exactly these (tests/test_fault_matrix.py)
    from test_fault_matrix import STAGES as MATRIX

    assert tuple(FAILPOINT_STAGES) == MATRIX
