"""Issue 35, item 1: the slash command as an agent runs it. Its own commands — every ```sh block
of .claude/commands/launch-llms-benchmark.md, extracted from the file, placeholders filled in
as an agent would — run in order, without a terminal, on a replay run of the observability
mission, and end with a row on a page; so the file cannot drift from the CLI again.

The one change to the file's commands: a scripted replay row never goes on the published page
(by design), so the project's `.venv/bin/llms-benchmark` is a wrapper that sends `render` and
`score check` to a page of scripted rows (`--include-scripted --page scripted.md`) and runs
every other command as written."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import CLI, REPO, Project

SLASH = REPO / ".claude" / "commands" / "launch-llms-benchmark.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.S | re.M)
PLACEHOLDER = re.compile(r"<([a-z_A-Z]+)>")


def commands() -> list[str]:
    """The file's commands, one per line of its ```sh blocks, in order."""
    text = SLASH.read_text()
    return [line.strip() for block in BLOCK.findall(text) for line in block.splitlines() if line.strip()]


def fill(command: str, values: dict[str, str]) -> str:
    def one(match: re.Match) -> str:
        name = match.group(1)
        assert name in values, f"the slash command's placeholder <{name}> has no value in the test: {command}"
        return values[name]
    return PLACEHOLDER.sub(one, command)


def test_each_wait_fits_an_agents_tool_limit_and_the_store_is_read_by_the_harness():
    """Issue 47: `wait --timeout 540` outlasted an agent's ~2-minute tool limit; "open
    telemetry.duckdb with DuckDB" named no command (and no duckdb CLI is installed)."""
    waits = [c for c in commands() if " wait " in c]
    assert waits and all(float(c.split("--timeout")[1].split()[0]) <= 110 for c in waits), waits
    text = SLASH.read_text()
    assert "DuckDB" not in text and "duckdb " not in text.lower()
    assert any(c.startswith(".venv/bin/llms-benchmark query <run_id>") for c in commands())
    assert "--mission observability|hello" in text


def _section(title: str) -> list[str]:
    text = SLASH.read_text()
    start = text.index(title)
    end = text.index("\n## ", start + 1)
    return [line.strip() for block in BLOCK.findall(text[start:end]) for line in block.splitlines() if line.strip()]


def test_a_run_without_a_row_leaves_git_as_the_file_says(project: Project):
    """Step 2b's commands, as written, on a void run of a real preset: the run's folder leaves
    `runs/` (ignored), and the entry and the page are exactly what is staged; nothing else is
    left for git."""
    from datetime import UTC, datetime, timedelta

    from harness.records.record import RowKey, RunRecord, Status, Timestamps

    root = project.root
    shutil.copy2(REPO / ".gitignore", root / ".gitignore")
    for name in ("README.md", "non-conclusive.yaml"):
        (root / ".llms-benchmark").mkdir(exist_ok=True)
        shutil.copy2(REPO / ".llms-benchmark" / name, root / ".llms-benchmark" / name)
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "llms-benchmark").symlink_to(CLI)
    _git(root, "init", "-q", ".")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the project")
    run = "20261205T110000Z-cpu-qwen2-5-coder-1-5b-medium-ef56"
    launch = datetime(2026, 12, 5, 11, tzinfo=UTC)
    RunRecord(run_id=run, key=RowKey(preset="cpu-qwen2-5-coder-1-5b", effort="medium", effort_requested="medium",
                                     gpu="CPU"), environment="cpu", stack="local-llamacpp", mission="observability",
              status=Status.void, reason="the mission ran past its 600 s cap", stopped_at="run",
              times=Timestamps(launch=launch, end=launch + timedelta(minutes=11))
              ).save(root / ".llms-benchmark" / "runs" / run)
    (root / ".llms-benchmark" / "runs" / run / "report.md").write_text("no findings\n")
    env = {**project.env, "LLMS_BENCHMARK_ROOT": str(root)}
    steps = _section("## 2b.")
    assert any(" inconclusive " in c for c in steps) and any(c.startswith("git add") for c in steps)
    for command in steps:
        done = subprocess.run(["sh", "-c", fill(command, {"run_id": run})], cwd=root, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
    assert sorted(_git(root, "diff", "--cached", "--name-only").split()) == [
        ".llms-benchmark/README.md", ".llms-benchmark/non-conclusive.yaml"]
    assert _git(root, "status", "--porcelain", "-uall").splitlines() == [
        "M  .llms-benchmark/README.md", "M  .llms-benchmark/non-conclusive.yaml"]
    assert f"(run {run})" in (root / ".llms-benchmark" / "README.md").read_text()


def test_the_file_names_only_commands_the_cli_has():
    """Cheap and always run: each llms-benchmark command of the file is one the CLI knows, with
    options it takes (`--help` of the verb lists each option the file passes)."""
    cmds = [c for c in commands() if c.startswith(".venv/bin/llms-benchmark")]
    assert len(cmds) >= 8, cmds
    for command in cmds:
        words = command.split()[1:]
        verb = words[:2] if words[0] in ("launch", "score") else words[:1]
        result = subprocess.run([str(CLI), *verb, "--help"], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "COLUMNS": "300"})
        assert result.returncode == 0, (command, result.stderr)
        for option in (w for w in words if w.startswith("--")):
            assert option in result.stdout, f"{command}: `{' '.join(verb)}` takes no {option}"


