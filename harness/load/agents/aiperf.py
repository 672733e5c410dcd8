"""Our agent trace in AIPerf's Mooncake trace format, and back.

Fields as AIPerf's own loader reads them (ai-dynamo/aiperf, src/aiperf/dataset/loader/models.py,
class MooncakeTrace; docs: docs.nvidia.com/aiperf, "Trace Replay with Mooncake Traces"):
`input_length` (tokens), `output_length`, `hash_ids` (one id per block of `--isl-block-size`
tokens, the last block partial: AIPerf's PromptGenerator._build_token_sequence refuses a row
unless 0 < input_length - (len(hash_ids) - 1) * block_size <= block_size), `timestamp` (ms).
AIPerf must be told our block size: `aiperf profile --custom-dataset-type mooncake_trace
--isl-block-size 16 --fixed-schedule --input-file T` (its default is 512).

We write the self-contained form of Mooncake's own FAST'25 traces: one row per request with
its whole prompt, a `timestamp`, and no `session_id`. (With `session_id`, AIPerf treats
`input_length` as the new content of a turn and appends the live answers itself, a delta
we cannot state for a prompt that shrank.) Prefix reuse is carried by `hash_ids`: a turn's
first `reused_blocks` ids are its previous turn's; every other block gets a fresh id, unique
across the file. AIPerf's rows allow keys it does not declare (its base_trace_loader:
extra="allow"), so what Mooncake cannot say travels in `llmsb_*` keys AIPerf ignores (`EXTRA`):
session, turn, parent/fork/rejoin, think, duration, recorded TTFT, cached tokens, tool names,
stop reason and reuse label. Read back with those keys, a file is our trace again (times to
the microsecond: Mooncake's are milliseconds, written to three decimals); without them (a
foreign Mooncake/AgentX export), every row is its own session and reuse is the common hash-id
prefix with the row before it. AIPerf itself replays only what Mooncake holds: lengths, hash
ids and start times, not the think times, TTFTs or cache reads in our keys.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from harness.errors import UserError
from harness.load.agents.trace import MAX_TURNS, AgentTrace, Session, Turn, blocks

EXTRA = ("llmsb_session", "llmsb_turn", "llmsb_parent", "llmsb_fork_after", "llmsb_rejoin_before", "llmsb_think_ms",
         "llmsb_duration_ms", "llmsb_ttft_ms", "llmsb_cached_tokens", "llmsb_tools", "llmsb_stop", "llmsb_reuse")


def to_rows(trace: AgentTrace) -> list[dict]:
    """One Mooncake row per turn, in start order (AIPerf's fixed schedule wants them sorted)."""
    rows, next_id = [], 0
    for s in trace.sessions:
        prev_ids: list[int] = []
        for i, t in enumerate(s.turns):
            n = blocks(t.prompt_tokens, trace.block_size)
            ids = prev_ids[:t.reused_blocks]
            ids += list(range(next_id, next_id + n - len(ids)))
            next_id += n - t.reused_blocks
            prev_ids = ids
            row = {"timestamp": round(t.start_s * 1000, 3), "input_length": t.prompt_tokens,
                   "output_length": t.output_tokens, "hash_ids": ids,
                   "llmsb_session": s.id, "llmsb_turn": i}
            if i == 0 and s.parent is not None:
                row.update(llmsb_parent=s.parent, llmsb_fork_after=s.fork_after_turn,
                           llmsb_rejoin_before=s.rejoin_before_turn)
            if t.think_s is not None:
                row["llmsb_think_ms"] = round(t.think_s * 1000, 3)
            if t.duration_s is not None:
                row["llmsb_duration_ms"] = round(t.duration_s * 1000, 3)
            if t.ttft_s is not None:
                row["llmsb_ttft_ms"] = round(t.ttft_s * 1000, 3)
            if t.cached_tokens is not None:
                row["llmsb_cached_tokens"] = t.cached_tokens
            if t.tool_calls:
                row["llmsb_tools"] = t.tool_calls
            if t.stop is not None:
                row["llmsb_stop"] = t.stop
            row["llmsb_reuse"] = t.reuse
            rows.append(row)
    rows.sort(key=lambda r: (r["timestamp"], r["llmsb_session"], r["llmsb_turn"]))
    return rows


def export(trace: AgentTrace, path: Path) -> int:
    rows = to_rows(trace)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


def _int(row: dict, key: str, where: str, *, required: bool = True, low: int = 0):
    value = row.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise UserError(f"{where}: {key} must be an integer >= {low} (got {value!r})", field=key,
                        fix="give a Mooncake trace row: input_length, output_length, hash_ids, timestamp (ms)")
    return value


def _number(row: dict, key: str, where: str):
    value = row.get(key)
    if value is None:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
        raise UserError(f"{where}: {key} must be a number >= 0 (got {value!r})", field=key, fix=f"correct {key}")
    return float(value)


def _secs(ms: float | None) -> float | None:
    """Milliseconds written to three decimals, back to seconds as they were (to the microsecond)."""
    return None if ms is None else round(ms / 1000, 6)


def from_rows(rows: list[dict], *, block_size: int, source: str = "") -> AgentTrace:
    by_session: dict[str, list[tuple[int, dict]]] = {}
    for n, row in enumerate(rows, 1):
        where = f"{source or 'trace'} row {n}"
        if not isinstance(row, dict):
            raise UserError(f"{where}: not a JSON object", fix="one JSON object a line")
        length = _int(row, "input_length", where, low=1)
        _int(row, "output_length", where, low=1)
        ids = row.get("hash_ids")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise UserError(f"{where}: hash_ids must be a list of integers", field="hash_ids",
                            fix="give one id per KV block of the prompt")
        if len(ids) != blocks(length, block_size):
            raise UserError(f"{where}: {len(ids)} hash_ids for input_length {length} at block size {block_size} "
                            f"(expected {blocks(length, block_size)})", field="hash_ids",
                            fix="give the block size the trace was written with (--block-size)")
        sid = row.get("llmsb_session")
        sid = str(sid) if sid is not None else f"r{n}"
        turn = _int(row, "llmsb_turn", where, required=False)
        by_session.setdefault(sid, []).append((turn if turn is not None else n, row))
    sessions, t0 = [], None
    for sid, items in by_session.items():
        items.sort(key=lambda x: x[0])
        turns, prev, first = [], None, items[0][1]
        for _, row in items:
            ids = row["hash_ids"]
            reused = 0
            if prev is not None:
                cap = min(prev["input_length"], row["input_length"]) // block_size
                while reused < cap and ids[reused] == prev["hash_ids"][reused]:
                    reused += 1
            ms = _number(row, "timestamp", sid) or 0.0
            think, dur = _number(row, "llmsb_think_ms", sid), _number(row, "llmsb_duration_ms", sid)
            ttft = _number(row, "llmsb_ttft_ms", sid)
            try:
                turns.append(Turn(start_s=_secs(ms), prompt_tokens=row["input_length"], reused_blocks=reused,
                                  output_tokens=row["output_length"], reuse=row.get("llmsb_reuse") or "imported",
                                  think_s=_secs(think), duration_s=_secs(dur), ttft_s=_secs(ttft),
                                  cached_tokens=row.get("llmsb_cached_tokens"), tool_calls=row.get("llmsb_tools") or [],
                                  stop=row.get("llmsb_stop")))
            except ValidationError as exc:
                first = exc.errors()[0]
                name = str(first["loc"][0])
                field = {"tool_calls": "llmsb_tools", "think_s": "llmsb_think_ms", "duration_s": "llmsb_duration_ms",
                         "ttft_s": "llmsb_ttft_ms"}.get(name, f"llmsb_{name}")
                raise UserError(f"{source or 'trace'} session {sid}: {field}: {first['msg']}", field=field,
                                fix="drop the llmsb_* keys, or give the file as llms-benchmark wrote it") from None
            prev = row
        t0 = min(t0, turns[0].start_s) if t0 is not None else turns[0].start_s
        sessions.append(Session(id=sid, parent=first.get("llmsb_parent"), fork_after_turn=first.get("llmsb_fork_after"),
                                rejoin_before_turn=first.get("llmsb_rejoin_before"), turns=turns))
    if not sessions:
        raise UserError(f"{source or 'trace'}: no rows", fix="give a Mooncake trace with at least one row")
    return AgentTrace(source=source, block_size=block_size, sessions=sessions)


def import_file(path: Path, *, block_size: int) -> AgentTrace:
    if not path.is_file():
        raise UserError(f"no Mooncake trace at {path}", file=path, fix="give a JSONL file")
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if n > MAX_TURNS:
                raise UserError(f"{path}: more than {MAX_TURNS} rows", file=path, fix="split the trace")
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    raise UserError(f"{path} line {n}: not JSON", file=path, line=n, fix="one JSON object a line") \
                        from None
    return from_rows(rows, block_size=block_size, source=str(path))
