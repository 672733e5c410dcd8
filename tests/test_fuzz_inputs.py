"""Bad input never crashes (issue #7): property-based tests over everything a person
writes or types — presets, environments, mission manifests (and prompts), rulings files,
the results page's hand-kept data files, the state files a person may hand-edit
(run.json, the unit ledger) and CLI arguments.

Every input is fed through the real CLI in-process (`typer.testing.CliRunner` on
`harness.cli.app`, `catch_exceptions=False`: a traceback fails the test) against a
throw-away project root. The property: the exit code is 0, 2 or the command's own
documented code (1: `score check` found a disagreement, `mission check` found a gap), and
an exit 2 prints one clear message — the word "error", and for a file input the file's
name — never a traceback.

Reproducible: hypothesis is derandomized and keeps no example database. The number of
examples per property is FUZZ_EXAMPLES (default 150); the inputs tried per property and in
total are printed at the end of the module and written to
<pytest basetemp>/fuzz-inputs.json.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import typer.main
import typer.testing
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from harness.cli import app
from harness.records.record import RowKey, RunRecord, Status, Timestamps
from harness.verdicts.rulings import Recall, RuledFinding, Rulings

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "150"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same inputs on every run and in CI
    database=None,  # nothing written under .hypothesis/
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.function_scoped_fixture, HealthCheck.large_base_example],
)

# Inputs tried per property, and CLI invocations made, reported at the end of the module.
TRIED: Counter[str] = Counter()
CALLS: Counter[str] = Counter()

RUN_ID = "20261101T100000Z-fz-medium-0000"
PAGE = Path(".llms-benchmark") / "README.md"
REMOTE_ROWS = Path(".llms-benchmark") / "remote-rows.yaml"
NON_CONCLUSIVE = Path(".llms-benchmark") / "non-conclusive.yaml"


# --- the throw-away project ---------------------------------------------------------------

class Fz:
    """The project root, the CLI's environment, and the pristine bytes of every fuzzed file."""

    def __init__(self, root: Path, env: dict[str, str], base: dict[str, bytes]) -> None:
        self.root, self.env, self.base = root, env, base

    def __repr__(self) -> str:  # hypothesis prints it with every failing example
        return f"Fz({self.root})"

    def write(self, rel: Path | str, data: bytes) -> Path:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return path

    def restore(self, *rels: Path | str) -> None:
        for rel in rels:
            self.write(rel, self.base[str(rel)])


def _rulings_doc(final: bool = True) -> dict:
    findings = [
        RuledFinding(number="1", kind="Telemetry", verdict="held up", reason="The query returns the rows.",
                     ruled_by="person", defects=["D1"]),
        RuledFinding(number="2", kind="Perf", verdict="did not hold up", reason="Nothing came back.",
                     ruled_by="key-matcher", evidence=[{"query": "obs sql 'select 1'", "result": 0}]),
        RuledFinding(number="3", kind="Perf", verdict="held up", reason="Same as finding 1.", ruled_by="person",
                     counts=0, restates="1"),
        RuledFinding(number="G1", kind="Behavior", verdict="held up", reason="Seen in the logs.",
                     ruled_by="grader:some-model", counts=2),
    ]
    rulings = Rulings(run_id=RUN_ID, report="report.md", ruled_at=datetime(2026, 11, 1, 12, tzinfo=UTC),
                      findings=findings, recall=Recall(found=["D1"], planted=15), final=final)
    return rulings.model_dump(mode="json")


def _run_record() -> RunRecord:
    launch = datetime(2026, 11, 1, 10, tzinfo=UTC)
    return RunRecord(
        run_id=RUN_ID, key=RowKey(preset="replay-hello", effort="medium", effort_requested="medium", gpu="A100 80 GB"),
        environment="replay", stack="replay", mission="hello", status=Status.ok,
        times=Timestamps(launch=launch, mission_start=launch + timedelta(seconds=60),
                         mission_end=launch + timedelta(seconds=960), end=launch + timedelta(seconds=990)),
        signals=["metrics", "logs"],
    )


