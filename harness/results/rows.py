"""The results page's rows, as cells (strings, formatted the way the page writes them).

Local rows are rendered from run records (`.llms-benchmark/runs/*/run.json`: status ok,
not scripted) joined with their FINAL rulings (`rulings/<run-id>.yaml`,
`final: true`); one row per key (preset, effort, CLI, GPU), the latest run (by its
launch time) replacing older ones. Remote rows are kept by hand in
`.llms-benchmark/remote-rows.yaml`, their cells as written; every cell's shape is
checked. Both get their Scoring from their own cells (`harness.verdicts.scoring`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.errors import UserError
from harness.mission import DEFAULT_MISSION
from harness.records.paths import RUN_RECORD, ProjectPaths
from harness.records.record import RunRecord, Status
from harness.results.columns import DASH, HAND_LOCAL_CELLS, REMOTE_CELLS
from harness.results.cells import (ended_cell, format_duration, format_median_turn, format_output, format_tokens,
                                   gpu_price_cell, half_up)
from harness.results.row import Row
from harness.results.serving_columns import SERVING_HEADERS, serving_cells
from harness.results.trials import Member, median_member, trials_cell
from harness.verdicts.rulings import Rulings, load_rulings
from harness.verdicts.scoring import format_total, parse_total
from harness.vot.loader import is_file, parse_yaml, read_bytes

# The benchmark's protocol revision: the local tables' `oddyssey` column reads
# `llms-benchmark <PROTOCOL>`; a row measured under another revision is marked ` ⚠`.
PROTOCOL = "1"
PROTOCOL_LABEL = "llms-benchmark"
STALE = " ⚠"


SIGNALS = ("metrics", "traces", "logs", "profiles")


# --- rows ------------------------------------------------------------------------------

def local_row(record: RunRecord, rulings: Rulings) -> Row:
    """One local row from a run record and its final rulings."""
    where = f"run {record.run_id}"
    start, end = record.times.mission_start, record.times.mission_end
    if start is None or end is None:
        raise UserError(f"{where} is ok but has no mission start/end time", field="times.mission_end",
                        fix="a row needs the mission's wall clock; re-collect the run")
    total = format_total((end - start).total_seconds())
    total_s = parse_total(total)  # as written: whole seconds
    confirmed, reported = rulings.confirmed, rulings.reported
    spc = f"{int(half_up(total_s / confirmed, '1'))}s" if confirmed else DASH
    accuracy = f"{rulings.accuracy}%" if rulings.accuracy is not None else "0%"
    # The protocol revision the run was measured under (records without one: the current).
    protocol = str(getattr(record, "protocol", None) or record.versions.get(PROTOCOL_LABEL) or PROTOCOL)
    oddyssey = f"{PROTOCOL_LABEL} {protocol}" + ("" if protocol == PROTOCOL else STALE)
    phases, figures = record.phases, record.figures()
    tokens, turns, median_turn = figures if figures else (None, None, None)
    recall = rulings.recall
    return Row(
        kind="local", name=record.key.preset, effort=record.key.effort, cli=record.key.cli,
        where=record.key.gpu, oddyssey=oddyssey,
        confirmed_reported=f"{confirmed} / {reported}",
        by_kind=" / ".join(str(n) for n in rulings.by_kind.values()),
        total=total, accuracy=accuracy, seconds_per_confirmed=spc,
        preflight=format_duration(phases.preflight_s if phases else None),
        drive=format_duration(phases.drive_s if phases else None),
        observation=format_duration(phases.observation_s if phases else None),
        turns=str(turns) if figures else DASH,
        median_turn=format_median_turn(median_turn),
        input=format_tokens(tokens.input if tokens else None),
        output=format_output(tokens),
        cache=format_tokens(tokens.cache if tokens else None),
        signals=f"{len(set(record.signals) & set(SIGNALS))}/{len(SIGNALS)}",
        planted_found=f"{len(recall.found)}/{recall.planted}" if recall.planted else DASH,
        run_id=record.run_id,
        unsandboxed=record.sandbox is not None and record.sandbox.kind == "none",
        key_matcher_only=key_matcher_only(rulings),
        serving=serving_cells(record, confirmed),
        date=f"{record.times.launch:%Y-%m-%d}",
        source=f"runs/{record.run_id}/{RUN_RECORD}",
        ended=ended_cell(record),
        engine=record.engine.describe() if record.engine else DASH,
        opencode=(record.session.opencode_version if record.session and record.session.opencode_version
                  else record.versions.get("opencode") or DASH),
        gpu_hours=DASH if record.gpu_hours is None else f"{record.gpu_hours:.2f}",
        gpu_price=gpu_price_cell(record),
        trials="1",
        capacity=record.capacity.cell() if record.capacity else DASH,
    )


def key_matcher_only(rulings: Rulings) -> bool:
    """Every finding still carries the key-matcher's proposal: `--accept` without a grader,
    nobody else looked. The key-matcher maps findings to defects; its verdicts are checks
    of the finding's own evidence, not a reading of it."""
    return bool(rulings.findings) and all(f.ruled_by == "key-matcher" for f in rulings.findings)


