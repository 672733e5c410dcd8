"""The results page: local rows from run records + final rulings (latest run per key),
remote rows from their file, rendered between the markers (prose kept byte for byte,
idempotent, nothing written on a bad row), and `score check` on the Scoring cells."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from harness.cli import app
from harness.errors import UserError
from harness.records.record import Phases, RowKey, RunRecord, SessionFigures, Status, Timestamps, Tokens
from harness.records.serving import ServingFigures, ToolCallHealth
from harness.results.check import check_page
from harness.results.render import (
    HAND_LOCAL_HEADERS,
    LOCAL_DETAIL_HEADERS,
    LOCAL_HEADERS,
    REMOTE_DETAIL_HEADERS,
    REMOTE_HEADERS,
    render_page,
)
from harness.results.cells import format_tokens
from harness.records.engine import EngineInfo
from harness.verdicts.rulings import Recall, RuledFinding, Rulings, save_rulings
from harness.verdicts.scoring import score_local

REPO = Path(__file__).resolve().parents[1]
PROSE_TOP = "# Results\n\nHand-written intro, kept as is.  \n\n## Results\n\n"
PROSE_BOTTOM = "\nAfter the tables: more prose.\n"
PAGE_TEXT = PROSE_TOP + "<!-- results:begin -->\nstale\n<!-- results:end -->" + PROSE_BOTTOM

# The digest's only local row (README 352c96), but for the oddyssey column, which now
# reads our protocol revision.
QWEN_ROW = ("| **#1** | [`odd-qwen3-8-27b`](../.vot/presets/odd-qwen3-8-27b.yaml) | default | opencode | A100 80 GB "
            "| llms-benchmark 1 | **9.0** | 7 / 11 | 4 / 3 / 0 | **150m02s** | **64%** | **1286s** |")
# Its detail as the seed writes it: output 42,711 + reasoning 139,401, about 2.7 GPU-hours, then
# the provenance (date, record, how it ended, engine and image, opencode, price and source).
QWEN_DETAIL = ("| [`odd-qwen3-8-27b`](../.vot/presets/odd-qwen3-8-27b.yaml) | default | opencode | A100 80 GB "
               "| llms-benchmark 1 | 12m13s | 2m04s | 135m45s | 56 | 65.7s | 5.0M | 43k + 139k | — | 4/4 | 5/15 "
               "| 2026-11-02 | [run record](runs/new-qwen/run.json) | on its own "
               "| vllm 0.30.0, image vllm/vllm-openai:v0.30.0@sha256:abc | 1.18.33 | 2.70 "
               "| $3.40 (Azure price / page, read 2026-12-02) | 1 "
               "| 93% | 41 / 35 tok/s | 71% | 0 | 0.12s | 2 / 1 | $8.41 | $1.201 |")
# The example row: a preset that confirmed its findings while its prefix cache hit 93 %,
# decode at its median context ran 41 tok/s, KV peaked at 71 %, nothing was preempted, 2 calls leaked.
QWEN_SERVING = ServingFigures(prefix_cache_hit=0.9312, decode_tps_p50_context=41.2, decode_tps_p90_context=34.6,
                              kv_peak=0.7114, preemptions=0, queue_wait_p95_s=0.1234,
                              tool_calls=ToolCallHealth(leaked=2, malformed=1), gpu_hourly_usd=3.4,
                              gpu_price_source="Azure price | page, read 2026-12-02", gpu_cost_usd=8.41)
REMOTE_ROWS = [
    {"model": "openai/gpt-5.6-luna", "effort": "medium", "cli": "copilot", "provider": "Copilot",
     "oddyssey": "1.13.0", "confirmed_reported": "7 / 8", "by_kind": "3 / 2 / 2", "total": "6m29s",
     "cost": "$0.11", "accuracy": "88%", "usd_per_confirmed": "$0.016", "seconds_per_confirmed": "56s"},
    {"model": "deepseek/deepseek-v4.1-flash", "effort": "default", "cli": "opencode", "provider": "OpenRouter",
     "oddyssey": "1.13.0", "confirmed_reported": "16 / 16", "by_kind": "10 / 3 / 3", "total": "29m05s",
     "cost": "$0.16", "accuracy": "100%", "usd_per_confirmed": "$0.010", "seconds_per_confirmed": "109s",
     "preflight": "3m10s", "drive": "2m01s", "observation": "11m58s", "turns": "32", "median_turn": "13.3s",
     "input": "2.3M", "output": "68k", "cache": "2.1M", "signals": "4/4", "date": "2026-09-27",
     "source": "https://github.com/using-system/oddyssey/pull/1"},
]
T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def _run(root: Path, run_id: str, preset: str, launch: datetime, total_s: int, held: list[str], missed: int,
         *, scripted=False, status=Status.ok, final=True, found=5, phases=(733, 124, 8145),
         tokens=(5_012_000, 182_112, 0, 139_401), versions=None, ruled_by="person", serving=None) -> None:
    """A schema-valid run record and its rulings: `held` is the kind of each finding held up."""
    start = launch + timedelta(seconds=phases[0] and 60)
    record = RunRecord(
        run_id=run_id, key=RowKey(preset=preset, effort="default", effort_requested="medium", gpu="A100 80 GB"),
        environment="a100", stack="local-vllm", mission="observability", scripted=scripted, status=status,
        times=Timestamps(launch=launch, mission_start=start, mission_end=start + timedelta(seconds=total_s),
                         end=start + timedelta(seconds=total_s + 30)),
        session=SessionFigures(root_session="ses_1", sessions=1, tokens=Tokens(input=tokens[0], output=tokens[1],
                                                                               cache=tokens[2],
                                                                               reasoning=tokens[3]),
                               turns=56, median_turn_s=65.7, compactions=0, opencode_version="1.18.33"),
        phases=Phases(preflight_s=phases[0], drive_s=phases[1], observation_s=phases[2]),
        signals=["metrics", "traces", "logs", "profiles"], versions=versions or {}, serving=serving,
        gpu_hours=2.7, engine=EngineInfo(name="vllm", version="0.30.0", read_from="/version",
                                         image="vllm/vllm-openai:v0.30.0", image_digest="sha256:abc"),
    )
    record.save(root / ".llms-benchmark" / "runs" / run_id)
    findings = [RuledFinding(number=str(i + 1), kind=kind, verdict="held up", reason="Its numbers check out.",
                             ruled_by=ruled_by) for i, kind in enumerate(held)]
    findings += [RuledFinding(number=f"G{i + 1}", kind="Perf", verdict="did not hold up",
                              reason="The query returns nothing.", ruled_by=ruled_by) for i in range(missed)]
    rulings = Rulings(run_id=run_id, report="report.md", ruled_at=launch, findings=findings,
                      recall=Recall(found=[f"D{i}" for i in range(found)], planted=15), final=final)
    save_rulings(rulings, root / "rulings" / f"{run_id}.yaml")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    bench = tmp_path / ".llms-benchmark"
    bench.mkdir()
    (bench / "README.md").write_text(PAGE_TEXT)
    (bench / "remote-rows.yaml").write_text(yaml.safe_dump(REMOTE_ROWS, sort_keys=False, allow_unicode=True))
    (bench / "non-conclusive.yaml").write_text(yaml.safe_dump([{
        "preset": "cpu-smollm2-135m", "environment": "cpu", "date": "2026-11-30",
        "reason": "SmolLM2-135M answers in prose"}]))
    qwen = ["Telemetry"] * 4 + ["Perf"] * 3
    # The key run twice: the older run (better figures) is replaced by the latest.
    _run(tmp_path, "old-qwen", "odd-qwen3-8-27b", T0, 1200, ["Telemetry"] * 3, 0)
    _run(tmp_path, "new-qwen", "odd-qwen3-8-27b", T0 + timedelta(days=1), 9002, qwen, 4, serving=QWEN_SERVING)
    # Another key, worse on every column.
    _run(tmp_path, "other", "odd-qwen3-6-35b-a3b", T0, 10000, ["Behavior"] * 2, 2, found=0, tokens=(0, 900, 0, 0))
    # No row: a scripted replay, a draft ruling, a void run.
    _run(tmp_path, "scripted", "replay-observability", T0, 100, ["Perf"], 0, scripted=True)
    _run(tmp_path, "draft", "odd-draft", T0, 100, ["Perf"], 0, final=False)
    _run(tmp_path, "void", "odd-void", T0, 100, ["Perf"], 0, status=Status.void)
    return tmp_path


def _page(root: Path) -> Path:
    return root / ".llms-benchmark" / "README.md"


def _row(headers: list[str]) -> str:
    return "| " + " | ".join(headers) + " |"


def test_render_builds_both_tables(root: Path):
    assert render_page(root) is True
    text = _page(root).read_text()
    lines = text.splitlines()
    for headers in (REMOTE_HEADERS, REMOTE_DETAIL_HEADERS, LOCAL_HEADERS, LOCAL_DETAIL_HEADERS):
        assert _row(headers) in lines
    assert "### Remote serving (oddyssey's mission)" in lines and "### Local serving" in lines
    assert "### Non-conclusive presets" in lines
    # The remote rows say whose mission measured them.
    remote_note = lines[lines.index("### Remote serving (oddyssey's mission)") + 2]
    assert "on its own mission" in remote_note and "never with the local rows" in remote_note
    assert text.count("<details><summary>Run detail — phases, turns, tokens</summary>") == 2
    # Local: the latest run of the key, the digest's published cells, all bold (best on each column).
    assert QWEN_ROW in lines and QWEN_DETAIL in lines
    assert ("| **#2** | [`odd-qwen3-6-35b-a3b`](../.vot/presets/odd-qwen3-6-35b-a3b.yaml) | default | opencode "
            "| A100 80 GB | llms-benchmark 1 | 1.4 | 2 / 4 | 0 / 0 / 2 | 166m40s | 50% | 5000s |") in lines
    assert ("| [`odd-qwen3-6-35b-a3b`](../.vot/presets/odd-qwen3-6-35b-a3b.yaml) | default | opencode "
            "| A100 80 GB | llms-benchmark 1 | 12m13s | 2m04s | 135m45s | 56 | 65.7s | — | 900 + 0 | — | 4/4 | 0/15 "
            "| 2026-11-01 | [run record](runs/other/run.json) | on its own "
            "| vllm 0.30.0, image vllm/vllm-openai:v0.30.0@sha256:abc | 1.18.33 | 2.70 | — | 1 "
            "| — | — | — | — | — | — | — | — |") in lines  # a record from before the serving section: no price
    assert text.count("odd-qwen3-8-27b.yaml") == 2  # one headline row, one detail row: the old run is gone
    for absent in ("replay-observability", "odd-draft", "odd-void", "20m00s"):
        assert absent not in text
    # Remote: ranked by Scoring, best values bold on every row that ties, perfect ratio bold.
    assert ("| **#1** | `openai/gpt-5.6-luna` | medium | copilot | Copilot | 1.13.0 | **79.7** | 7 / 8 | 3 / 2 / 2 "
            "| **6m29s** | **$0.11** | 88% | $0.016 | **56s** |") in lines
    assert ("| **#2** | `deepseek/deepseek-v4.1-flash` | default | opencode | OpenRouter | 1.13.0 | 70.9 "
            "| **16 / 16** | 10 / 3 / 3 | 29m05s | $0.16 | **100%** | **$0.010** | 109s |") in lines
    assert ("| `openai/gpt-5.6-luna` | medium | copilot | Copilot | 1.13.0 | — | — | — | — | — | — | — | — | — "
            "| — | — |" in lines)
    # A remote row is dated and linked to where it was measured.
    assert ("| `deepseek/deepseek-v4.1-flash` | default | opencode | OpenRouter | 1.13.0 | 3m10s | 2m01s | 11m58s "
            "| 32 | 13.3s | 2.3M | 68k | 2.1M | 4/4 | 2026-09-27 "
            "| [source](https://github.com/using-system/oddyssey/pull/1) |") in lines
    assert ("| [`cpu-smollm2-135m`](../.vot/presets/cpu-smollm2-135m.yaml) | `cpu` | 2026-11-30 "
            "| SmolLM2-135M answers in prose |") in lines
    # Prose outside the markers: byte for byte.
    assert text.startswith(PROSE_TOP + "<!-- results:begin -->\n")
    assert text.endswith("\n<!-- results:end -->" + PROSE_BOTTOM)
    assert "stale" not in text


def test_ties_are_all_bold(root: Path):
    rows = yaml.safe_load((root / ".llms-benchmark" / "remote-rows.yaml").read_text())
    rows[1].update(total="6m29s", cost="$0.11")
    (root / ".llms-benchmark" / "remote-rows.yaml").write_text(yaml.safe_dump(rows, allow_unicode=True))
    render_page(root)
    text = _page(root).read_text()
    assert text.count("| **6m29s** | **$0.11** |") == 2


def test_second_render_changes_nothing(root: Path):
    assert render_page(root) is True
    before = _page(root).read_bytes()
    assert render_page(root) is False
    assert _page(root).read_bytes() == before


def test_score_check_passes_then_names_the_tampered_row(root: Path):
    render_page(root)
    page = _page(root)
    assert check_page(page) == []
    runner = CliRunner()
    result = runner.invoke(app, ["score", "check", "--page", str(page)])
    assert result.exit_code == 0, result.output
    page.write_text(page.read_text().replace("| 70.9 |", "| 71.9 |"))
    problems = check_page(page)
    assert len(problems) == 1
    assert "deepseek/deepseek-v4.1-flash" in problems[0] and "'71.9'" in problems[0] and "70.9" in problems[0]
    assert "Remote serving" in problems[0]
    result = runner.invoke(app, ["score", "check", "--page", str(page)])
    assert result.exit_code == 1 and "deepseek/deepseek-v4.1-flash" in result.output


def test_score_check_local_tampered(root: Path):
    render_page(root)
    page = _page(root)
    page.write_text(page.read_text().replace("| **9.0** |", "| **19.0** |"))
    problems = check_page(page)
    assert len(problems) == 1 and "odd-qwen3-8-27b" in problems[0] and "Local serving" in problems[0]


def test_missing_page_is_a_user_error(tmp_path: Path):
    result = CliRunner().invoke(app, ["score", "check", "--page", str(tmp_path / "nope.md")])
    assert result.exit_code == 2
    with pytest.raises(UserError):
        check_page(tmp_path / "nope.md")


def test_render_cli(root: Path, monkeypatch):
    monkeypatch.setenv("LLMS_BENCHMARK_ROOT", str(root))
    runner = CliRunner()
    assert "rewritten" in runner.invoke(app, ["render"]).output
    result = runner.invoke(app, ["render", "--json"])
    assert result.exit_code == 0 and '"changed": false' in result.output


@pytest.mark.parametrize(("column", "field", "value"), [
    ("Total", "total", "6 min"),
    ("Cost", "cost", "0.11"),
    ("Accuracy", "accuracy", "88"),
    ("Telemetry / Perf / Behavior", "by_kind", "3 / 2 / 1"),
])
def test_malformed_remote_cell_leaves_the_page_alone(root: Path, column, field, value):
    render_page(root)
    before = _page(root).read_bytes()
    rows = yaml.safe_load((root / ".llms-benchmark" / "remote-rows.yaml").read_text())
    rows[0][field] = value
    (root / ".llms-benchmark" / "remote-rows.yaml").write_text(yaml.safe_dump(rows, allow_unicode=True))
    with pytest.raises(UserError) as info:
        render_page(root)
    text = str(info.value)
    assert "remote-rows.yaml" in text and "openai/gpt-5.6-luna" in text and column in text
    assert info.value.field == field
    assert _page(root).read_bytes() == before
    result = CliRunner().invoke(app, ["render", "--page", str(_page(root))], env={"LLMS_BENCHMARK_ROOT": str(root)})
    assert result.exit_code == 2


def test_page_without_markers_is_refused(root: Path):
    _page(root).write_text("# just prose\n")
    with pytest.raises(UserError, match="marker"):
        render_page(root)
    assert _page(root).read_text() == "# just prose\n"


def test_an_older_protocol_is_marked(root: Path):
    _run(root, "older-protocol", "odd-qwen3-8-27b", T0 + timedelta(days=2), 9002, ["Perf"], 0,
         versions={"llms-benchmark": "0"})
    render_page(root)
    assert "| llms-benchmark 0 ⚠ |" in _page(root).read_text()


def test_a_row_only_the_key_matcher_ruled_is_marked(root: Path):
    _run(root, "machine", "odd-machine", T0, 900, ["Perf"], 1, ruled_by="key-matcher")
    render_page(root)
    lines = _page(root).read_text().splitlines()
    marked = [line for line in lines if "odd-machine" in line]
    assert len(marked) == 2 and all("(key-matcher only)" in line for line in marked)
    assert not [line for line in lines if "odd-qwen3-8-27b" in line and "key-matcher only" in line]
    assert check_page(_page(root)) == []


def test_an_empty_report_ranks_last_with_0_0(root: Path):
    # A fast run that confirmed nothing (an empty report) against the slow run with 7 confirmed.
    _run(root, "empty", "odd-empty", T0, 300, [], 0)
    render_page(root)
    lines = _page(root).read_text().splitlines()
    local = [line for line in lines if line.startswith("| **#") and "vot/presets" in line]
    assert "odd-empty" in local[-1] and "| 0.0 | 0 / 0 |" in local[-1] and "| **5m00s** |" in local[-1]
    assert "odd-qwen3-8-27b" in local[0] and "| **#1** |" in local[0]
    assert check_page(_page(root)) == []


def test_a_run_whose_scenario_never_drove_gets_no_row(root: Path):
    from harness.records.drive import DriveFigures

    _run(root, "skipped", "odd-skipped", T0 + timedelta(days=3), 900, ["Perf"], 0)
    path = root / ".llms-benchmark" / "runs" / "skipped" / "run.json"
    record = RunRecord.load(path)
    record.drive = DriveFigures(user_agent="llms-benchmark-scenario/", requests=0,
                                problem="the scenario never drove the stack inside the mission")
    record.save(path.parent)
    render_page(root)
    assert "odd-skipped" not in _page(root).read_text()
    record.drive = DriveFigures(user_agent="llms-benchmark-scenario/", requests=48)  # it did drive
    record.save(path.parent)
    render_page(root)
    assert "odd-skipped" in _page(root).read_text()


def test_a_hello_run_with_final_rulings_is_not_on_the_observability_table(root: Path):
    """The issue's case: a final rulings file for a `hello` run rendered as #1 (60.8)."""
    _run(root, "hello-run", "odd-hello", T0 + timedelta(days=3), 120, ["Perf"] * 6, 0)
    path = root / ".llms-benchmark" / "runs" / "hello-run" / "run.json"
    record = RunRecord.load(path)
    render_page(root)
    assert "odd-hello" in _page(root).read_text()  # an observability run of that key makes its row
    record.mission = "hello"
    record.save(path.parent)
    render_page(root)
    assert "odd-hello" not in _page(root).read_text()