@pytest.fixture(scope="module")
def fz(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    base_dir = tmp_path_factory.mktemp("fuzz")
    root = (base_dir / "project").resolve()
    shutil.copytree(REPO / ".vot" / "environments", root / ".vot" / "environments")
    shutil.copytree(REPO / ".vot" / "presets", root / ".vot" / "presets")
    shutil.copytree(REPO / "missions" / "hello", root / "missions" / "hello")
    shutil.copytree(REPO / "missions" / "hello", root / "missions" / "fz")
    (root / "replay").mkdir()
    shutil.copy2(REPO / "replay" / "hello.yaml", root / "replay" / "hello.yaml")
    bench = root / ".llms-benchmark"
    bench.mkdir()
    for name in ("README.md", "remote-rows.yaml", "non-conclusive.yaml"):
        shutil.copy2(REPO / ".llms-benchmark" / name, bench / name)
    _run_record().save(bench / "runs" / RUN_ID)
    (root / "rulings").mkdir()
    (root / "rulings" / f"{RUN_ID}.yaml").write_text(yaml.safe_dump(_rulings_doc(), sort_keys=False))
    # Odd things for --page / paths: a folder, binary bytes, a page without markers.
    odd = base_dir / "odd"
    (odd / "folder").mkdir(parents=True)
    (odd / "binary.md").write_bytes(b"\xff\xfe\x00garbage\x80")
    (odd / "nomarkers.md").write_text("# a page\n\nno markers here\n")
    (odd / "empty.md").write_text("")
    # opencode's --version, without starting node once per example.
    fake = base_dir / "bin" / "opencode"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 1.18.33\n")
    fake.chmod(0o755)
    # typer rebuilds the click command on every invoke (~0.3 s); build it once for the module.
    command = typer.main.get_command(app)
    build = getattr(typer.testing, "_get_command", None)
    if build is not None:
        typer.testing._get_command = lambda a: command if a is app else build(a)
    env = {"LLMS_BENCHMARK_ROOT": str(root), "LLMS_BENCHMARK_OPENCODE": str(fake), "COLUMNS": "400"}
    fuzzed = [".vot/presets/fz.yaml", ".vot/environments/fz.yaml", "missions/fz/mission.yaml",
              "missions/fz/prompt.md", f"rulings/{RUN_ID}.yaml", f".llms-benchmark/runs/{RUN_ID}/run.json",
              str(PAGE), str(REMOTE_ROWS), str(NON_CONCLUSIVE)]
    for rel, doc in ((".vot/presets/fz.yaml", "presets/replay-hello.yaml"),
                     (".vot/environments/fz.yaml", "environments/replay.yaml")):
        data = yaml.safe_load((REPO / ".vot" / doc).read_text())
        (root / rel).write_text(yaml.safe_dump({**data, "name": "fz"}, sort_keys=False))
    manifest = yaml.safe_load((REPO / "missions" / "hello" / "mission.yaml").read_text())
    (root / "missions" / "fz" / "mission.yaml").write_text(yaml.safe_dump({**manifest, "name": "fz"}, sort_keys=False))
    base = {rel: (root / rel).read_bytes() for rel in fuzzed}
    try:
        yield Fz(root=root, env=env, base=base)
    finally:
        if build is not None:
            typer.testing._get_command = build

    total = sum(TRIED.values())
    report = {"inputs_per_property": dict(TRIED), "inputs_total": total,
              "cli_invocations": sum(CALLS.values()), "cli_invocations_per_command": dict(CALLS),
              "max_examples": EXAMPLES}
    out = tmp_path_factory.getbasetemp() / "fuzz-inputs.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    line = (f"fuzzed inputs: {total} in total ({', '.join(f'{k} {v}' for k, v in TRIED.items())}); "
            f"{report['cli_invocations']} CLI invocations; written to {out}")

    class _Summary:  # printed after the run, outside output capture
        @staticmethod
        def pytest_terminal_summary(terminalreporter) -> None:
            terminalreporter.write_line(line)

    request.config.pluginmanager.register(_Summary(), "fuzz-inputs-summary")


# --- running the CLI ------------------------------------------------------------------------

def invoke(fz: Fz, argv: list[str], *, codes: tuple[int, ...] = (0, 2), names: tuple[str, ...] = ()) -> int:
    """Run the CLI in-process; an escaped exception fails the test with its traceback."""
    CALLS[" ".join(a for a in argv[:2] if not a.startswith("-")) if argv else "(none)"] += 1
    result = CliRunner().invoke(app, argv, env=fz.env, catch_exceptions=False)
    out = result.stdout + result.stderr
    shown = f"llms-benchmark {argv!r} exited {result.exit_code}:\n{out}"
    assert "Traceback" not in out, shown
    assert result.exit_code in codes, shown
    if result.exit_code == 2:
        # Ours ("error: <file>: field '<f>': ..."), click's usage errors ("Error: ..."), or the
        # help a group prints when given no command (exit 2 in click 8.2+).
        assert re.search(r"error|Usage:", out, re.IGNORECASE), f"exit 2 without a message: {shown}"
        if names:
            flat = "".join(out.split())  # rich folds long paths across lines
            assert any("".join(n.split()) in flat for n in names), f"the message names none of {names}: {shown}"
    return result.exit_code


# --- strategies -------------------------------------------------------------------------------