RESULTS_MISSION = DEFAULT_MISSION  # the only mission whose runs make a row


SCHEMA_VERSION = RunRecord.model_fields["schema_version"].default  # the run records this harness reads


class RecordsLeftOut(UserError):
    """Run records the page was rendered without (unreadable, another schema, a broken rulings
    file): each named with its problem and fix; the rest of the page was rendered."""

    def __init__(self, problems: list[UserError], changed: bool = False) -> None:
        self.problems, self.changed = problems, changed
        lines = "\n".join(f"  - {p.render()}".replace("\n  fix:", "\n      fix:") for p in problems)
        super().__init__(f"{len(problems)} run record(s) left out of the page, the rest rendered:\n{lines}",
                         fix="fix or restore each record named (`git checkout -- FILE`), or move a record that "
                             "is not this harness's out of .llms-benchmark/runs/; then render again")


def _load_record(path: Path) -> RunRecord:
    try:
        record = RunRecord.load(path)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":  # truncated or not JSON at all
            raise UserError(f"not a readable run record: {first.get('msg', exc)}", file=path,
                            fix="restore it from git, or move it out of .llms-benchmark/runs/") from None
        where = ".".join(str(x) for x in first.get("loc", ())) or None
        raise UserError(f"not a run record of this harness ({exc.error_count()} problem(s), first: "
                        f"{first.get('msg', exc)})", file=path, field=where,
                        fix="restore it from git, or move it out of .llms-benchmark/runs/") from None
    except (ValueError, OSError) as exc:  # not JSON, not UTF-8, unreadable
        raise UserError(f"not a readable run record: {str(exc).splitlines()[0][:200]}", file=path,
                        fix="restore it from git, or move it out of .llms-benchmark/runs/") from None
    if record.schema_version != SCHEMA_VERSION:
        raise UserError(f"written under run-record schema {record.schema_version}; this harness reads "
                        f"{SCHEMA_VERSION}", file=path, field="schema_version",
                        fix="render it with the harness that wrote it, or move it out of .llms-benchmark/runs/")
    if record.run_id != path.parent.name:  # rulings are found by run id: never a path elsewhere
        raise UserError(f"run_id '{record.run_id}' is not its folder's name '{path.parent.name}'", file=path,
                        field="run_id", fix=f"set run_id to {path.parent.name}")
    return record


def _load_records(root: Path, left_out: list[UserError] | None = None) -> list[RunRecord]:
    """Every run record; one that cannot be read goes to `left_out` (None: raised)."""
    records = []
    for path in sorted(ProjectPaths(root).runs.glob(f"*/{RUN_RECORD}")):
        try:
            records.append(_load_record(path))
        except UserError as exc:
            if left_out is None:
                raise
            left_out.append(exc)
    return records


