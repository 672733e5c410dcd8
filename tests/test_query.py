"""Issue 47, item 4: a finished run's telemetry store is read through a harness command (`query`),
never "open telemetry.duckdb with DuckDB" (no duckdb CLI is installed): obs's own query commands,
read-only and confined. The real CLI on a store the receiver's schema made."""

from __future__ import annotations

import json

import pytest

from conftest import Project

RUN = "20261205T100000Z-replay-observability-medium-cd34"


@pytest.fixture
def store(project: Project):
    from harness.telemetry.store import Store

    folder = project.root / ".llms-benchmark" / "runs" / RUN
    folder.mkdir(parents=True)
    Store(folder / "telemetry.duckdb").close()
    return folder / "telemetry.duckdb"


@pytest.mark.parametrize("argv", [["sql", "SELECT count(*) AS n FROM spans"], ["SELECT count(*) AS n FROM spans"],
                                  ["obs", "sql", "SELECT count(*) AS n FROM spans"]])
def test_sql_reads_the_store(project: Project, store, argv: list[str]):
    code, out, err = project.run_cli(["query", RUN, *argv, "--json"], timeout=60)
    assert code == 0, out + err
    assert json.loads(out) == {"columns": ["n"], "rows": [[0]], "truncated": False}


def test_an_obs_command_reads_the_store(project: Project, store):
    code, out, err = project.run_cli(["query", RUN, "traces", "search", "--service", "shop-api"], timeout=60)
    assert code == 0 and "no spans match" in out, out + err


@pytest.mark.parametrize(("argv", "said"), [
    (["sql", "DROP TABLE spans"], "not DROP"),
    (["sql", "SELECT * FROM read_csv('/etc/passwd')"], "read_csv"),
    (["drive"], "does not read the store"),
    (["finding", "list"], "does not read the store"),
    ([], "no query given"),
])
def test_what_is_not_a_reading_is_refused_and_the_store_is_unchanged(project: Project, store, argv, said):
    before = store.read_bytes()
    code, out, err = project.run_cli(["query", RUN, *argv], timeout=60)
    assert code == 2 and said in " ".join(err.split()) and "Traceback" not in err, out + err
    assert store.read_bytes() == before


def test_a_run_without_a_store_is_named(project: Project):
    for run, said in ((RUN, "has no telemetry store"), ("../x", "is not a run id")):
        code, out, err = project.run_cli(["query", run, "sql", "SELECT 1"], timeout=60)
        assert code == 2 and said in " ".join(err.split()), out + err