SPECIAL = [
    "", " ", "-1", "0", "-0", "1e309", "9" * 400, "nan", "NaN", "inf", "-inf", "5m99s", "0m00s", "—", "-", "n/a",
    "../x", "../../etc/passwd", "/", "/etc/passwd", ".", "..", "~", "null", "true", "yes", "no", "0x1F", "1_000",
    "\u202e", "💥", "é", "\u0663", "²", "\ufeff", "\t", "a\nb", "%", "|", "**", "`", "{{ x }}", "{% raw %}",
    "[x](y)", "<!-- results:begin -->", "<!-- results:end -->", "a" * 3000, "a\x00b", "held up", "did not hold up",
    "Telemetry", "person", "replay/hello.yaml", "missions/hello/prompt.md", "hello", "fz", RUN_ID,
]
_chars = st.characters(exclude_categories=("Cs",))
texts = st.one_of(st.sampled_from(SPECIAL), st.text(_chars, max_size=24))
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([0, 1, -1, 65535, 65536, 2**31, 2**63, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True), texts, st.dates(),
    st.datetimes(timezones=st.just(UTC)),
)
keys = st.one_of(texts, st.integers(-5, 5), st.none(), st.booleans())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
                      max_leaves=12)
INSERTS = [b"\xff\xfe", b"\x80", b":", b": ", b"\t", b"- ", b"  ", b"{", b"}", b"[", b"]", b"&a ", b"*a", b"*b",
           b"!!python/object/apply:os.system ['true']", b"\x00", b"%YAML 9.9\n---\n", b"---\n", b"...\n", b"'",
           b'"', b"#", b"\n", b"? ", b"!!binary x", b"\xef\xbb\xbf", b"<<: *a\n"]


def _containers(doc) -> list:
    """Every dict or list inside `doc` (itself included), so a mutation can land anywhere."""
    found, stack = [], [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, list)):
            found.append(node)
            stack.extend(node.values() if isinstance(node, dict) else node)
    return found


@st.composite
def mutated(draw, bases: list):
    """A valid document with 1–4 mutations: a key dropped, renamed or added, a value of
    the wrong type, a list item dropped or added, or the whole top level replaced."""
    doc = copy.deepcopy(draw(st.sampled_from(bases)))
    for _ in range(draw(st.integers(1, 4))):
        spots = _containers(doc)
        if not spots or draw(st.integers(0, 19)) == 0:
            doc = draw(values)  # a non-mapping (or any) top level
            continue
        node = draw(st.sampled_from(spots))
        if isinstance(node, dict):
            op = draw(st.sampled_from(["drop", "set", "retype", "add", "rename"]))
            if op == "add" or not node:
                node[draw(keys)] = draw(values)
                continue
            key = draw(st.sampled_from(list(node)))
            if op == "drop":
                del node[key]
            elif op == "set":
                node[key] = draw(values)
            elif op == "retype":
                old = node[key]
                node[key] = draw(st.sampled_from([str(old), [old], {"x": old}, None, -1, 10**30, 1e308, True, ""]))
            else:
                node[draw(st.sampled_from([f"{key}x", str(key).upper(), f"_{key}", f"{key} "]))] = node.pop(key)
        else:
            op = draw(st.sampled_from(["drop", "set", "add"]))
            if op == "add" or not node:
                node.insert(draw(st.integers(0, len(node))), draw(values))
            elif op == "drop":
                del node[draw(st.integers(0, len(node) - 1))]
            else:
                node[draw(st.integers(0, len(node) - 1))] = draw(values)
    return doc


def _dump(doc, draw) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=draw(st.booleans()),
                          default_flow_style=draw(st.sampled_from([False, None, True]))).encode("utf-8")


@st.composite
def byte_mutated(draw, data: bytes) -> bytes:
    """Bytes broken at random: truncated, a slice deleted or duplicated, something inserted."""
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["truncate", "delete", "insert", "insert", "duplicate"]))
        if op == "truncate":
            data = data[:i]
        elif op == "delete":
            data = data[:i] + data[i + draw(st.integers(1, 40)):]
        elif op == "duplicate":
            data = data[:i] + data[i:i + draw(st.integers(1, 80))] * 2 + data[i + 1:]
        else:
            data = data[:i] + draw(st.sampled_from(INSERTS) | st.binary(min_size=1, max_size=8)) + data[i:]
    return data


@st.composite
def yaml_inputs(draw, bases: list) -> bytes:
    """The bytes of a file: a mutated valid document, any document, broken YAML, binary
    garbage, an empty file, other encodings."""
    kind = draw(st.sampled_from(["mutated"] * 6 + ["any", "bytes", "bytes", "garbage", "empty", "utf16", "valid"]))
    if kind == "valid":
        return _dump(draw(st.sampled_from(bases)), draw)
    if kind == "any":
        return _dump(draw(values), draw)
    if kind == "garbage":
        return draw(st.binary(max_size=300))
    if kind == "empty":
        return draw(st.sampled_from([b"", b"\n", b"   \n", b"# only a comment\n", b"---\n", b"~\n", b"[]\n", b"{}\n"]))
    if kind == "utf16":
        return _dump(draw(st.sampled_from(bases)), draw).decode("utf-8").encode(draw(st.sampled_from(["utf-16",
                                                                                                      "latin-1"])),
                                                                                "replace")
    doc = draw(mutated(bases))
    data = _dump(doc, draw)
    return draw(byte_mutated(data)) if kind == "bytes" else data