def test_digest_local_cells_reproduce_9_0():
    assert score_local("1286s", "150m02s", "64%", "7 / 11").score == 9.0


@pytest.mark.parametrize(("n", "cell"), [(0, "—"), (None, "—"), (900, "900"), (68_400, "68k"), (182_300, "182k"),
                                         (999_600, "1.0M"), (5_012_000, "5.0M"), (30_040_000, "30.0M")])
def test_token_cells(n, cell):
    assert format_tokens(n) == cell


def test_the_committed_page_agrees():
    # Not re-rendered here: local rows come from run records, which git ignores (machine state).
    page = REPO / ".llms-benchmark" / "README.md"
    text = page.read_text()
    assert text.count("<!-- results:begin -->") == 1 and text.count("<!-- results:end -->") == 1
    assert _row(REMOTE_HEADERS) in text.splitlines() and _row(LOCAL_HEADERS) in text.splitlines()
    assert check_page(page) == []


def test_a_run_stopped_after_its_report_makes_a_row_that_says_so(root: Path):
    from harness.records.record import RunOutcome

    _run(root, "stopped", "odd-stopped", T0 + timedelta(days=3), 900, ["Perf"], 0)
    path = root / ".llms-benchmark" / "runs" / "stopped" / "run.json"
    record = RunRecord.load(path)
    record.run = RunOutcome(exit_code=-15, ended_by="stopped after its report: by the maintainer (llms-benchmark stop)",
                            report_found=True, stopped_after_report="by the maintainer (llms-benchmark stop)")
    record.save(path.parent)
    render_page(root)
    detail = next(line for line in _page(root).read_text().splitlines()
                  if line.startswith("| [`odd-stopped`]") and "run record" in line)
    assert "| stopped after its report (by the maintainer (llms-benchmark stop)) |" in detail


