"""Issue 35, item 2: every launch input checked before anything happens, a refused launch
leaves `git status` clean; item 1's background launch: `launch --detach` prints the run id
and record at once, `wait RUN --timeout S` exits as the launch did (124 while it runs).

The checks run the real console script against a throw-away project root (tests/conftest.py)
that is a git repository with the checkout's own .gitignore."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from conftest import REPO, Project


def dump(out: str, err: str) -> str:
    return f"\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"


def _git(project: Project, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project.root, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(project: Project) -> Project:
    """The project as a git repository: the checkout's .gitignore, everything committed."""
    shutil.copy2(REPO / ".gitignore", project.root / ".gitignore")
    _git(project, "init", "-q", ".")
    _git(project, "add", "-A")
    _git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the project")
    return project


def _nothing_written(project: Project) -> None:
    assert not (project.root / ".llms-benchmark").exists(), sorted((project.root / ".llms-benchmark").rglob("*"))
    assert project.ledger() == {}


@pytest.mark.parametrize("effort", ["extreme", "x/y", "../medium", "", "HIGH", "a" * 3000])
def test_an_effort_opencode_does_not_accept_is_refused_before_anything(project: Project, effort: str):
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", effort, "--mission", "hello"],
                                     timeout=60)
    text = " ".join(err.split())
    assert code == 2 and "Traceback" not in err, dump(out, err)
    assert "field 'EFFORT'" in text and "use one of: low, medium, high, default" in text, dump(out, err)
    _nothing_written(project)


@pytest.mark.parametrize(("args", "field"), [
    (["replay", "x/y"], "PRESET"), (["replay", "../replay-hello"], "PRESET"), (["replay", ""], "PRESET"),
    (["replay", "a" * 3000], "PRESET"), (["../replay", "replay-hello"], "ENVIRONMENT"),
    (["/etc", "replay-hello"], "ENVIRONMENT"), (["replay", "replay-hello", "medium", "--mission", "../hello"], "--mission"),
    (["replay", "replay-hello", "medium", "--mission", "hello/"], "--mission"),
])
def test_a_name_that_could_make_a_path_is_refused_before_anything(project: Project, args: list[str], field: str):
    if "--mission" not in args:
        args = [*args, "medium", "--mission", "hello"]
    code, out, err = project.run_cli(["launch", "local", *args], timeout=60)
    text = " ".join(err.split())
    assert code == 2 and "Traceback" not in err, dump(out, err)
    assert f"field '{field}'" in text and "is not a name" in text and "use one of:" in text, dump(out, err)
    _nothing_written(project)


def test_default_effort_is_accepted(repo: Project):
    """`default` (the seed's word: no --variant) passes the check; the preflight refusal after it
    proves the check let it through (an unknown preset: nothing served)."""
    code, out, err = repo.run_cli(["launch", "local", "replay", "nope", "default", "--mission", "hello"], timeout=60)
    assert code == 2 and "no preset 'nope'" in err, dump(out, err)


@pytest.mark.parametrize("case", ["unknown-preset", "missing-key", "port-in-use"])
def test_a_refused_launch_leaves_git_status_clean(repo: Project, case: str):
    import socket

    held = None
    if case == "unknown-preset":
        args = ["replay", "nope"]
    elif case == "missing-key":
        repo.add_preset("keyed", trajectory="hello", env=["LLMS_BENCHMARK_TEST_UNSET_KEY"])
        repo.env.pop("LLMS_BENCHMARK_TEST_UNSET_KEY", None)
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a preset needing a key")
        args = ["replay", "keyed"]
    else:
        held = socket.socket()
        held.bind(("127.0.0.1", 0))
        held.listen()
        env = repo.root / ".vot" / "environments" / "replay.yaml"
        env.write_text(f"name: replay\nstack: replay\nconfig:\n  port: {held.getsockname()[1]}\n")
        _git(repo, "add", "-A")
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a port in use")
        args = ["replay", "replay-hello"]
    try:
        code, out, err = repo.run_cli(["launch", "local", *args, "--mission", "hello"], timeout=90)
    finally:
        if held is not None:
            held.close()
    assert code == 2 and "Traceback" not in err, dump(out, err)
    assert _git(repo, "status", "--porcelain") == "", dump(out, err)
    if case == "unknown-preset":  # the preflight names it (--detach refuses it before detaching: below)
        assert "no preset 'nope'" in " ".join(err.split()), dump(out, err)
    # The record is kept, out of git, and says why.
    refused = sorted((repo.root / ".llms-benchmark" / "refused").glob("*/run.json"))
    assert len(refused) == 1 and repo.run_dirs() == []
    rec = json.loads(refused[0].read_text())
    assert rec["status"] == "refused" and rec["stopped_at"] == "preflight" and rec["reason"], rec
    assert f".llms-benchmark/refused/{rec['run_id']}/run.json" in " ".join(err.split()), dump(out, err)
    assert repo.ledger() == {}