@st.composite
def text_mutated(draw, bases: list[bytes]) -> bytes:
    """Markdown-ish files (the results page, a prompt): lines dropped, duplicated, cells broken."""
    data = draw(st.sampled_from(bases))
    kind = draw(st.sampled_from(["bytes", "lines", "lines", "garbage", "empty"]))
    if kind == "garbage":
        return draw(st.binary(max_size=300))
    if kind == "empty":
        return b""
    if kind == "bytes":
        return draw(byte_mutated(data))
    lines = data.decode("utf-8").splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            lines.append(draw(texts) + "\n")
            continue
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "insert", "cell"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "insert":
            lines.insert(i, draw(st.sampled_from(SPECIAL + ["| a | b |\n", "|---|\n", "# heading\n"])) + "\n")
        else:
            cells = lines[i].split("|")
            j = draw(st.integers(0, len(cells) - 1))
            cells[j] = f" {draw(texts)} "
            lines[i] = "|".join(cells)
    return "".join(lines).encode("utf-8", "surrogatepass")


def _yaml_bases(folder: Path, rename: str | None = None) -> list:
    out = []
    for path in sorted(folder.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if rename:
            doc["name"] = rename
        out.append(doc)
    return out


def _jsonable(doc):
    return json.loads(json.dumps(doc, default=str))


PRESETS = _yaml_bases(REPO / ".vot" / "presets", rename="fz")
ENVIRONMENTS = _yaml_bases(REPO / ".vot" / "environments", rename="fz")
MANIFESTS = [dict(yaml.safe_load((REPO / "missions" / m / "mission.yaml").read_text()), name="fz")
             for m in ("hello", "observability")]
RULINGS = [_rulings_doc(True), _rulings_doc(False)]
REMOTE = [yaml.safe_load((REPO / REMOTE_ROWS).read_text())]
NON_CONCLUSIVE_DOCS = [yaml.safe_load((REPO / NON_CONCLUSIVE).read_text())]
RECORDS = [_jsonable(_run_record().model_dump(mode="json"))]


def test_the_fuzz_project_is_valid(fz: Fz):
    """The pristine project the properties mutate is itself valid (so mutations reach deep code)."""
    assert invoke(fz, ["validate", str(fz.root / ".vot/presets/fz.yaml"), str(fz.root / ".vot/environments/fz.yaml"),
                       str(fz.root / "missions" / "fz")]) == 0
    assert invoke(fz, ["preflight", "replay", "fz", "--mission", "fz"]) == 0
    assert invoke(fz, ["rule", RUN_ID, "--accept"]) == 0
    assert invoke(fz, ["render"]) == 0
    assert invoke(fz, ["score", "check"]) == 0
    fz.restore(PAGE)


# --- presets and environments -------------------------------------------------------------------

@FUZZ
@given(data=yaml_inputs(PRESETS))
def test_presets_never_crash(fz: Fz, data: bytes):
    TRIED["presets"] += 1
    path = fz.write(".vot/presets/fz.yaml", data)
    try:
        invoke(fz, ["validate", str(path)], names=("fz.yaml",))
        invoke(fz, ["preflight", "replay", "fz", "--mission", "hello"], names=("fz.yaml", str(fz.root)))
    finally:
        fz.restore(".vot/presets/fz.yaml")


def _stack_of(data: bytes) -> object:
    try:
        doc = yaml.safe_load(data.decode("utf-8"))
    except Exception:  # not YAML: refused before any stack is looked at
        return None
    return doc.get("stack") if isinstance(doc, dict) else None


@FUZZ
@given(data=yaml_inputs(ENVIRONMENTS))
def test_environments_never_crash(fz: Fz, data: bytes):
    TRIED["environments"] += 1
    path = fz.write(".vot/environments/fz.yaml", data)
    try:
        invoke(fz, ["validate", str(path)], names=("fz.yaml",))
        # A stack may refuse the preset (named by its own file): any file of the project will do.
        # Azure, docker and metal preflights ask a cloud or a daemon: only the local ones run here.
        if _stack_of(data) not in ("azure", "aca", "local-vllm-docker", "local-vllm-metal"):
            invoke(fz, ["preflight", "fz", "replay-hello", "--mission", "hello"], names=("fz.yaml", str(fz.root)))
        invoke(fz, ["destroy", "fz", "replay-hello"], names=("fz.yaml",))
    finally:
        fz.restore(".vot/environments/fz.yaml")


# --- mission manifests (and their prompt) ----------------------------------------------------

@FUZZ
@given(manifest=yaml_inputs(MANIFESTS),
       prompt=st.none() | text_mutated([(REPO / "missions" / "hello" / "prompt.md").read_bytes()]))
def test_mission_manifests_never_crash(fz: Fz, manifest: bytes, prompt: bytes | None):
    TRIED["mission manifests"] += 1
    fz.write("missions/fz/mission.yaml", manifest)
    if prompt is not None:
        fz.write("missions/fz/prompt.md", prompt)
    try:
        invoke(fz, ["validate", str(fz.root / "missions" / "fz")], names=("fz",))
        invoke(fz, ["preflight", "replay", "replay-hello", "--mission", "fz"], names=("fz",))
    finally:
        fz.restore("missions/fz/mission.yaml", "missions/fz/prompt.md")


# --- rulings, and the run record they rule ----------------------------------------------------

@FUZZ
@given(data=yaml_inputs(RULINGS))
def test_rulings_never_crash(fz: Fz, data: bytes):
    TRIED["rulings"] += 1
    rel = f"rulings/{RUN_ID}.yaml"
    fz.write(rel, data)
    try:
        invoke(fz, ["rule", RUN_ID, "--accept", "--json"], names=(f"{RUN_ID}.yaml", str(fz.root)))
        invoke(fz, ["render"], names=(f"{RUN_ID}.yaml", str(fz.root)))
    finally:
        fz.restore(rel, PAGE)


@FUZZ
@given(data=st.one_of(
    st.builds(lambda d: json.dumps(d, default=str).encode(), mutated(RECORDS)),
    st.binary(max_size=200),
    st.builds(lambda d: json.dumps(d).encode(), st.just(RECORDS[0])).flatmap(byte_mutated),
))
def test_run_records_never_crash(fz: Fz, data: bytes):
    """run.json is written by the harness, but a person may hand-edit or truncate it."""
    TRIED["run records"] += 1
    rel = f".llms-benchmark/runs/{RUN_ID}/run.json"
    fz.write(rel, data)
    try:
        invoke(fz, ["rule", RUN_ID, "--accept"], names=("run.json",))
        invoke(fz, ["render"], names=("run.json",))
    finally:
        fz.restore(rel, PAGE)


# --- the results page and its hand-kept data files ---------------------------------------------

@FUZZ
@given(which=st.sampled_from(["remote", "remote", "remote", "non-conclusive", "page"]), data=st.data())
def test_results_files_never_crash(fz: Fz, which: str, data: st.DataObject):
    TRIED["results files"] += 1
    rel, strategy = {
        "remote": (REMOTE_ROWS, yaml_inputs(REMOTE)),
        "non-conclusive": (NON_CONCLUSIVE, yaml_inputs(NON_CONCLUSIVE_DOCS)),
        "page": (PAGE, text_mutated([(REPO / PAGE).read_bytes()])),
    }[which]
    fz.write(rel, data.draw(strategy, label=str(rel)))
    try:
        invoke(fz, ["render", "--json"], names=(rel.name,))
        invoke(fz, ["score", "check"], codes=(0, 1, 2), names=(rel.name, "README.md"))
    finally:
        fz.restore(rel, PAGE)


# --- the unit ledger (hand-edited or from another version) ---------------------------------------

@FUZZ
@given(data=st.one_of(
    st.builds(lambda d: json.dumps(d, default=str).encode(), values),
    st.builds(lambda d: json.dumps(d, default=str).encode(), mutated([{"replay/vot-replay-hello": {
        "name": "vot-replay-hello", "stack": "replay", "environment": "replay", "preset": "replay-hello",
        "base_url": "http://127.0.0.1:1", "served_name": "replay-hello"}}])),
    st.binary(max_size=100),
))
def test_ledger_never_crashes(fz: Fz, data: bytes):
    """`units` only: it lists the ledger and never destroys (a fuzzed pid must not be signalled)."""
    TRIED["ledger"] += 1
    ledger = fz.root / ".vot" / "run" / "units.json"
    fz.write(".vot/run/units.json", data)
    try:
        invoke(fz, ["units", "--json"], names=("units.json",))
        invoke(fz, ["units"], names=("units.json",))
    finally:
        for path in ledger.parent.iterdir():
            path.unlink()


# --- CLI arguments ------------------------------------------------------------------------------

args = st.one_of(st.sampled_from([a for a in SPECIAL if "\x00" not in a]),
                 st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=16))