def test_oddyssey_local_rows_score_from_their_cells_apart_from_ours(root: Path):
    """Seed 000's two A100 rows, kept by hand: 18.5 and 9.0, in a table of their own."""
    shutil.copy2(REPO / ".llms-benchmark" / "oddyssey-local-rows.yaml", root / ".llms-benchmark")
    render_page(root)
    text = _page(root).read_text()
    lines = text.splitlines()
    assert _row(HAND_LOCAL_HEADERS) in lines  # its oddyssey column, not our Protocol
    ours = lines.index("### Local serving")
    theirs = lines.index("### Local serving (oddyssey's mission)")
    assert theirs < ours
    hand = [line for line in lines[theirs:ours] if line.startswith("| **#")]
    assert [line.split(" | ")[6] for line in hand] == ["**18.5**", "9.0"]
    assert check_page(_page(root)) == []  # score check reads that table too


@pytest.mark.parametrize(("field", "value", "words"), [
    ("gpu", None, "column GPU is missing"),
    ("by_kind", "1 / 1 / 0", "does not sum to 3 confirmed"),
    ("output", "26k plus 11k", "cannot read '26k plus 11k'"),
])
def test_a_malformed_oddyssey_local_row_is_refused_by_name(root: Path, field, value, words):
    rows = yaml.safe_load((REPO / ".llms-benchmark" / "oddyssey-local-rows.yaml").read_text())
    rows[1][field] = value
    (root / ".llms-benchmark" / "oddyssey-local-rows.yaml").write_text(yaml.safe_dump(rows, allow_unicode=True))
    before = _page(root).read_text()
    with pytest.raises(UserError) as caught:
        render_page(root)
    assert words in caught.value.message and caught.value.field == field
    assert str(caught.value.file).endswith("oddyssey-local-rows.yaml")
    assert _page(root).read_text() == before


