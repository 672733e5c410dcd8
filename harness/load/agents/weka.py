"""Our agent trace in the Weka agentic-coding trace format (AgentX's corpus, as AIPerf reads it), and back.

The format as AIPerf's loader validates it (ai-dynamo/aiperf, src/aiperf/dataset/loader/
weka_trace_models.py, models WekaTrace / WekaStreamingRequest / WekaSubagentEntry; every
model there is `extra="forbid"`, so nothing of ours may be added): one JSON object per file
and per root session — `id`, `models`, `block_size`, `hash_id_scope: "local"`, `requests`,
an ordered list of API calls `{"t", "type": "s", "model", "in", "out", "hash_ids", "stop",
"api_time", "think_time", "ttft"}` (seconds) and subagent markers `{"t", "type": "subagent",
"agent_id", "subagent_type", "status", "duration_ms", "total_tokens", "tool_use_count",
"models", "requests"}`; the parent's next call after a marker waits for that subagent
("completed"), otherwise the subagent runs detached.

What it carries of ours in its own fields: every turn's start (`t`, seconds after the trace's
first request), lengths, block reuse (hash ids: a turn's first `reused_blocks` are its previous
turn's), think time, duration (`api_time`), recorded TTFT, the stop reason, and child sessions
one level deep whose rejoin is the parent's next turn (or none). What the replay also uses and
the format has no field for — each turn's cached tokens (`--warm-prefixes` needs them), its
tool names and its reuse label, and the sessions' order — travels in the trace's `totals`
object, which the format leaves opaque (`totals.llmsb`, `EXTRA`); read back, a file we wrote is
our trace again. What it cannot hold at all: a grandchild session and a child that rejoins
later than the parent's next turn (export refuses both, naming the session).

Read from a foreign Weka file, kept: `stop`, a first request's `think_time`; not kept
(`NOT_KEPT`, written back as our own): the hash ids' values (renumbered; their structure, the
reuse, stays), `type` "n" (written back "s"), `input_types` / `output_types`, `tool_tokens` /
`system_tokens` (never written: we do not know them, and 0 would say there are none), the
model names and the subagent markers' own type and counts.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from harness.errors import UserError
from harness.load.agents.synth import block_ids
from harness.load.agents.trace import AgentTrace, Session, Turn

SUBAGENT_TYPE = "task"  # opencode's tool that starts a child session
EXTRA = "llmsb"  # our key in `totals`
EXTRA_FIELDS = ("cached_tokens", "tool_calls", "reuse")  # per turn, beside the format's own fields
NOT_KEPT = ("hash_ids values (renumbered)", "type n (written as s)", "input_types", "output_types", "tool_tokens",
            "system_tokens", "models", "subagent_type", "total_tokens", "tool_use_count", "duration_ms")


def _stop(tool_calls) -> str:
    return "tool_use" if tool_calls else "end_turn"


def _call(trace: AgentTrace, ids: dict, s: Session, i: int, model: str) -> dict:
    t = s.turns[i]
    call = {"t": t.start_s, "type": "s", "model": model, "in": t.prompt_tokens, "out": t.output_tokens,
            "hash_ids": ids[(s.id, i)],
            "stop": t.stop if t.stop is not None else _stop(t.tool_calls),
            "api_time": t.duration_s, "think_time": t.think_s}
    if t.ttft_s is not None:
        call["ttft"] = t.ttft_s
    return call


def to_files(trace: AgentTrace, model: str = "unknown") -> dict[str, dict]:
    """Root session id -> its Weka trace object."""
    ids = block_ids(trace)  # unique across the trace, so "local" scope holds in every file
    children: dict[str, list[Session]] = {}
    for s in trace.sessions:
        if s.parent is None:
            continue
        parent = trace.session(s.parent)
        if parent.parent is not None:
            raise UserError(f"session {s.id} is a child of child {parent.id}: the Weka format nests one level",
                            field="sessions", fix="export to AIPerf's Mooncake format instead (--mooncake)")
        if s.rejoin_before_turn is not None and s.rejoin_before_turn != s.fork_after_turn + 1:
            raise UserError(f"session {s.id} rejoins {parent.id} at turn {s.rejoin_before_turn}, not the turn after "
                            f"its fork ({s.fork_after_turn + 1}): the Weka format cannot say so", field="sessions",
                            fix="export to AIPerf's Mooncake format instead (--mooncake)")
        children.setdefault(s.parent, []).append(s)
    out = {}
    for root in (s for s in trace.sessions if s.parent is None):
        requests = []
        for i in range(len(root.turns)):
            requests.append(_call(trace, ids, root, i, model))
            for child in children.get(root.id, []):
                if child.fork_after_turn != i:
                    continue
                last = child.turns[-1]
                end = last.start_s + last.duration_s if last.duration_s is not None else None
                requests.append({
                    "t": child.turns[0].start_s, "type": "subagent", "agent_id": child.id,
                    "subagent_type": SUBAGENT_TYPE,
                    "status": "completed" if child.rejoin_before_turn is not None else "async_launched",
                    "duration_ms": None if end is None else round((end - child.turns[0].start_s) * 1000),
                    "total_tokens": sum(t.prompt_tokens + t.output_tokens for t in child.turns),
                    "tool_use_count": sum(len(t.tool_calls) for t in child.turns), "models": [model],
                    "requests": [_call(trace, ids, child, k, model) for k in range(len(child.turns))]})
        mine = [root, *children.get(root.id, [])]
        extra = {"order": [trace.sessions.index(x) for x in mine],
                 "turns": {x.id: [{k: getattr(t, k) for k in EXTRA_FIELDS} for t in x.turns] for x in mine}}
        out[root.id] = {"id": root.id, "models": [model], "block_size": trace.block_size, "hash_id_scope": "local",
                        "requests": requests, "totals": {EXTRA: extra}}
    return out


def export(trace: AgentTrace, folder: Path, model: str = "unknown") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for sid, obj in to_files(trace, model).items():
        path = folder / f"{sid}.json"
        path.write_text(json.dumps(obj) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


# ---------------------------------------------------------------- back

def _need(obj: dict, key: str, kinds: tuple, where: str):
    value = obj.get(key)
    if not isinstance(value, kinds) or isinstance(value, bool):
        raise UserError(f"{where}: {key} is missing or not {'/'.join(k.__name__ for k in kinds)} (got {value!r})",
                        field=key, fix="give a Weka trace file (AIPerf's weka_trace_models.py)")
    return value


def _extra(obj: dict, where: str) -> tuple[dict[str, list[dict]], list[int]]:
    """Our per-turn fields and session order from `totals.llmsb`, where a file we wrote has them."""
    totals = obj.get("totals")
    extra = totals.get(EXTRA) if isinstance(totals, dict) else None
    if extra is None:
        return {}, []
    turns, order = (extra.get("turns"), extra.get("order")) if isinstance(extra, dict) else (None, None)
    if (not isinstance(turns, dict) or not all(isinstance(v, list) for v in turns.values())
            or not isinstance(order, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in order)):
        raise UserError(f"{where}: totals.{EXTRA} is not {{turns: {{session: [...]}}, order: [int]}}",
                        field=f"totals.{EXTRA}", fix=f"drop totals.{EXTRA}, or give the file as llms-benchmark wrote it")
    return turns, order


def _turns(calls: list[dict], block_size: int, where: str, extra: list | None = None) -> list[Turn]:
    if extra is not None and len(extra) != len(calls):
        raise UserError(f"{where}: totals.{EXTRA} lists {len(extra)} turns for {len(calls)} requests",
                        field=f"totals.{EXTRA}", fix=f"drop totals.{EXTRA}, or give the file as llms-benchmark wrote it")
    turns, prev = [], None
    for n, call in enumerate(calls):
        at = f"{where} request {n}"
        length = _need(call, "in", (int,), at)
        out = _need(call, "out", (int,), at)
        ids = _need(call, "hash_ids", (list,), at)
        if length < 1 or out < 1:
            raise UserError(f"{at}: in and out must be at least 1", field="in/out", fix="correct the request")
        reused = 0
        if prev is not None:  # real captures may list hash ids for the cached prefix only
            cap = min(prev["in"], length, len(ids) * block_size, len(prev["hash_ids"]) * block_size) // block_size
            while reused < cap and ids[reused] == prev["hash_ids"][reused]:
                reused += 1
        num = {k: call.get(k) for k in ("t", "api_time", "think_time", "ttft")}
        for k, v in num.items():
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0):
                raise UserError(f"{at}: {k} must be seconds >= 0 (got {v!r})", field=k, fix=f"correct {k}")
        stop = call.get("stop") if isinstance(call.get("stop"), str) else None
        mine = extra[n] if extra is not None else {}
        if extra is not None and isinstance(mine, dict) and stop == _stop(mine.get("tool_calls")):
            stop = None  # ours, said by the tool names as before
        if not isinstance(mine, dict) or set(mine) - set(EXTRA_FIELDS):
            raise UserError(f"{at}: totals.{EXTRA} turn is not an object of {', '.join(EXTRA_FIELDS)}",
                            field=f"totals.{EXTRA}", fix=f"drop totals.{EXTRA}")
        try:
            turns.append(Turn(start_s=float(num["t"] or 0.0), prompt_tokens=length, reused_blocks=reused,
                              output_tokens=out, reuse=mine.get("reuse") or "imported", think_s=num["think_time"],
                              duration_s=num["api_time"], ttft_s=num["ttft"], cached_tokens=mine.get("cached_tokens"),
                              tool_calls=mine.get("tool_calls") or [], stop=stop))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise UserError(f"{at}: {field}: {first['msg']}", field=field, fix="correct that field") from None
        prev = call
    return turns


def from_objects(objs: list[dict], source: str = "") -> AgentTrace:
    placed: list[tuple[int | None, Session]] = []
    sizes = set()
    for obj in objs:
        where = f"{source or 'weka'} trace {obj.get('id') if isinstance(obj, dict) else '?'}"
        if not isinstance(obj, dict):
            raise UserError(f"{where}: not a JSON object", fix="one Weka trace object a file")
        root = str(_need(obj, "id", (str,), where))
        sizes.add(_need(obj, "block_size", (int,), where))
        block = next(iter(sizes))
        if len(sizes) > 1:
            raise UserError(f"{where}: block sizes differ across files ({sorted(sizes)})", field="block_size",
                            fix="import files of one block size together")
        calls, children = [], []
        for n, req in enumerate(_need(obj, "requests", (list,), where)):
            kind = req.get("type") if isinstance(req, dict) else None
            if kind in ("s", "n"):
                calls.append(req)
            elif kind == "subagent":
                sub = f"{where} subagent {req.get('agent_id')}"
                if not calls:
                    raise UserError(f"{sub}: starts before its parent's first request", field="requests",
                                    fix="a subagent marker follows the call that started it")
                completed = req.get("status") == "completed"
                children.append((req, len(calls) - 1, completed))
            else:
                raise UserError(f"{where} request {n}: type {kind!r} is not s, n or subagent", field="type",
                                fix="give a Weka trace file")
        if not calls:
            raise UserError(f"{where}: no requests", field="requests", fix="give a trace with at least one call")
        extra, order = _extra(obj, where)
        turns = _turns(calls, block, where, extra.get(root) if extra else None)
        mine = [Session(id=root, turns=turns)]
        for req, fork, completed in children:
            sub = f"{where} subagent {req.get('agent_id')}"
            inner = [r for r in _need(req, "requests", (list,), sub) if isinstance(r, dict)]
            if not inner:
                continue  # an async launch without telemetry: nothing to replay
            rejoin = fork + 1 if completed and fork + 1 < len(turns) else None
            sid = str(_need(req, "agent_id", (str,), sub))
            mine.append(Session(id=sid, parent=root, fork_after_turn=fork, rejoin_before_turn=rejoin,
                                turns=_turns(inner, block, sub, extra.get(sid) if extra else None)))
        if order and len(order) != len(mine):
            raise UserError(f"{where}: totals.{EXTRA}.order names {len(order)} sessions for {len(mine)}",
                            field=f"totals.{EXTRA}", fix=f"drop totals.{EXTRA}")
        placed += [(order[k] if order else None, s) for k, s in enumerate(mine)]
    # our files: the sessions in the order the trace had them; foreign ones: as read
    if placed and all(rank is not None for rank, _ in placed):
        placed.sort(key=lambda x: x[0])
    sessions = [s for _, s in placed]
    if not sessions:
        raise UserError(f"{source or 'weka'}: no traces", fix="give at least one Weka trace file")
    return AgentTrace(source=source, block_size=next(iter(sizes)), sessions=sessions)


def import_paths(paths: list[Path]) -> AgentTrace:
    """Weka trace files (or folders of *.json) as one trace."""
    files: list[Path] = []
    for p in paths:
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    objs = []
    for f in files[:10_000]:
        try:
            objs.append(json.loads(f.read_text(encoding="utf-8")))
        except (OSError, ValueError) as exc:
            raise UserError(f"{f}: not a readable JSON file ({exc})", file=f, fix="give a Weka trace file") from None
    return from_objects(objs, source=",".join(str(p) for p in paths))