numbers = st.one_of(args, st.sampled_from(["5m99s", "-3", "nan", "inf", "-inf", "1e999", "0", "0m00s", "150m02s",
                                           "9002", "88%", "101%", "7 / 8", "7/0", "$0.016", "$-1", "56s", "-56s",
                                           "1h2h", "²", "٣", "9" * 5000, "0." + "0" * 400 + "1", "1" * 30 + "m00s"]),
                    st.floats(allow_nan=True).map(repr), st.integers().map(str))


@st.composite
def odd_page(draw, fz_odd: str) -> str:
    return draw(st.sampled_from([
        "", ".", "/", "/nonexistent/page.md", "/dev/null", "/proc/self/status", f"{fz_odd}/folder",
        f"{fz_odd}/binary.md", f"{fz_odd}/nomarkers.md", f"{fz_odd}/empty.md", f"{fz_odd}/missing/x.md",
        "../x", "page.md\x7f", "~/page.md"]) | args)


def _opt(draw, name: str, value_strategy) -> list[str]:
    return [name, draw(value_strategy)] if draw(st.booleans()) else []


@st.composite
def argvs(draw, odd: str) -> list[str]:
    """An argv for a command that serves nothing, with values at random, or tokens at random."""
    command = draw(st.sampled_from(["validate", "preflight", "score local", "score remote", "score check", "rule",
                                    "render", "units", "mission check", "destroy", "collect", "random", "random"]))
    flags = ["--json"] if draw(st.booleans()) else []
    if command == "validate":
        rest = draw(st.lists(st.sampled_from([".vot/presets/replay-hello.yaml", ".vot/environments/replay.yaml",
                                              "missions/hello", "missions/nope", "missions", ".vot", ".vot/presets",
                                              f"{odd}/binary.md", f"{odd}/folder", "/"]) | args, max_size=3))
        flags = []
    elif command == "preflight":
        rest = [draw(st.just("replay") | args), draw(st.just("replay-hello") | args),
                *_opt(draw, "--mission", st.just("hello") | args)]
    elif command in ("score local", "score remote"):
        rest = [*_opt(draw, "--total", numbers), *_opt(draw, "--accuracy", numbers),
                *_opt(draw, "--confirmed", numbers), *_opt(draw, "--seconds-per-confirmed", numbers)]
        if command == "score remote":
            rest += _opt(draw, "--usd-per-confirmed", numbers)
    elif command in ("score check", "render"):
        rest = _opt(draw, "--page", odd_page(odd))
    elif command == "rule":
        rest = [draw(st.sampled_from([RUN_ID, f"../runs/{RUN_ID}", f"../../{RUN_ID}", "../x", "..", ".", "/etc",
                                      f"{RUN_ID}/", f"./{RUN_ID}"]) | args)]
        flags += ["--accept"] if draw(st.booleans()) else []
    elif command == "units":
        rest = []
    elif command == "mission check":
        rest = [draw(args), *_opt(draw, "--duration", numbers)]
    elif command == "destroy":
        rest = [draw(st.just("replay") | args), draw(args)]
        flags = []
    elif command == "collect":
        rest = [draw(st.sampled_from([f"{odd}/folder", f"{odd}/binary.md", "/nonexistent", "."]) | args),
                *_opt(draw, "--session", args), *_opt(draw, "--title", args)]
    else:
        vocabulary = st.sampled_from(["validate", "preflight", "score", "local", "remote", "check", "rule", "render",
                                      "units", "mission", "destroy", "--json", "--page", "--total", "--accept",
                                      "--mission", "--help", "-h", "--", "-", "replay", "replay-hello", "hello"])
        return draw(st.lists(vocabulary | args, max_size=6))
    return [*command.split(), *rest, *flags]