def test_the_page_states_the_bounds_that_scored_it(root: Path):
    from harness.verdicts import scoring

    render_page(root)
    text = _page(root).read_text()
    lo, hi = scoring.SECONDS_PER_CONFIRMED_BOUNDS
    assert f"100·ln({hi:g}/s)/ln({hi / lo:g})" in text and f"{lo:g} s → 100, ≥ {hi:g} s → 0" in text
    assert "Scoring = (3·points(s) + 2·points(T) + 1·points(a) + 1·points(n)) / 7" in text


# -- issue 35, item 3: a page no bad record can block; score check reads ranks, order and bold ----------
@pytest.mark.parametrize(("data", "words"), [
    (b"{\"run_id\": \"new-qwen\", ", "not a readable run record"),  # truncated
    (b"\xff\xfe", "not a readable run record"),  # not UTF-8
    (b"{\"kind\": \"another tool's record\", \"id\": 7}", "not a run record of this harness"),  # foreign schema
    (None, "written under run-record schema 2"),  # a later schema of ours
])
def test_a_bad_record_is_named_and_the_rest_rendered(root: Path, data: bytes | None, words: str):
    record = root / ".llms-benchmark" / "runs" / "other" / "run.json"
    if data is None:
        text = record.read_text().replace('"schema_version": 1', '"schema_version": 2')
        assert '"schema_version": 2' in text
        record.write_text(text)
    else:
        record.write_bytes(data)
    result = CliRunner().invoke(app, ["render"], env={"LLMS_BENCHMARK_ROOT": str(root), "COLUMNS": "400"},
                                catch_exceptions=False)
    output = " ".join(result.output.split())
    squeezed = "".join(result.output.split())  # a long path is wrapped at the console's width (xdist's are longer)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and str(record) in squeezed and words in output, result.output
    assert "1 run record(s) left out of the page, the rest rendered" in output and "fix:" in output
    text = _page(root).read_text()
    assert QWEN_ROW in text  # the good record's row is there,
    assert "odd-qwen3-6-35b-a3b" not in text  # the bad one's is not
    assert "deepseek/deepseek-v4.1-flash" in text and text.endswith(PROSE_BOTTOM)
    assert check_page(_page(root)) == []
    # --json names it too; a second render is as clear (and changes nothing).
    result = CliRunner().invoke(app, ["render", "--json"], env={"LLMS_BENCHMARK_ROOT": str(root), "COLUMNS": "400"})
    assert result.exit_code == 2 and '"changed": false' in result.output and "other/run.json" in result.output


