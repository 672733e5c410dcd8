"""Issue 63, item 5 ("bad input"): each mistake a tester found is one clear refusal through the
real CLI — the file, the field and a `fix:` line, the user-error exit code, no traceback — and
nothing is written, saved or claimed.

The CLI runs in-process (`typer.testing.CliRunner` on `harness.cli.app`, `catch_exceptions=False`:
an escaped exception fails the test) against a throw-away project root; `obs` (the agent's own
tool, argparse) through its `main`. The only network is loopback: a grader that is down is a
closed port on 127.0.0.1.
"""

from __future__ import annotations

import shutil
import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.errors import UserError
from harness.records.record import RowKey, RunRecord, Status, Timestamps
from harness.vot.loader import VOT_FILE_CAP

REPO = Path(__file__).resolve().parents[1]
WIRE_RUN = REPO / "tests" / "fixtures" / "runs" / "20261206T030208Z-cpu-qwen2-5-coder-1-5b-medium-8176"
USER_ERROR = UserError.exit_code  # 2
FITNESS_ERROR = 3  # fitness: a bad config is a pipeline error (2 means FAIL there)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    shutil.copytree(REPO / ".vot" / "environments", project / ".vot" / "environments")
    shutil.copytree(REPO / ".vot" / "presets", project / ".vot" / "presets")
    return project


class Folded(str):
    """The CLI's output, compared whatever rich folded where: its console takes its width when it
    is first built (another test's, in a full run), and a long path may break at any character."""

    def __contains__(self, fragment: object) -> bool:
        return "".join(str(fragment).split()) in "".join(self.split())


def cli(root: Path, argv: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, argv, env={"LLMS_BENCHMARK_ROOT": str(root), "COLUMNS": "400"},
                                catch_exceptions=False)
    out = result.stdout + result.stderr
    assert "Traceback" not in out, out
    return result.exit_code, Folded(" ".join(out.split()))


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")} if folder.exists() else set()


# --- 1. load-trace --out into a folder that does not exist ----------------------------------

def test_load_trace_into_a_missing_folder_is_refused_naming_the_folder(root: Path, tmp_path: Path):
    out = tmp_path / "no-such-folder" / "x.trace.jsonl"
    code, text = cli(root, ["load-trace", str(WIRE_RUN), "--out", str(out)])
    assert code == USER_ERROR, text
    assert f"{out}: field '--out'" in text and f"the folder {out.parent} does not exist" in text
    assert f"fix: create it first (mkdir -p {out.parent})" in text
    assert not out.parent.exists()


def test_load_trace_mooncake_into_a_missing_folder_writes_not_even_the_trace(root: Path, tmp_path: Path):
    out, mooncake = tmp_path / "t.trace.jsonl", tmp_path / "gone" / "m.jsonl"
    code, text = cli(root, ["load-trace", str(WIRE_RUN), "--out", str(out), "--mooncake", str(mooncake)])
    assert code == USER_ERROR and "field '--mooncake'" in text and "fix: create it first" in text, text
    assert not out.exists()  # checked before anything is written


def test_load_trace_onto_a_folder_is_refused(root: Path, tmp_path: Path):
    before = files_under(tmp_path)
    code, text = cli(root, ["load-trace", str(WIRE_RUN), "--out", str(tmp_path)])
    assert code == USER_ERROR and "field '--out'" in text and "is a folder" in text and "fix: name a file" in text
    assert files_under(tmp_path) == before


def test_load_trace_into_an_existing_folder_still_writes(root: Path, tmp_path: Path):
    out = tmp_path / "ok.trace.jsonl"
    code, text = cli(root, ["load-trace", str(WIRE_RUN), "--out", str(out), "--json"])
    assert code == 0, text
    assert out.read_text().startswith('{"kind": "agent-trace"')


# --- 2/3. an environment's config.threads: -3 --------------------------------------------------

def _environment(root: Path, threads) -> Path:
    path = root / ".vot" / "environments" / "cpu.yaml"
    path.write_text(yaml.safe_dump({"name": "cpu", "stack": "local-llamacpp",
                                    "config": {"port": 0, "threads": threads}}, sort_keys=False))
    return path