@FUZZ
@given(data=st.data())
def test_cli_arguments_never_crash(fz: Fz, data: st.DataObject):
    TRIED["CLI argv"] += 1
    argv = data.draw(argvs(str(fz.root.parent / "odd")), label="argv")
    if argv[:2] == ["mission", "check"] and len(argv) > 2:
        # A mission that exists would really be started: only names that resolve to none.
        assume(not (fz.root / "missions" / argv[2] / "mission.yaml").is_file())
    try:
        # Exit 1: a score check that disagrees, a mission check that fails.
        invoke(fz, argv, codes=(0, 1, 2) if argv[:1] in (["score"], ["mission"]) else (0, 2))
    finally:
        fz.restore(PAGE, f"rulings/{RUN_ID}.yaml")
    # Nothing outside the project's own files is written by a path argument.
    stray = [p for p in fz.root.parent.rglob("*") if p.is_file() and p.suffix in (".md", ".yaml")
             and not p.is_relative_to(fz.root) and not p.is_relative_to(fz.root.parent / "odd")]
    assert not stray, f"{argv!r} wrote {stray}"


# --- what the fuzzer found, kept as plain examples ------------------------------------------

FOUND_IN_FILES = [
    # (file, bytes): each crashed with a traceback before its fix
    (f"rulings/{RUN_ID}.yaml", b"\x80"),  # not UTF-8: UnicodeDecodeError
    (f"rulings/{RUN_ID}.yaml", b"ruled_at: 2026-02-30\n"),  # a date PyYAML recognises but cannot build
    (str(REMOTE_ROWS), b"- model: x\n  total: \x80\n"),
    (str(NON_CONCLUSIVE), b"- date: 2026-13-45\n"),
    (".vot/presets/fz.yaml", b"name: fz\nmodel: m\nvllm_args:\n  1: [1]\n  --x: [2]\n"),  # a key that is no text
    (".vot/presets/fz.yaml", b"name: fz\nmodel: m\nvllm_args:\n  1: 2\n"),
    ("missions/fz/prompt.md", b"\x80 not UTF-8"),
    ("missions/fz/mission.yaml", b"name: fz\nprompt: prompt.md\nworkspace: /\nreport: R.md\nmin_context: 1\n"
                                 b"time_cap_minutes: 1\nstall_minutes: 1\n"),  # would hash the whole disk
    (f".llms-benchmark/runs/{RUN_ID}/run.json", b"{}"),  # `rule` on a broken record: ValidationError
    (f".llms-benchmark/runs/{RUN_ID}/run.json", b"\xff"),
]


