"""The results tables' columns, each declared once: its header, the tables it stands in,
how its cell is written from a row, how the remote rows file must write it, and which
value is best (bold).

Render builds the four tables from this list, `score check` finds the headline tables
on the page by the headers it derives, and the remote rows file is read and checked
through the shapes declared here. A new column is one `Column(...)` below (plus, for a
local row, where `local_row` reads its figure from the record).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from harness.results.row import DASH, Row
from harness.results.serving_columns import SERVING_COLUMNS
from harness.verdicts.scoring import parse_percent, parse_seconds, parse_total, parse_usd

Kind = Literal["remote", "local"]

# A local row whose agent ran with --no-sandbox: it could have read what it was not given.
UNSANDBOXED = " (no sandbox)"
# A local row whose findings no grader or person ever saw (`rule --accept` alone).
KEY_MATCHER_ONLY = " (key-matcher only)"
# A local row that is the median of K trials on one serve (its Trials cell gives the spread).
MEDIAN_OF = " (median of {n} trials)"


def bold(cell: str) -> str:
    return f"**{cell}**"


def preset_link(preset: str) -> str:
    return f"[`{preset}`](../.vot/presets/{preset}.yaml)"


@dataclass(frozen=True)
class Shape:
    """How a hand-kept remote row writes the cell: a full-match regex and its words."""

    pattern: str
    words: str
    required: bool = False


@dataclass(frozen=True)
class Column:
    attr: str  # the Row attribute it shows
    header: str
    local_header: str | None = None  # where the local tables name it otherwise (Model → Preset)
    # The hand-kept local rows oddyssey measured (oddyssey-local-rows.yaml): their key in that
    # file, their shape there, and their header where it differs from the local one.
    hand_key: str | None = None
    hand_shape: Shape | None = None
    hand_header: str | None = None
    headline: bool = False  # in the ranked table
    detail: bool = False  # in the run-detail table
    kinds: tuple[Kind, ...] = ("remote", "local")
    remote_key: str | None = None  # its key in the remote rows file, when not `attr`
    shape: Shape | None = None  # None: computed, never written in the remote rows file
    best: Literal["min", "max"] | None = None  # the headline's best value is bold (ties all; — never)
    parse: Callable[[str], float] | None = None  # the cell as a number, to find the best
    cell: Callable[[Row, int], str] | None = None  # (row, rank) → cell; default: the attribute as written
    # In the detail table only when some row has it (not —): a figure few runs measure
    optional: bool = False

    def header_for(self, kind: Kind, hand: bool = False) -> str:
        if kind == "local" and hand and self.hand_header:
            return self.hand_header
        return self.local_header if kind == "local" and self.local_header else self.header

    @property
    def key(self) -> str:
        return self.remote_key or self.attr

    def text(self, row: Row, rank: int) -> str:
        return self.cell(row, rank) if self.cell else getattr(row, self.attr)


def _name(row: Row, _: int) -> str:
    if row.kind == "remote":
        return f"`{row.name}`"
    return (preset_link(row.name) + (UNSANDBOXED if row.unsandboxed else "")
            + (KEY_MATCHER_ONLY if row.key_matcher_only else "")
            + (MEDIAN_OF.format(n=row.median_of) if row.median_of else ""))


def _link(url: str | None) -> str:
    if not url or url == DASH:
        return DASH
    return f"[source]({url})" if url.startswith("https://") else f"[run record]({url})"


def _ratio(row: Row, _: int) -> str:
    """All reported findings confirmed: the ratio is bold."""
    return bold(row.confirmed_reported) if row.reported and row.confirmed == row.reported else row.confirmed_reported


def _serving(index: int) -> Callable[[Row, int], str]:
    return lambda row, _: row.serving[index]


_DURATION = r"\d+m\d{2}s"
_TOKENS = Shape(r"\d+(?:\.\d)?M|\d+k|\d{1,3}|—", "rounded tokens, e.g. 2.3M or 68k, or —")

# In table order; the remote rows file's keys follow the same order.
COLUMNS: tuple[Column, ...] = (
    Column("rank", "Rank", headline=True, cell=lambda _, rank: bold(f"#{rank}")),
    Column("name", "Model", local_header="Preset", headline=True, detail=True, remote_key="model", cell=_name,
           shape=Shape(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*", "a canonical model id, e.g. openai/gpt-5.6-luna", True),
           hand_key="preset", hand_shape=Shape(r"[a-z0-9][a-z0-9-]*", "the vllm-on-tap preset's name", True)),
    Column("effort", "Effort", headline=True, detail=True,
           shape=Shape(r"[a-z][a-z0-9-]*", "the effort applied (medium) or default", True)),
    Column("cli", "CLI", headline=True, detail=True,
           shape=Shape(r"opencode|claude|copilot", "opencode, claude or copilot", True)),
    Column("where", "Provider", local_header="GPU", headline=True, detail=True, remote_key="provider",
           shape=Shape(r"OpenRouter|Anthropic|Copilot", "OpenRouter, Anthropic or Copilot", True),
           hand_key="gpu", hand_shape=Shape(r"[A-Za-z0-9][A-Za-z0-9 .-]*", "the GPU, e.g. A100 80 GB", True)),
    # Remote rows: the oddyssey version that measured them; local rows: our protocol revision.
    Column("oddyssey", "oddyssey", local_header="Protocol", hand_header="oddyssey", headline=True, detail=True,
           shape=Shape(r"\d+\.\d+\.\d+(?: ⚠)?", "a version, e.g. 1.13.0 (a trailing ' ⚠' if provisional)", True),
           hand_shape=Shape(r"\d+\.\d+\.\d+(?: ⚠)?|—", "the oddyssey version, e.g. 1.13.0, or — where its source "
                            "gives none", True)),
    Column("score", "Scoring", headline=True, best="max", parse=float,
           cell=lambda row, _: f"{row.score.score:.1f}"),
    Column("confirmed_reported", "Confirmed / reported", headline=True, cell=_ratio,
           shape=Shape(r"\d+ / \d+", "X / Y, e.g. 7 / 8", True)),
    Column("by_kind", "Telemetry / Perf / Behavior", headline=True,
           shape=Shape(r"\d+ / \d+ / \d+", "X / X / X, e.g. 3 / 2 / 2", True),
           hand_shape=Shape(r"\d+ / \d+ / \d+|—", "X / X / X, e.g. 3 / 2 / 2, or — where the source gives no split",
                            True)),
    Column("total", "Total", headline=True, best="min", parse=parse_total,
           shape=Shape(_DURATION, "NmSSs, e.g. 6m29s or 150m02s", True)),
    Column("cost", "Cost", headline=True, kinds=("remote",), best="min", parse=parse_usd,
           shape=Shape(r"\$\d+\.\d{2}", "$N.NN, e.g. $0.11", True)),
    Column("accuracy", "Accuracy", headline=True, best="max", parse=parse_percent,
           shape=Shape(r"\d{1,3}%", "a whole percent, e.g. 88%", True)),
    Column("usd_per_confirmed", "$/confirmed", headline=True, kinds=("remote",), best="min", parse=parse_usd,
           shape=Shape(r"\$\d+\.\d{3}|—", "$N.NNN, e.g. $0.016 (— with no confirmed finding)", True)),
    Column("seconds_per_confirmed", "seconds/confirmed", headline=True, best="min", parse=parse_seconds,
           shape=Shape(r"\d+s|—", "whole seconds, e.g. 56s (— with none confirmed)", True)),
    Column("preflight", "Preflight", detail=True, shape=Shape(_DURATION + "|—", "NmSSs, e.g. 3m10s, or —")),
    Column("drive", "Drive", detail=True, shape=Shape(_DURATION + "|—", "NmSSs, e.g. 2m01s, or —")),
    Column("observation", "Observation", detail=True, shape=Shape(_DURATION + "|—", "NmSSs, e.g. 11m58s, or —")),
    Column("turns", "Turns", detail=True, shape=Shape(r"\d+|—", "a whole number, or —")),
    Column("median_turn", "Median turn", detail=True,
           shape=Shape(r"\d+(?:\.\d)?s|—", "seconds with one decimal, e.g. 13.3s, or —")),
    Column("input", "Input", detail=True, shape=_TOKENS),
    # Local rows: output and reasoning apart (the seed: "output 42,711 + reasoning 139,401");
    # oddyssey's remote cell folds the two.
    Column("output", "Output", local_header="Output + reasoning", detail=True, shape=_TOKENS,
           hand_shape=Shape(r"(?:\d+(?:\.\d)?M|\d+k|\d{1,3}|—)(?: \+ (?:\d+(?:\.\d)?M|\d+k|\d{1,3}|—))?",
                            "rounded tokens, output + reasoning, e.g. 43k + 139k, or —")),
    Column("cache", "Cache", detail=True, shape=_TOKENS),
    Column("signals", "Signals", detail=True, shape=Shape(r"[0-4]/4|—", "k/4, e.g. 4/4, or —")),
    Column("planted_found", "Planted found", detail=True, kinds=("local",),
           cell=lambda row, _: row.planted_found or DASH),
    # Provenance: when, how it ended, what served it, at what price.
    Column("date", "Date", detail=True,
           shape=Shape(r"\d{4}-\d{2}-\d{2}|—", "YYYY-MM-DD, the day it was measured (— where its source gives none)")),
    # Remote and hand-kept rows: where they were measured; local rows: their run record.
    Column("source", "Source", detail=True, cell=lambda row, _: _link(row.source),
           shape=Shape(r"https://\S+", "the https address where the row was measured or published")),
    Column("ended", "Ended", detail=True, kinds=("local",)),
    Column("engine", "Served by", detail=True, kinds=("local",)),
    Column("opencode", "opencode", detail=True, kinds=("local",)),
    Column("gpu_hours", "GPU-hours", detail=True, kinds=("local",)),
    Column("gpu_price", "GPU $/h", detail=True, kinds=("local",)),
    # K trials on one serve: which trial the row is, and the spread of all of them.
    Column("trials", "Trials", detail=True, kinds=("local",)),
    # What the serving did (harness/results/serving_columns.py reads them from the record).
    *(Column(f"serving[{i}]", c.header, detail=True, kinds=("local",), cell=_serving(i))
      for i, c in enumerate(SERVING_COLUMNS)),
    # `launch --capacity`: concurrent agents the same serve sustained, its SLO and the trace replayed
    Column("capacity", "Agents sustained", detail=True, kinds=("local",), optional=True),
)


def columns(kind: Kind, table: Literal["headline", "detail"], rows: list[Row] | None = None) -> list[Column]:
    """The table's columns; an optional one only where one of `rows` has it."""
    return [c for c in COLUMNS if kind in c.kinds and getattr(c, table)
            and (not c.optional or any(c.text(r, i + 1) != DASH for i, r in enumerate(rows or [])))]


def headers(kind: Kind, table: Literal["headline", "detail"], hand: bool = False,
            rows: list[Row] | None = None) -> list[str]:
    return [c.header_for(kind, hand) for c in columns(kind, table, rows)]


# The remote rows file: its keys in order, and those a row must give.
REMOTE_CELLS: dict[str, Column] = {c.key: c for c in COLUMNS if c.shape is not None}
REMOTE_REQUIRED: tuple[str, ...] = tuple(k for k, c in REMOTE_CELLS.items() if c.shape.required)
# The hand-kept local rows oddyssey measured: the local columns a file can write, by their key there.
HAND_LOCAL_CELLS: dict[str, Column] = {(c.hand_key or c.attr): c for c in COLUMNS
                                       if c.shape is not None and "local" in c.kinds}