@pytest.mark.parametrize("threads", [-3, 0])
def test_negative_threads_are_refused_with_a_fix(root: Path, threads: int):
    path = _environment(root, threads)
    for argv in (["validate", str(path)], ["preflight", "cpu", "cpu-qwen2-5-coder-1-5b"]):
        code, text = cli(root, argv)
        assert code == USER_ERROR, (argv, text)
        assert "cpu.yaml" in text and "field 'config.threads'" in text and f"not {threads}" in text, text
        assert "fix: set config.threads to 1 or more, or remove it" in text, text
    assert not (root / ".llms-benchmark").exists() and not (root / ".vot" / "run").exists()


def test_a_schema_refusal_always_has_a_fix(root: Path):
    """A check the schema makes without its own fix (here a port above 65535) still says what to do."""
    path = root / ".vot" / "environments" / "cpu.yaml"
    path.write_text("name: cpu\nstack: local-llamacpp\nconfig:\n  port: 70000\n")
    code, text = cli(root, ["validate", str(path)])
    assert code == USER_ERROR and "field 'config.port'" in text and "fix: set config.port to 65535 or less" in text


# --- 2/3. metrics --watch -1 ------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "field"), [
    (["--watch", "-1"], "--watch"), (["--watch", "nan"], "--watch"), (["--watch", "inf"], "--watch"),
    (["--watch", "1", "--count", "-2"], "--count"),
])
def test_metrics_refuses_a_watch_or_count_that_means_nothing(root: Path, argv: list[str], field: str):
    # A closed port: were the options let through, the read would fail later with another message.
    code, text = cli(root, ["metrics", "http://127.0.0.1:9", *argv])
    assert code == USER_ERROR, text
    assert f"field '{field}'" in text and "fix: give" in text and "cannot read" not in text, text


# --- 3. classroom --users 0 -------------------------------------------------------------------

@pytest.mark.parametrize(("argv", "field"), [
    (["--users", "0"], "--users"), (["--max-steps", "0"], "--max-steps"), (["--duration", "0"], "--duration"),
    (["--test-fail-rate", "2"], "--test-fail-rate"), (["--timeout", "-1"], "--timeout"),
])
def test_classroom_refusals_name_the_option_and_the_fix(root: Path, tmp_path: Path, argv: list[str], field: str):
    results = tmp_path / "results"
    code, text = cli(root, ["classroom", "--base-url", "http://127.0.0.1:9", "--out-dir", str(results), *argv])
    assert code == USER_ERROR, text
    assert f"field '{field}'" in text and "fix: give" in text, text
    assert not results.exists() and not (root / "bench-results").exists()


# --- 3. fitness run --config <missing file> ---------------------------------------------------