@pytest.mark.parametrize(("rel", "data"), FOUND_IN_FILES, ids=[f"{r}-{i}" for i, (r, _) in enumerate(FOUND_IN_FILES)])
def test_found_file_inputs_are_clear_errors(fz: Fz, rel: str, data: bytes):
    fz.write(rel, data)
    argv = {
        "rulings": ["rule", RUN_ID, "--accept"], ".llms-benchmark": ["render"],
        ".vot": ["validate", str(fz.root / rel)],
        "missions": ["validate", str(fz.root / "missions" / "fz")],
    }[rel.split("/")[0]]
    if rel.endswith("run.json"):  # a draft: `rule` reads the record to rule it again
        fz.write(f"rulings/{RUN_ID}.yaml", yaml.safe_dump(_rulings_doc(final=False)).encode())
        argv = ["rule", RUN_ID, "--accept"]
    try:
        assert invoke(fz, argv, names=(Path(rel).name, "fz")) == 2
    finally:
        fz.restore(rel, PAGE, f"rulings/{RUN_ID}.yaml")
        (fz.root / ".vot" / "presets" / "fz.yaml").write_bytes(fz.base[".vot/presets/fz.yaml"])


FOUND_IN_ARGV = [
    ["score", "local", "--total", "10m00s", "--accuracy", "80", "--confirmed", "²", "--seconds-per-confirmed", "5"],
    ["score", "local", "--total", "9" * 400, "--accuracy", "80", "--confirmed", "1", "--seconds-per-confirmed", "5"],
    ["score", "remote", "--total", "10m00s", "--accuracy", "80", "--confirmed", "9" * 5000],
    ["validate", "a" * 3000],  # ENAMETOOLONG
    ["preflight", "a" * 3000, "replay-hello"],
    ["preflight", "replay", "replay-hello", "--mission", "a" * 3000],
    ["rule", "a" * 3000],
    ["render", "--page", "a" * 3000],
    ["score", "check", "--page", "."],  # a folder
    ["render", "--page", "."],
    # Paths where a name belongs: refused, never followed.
    ["mission", "check", "../missions/hello"],
    ["mission", "check", "hello/"],
    ["preflight", "replay", "replay-hello", "--mission", "../missions/hello"],
    ["rule", f"../runs/{RUN_ID}", "--accept"],
    ["rule", f"./{RUN_ID}"],
]


@pytest.mark.parametrize("argv", FOUND_IN_ARGV, ids=[" ".join(a)[:60] for a in FOUND_IN_ARGV])
def test_found_arguments_are_clear_errors(fz: Fz, argv: list[str]):
    assert invoke(fz, argv) == 2
    assert not (fz.root / "runs").exists() and not list((fz.root / "rulings").glob("*/*"))


# --- issue 47, item 5: bad input accepted before, each refused before anything is written ----------

FITNESS_NOTHING_TO_MEASURE = [
    ["fitness", "run", "http://127.0.0.1:9", "--phases", "warmup", "--skip", "warmup"],
    ["fitness", "run", "http://127.0.0.1:9", "--phases", "kl,judge"],
    ["fitness", "run", "http://127.0.0.1:9", "--phases", "kl"],
    ["fitness", "run", "http://127.0.0.1:9", "--phases", "warmup,tooluse", "--skip", "tooluse,warmup", "--dry-run"],
]


@pytest.mark.parametrize("argv", FITNESS_NOTHING_TO_MEASURE, ids=[" ".join(a[3:]) for a in FITNESS_NOTHING_TO_MEASURE])
def test_a_fitness_run_that_would_measure_nothing_is_refused(fz: Fz, argv: list[str]):
    """It printed "fitness PASS", exit 0, having run nothing: now exit 3 (the seed's pipeline
    error, never a verdict), naming --phases and the fix, and no report folder written."""
    report = fz.root.parent / "fitness-report"
    result = CliRunner().invoke(app, [*argv, "--report-dir", str(report)], env=fz.env, catch_exceptions=False)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.exit_code == 3, out
    assert "field '--phases'" in out and "measure nothing" in out and "fix:" in out, out
    assert "PASS" not in out and "Traceback" not in out
    assert not report.exists()