@pytest.mark.parametrize(("args", "named"), [
    (["--probe-long-tokens", "-5"], "--probe-long-tokens"),  # it served and recorded "200.5 tok/s at 20 tokens"
    (["--probe-long-tokens", "100000000"], "--probe-long-tokens"),
    (["--capacity-trace", "x.trace.jsonl"], "add --capacity"),  # it was ignored
    (["--capacity-copies", "1,2"], "add --capacity"),
    (["--capacity", "--capacity-trace", "x.trace.jsonl"], "llms-benchmark load-trace"),
    (["--detach", "--capacity-ttft-p99", "5"], "add --capacity"),
])
def test_issue_47_launch_options_are_refused_before_anything(project: Project, args: list[str], named: str):
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "hello", *args],
                                     timeout=60)
    text = " ".join(err.split())
    assert code == 2 and "Traceback" not in err and named in text, dump(out, err)
    _nothing_written(project)


def test_a_detached_launch_refuses_a_file_that_does_not_load_before_it_detaches(project: Project):
    """An unknown preset, a mission that is not there, a preset that does not validate: exit 2 at
    once, naming the file (it exited 0 and printed a record path that never came to be)."""
    broken = project.add_preset("broken", trajectory="hello")
    broken.write_text(broken.read_text().replace("--max-model-len: 65536", "--max-model-len: abc"))
    for args, named in ((["replay", "nope"], "nope.yaml"), (["replay", "replay-hello", "medium", "--mission", "nope"],
                                                           "no mission named 'nope'"),
                        (["replay", "broken"], "not an integer")):
        if "--mission" not in args:
            args = [*args, "--mission", "hello"]
        code, out, err = project.run_cli(["launch", "local", *args, "--detach", "--json"], timeout=60)
        assert code == 2 and out == "" and named in " ".join(err.split()), dump(out, err)
        _nothing_written(project)
        assert not (project.root / ".llms-benchmark").exists()


def test_wait_names_a_run_it_cannot_find(project: Project):
    for run, phrase in (("no-such-run", "no run 'no-such-run'"), ("../x", "is not a run id")):
        code, out, err = project.run_cli(["wait", run, "--timeout", "1"], timeout=60)
        assert code == 2 and phrase in " ".join(err.split()) and "Traceback" not in err, dump(out, err)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_detach_prints_the_run_at_once_and_wait_exits_as_the_launch(repo: Project):
    code, out, err = repo.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "hello", "--detach",
                                   "--json"], timeout=60)
    assert code == 0, dump(out, err)
    facts = json.loads(out)
    run = facts["run_id"]
    assert facts["record"] == f".llms-benchmark/runs/{run}/run.json" and facts["pid"] > 0
    # Still running a second later: 124, and the run goes on.
    code, out, err = repo.run_cli(["wait", run, "--timeout", "0.5"], timeout=60)
    assert code == 124 and "still running" in err, dump(out, err)
    code, out, err = repo.run_cli(["wait", run, "--timeout", "240", "--json"], timeout=260)
    assert code == 0, dump(out, err) + (repo.root / facts["log"]).read_text()[-3000:]
    done = json.loads(out)
    assert done["status"] == "ok" and done["record"] == facts["record"]
    assert json.loads((repo.root / facts["record"]).read_text())["times"]["end"]
    # A background launch of a preset that does not exist: refused before it detaches (it exited 0
    # and named a record that was never written), nothing started, nothing written.
    code, out, err = repo.run_cli(["launch", "local", "replay", "nope", "--mission", "hello", "--detach", "--json"],
                                  timeout=60)
    assert code == 2 and out == "" and "no preset 'nope'" in " ".join(err.split()), dump(out, err)
    assert not (repo.root / ".llms-benchmark" / "refused").exists()
    # Only the ok run's record, report and trajectory (ATIF) are left for git: no log.
    assert _git(repo, "status", "--porcelain", "-uall").split() == [
        "??", facts["record"].replace("run.json", "report.md"), "??", facts["record"],
        "??", facts["record"].replace("run.json", "trajectory.json")]


def test_wait_on_a_launch_that_died_is_a_fault(project: Project):
    """A background launch gone (killed) with its record never ended: exit 3, named, at once."""
    import subprocess as sp

    run = "20260101T000000Z-replay-hello-medium-dead"
    folder = project.root / ".llms-benchmark" / "runs" / run
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps({
        "run_id": run, "key": {"preset": "replay-hello", "effort": "medium", "effort_requested": "medium",
                               "gpu": "unknown"},
        "environment": "replay", "stack": "replay", "mission": "hello", "times": {"launch": "2026-01-01T00:00:00Z"}}))
    gone = sp.Popen(["true"])
    gone.wait()
    launches = project.root / ".llms-benchmark" / "launches"
    launches.mkdir()
    (launches / f"{run}.json").write_text(json.dumps({"run_id": run, "pid": gone.pid, "created": 1.0}))
    code, out, err = project.run_cli(["wait", run, "--timeout", "30"], timeout=60)
    assert code == 3 and "ended without finishing its record" in " ".join(err.split()), dump(out, err)