def _row_rulings(root: Path, record: RunRecord) -> Rulings | None:
    """The final rulings a row is made of, or None: the run makes no row (not ok, its drive
    gate failed, not ruled yet, or ruled only in draft)."""
    if record.status != Status.ok:
        return None
    if record.drive is not None and record.drive.problem:
        return None  # the harness's drive gate: the scenario never drove the stack (record.drive.problem says why)
    rulings_path = ProjectPaths(root).rulings_file(record.run_id)
    if not is_file(rulings_path):
        return None  # not ruled yet: no row
    rulings = load_rulings(rulings_path)
    return rulings if rulings.final else None  # a draft is a proposal, not a grade


def _named(root: Path, record: RunRecord, build):
    try:
        return build()
    except UserError as exc:  # a cell the record cannot give: name the record
        if exc.file:
            raise
        raise UserError(exc.message, file=ProjectPaths(root).run(record.run_id).record, field=exc.field,
                        fix=exc.fix) from None


def single_run_row(root: Path, record: RunRecord) -> Row | None:
    """A launch of one run as a row, or None (no row: not ok, not ruled finally, ...)."""
    rulings = _row_rulings(root, record)
    return None if rulings is None else _named(root, record, lambda: local_row(record, rulings))


def trial_group_row(root: Path, group: list[RunRecord]) -> Row | None:
    """K trials on one serve as one row: the median trial's cells and the spread (harness/results/trials.py)."""
    members, rows = [], {}
    for record in sorted(group, key=lambda r: r.trial.index):
        rulings = _row_rulings(root, record)
        if rulings is None:
            members.append(Member(record))
            continue
        row = rows[record.run_id] = _named(root, record, lambda: local_row(record, rulings))
        members.append(Member(record, row.score.score, row.confirmed, row.total))
    if not rows:
        return None
    median = median_member(members)
    row = rows[median.record.run_id]
    row.trials = trials_cell(members, median)
    row.median_of = len(rows)
    if row.gpu_hours != DASH:
        row.gpu_hours += f" (the serve's, shared by {len(members)} trials)"
    cost = median.record.serving.gpu_cost_usd if median.record.serving else None
    if cost is not None:
        # The serve's cost over every finding confirmed on it, not one trial's findings.
        found = sum(m.confirmed for m in members if m.made_row)
        row.serving[SERVING_HEADERS.index("GPU cost")] = f"${cost:.2f} (the serve's)"
        row.serving[SERVING_HEADERS.index("GPU $/confirmed")] = (
            f"${cost / found:.3f} (over {found} confirmed in {len(rows)} trials)" if found else DASH)
    return row


def load_local_rows(root: Path, include_scripted: bool = False, left_out: list[UserError] | None = None) -> list[Row]:
    """The local rows: ok, unscripted observability-mission runs with final rulings; the latest run per key.
    K trials on one serve (`launch --trials K`) make one row, their median trial with the spread,
    dated by the group's first trial. `include_scripted` admits replay runs too (their GPU cell
    says scripted): for demos and tests on a page of their own, never the published one."""
    root = Path(root)
    latest: dict[tuple[str, str, str, str], tuple[datetime, Row]] = {}
    groups: dict[str, list[RunRecord]] = {}

    def offer(record: RunRecord, row: Row | None) -> None:
        if row is None:
            return
        k = record.key
        key = (k.preset, k.effort, k.cli, k.gpu)
        if key not in latest or record.times.launch >= latest[key][0]:
            latest[key] = (record.times.launch, row)

    def left(build):
        """A run whose rulings or cells cannot be read is left out (named), not the whole page."""
        try:
            return build()
        except UserError as exc:
            if left_out is None:
                raise
            left_out.append(exc)
            return None

    launches: dict[tuple[str, str, str, str], dict[str, RunRecord]] = {}  # key -> serve -> a record of it
    by_id: dict[str, RunRecord] = {}
    for record in _load_records(root, left_out):
        if record.scripted and not include_scripted:
            continue
        by_id[record.run_id] = record
        if record.capacity is not None and record.capacity.sustained is not None:
            k = record.key  # the serve's capacity, whatever its mission made of it
            serve = record.trial.group if record.trial is not None else record.run_id
            launches.setdefault((k.preset, k.effort, k.cli, k.gpu), {}).setdefault(serve, record)
        if record.mission != RESULTS_MISSION:
            continue  # the tables rank the observability mission; a hello run is a smoke of the plumbing
        if record.trial is not None:
            groups.setdefault(record.trial.group, []).append(record)
            continue
        offer(record, left(lambda: single_run_row(root, record)))
    for group in groups.values():
        first = min(group, key=lambda r: r.trial.index)
        offer(first, left(lambda: trial_group_row(root, group)))
    for key, (_, row) in latest.items():
        own = by_id.get(row.run_id)
        if own is not None and own.capacity is not None and own.capacity.sustained is not None:
            row.capacity = capacity_across(own, launches.get(key, {}))
    return [row for _, row in latest.values()]