ISSUE_47_ARGV = [
    # (argv, exit code, what the message names)
    (["fitness", "serve", "--port", "99999"], 3, "--port"),  # OverflowError traceback before
    (["fitness", "serve", "--port", "-1"], 3, "--port"),
    (["launch", "local", "replay", "replay-hello", "--mission", "hello", "--probe-long-tokens", "-5"], 2,
     "--probe-long-tokens"),  # served, and recorded "200.5 tok/s at 20 tokens" before
    (["launch", "local", "replay", "replay-hello", "--mission", "hello", "--probe-long-tokens", "10"], 2,
     "--probe-long-tokens"),
    (["launch", "local", "replay", "replay-hello", "--mission", "hello", "--probe-long-tokens", "9" * 30], 2,
     "--probe-long-tokens"),
    (["launch", "local", "replay", "replay-hello", "--mission", "hello", "--capacity-trace", "x.trace.jsonl"], 2,
     "--capacity"),  # ignored before
    (["launch", "local", "replay", "replay-hello", "--mission", "hello", "--capacity", "--capacity-trace",
      "no.trace.jsonl"], 2, "load-trace"),  # the fix named `llms-benchmark trace`, which does not exist
    (["launch", "local", "replay", "nope", "--mission", "hello", "--detach"], 2, "nope"),  # exit 0 before
    (["launch", "local", "replay", "fz", "--mission", "nope", "--detach"], 2, "nope"),
    (["load-agents", "no.trace.jsonl", "--base-url", "http://127.0.0.1:9"], 2, "load-trace"),
]


@pytest.mark.parametrize(("argv", "code", "named"), ISSUE_47_ARGV, ids=[" ".join(a)[:70] for a, _, _ in ISSUE_47_ARGV])
def test_issue_47_arguments_are_refused_before_anything(fz: Fz, argv: list[str], code: int, named: str):
    result = CliRunner().invoke(app, argv, env=fz.env, catch_exceptions=False)
    out = "".join((result.stdout + result.stderr).split())
    assert result.exit_code == code and "Traceback" not in out, out
    assert "".join(named.split()) in out and re.search(r"error|Invalidvalue", out, re.IGNORECASE), out
    assert "llms-benchmarktrace" not in out  # no such command
    bench = fz.root / ".llms-benchmark"
    assert not (bench / "launches").exists() and not (bench / "refused").exists()
    assert sorted(p.name for p in (bench / "runs").iterdir()) == [RUN_ID]


@pytest.mark.parametrize("value", ["abc", "32k", "1.5", "[1]", "true", "''"])
def test_a_max_model_len_that_is_no_integer_is_said_so(fz: Fz, value: str):
    """`--max-model-len: abc` read as "not set" before; `false` (an override removing it) stays valid."""
    data = yaml.safe_load(fz.base[".vot/presets/fz.yaml"])
    text = yaml.safe_dump({**data, "vllm_args": {**data["vllm_args"], "--max-model-len": "X"}}, sort_keys=False)
    path = fz.write(".vot/presets/fz.yaml", text.replace("'X'", value).encode())
    try:
        for argv in (["validate", str(path)], ["preflight", "replay", "fz", "--mission", "hello"],
                     ["launch", "local", "replay", "fz", "--mission", "hello", "--detach"]):
            result = CliRunner().invoke(app, argv, env=fz.env, catch_exceptions=False)
            out = " ".join((result.stdout + result.stderr).split())
            assert result.exit_code == 2, (argv, out)
            assert "--max-model-len" in out and "not an integer" in out and "not set" not in out, (argv, out)
            assert "fz.yaml" in out.replace(" ", ""), out
    finally:
        fz.restore(".vot/presets/fz.yaml")


def test_validate_takes_the_folders_its_help_names(fz: Fz):
    """`validate .vot/presets/` was refused ("cannot tell what kind of file this is"): a folder of
    presets, of environments, `.vot/` or `missions/` validates each one in it, and one bad file
    among them fails the whole (exit 2), named."""
    result = CliRunner().invoke(app, ["validate", "--json", str(fz.root / ".vot" / "presets") + "/",
                                      str(fz.root / ".vot" / "environments"), str(fz.root / "missions")],
                                env=fz.env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    checked = {Path(c["path"]).name for c in doc["checked"]}
    assert doc["ok"] and {"fz.yaml", "replay-hello.yaml", "replay.yaml", "hello", "fz"} <= checked, doc
    assert len(doc["checked"]) == len(list((fz.root / ".vot").glob("*/*.yaml"))) + 2
    fz.write(".vot/presets/fz.yaml", b"name: fz\nmodel: m\nvllm_args:\n  --max-model-len: abc\n")
    try:
        assert invoke(fz, ["validate", str(fz.root / ".vot")], names=("fz.yaml",)) == 2
    finally:
        fz.restore(".vot/presets/fz.yaml")