def test_a_broken_rulings_file_leaves_out_its_run_only(root: Path):
    (root / "rulings" / "other.yaml").write_bytes(b"findings: [\n")
    with pytest.raises(UserError) as caught:
        render_page(root)
    assert "other.yaml" in str(caught.value) and "left out" in str(caught.value)
    assert QWEN_ROW in _page(root).read_text() and "odd-qwen3-6-35b-a3b" not in _page(root).read_text()


def _swap_rows(text: str, first: str, second: str) -> str:
    lines = text.splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if first in line)
    j = next(n for n, line in enumerate(lines) if second in line)
    lines[i], lines[j] = lines[j], lines[i]
    return "".join(lines)


def test_score_check_catches_swapped_ranks_and_moved_bold(root: Path):
    render_page(root)
    page = _page(root)
    good = page.read_text()
    runner = CliRunner()
    # #1 and #2 swapped, each keeping its cells (its Scoring still right): the ranks and the order are wrong.
    page.write_text(_swap_rows(good, "| **#1** | `openai/gpt-5.6-luna`", "| **#2** | `deepseek/deepseek-v4.1-flash`"))
    problems = check_page(page)
    assert any("Rank '**#2**' in place 1" in p for p in problems), problems
    assert any("ranked above openai/gpt-5.6-luna but scores lower (70.9 vs 79.7)" in p for p in problems), problems
    result = runner.invoke(app, ["score", "check", "--page", str(page)])
    assert result.exit_code == 1 and "scores lower" in result.output
    # The rank cells renumbered too: the order alone still gives it away.
    swapped = _swap_rows(good, "| **#1** | `openai/gpt-5.6-luna`", "| **#2** | `deepseek/deepseek-v4.1-flash`")
    swapped = swapped.replace("| **#2** | `deepseek", "| **#1** | `deepseek").replace("| **#1** | `openai", "| **#2** | `openai")
    page.write_text(swapped)
    assert [p for p in check_page(page) if "scores lower" in p] and not [p for p in check_page(page) if "Rank" in p]
    # A bold mark moved off the best Total, and onto a worse one.
    page.write_text(good.replace("| **6m29s** |", "| 6m29s |").replace("| 29m05s |", "| **29m05s** |"))
    problems = check_page(page)
    assert len(problems) == 2, problems
    assert "Total '6m29s' is the column's best but not bold" in problems[0]
    assert "Total '29m05s' is bold but not the column's best" in problems[1]
    # A ratio with a finding unconfirmed, bold.
    page.write_text(good.replace("| 7 / 8 |", "| **7 / 8** |"))
    assert [p for p in check_page(page) if "not every finding was confirmed" in p]
    page.write_text(good)
    assert check_page(page) == []