def capacity_across(own: RunRecord, serves: dict[str, RunRecord]) -> str:
    """The row's capacity read with every launch of its preset, effort, CLI and GPU under the
    same SLO replaying the same work (harness/load/agents/across.py): one launch says so;
    launches that disagree say so."""
    from harness.load.agents.across import Launch, combine, same_slo, workload

    mine = workload(own.capacity, own.mission)
    chosen = [Launch(serve, record.capacity) for serve, record in sorted(serves.items())
              if same_slo(record.capacity, own.capacity) and workload(record.capacity, record.mission) == mine]
    if not chosen:
        chosen = [Launch(own.run_id, own.capacity)]
    return combine(chosen).cell()


# --- remote rows: kept by hand, cells as written, shapes checked (results/columns.py) --

def _cell_text(value: Any) -> str:
    text = str(value).strip().replace("**", "").strip()
    return text.strip("`").strip()


def remote_row(raw: Any, path: Path, index: int) -> Row:
    return hand_row(raw, path, index, "remote")


def hand_row(raw: Any, path: Path, index: int, kind: str) -> Row:
    """A hand-kept row, cells as written and shapes checked: a remote row (remote-rows.yaml) or a
    local row oddyssey measured on its own mission (oddyssey-local-rows.yaml)."""
    cols = REMOTE_CELLS if kind == "remote" else HAND_LOCAL_CELLS
    required = [k for k, c in cols.items() if _shape(c, kind).required]
    if not isinstance(raw, dict):
        raise UserError(f"row {index + 1} is not a mapping of cells", file=path,
                        fix=f"give each row its cells: {', '.join(required)}")
    name_key = "model" if kind == "remote" else "preset"
    model = _cell_text(raw.get(name_key, f"#{index + 1}"))
    where = f"row {model}"
    unknown = [k for k in raw if k not in cols]
    if unknown:
        raise UserError(f"{where}: unknown column {unknown[0]!r} (Rank and Scoring are computed)", file=path,
                        field=str(unknown[0]), fix=f"columns are: {', '.join(cols)}")
    cells: dict[str, str] = {}
    for name, col in cols.items():
        shape, header = _shape(col, kind), col.header_for(kind, hand=True)
        if name not in raw or raw[name] is None:
            if shape.required:
                raise UserError(f"{where}: column {header} is missing", file=path, field=name,
                                fix=f"write it as {shape.words}")
            cells[name] = DASH
            continue
        value = raw[name]
        text = value.isoformat()[:10] if isinstance(value, (date, datetime)) else _cell_text(value)
        if not re.fullmatch(shape.pattern, text):
            raise UserError(f"{where}: column {header}: cannot read {text!r}", file=path, field=name,
                            fix=f"write it as {shape.words}")
        cells[name] = text
    confirmed, reported = (int(x) for x in cells["confirmed_reported"].split(" / "))
    if confirmed > reported:
        raise UserError(f"{where}: column Confirmed / reported: {confirmed} confirmed of {reported} reported",
                        file=path, field="confirmed_reported", fix="confirmed cannot exceed reported")
    split = [int(x) for x in cells["by_kind"].split(" / ")] if cells["by_kind"] != DASH else [confirmed]
    if sum(split) != confirmed:
        raise UserError(f"{where}: column Telemetry / Perf / Behavior: {cells['by_kind']} does not sum to "
                        f"{confirmed} confirmed", file=path, field="by_kind",
                        fix="split the confirmed findings by kind")
    for name in ("usd_per_confirmed", "seconds_per_confirmed"):
        if name in cells and (cells[name] == DASH) != (confirmed == 0):
            column = cols[name].header
            raise UserError(f"{where}: column {column}: {cells[name]!r} with {confirmed} confirmed", file=path,
                            field=name, fix="write — only when no finding is confirmed, else the figure")
    if int(cells["accuracy"].rstrip("%")) > 100:
        raise UserError(f"{where}: column Accuracy: {cells['accuracy']!r} is over 100%", file=path,
                        field="accuracy", fix="a whole percent between 0% and 100%")
    try:
        return Row(kind=kind, **{cols[name].attr: text for name, text in cells.items()})
    except UserError as exc:
        raise UserError(f"{where}: {exc.message}", file=path, field=exc.field, fix=exc.fix) from None


