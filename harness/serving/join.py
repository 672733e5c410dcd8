"""Join each model call of the session tree with what the server's /metrics said about it.

The timeline (`timeline.py`) holds readings of the unit's counters; a reading with no
request running is a *boundary*: every counter there is whole for the requests before it
and untouched by the ones after (a waiting request has not been prefilled yet). A call's
server figures are the counter deltas between the last boundary before it and the first
boundary after it; the reading taken as its step finished (tagged with its message) is
that end boundary. The attribution is `exact` when no other call's window overlaps the
bracket (a sequential agent), `shared` when one does (a subagent inside its parent's
step, two steps ending before one reading): the deltas then hold more than one call.
Where the server counts the requests it finished (vLLM's `request_success_total`, the replay
servers'), that count over the bracket decides how many calls it holds: the times opencode
stored only bound when a call ran on the server, and a reading asked for at a step's end can
be answered after the next call has come and gone (a loaded box). llama.cpp counts no
requests; there the times alone decide.

Per-engine meaning of the prompt counter: vLLM (and the replay server) count every prompt
token, cached or not; llama.cpp counts the tokens it had to process (cache hits excluded).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.serving.turns import Turn


# Counter figures differenced per turn (name in the reading, or in its `extra`).
COUNTERS = {
    "prompt_tokens": "prompt_tokens_total",
    "generation_tokens": "generation_tokens_total",
    "prefix_cache_hits": "prefix_cache_hits_total",
    "prefix_cache_queries": "prefix_cache_queries_total",
    "preemptions": "preemptions_total",
}
# Requests the server finished (any finish reason): the calls a bracket's deltas hold.
FINISHED = ("vllm:request_success_total", "vllm:e2e_request_latency_seconds_count")
SECONDS = {
    "queue_s": "vllm:request_queue_time_seconds_sum",
    "prefill_s": ("vllm:request_prefill_time_seconds_sum", "llamacpp:prompt_seconds_total"),
    "ttft_s": "vllm:time_to_first_token_seconds_sum",
    "decode_s": ("vllm:request_decode_time_seconds_sum", "llamacpp:tokens_predicted_seconds_total"),
}


@dataclass
class ServerSide:
    attribution: str  # exact | shared | none
    shared_with: int = 0  # other calls inside the bracket
    prompt_tokens: float | None = None
    generation_tokens: float | None = None
    prefix_cache_hits: float | None = None
    prefix_cache_queries: float | None = None
    preemptions: float | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    ttft_s: float | None = None
    decode_s: float | None = None
    decode_tps: float | None = None
    kv_peak: float | None = None
    readings: int = 0  # readings inside the bracket


def _value(reading: dict[str, Any], name: str | tuple[str, ...]) -> float | None:
    for key in (name,) if isinstance(name, str) else name:
        value = reading.get(key)
        if value is None:
            value = (reading.get("extra") or {}).get(key)
        if value is not None:
            return float(value)
    return None


def _delta(a: dict[str, Any], b: dict[str, Any], name: str | tuple[str, ...]) -> float | None:
    x, y = _value(a, name), _value(b, name)
    if x is None or y is None or y < x:  # absent, or the server restarted (a reset)
        return None
    return round(y - x, 6)


def _is_boundary(r: dict[str, Any]) -> bool:
    return r.get("reachable", True) is not False and (r.get("running") in (None, 0, 0.0))


def _tags(r: dict[str, Any]) -> list[str]:
    return [x for x in str(r.get("after") or "").split(",") if x]


def server_side(turn: Turn, turns: list[Turn], readings: list[dict[str, Any]]) -> ServerSide:
    if turn.completed is None:
        return ServerSide("none")
    bounds = [r for r in readings if _is_boundary(r)]
    end = next((r for r in bounds if turn.message in _tags(r)), None)
    if end is None:
        end = next((r for r in bounds if r["t"] >= turn.completed), None)
    if end is None:
        return ServerSide("none")
    done_before = {t.message for t in turns if t.completed is not None and t.completed <= turn.created}
    start = None
    for r in bounds:
        if r["t"] >= end["t"]:
            break
        tags = _tags(r)
        if r["t"] <= turn.created or (tags and all(x in done_before for x in tags)):
            start = r
    if start is None:
        return ServerSide("none")
    others = 0
    for t in turns:
        if t is turn or t.message in _tags(start):
            continue
        t_end = t.completed if t.completed is not None else float("inf")
        if t_end <= start["t"] or t.created >= end["t"]:
            continue  # outside the bracket
        if t.created >= turn.completed and t_end > end["t"]:
            continue  # began after this call ended and still ran at a boundary: not yet counted
        others += 1
    if len(_tags(end)) > 1:
        others = max(others, len(_tags(end)) - 1)
    finished = _delta(start, end, FINISHED)
    if finished is not None:
        if finished < 1:  # this call is not among the bracket's finished requests: no reading fits it
            return ServerSide("none")
        others = int(round(finished)) - 1
    side = ServerSide("exact" if others == 0 else "shared", shared_with=others)
    for field, name in COUNTERS.items():
        setattr(side, field, _delta(start, end, name))
    for field, name in SECONDS.items():
        setattr(side, field, _delta(start, end, name))
    if side.decode_s and side.generation_tokens:
        # vLLM's decode time runs from the first token to the last: one token fewer than generated.
        tokens = side.generation_tokens - 1 if _value(end, SECONDS["decode_s"][0]) is not None else side.generation_tokens
        side.decode_tps = round(max(tokens, 0) / side.decode_s, 2) if tokens > 0 else None
    inside = [r for r in readings if start["t"] <= r["t"] <= end["t"] and r.get("kv_usage") is not None]
    side.kv_peak = max((r["kv_usage"] for r in inside), default=None)
    side.readings = len(inside)
    return side


def _iso(t: float | None) -> str | None:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds") if t is not None else None


def join(turns: list[Turn], readings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per model call, in the order they started."""
    rows = []
    for n, turn in enumerate(turns, 1):
        rows.append({
            "turn": n, "message": turn.message, "session": turn.session,
            "start": _iso(turn.created), "end": _iso(turn.completed),
            "seconds": round(turn.completed - turn.created, 3) if turn.completed is not None else None,
            "mode": turn.mode, "finish": turn.finish, "compaction": turn.summary, "error": turn.error,
            # What the server reported in the call's usage, as opencode stored it.
            "prompt_tokens": turn.prompt, "cached_tokens": turn.cached, "output_tokens": turn.output,
            "prefix_hit": round(turn.cached / turn.prompt, 4) if turn.prompt else None,
            "server": asdict(server_side(turn, turns, readings)),
        })
    return rows


def write_table(rows: list[dict[str, Any]], path: Path) -> Path:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows), encoding="utf-8")
    return path


def load_table(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