def test_fitness_run_with_a_missing_config_names_it_and_the_fix(root: Path, tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    report = tmp_path / "report"
    code, text = cli(root, ["fitness", "run", "http://127.0.0.1:9", "--config", str(missing),
                            "--report-dir", str(report)])
    assert code == FITNESS_ERROR, text
    assert f"{missing}: field '--config': no fitness config at this path" in text
    assert "fix: give the path of a fitness YAML" in text and "leave --config out" in text
    # The run that could not start leaves its record (by design), measuring nothing.
    assert (report / "report.md").is_file() and not (report / "phases").exists()


def test_fitness_config_that_is_a_folder_is_said_so(root: Path, tmp_path: Path):
    code, text = cli(root, ["fitness", "run", "--dry-run", "--config", str(tmp_path)])
    assert code == FITNESS_ERROR and "field '--config': is a folder, not a fitness YAML" in text and "fix:" in text


# --- 4. a size cap on presets and environments --------------------------------------------------

@pytest.mark.parametrize("kind", ["presets", "environments"])
def test_a_huge_preset_or_environment_is_refused_before_it_is_parsed(root: Path, kind: str):
    name = "replay-hello" if kind == "presets" else "replay"
    path = root / ".vot" / kind / f"{name}.yaml"
    text = path.read_text()
    with path.open("a") as fh:  # valid YAML all the way: only its size is wrong
        fh.write("".join(f"# padding line {i:08d} of a file nobody meant to write\n" for i in range(400_000)))
    size = path.stat().st_size
    assert size > 20 * 1024 * 1024 and text in path.read_text()
    started = time.monotonic()
    code, out = cli(root, ["validate", str(path)])
    took = time.monotonic() - started
    assert code == USER_ERROR, out
    word = kind[:-1]
    assert (f"{path}: is {size / 1024 / 1024:.1f} MiB ({size} bytes), over the 256 KiB (262144 bytes) a {word} "
            "may be (nothing was parsed)") in out, out
    assert f"fix: a {word} is a few KB of YAML" in out
    assert took < 5, took  # 58 s before the cap


def test_a_preset_at_the_cap_is_still_read(root: Path):
    path = root / ".vot" / "presets" / "replay-hello.yaml"
    body = path.read_text()
    path.write_text(body + "#" * (VOT_FILE_CAP - len(body.encode()) - 1) + "\n")
    assert path.stat().st_size == VOT_FILE_CAP
    code, out = cli(root, ["validate", str(path)])
    assert code == 0 and "preset replay-hello: ok" in out, out


def test_the_shipped_presets_and_environments_are_far_below_the_cap():
    largest = max(p.stat().st_size for p in (REPO / ".vot").glob("*/*.yaml"))
    assert largest * 20 < VOT_FILE_CAP


# --- 2. rule --grader <a grader that is down> ------------------------------------------------

RUN_ID = "20261130T010000Z-bad-input-run"
REPORT = """# Observation report

## Anomalies

| # | Finding | Kind | Severity | Evidence |
|---|---------|------|----------|----------|
| 1 | POST /orders spans have no database child span: place_order in src/shop_api/app.py skips db.query [claim: missing-signal, absent, shop-api] | Telemetry | high | `obs sql "SELECT count(*) FROM spans WHERE name = 'POST /orders'"` → 0 |
"""


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ruled_project(root: Path) -> Path:
    (root / "missions").mkdir()
    (root / "missions" / "observability").symlink_to(REPO / "missions" / "observability")
    launch = datetime(2026, 11, 30, 1, tzinfo=UTC)
    RunRecord(run_id=RUN_ID, key=RowKey(preset="replay-hello", effort="medium", effort_requested="medium",
                                        gpu="A100 80 GB"),
              environment="replay", stack="replay", mission="observability", status=Status.ok,
              times=Timestamps(launch=launch, mission_start=launch + timedelta(seconds=60),
                               mission_end=launch + timedelta(seconds=960), end=launch + timedelta(seconds=990)),
              ).save(root / ".llms-benchmark" / "runs" / RUN_ID)
    (root / ".llms-benchmark" / "runs" / RUN_ID / "report.md").write_text(REPORT)
    return root


def _rulings(root: Path) -> Path:
    return root / "rulings" / f"{RUN_ID}.yaml"


def test_a_grader_that_is_down_is_said_and_nothing_is_ruled(ruled_project: Path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    code, text = cli(ruled_project, ["rule", RUN_ID, "--accept", "--json", "--grader", "lab/judge",
                                     "--grader-url", url])
    assert code == USER_ERROR, text
    assert f"field '--grader': the grader lab/judge could not be reached at {url}" in text, text
    assert "nothing was ruled or written" in text and "fix: start the grader" in text
    assert '"grader"' not in text and "held up" not in text  # no summary, no ruling claimed
    assert not _rulings(ruled_project).exists()
    # Without the grader the same run is ruled (the refusal was the grader's, not the run's).
    code, text = cli(ruled_project, ["rule", RUN_ID, "--accept", "--json"])
    assert code == 0 and _rulings(ruled_project).is_file(), text


def test_a_final_ruling_is_never_said_to_be_graded(ruled_project: Path):
    assert cli(ruled_project, ["rule", RUN_ID, "--accept"])[0] == 0  # final, by the key-matcher
    before = _rulings(ruled_project).read_bytes()
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    for argv in (["--accept", "--json"], ["--final"]):
        code, text = cli(ruled_project, ["rule", RUN_ID, *argv, "--grader", "lab/judge", "--grader-url", url])
        assert code == USER_ERROR, (argv, text)
        assert "field '--grader'" in text and "fix:" in text and '"grader"' not in text, (argv, text)
    assert _rulings(ruled_project).read_bytes() == before


def test_a_grader_url_without_a_grader_is_refused(ruled_project: Path):
    code, text = cli(ruled_project, ["rule", RUN_ID, "--accept", "--grader-url", "http://127.0.0.1:9/v1"])
    assert code == USER_ERROR and "--grader-url is given without --grader" in text and "fix:" in text, text
    assert not _rulings(ruled_project).exists()