def _shape(col, kind: str):
    return col.hand_shape if kind == "local" and col.hand_shape else col.shape


def _load_yaml_list(path: Path, what: str) -> list:
    if not path.exists():
        return []
    data = parse_yaml(read_bytes(path), path)  # unreadable, not UTF-8, not YAML: one UserError
    if data is None:
        return []
    if not isinstance(data, list):
        raise UserError(f"{what} is a list", file=path, fix="write one '- ' entry per row")
    return data


def load_remote_rows(root: Path) -> list[Row]:
    path = ProjectPaths(Path(root)).remote_rows
    return [remote_row(raw, path, i) for i, raw in enumerate(_load_yaml_list(path, "the remote rows file"))]


def load_oddyssey_local_rows(root: Path) -> list[Row]:
    """The local rows oddyssey measured on its own mission (seed 000's A100 rows), kept by hand."""
    path = ProjectPaths(Path(root)).oddyssey_local_rows
    return [hand_row(raw, path, i, "local")
            for i, raw in enumerate(_load_yaml_list(path, "the oddyssey local rows file"))]


@dataclass(frozen=True)
class NonConclusive:
    preset: str
    environment: str
    date: str
    reason: str


def load_non_conclusive(root: Path, path: Path | None = None) -> list[NonConclusive]:
    """Presets tried that could yield no row, and why (`.llms-benchmark/non-conclusive.yaml`, or
    `path`: the ones oddyssey tried on its own mission, undated in their source: `—` allowed)."""
    undated_ok = path is not None
    path = path or ProjectPaths(Path(root)).non_conclusive
    entries = []
    for i, raw in enumerate(_load_yaml_list(path, "the non-conclusive presets file")):
        if not isinstance(raw, dict):
            raise UserError(f"entry {i + 1} is not a mapping", file=path, fix="give preset, environment, date, reason")
        name = raw.get("preset", f"#{i + 1}")
        cells = {}
        for key in ("preset", "environment", "date", "reason"):
            value = raw.get(key)
            if isinstance(value, (date, datetime)):
                value = value.isoformat()[:10]
            text = " ".join(str(value).split()) if value is not None else ""
            if not text or "|" in text:
                raise UserError(f"entry {name}: {key} is " + ("missing" if not text else "not one cell (has '|')"),
                                file=path, field=key, fix="preset, environment, date (YYYY-MM-DD) and a one-line reason")
            cells[key] = text
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}" + (r"|—" if undated_ok else ""), cells["date"]):
            raise UserError(f"entry {name}: date {cells['date']!r}", file=path, field="date", fix="write it as YYYY-MM-DD")
        unknown = [k for k in raw if k not in cells]
        if unknown:
            raise UserError(f"entry {name}: unknown field {unknown[0]!r}", file=path, field=str(unknown[0]),
                            fix="fields are preset, environment, date, reason")
        entries.append(NonConclusive(**cells))
    return entries
