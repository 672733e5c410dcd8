"""An agent trace: each session of a run as the model saw it, turn by turn.

Read from a run's `wire.jsonl` (harness/sandbox/wirelog.py): one line per exchange the agent
made with the model, with its start/end times and the server's `usage`. The wire log holds no
prompt text, so a turn keeps only sizes and timing:

- prompt_tokens / output_tokens: the server's usage (output includes reasoning);
- reused_blocks: the leading KV blocks (`block_size` tokens each) that repeat the previous
  turn's prompt. An agent's prompt grows by appending (the previous prompt, the answer, the
  tool results), so the next prompt of a session reuses every full block of the previous one
  (reuse="append"); the first turn reuses nothing (reuse="none");
- think_s: from the previous response's end (in the same session) to this request's start,
  i.e. tool and client time;
- sessions: the wire log does not name opencode's sessions, so they are inferred from growth:
  an exchange continues the idle open session whose last prompt plus answer it holds (the
  tightest such); one that fits none opens a child session, forked after the active
  session's last turn; when an ancestor goes on, the children above it have ended, and the
  parent's turn that resumed is where each rejoins. A compaction (a prompt that shrank)
  therefore reads as a child. Where the run folder keeps opencode's store, the store names
  each exchange's session and parent instead (store_tree.py).

File format (JSON Lines, `*.trace.jsonl`): a header line `{"kind": "agent-trace", ...}`
(AgentTrace without sessions), then one line per session `{"kind": "session", ...}`.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from harness.errors import UserError
from harness.sandbox.wirelog import TOOL_ORIGIN

FORMAT = "llms-benchmark/agent-trace"
VERSION = 1
DEFAULT_BLOCK_SIZE = 16  # vLLM's default KV block size
MAX_TURNS = 100_000  # lines read from one wire log


class Turn(BaseModel):
    start_s: float = Field(ge=0, description="request start, seconds after the trace's first request")
    prompt_tokens: int = Field(ge=1)
    reused_blocks: int = Field(ge=0, description="leading KV blocks repeating the previous turn's prompt")
    output_tokens: int = Field(ge=1)
    think_s: float | None = Field(None, ge=0, description="previous response's end to this request (None: first)")
    duration_s: float | None = Field(None, ge=0, description="the recorded request's start to end")
    ttft_s: float | None = Field(None, ge=0, description="the recorded request's start to its first data")
    cached_tokens: int | None = Field(None, ge=0, description="prompt tokens the server reported cached")
    reuse: Literal["append", "none", "imported"] = "append"
    tool_calls: list[str] = Field(default_factory=list, max_length=1000)
    # the recorded stop reason where a format gave one (Weka's `stop`); None: said by tool_calls
    stop: str | None = Field(None, max_length=64)


class Session(BaseModel):
    id: str = Field(min_length=1)
    parent: str | None = None
    fork_after_turn: int | None = Field(None, ge=0, description="parent's turn after whose end this starts")
    rejoin_before_turn: int | None = Field(None, ge=0, description="parent's turn that waits for this to end")
    turns: list[Turn] = Field(min_length=1)


class AgentTrace(BaseModel):
    format: Literal["llms-benchmark/agent-trace"] = FORMAT
    version: Literal[1] = VERSION
    source: str = ""
    block_size: int = Field(DEFAULT_BLOCK_SIZE, ge=1)
    # what a conversion had to assume (an ATIF file without token counts or times: atif.py)
    notes: list[str] = Field(default_factory=list, max_length=100)
    sessions: list[Session] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> AgentTrace:
        ids = {s.id for s in self.sessions}
        if len(ids) != len(self.sessions):
            raise ValueError("session ids must be unique")
        for s in self.sessions:
            if (s.parent is None) != (s.fork_after_turn is None):
                raise ValueError(f"session {s.id}: parent and fork_after_turn go together")
            if s.parent is not None and s.parent not in ids:
                raise ValueError(f"session {s.id}: parent {s.parent} is not in the trace")
            if s.parent is not None:  # a replay waits on these: out of range, it would wait forever
                n = len(next(p for p in self.sessions if p.id == s.parent).turns)
                if s.fork_after_turn >= n:
                    raise ValueError(f"session {s.id}: fork_after_turn {s.fork_after_turn} but {s.parent} has {n} "
                                     f"turns")
                if s.rejoin_before_turn is not None and not s.fork_after_turn < s.rejoin_before_turn < n:
                    raise ValueError(f"session {s.id}: rejoin_before_turn {s.rejoin_before_turn} is not after its "
                                     f"fork ({s.fork_after_turn}) and within {s.parent}'s {n} turns")
            elif s.rejoin_before_turn is not None:
                raise ValueError(f"session {s.id}: rejoin_before_turn without a parent")
            prev = None
            for i, t in enumerate(s.turns):
                cap = 0 if prev is None else min(prev.prompt_tokens, t.prompt_tokens) // self.block_size
                if t.reused_blocks > cap:
                    raise ValueError(f"session {s.id} turn {i}: reused_blocks {t.reused_blocks} > {cap}, the full "
                                     f"blocks both it and the previous turn hold")
                prev = t
        return self

    def session(self, sid: str) -> Session:
        return next(s for s in self.sessions if s.id == sid)


# ---------------------------------------------------------------- from a run's wire log

def _ts(value, where: str) -> float:
    try:
        return datetime.fromisoformat(value).timestamp()
    except (TypeError, ValueError):
        raise UserError(f"{where}: not an ISO 8601 time: {value!r}", field="started/ended",
                        fix="give a wire.jsonl written by the harness (harness/sandbox/wirelog.py)") from None


def _exchanges(wire: Path) -> list[dict]:
    """The completed chat exchanges of a wire log, in start order."""
    if not wire.is_file():
        raise UserError(f"no wire log at {wire}", file=wire,
                        fix="give a run folder holding wire.jsonl (committed runs do not keep it; "
                            "make one with `llms-benchmark launch local replay replay-hello --mission hello`)")
    rows = []
    with wire.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if n > MAX_TURNS:
                raise UserError(f"{wire}: more than {MAX_TURNS} lines", file=wire, fix="split the log")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise UserError(f"{wire} line {n}: not JSON", file=wire, line=n,
                                fix="give the wire.jsonl the harness wrote, unedited") from None
            if not isinstance(row, dict):
                raise UserError(f"{wire} line {n}: not a JSON object", file=wire, line=n, fix="give wire.jsonl")
            usage = row.get("usage") or {}
            if (not str(row.get("path", "")).endswith("/chat/completions") or row.get("status") != 200
                    or not row.get("ended") or not usage.get("prompt_tokens") or row.get("origin") == TOOL_ORIGIN):
                continue  # listings, failed or cut exchanges, a tool's own calls: not a turn the agent made
            started, ended = _ts(row.get("started"), f"{wire} line {n}"), _ts(row.get("ended"), f"{wire} line {n}")
            rows.append({**row, "_start": started, "_end": ended, "_line": n})
    if not rows:
        raise UserError(f"{wire}: no completed chat exchange with usage", file=wire,
                        fix="give the wire log of a run whose agent talked to the model")
    return sorted(rows, key=lambda r: r["_start"])


def _reuse(prev: dict | None, row: dict, block: int) -> tuple[int, str]:
    if prev is None or row["usage"]["prompt_tokens"] < prev["usage"]["prompt_tokens"]:
        return 0, "none"
    return prev["usage"]["prompt_tokens"] // block, "append"


def _ttft(row: dict) -> float | None:
    try:
        return round(max(0.0, datetime.fromisoformat(row["first_data"]).timestamp() - row["_start"]), 6)
    except (KeyError, TypeError, ValueError):
        return None


def _grown(row: dict) -> int:
    return row["usage"]["prompt_tokens"] + (row["usage"].get("completion_tokens") or 0)


def _by_growth(rows: list[dict]) -> list[dict]:
    """Sessions inferred from prompt growth (see the module's docstring)."""
    open_: list[dict] = []  # the session stack, the active one last: {"id", "rows", "parent", "fork"}
    done: list[dict] = []
    for row in rows:
        prompt = row["usage"]["prompt_tokens"]
        # a session's next prompt holds its last prompt and answer (an agent appends); of the idle
        # sessions that fit, the tightest is this one's
        fits = [s for s in open_ if s["rows"][-1]["_end"] <= row["_start"]
                and _grown(s["rows"][-1]) <= prompt]
        home = max(fits, key=lambda s: _grown(s["rows"][-1]), default=None)
        if home is None and not open_:
            open_.append({"id": f"s{len(done)}", "rows": [row], "parent": None, "fork": None})
        elif home is None:  # fits no session: a child of the active one, forked after its last turn
            cur = open_[-1]
            open_.append({"id": f"s{len(open_) + len(done)}", "rows": [row], "parent": cur["id"],
                          "fork": len(cur["rows"]) - 1})
        else:
            while open_[-1] is not home:  # the parent goes on: its children have ended
                child = open_.pop()
                if child["parent"] == home["id"]:
                    child["rejoin"] = len(home["rows"])
                done.append(child)
            home["rows"].append(row)
    return done + open_


def _by_store(rows: list[dict], tree) -> list[dict]:
    """Sessions as opencode's store names them; fork = the parent's last turn ended before the
    child's first request, rejoin = the parent's first turn started after the child's last end."""
    groups: dict[str, dict] = {}
    for n, row in enumerate(rows):
        sid = tree.session_of(row["_start"]) or f"x{n}"
        groups.setdefault(sid, {"id": sid, "rows": [], "parent": None, "fork": None})["rows"].append(row)
    for g in groups.values():
        parent = groups.get(tree.parents.get(g["id"]) or "")
        if parent is None:
            continue
        first, last = g["rows"][0], g["rows"][-1]
        before = [i for i, r in enumerate(parent["rows"]) if r["_end"] <= first["_start"]]
        if not before:
            continue  # forked before the parent's first answer: a session of its own
        g["parent"], g["fork"] = parent["id"], before[-1]
        after = [i for i, r in enumerate(parent["rows"]) if r["_start"] >= last["_end"]]
        g["rejoin"] = after[0] if after else None
    return list(groups.values())


def from_wire(wire: Path, *, block_size: int = DEFAULT_BLOCK_SIZE, source: str = "",
              store: Path | None = None) -> AgentTrace:
    """Each session of a wire log as turns; sessions from opencode's store at `store` (its data
    directory) when given, else inferred from prompt growth (see the module's docstring)."""
    if block_size < 1:
        raise UserError(f"block size {block_size} is below 1", field="--block-size", fix="give 16 (vLLM's default)")
    rows = _exchanges(wire)
    t0 = rows[0]["_start"]
    if store is not None:
        from harness.load.agents.store_tree import read

        groups = _by_store(rows, read(store))
    else:
        groups = _by_growth(rows)
    sessions = []
    for s in sorted(groups, key=lambda s: s["rows"][0]["_start"]):
        turns, prev = [], None
        for row in s["rows"]:
            reused, how = _reuse(prev, row, block_size)
            u = row["usage"]
            turns.append(Turn(start_s=round(row["_start"] - t0, 6), prompt_tokens=u["prompt_tokens"],
                              reused_blocks=reused, reuse=how,
                              output_tokens=max(1, (u.get("completion_tokens") or 0)),
                              think_s=None if prev is None else round(max(0.0, row["_start"] - prev["_end"]), 6),
                              duration_s=round(row["_end"] - row["_start"], 6), ttft_s=_ttft(row),
                              cached_tokens=u.get("cached_tokens"), tool_calls=list(row.get("tool_calls") or [])))
            prev = row
        sessions.append(Session(id=s["id"], parent=s["parent"], fork_after_turn=s["fork"],
                                rejoin_before_turn=s.get("rejoin"), turns=turns))
    return AgentTrace(source=source or str(wire), block_size=block_size, sessions=sessions)


def from_run(run_dir: Path, *, block_size: int = DEFAULT_BLOCK_SIZE) -> AgentTrace:
    """A run folder's trace; its session tree from opencode's store when the folder keeps it."""
    from harness.load.agents.store_tree import run_store

    return from_wire(run_dir / "wire.jsonl", block_size=block_size, source=run_dir.name, store=run_store(run_dir))


# ---------------------------------------------------------------- our file format

def dump(trace: AgentTrace, path: Path) -> None:
    head = trace.model_dump(mode="json", exclude={"sessions"})
    if not head["notes"]:  # nothing assumed: the files written before the field stay as they were
        del head["notes"]
    lines = [json.dumps({"kind": "agent-trace", **head})]
    for s in trace.sessions:
        row = s.model_dump(mode="json")
        for t in row["turns"]:
            if t["stop"] is None:  # said by tool_calls: the files written before the field stay as they were
                del t["stop"]
        lines.append(json.dumps({"kind": "session", **row}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def load(path: Path) -> AgentTrace:
    """Read a trace file; any fault is one UserError naming the file, line and field."""
    if not path.is_file():
        raise UserError(f"no trace file at {path}", file=path, fix="give a *.trace.jsonl (`llms-benchmark load-trace RUN` writes one from a run)")
    head, sessions = None, []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if n > MAX_TURNS:
                raise UserError(f"{path}: more than {MAX_TURNS} lines", file=path, fix="split the trace")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                raise UserError(f"{path} line {n}: not JSON", file=path, line=n, fix="one JSON object a line") from None
            kind = row.pop("kind", None) if isinstance(row, dict) else None
            if kind == "agent-trace" and head is None and n == 1:
                head = row
            elif kind == "session" and head is not None:
                sessions.append(row)
            else:
                raise UserError(f"{path} line {n}: expected {'a header' if head is None else 'a session'} line",
                                file=path, line=n, field="kind",
                                fix='first line {"kind": "agent-trace", ...}, then {"kind": "session", ...} lines')
    if head is None:
        raise UserError(f"{path}: empty", file=path, fix="give a trace written by llms-benchmark")
    try:
        return AgentTrace.model_validate({**head, "sessions": sessions})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{path}: {where}: {first['msg']}", file=path, field=where,
                        fix="correct that field (format: harness/load/agents/trace.py)") from None


def blocks(prompt_tokens: int, block_size: int) -> int:
    return math.ceil(prompt_tokens / block_size)


def merge(traces: list[AgentTrace]) -> AgentTrace:
    """Several traces as one: each copy of a load then replays every one of them. Session ids
    get the trace's index (`t<i>.<id>`); start times stay each trace's own (all begin together)."""
    if len(traces) == 1:
        return traces[0]
    sizes = {t.block_size for t in traces}
    if len(sizes) > 1:
        raise UserError(f"the traces' block sizes differ ({sorted(sizes)})", field="block_size",
                        fix="make every trace with the same --block-size")
    sessions = []
    for i, t in enumerate(traces):
        for s in t.sessions:
            sessions.append(s.model_copy(update={"id": f"t{i}.{s.id}",
                                                 "parent": None if s.parent is None else f"t{i}.{s.parent}"}))
    return AgentTrace(source=",".join(t.source for t in traces), block_size=sizes.pop(), sessions=sessions,
                      notes=[f"t{i}: {n}" for i, t in enumerate(traces) for n in t.notes][:100])