WRAPPER = """#!/bin/sh
# The test's llms-benchmark: render and score check go to a page of scripted rows.
real={real}
case "$1" in
  render) exec "$real" "$@" --include-scripted --page scripted.md ;;
  score) [ "$2" = check ] && exec "$real" "$@" --page scripted.md ;;
esac
exec "$real" "$@"
"""


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_slash_commands_own_commands_end_with_a_row(project: Project):
    root = project.root
    shutil.copytree(REPO / "missions" / "observability", root / "missions" / "observability",
                    ignore=shutil.ignore_patterns("__pycache__", "*.db", "drive.json", ".obs"), dirs_exist_ok=True)
    shutil.copy2(REPO / "replay" / "observability.yaml", root / "replay")
    shutil.copy2(REPO / ".vot" / "presets" / "replay-observability.yaml", root / ".vot" / "presets")
    shutil.copy2(REPO / ".gitignore", root / ".gitignore")
    (root / ".llms-benchmark").mkdir()
    (root / ".llms-benchmark" / "README.md").write_text("# results\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    (root / "scripted.md").write_text("# scripted rows\n\n<!-- results:begin -->\n<!-- results:end -->\n")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "llms-benchmark").write_text(WRAPPER.format(real=CLI))
    (bin_dir / "llms-benchmark").chmod(0o755)
    _git(root, "init", "-q", ".")
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "the project")
    # The mission's control stores (finding 1's evidence is checked against them): `make setup`
    # makes them, cached by the mission's hash, which the copy shares.
    from harness.verdicts import controls as ctl

    ctl.build(root / "missions" / "observability")

    env = {**project.env, "LLMS_BENCHMARK_ROOT": str(root)}
    values = {"environment": "replay", "preset": "replay-observability", "effort": "medium",
              "mission": "observability"}
    ran: list[tuple[str, int]] = []

    def sh(command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        line = fill(command, values)
        done = subprocess.run(["sh", "-c", line], cwd=root, env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)
        ran.append((line, done.returncode))
        return done

    def fail(done: subprocess.CompletedProcess) -> str:
        return f"\n{ran}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"

    steps = commands()
    launch, wait, stop = (next(c for c in steps if key in c) for key in (" launch local ", " wait ", " stop "))
    assert "--detach" in launch and "<run_id>" in wait and "--timeout" in wait and "--mission <mission>" in launch

    # 1. The launch, in the background: the run id at once.
    started = time.monotonic()
    done = sh(launch, timeout=120)
    assert done.returncode == 0, fail(done)
    facts = json.loads(done.stdout)
    assert time.monotonic() - started < 60 and facts["record"].endswith(f"{facts['run_id']}/run.json")
    values["run_id"] = run = facts["run_id"]
    run_dir = root / ".llms-benchmark" / "runs" / run

    assert (root / facts["record"]).is_file()  # named once it is there, where it stays
    # 2. While it runs: `stop` once `wait` says the report is persisted (the file waits for it to
    # settle; the replay's agent ends seconds after writing it, so here: as soon as it is persisted.
    # The stop may find the run already over: then it says so, exit 2).
    short_wait = wait.replace("--timeout 100", "--timeout 0.3") + " --json"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        done = sh(short_wait, timeout=60)
        if done.returncode != 124 or (json.loads(done.stdout)["report"] or {}).get("persisted"):
            break
    assert done.returncode in (0, 124), fail(done)
    if done.returncode == 124:
        assert json.loads(done.stdout)["report"]["file"] == f".llms-benchmark/runs/{run}/workspace/report.md"
    done = sh(stop, timeout=60)
    stopped = done.returncode == 0
    assert stopped or (done.returncode == 2 and "is not running" in done.stderr), fail(done)
    while True:
        done = sh(wait, timeout=600)
        if done.returncode != 124:
            break
    assert done.returncode == 0, fail(done) + (root / facts["log"]).read_text()[-3000:]
    # What the file asks the agent to report, and how this run ends: a scripted preset never makes
    # a row (the rest goes on as for a real model, onto a page of scripted rows: see the top).
    assert "probe: decode " in done.stdout and "turns: " in done.stdout and "tokens: " in done.stdout, fail(done)
    assert "next: scripted trajectory: no row" in done.stdout, fail(done)
    assert "`next: scripted trajectory: no row`" in SLASH.read_text()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["status"] == "ok" and record["times"]["end"]
    if stopped:  # asked in time: the run ended stopped after its report, or on its own first
        assert record["run"]["stopped_after_report"] or record["run"]["ended_by"] is None, record["run"]

    # 3. Rulings: the draft, then every finding set as the agent decides (here: as proposed,
    # with a reason of its own), checked, made final.
    rule_steps = [c for c in steps if " rule " in c]
    draft_cmd, set_cmd = rule_steps[0], next(c for c in rule_steps if " set " in c)
    done = sh(draft_cmd)
    assert done.returncode == 0, fail(done)
    draft = yaml.safe_load((root / "rulings" / f"{run}.yaml").read_text())
    assert draft["final"] is False and draft["findings"]
    # A draft reason may be made final as it stands: none quotes the answer key (issue 63).
    key = yaml.safe_load((REPO / "missions" / "observability" / "key" / "defects.yaml").read_text())["defects"]
    secret = [" ".join(d["description"].split()) for d in key] + [
        x for d in key for e in d["evidence"] for x in (" ".join(e["sql"].split()), f"{e['expect']} (got")]
    reasons = [" ".join(f["reason"].split()) for f in draft["findings"]]
    assert not [t for t in secret for r in reasons if t in r], reasons
    for finding in draft["findings"]:
        values.update(N=finding["number"], verdict=finding["verdict"],
                      reason=f"Checked by hand: the proposal for finding {finding['number']} stands on its query.")
        done = sh(set_cmd)
        assert done.returncode == 0, fail(done)
    for command in rule_steps[rule_steps.index(set_cmd) + 1:]:
        done = sh(command)
        assert done.returncode == 0, fail(done)
    rulings = yaml.safe_load((root / "rulings" / f"{run}.yaml").read_text())
    assert rulings["final"] is True
    assert {f["ruled_by"] for f in rulings["findings"]} != {"key-matcher"}  # ruled by the agent, each one

    # 4. and 5. The page, its check, and git add of exactly what the row needs.
    rest = steps[steps.index(rule_steps[-1]) + 1:]
    assert any(c.endswith(" render") for c in rest) and any(c.endswith(" score check") for c in rest)
    for command in rest:
        done = sh(command)
        assert done.returncode == 0, fail(done)
    page = (root / "scripted.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| **#1** |") and "replay-observability" in line]
    assert len(rows) == 1, page
    staged = sorted(_git(root, "diff", "--cached", "--name-only").split())
    assert staged == sorted([f".llms-benchmark/runs/{run}/run.json", f".llms-benchmark/runs/{run}/report.md",
                             f".llms-benchmark/runs/{run}/trajectory.json", f"rulings/{run}.yaml"]), staged
    # Every file the run left that git would keep is staged: nothing of it is left untracked.
    left = [line for line in _git(root, "status", "--porcelain", "-uall").splitlines() if line.startswith("??")]
    assert not [line for line in left if run in line], left
    assert project.ledger() == {}