def test_an_effort_the_model_cannot_take_is_said_before_the_launch(project: Project):
    from harness.cli.launch import effort_note

    note = effort_note(project.root, "replay", "replay-hello", "high")
    assert note and "takes no reasoning effort" in note and "the row reads `default`" in note
    assert effort_note(project.root, "replay", "replay-hello", "default") is None
    assert effort_note(project.root, "replay", "nope", "high") is None  # the preflight names it
    gptoss = project.add_preset("replay-gptoss", trajectory="hello")
    text = gptoss.read_text().replace("--tool-call-parser: hermes", "--tool-call-parser: openai\n  --reasoning-parser: openai_gptoss")
    gptoss.write_text(text)
    from harness.vot.preset import load_preset

    assert load_preset(project.root, "replay-gptoss").resolve("replay").reasoning_parser == "openai_gptoss"
    assert effort_note(project.root, "replay", "replay-gptoss", "high") is None


@pytest.mark.parametrize("covered", [True, False])
def test_a_mission_the_replay_trajectory_does_not_script_is_refused_before_anything(project: Project, covered: bool):
    """Unscripted, the mission would be answered by the fallback's filler (max_tokens a turn at
    its pace) until its budget ran out: `launch local replay replay-hello` without
    `--mission hello` ran 49 minutes on the observability mission before this check."""
    folder = project.add_mission("unscripted")
    (folder / "prompt.md").write_text("Count the files in this directory and say how many there are.\n")
    if not covered:
        shutil.rmtree(project.root / "missions" / "hello")
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "unscripted"],
                                     timeout=60)
    text = " ".join(err.split())
    assert code == 2 and "Traceback" not in err, dump(out, err)
    assert "none of its scenarios matches the 'unscripted' mission's prompt" in text, dump(out, err)
    fix = "fix: add --mission hello" if covered else "fix: add a scenario to replay/hello.yaml"
    assert fix in text, dump(out, err)
    assert project.run_dirs() == [] and project.ledger() == {}


# --- issue 63, item 4e: `--detach` never names a record that will not be there ------------------

def test_a_detached_scripted_preset_without_its_mission_is_refused_before_it_detaches(project: Project):
    """replay-hello with the default mission (observability), which its trajectory does not script:
    the foreground preflight refuses it; `--detach` exited 0 naming a record in `runs/` that the
    refusal moved to `refused/`. Now: exit 2 at once, the fix named, nothing started or written."""
    shutil.copytree(REPO / "missions" / "observability", project.root / "missions" / "observability",
                    ignore=shutil.ignore_patterns("__pycache__", "*.db", "drive.json", ".obs"))
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--detach", "--json"], timeout=60)
    text = " ".join(err.split())
    assert code == 2 and out == "" and "fix: add --mission hello" in text and "Traceback" not in err, dump(out, err)
    _nothing_written(project)


def test_a_detached_launch_its_background_preflight_refuses_exits_2_naming_its_record(project: Project):
    """A refusal only the launch's own preflight makes (here a failpoint naming a trial that never
    runs): `--detach` waits for the preflight, exits 2 with the refusal, and the record it names is
    where the refusal left it (`refused/`), never the `runs/` path it will not be at."""
    project.env["LLMS_BENCHMARK_FAILPOINT"] = "configure#2:raise"
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "hello", "--detach",
                                      "--json"], timeout=120)
    assert code == 2 and "names trial 2 of stage configure" in " ".join(err.split()), dump(out, err)
    facts = json.loads(out)
    run = facts["run_id"]
    assert facts["record"] == f".llms-benchmark/refused/{run}/run.json" and facts["status"] == "refused"
    assert (project.root / facts["record"]).is_file() and not (project.root / ".llms-benchmark" / "runs" / run).exists()
    code, out, err = project.run_cli(["wait", run, "--timeout", "10", "--json"], timeout=60)
    assert code == 2 and json.loads(out)["next"] == "scripted trajectory: no row", dump(out, err)


def test_a_detached_launch_that_passed_its_preflight_names_a_record_that_is_there(project: Project):
    code, out, err = project.run_cli(["launch", "local", "replay", "replay-hello", "--mission", "hello", "--detach",
                                      "--json"], timeout=120)
    assert code == 0, dump(out, err)
    facts = json.loads(out)
    assert facts["record"] == f".llms-benchmark/runs/{facts['run_id']}/run.json"
    assert (project.root / facts["record"]).is_file()  # there when named, and it stays (it began serving)
    code, out, err = project.run_cli(["wait", facts["run_id"], "--timeout", "240", "--json"], timeout=260)
    assert code == 0, dump(out, err) + (project.root / facts["log"]).read_text()[-3000:]
    assert (project.root / facts["record"]).is_file() and json.loads(out)["next"] == "scripted trajectory: no row"
