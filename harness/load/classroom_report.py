"""The classroom run's figures, computed only from its request and turn records (and the
server's /metrics readings), and the results folder they are written to:

    bench-results/classroom-<UTC>/summary.json  summary.csv  summary.md  requests.jsonl  turns.jsonl

Percentiles are numpy's default linear interpolation (Hyndman–Fan type 7).
"""

from __future__ import annotations

import csv
import io
import json
import os
import statistics
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.markdown_table import row, rule


if TYPE_CHECKING:
    from rich.table import Table

    from harness.load.classroom_config import ClassroomConfig

MODEL_KINDS = ("agent", "compaction", "title")  # what a successful request can be
DECODE_MIN_TOKENS = 8  # a request's decode speed needs a few tokens to mean anything


@dataclass
class Outcome:
    """What a classroom run leaves for the report: every request and turn, the server's figures."""

    requests: list[dict]
    turns: list[dict]
    server: dict[str, Any]
    wall_s: float
    started_users: int
    started: str
    finished: str
    interrupted: bool = False


def pct(values: list[float], p: int, digits: int = 3) -> float | int | None:
    """The `p`th percentile (1..99) as numpy's default "linear" method gives it (statistics'
    "inclusive" method: the standard library, for classroom_standalone), rounded (to an int when
    `digits` is 0); None without values."""
    if not values:
        return None
    data = [float(v) for v in values]
    exact = data[0] if len(data) == 1 else statistics.quantiles(data, n=100, method="inclusive")[p - 1]
    value = round(exact, digits)
    return int(value) if digits == 0 else value


def summarize(cfg: ClassroomConfig, outcome: Outcome, *, keys: int, prompt: str, notes: list[str]) -> dict[str, Any]:
    return {
        "meta": meta(cfg, outcome, keys=keys, prompt=prompt, notes=notes),
        "client": client_figures(outcome.requests, outcome.turns, outcome.wall_s),
        "server": outcome.server,
    }


def meta(cfg: ClassroomConfig, outcome: Outcome, *, keys: int, prompt: str, notes: list[str]) -> dict[str, Any]:
    return {
        "tool": "llms-benchmark classroom",
        "started": outcome.started,
        "finished": outcome.finished,
        "wall_s": outcome.wall_s,
        "interrupted": outcome.interrupted,
        "base_url": cfg.root_url,
        "model": cfg.model,
        "users": cfg.users,
        "users_started": outcome.started_users,
        "scenario": cfg.scenario,
        "duration_s": cfg.duration_s,
        "grace_s": cfg.grace_s,
        "ramp_up_s": cfg.ramp_up_s,
        "think_s": list(cfg.think_s),
        "tool_s": list(cfg.tool_s),
        "test_fail_rate": cfg.test_fail_rate,
        "max_turns": cfg.max_turns,
        "max_steps": cfg.max_steps,
        "max_output": cfg.max_output,
        "context_limit": cfg.context_limit,
        "compact_at_tokens": cfg.compact_at,
        "max_retries": cfg.max_retries,
        "title_request": cfg.title,
        "seed": cfg.seed,
        "time_scale": cfg.time_scale,
        "api_keys": keys,
        "prompt": prompt,
        "percentile_method": "numpy linear (type 7)",
        "notes": notes,
    }


def client_figures(requests: list[dict], turns: list[dict], wall_s: float) -> dict[str, Any]:
    final = [r for r in requests if r["kind"] != "retry"]  # each call's last attempt
    ok = [r for r in final if r["ok"]]
    failed = [r for r in final if not r["ok"] and not r.get("cut_off")]
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    e2e = [r["e2e_s"] for r in ok if r["e2e_s"] is not None]
    decode = [(r["completion_tokens"] - 1) / (r["e2e_s"] - r["ttft_s"]) for r in ok if _decodes(r)]
    agent_prompts = [r["prompt_tokens"] for r in ok if r["kind"] == "agent" and r["prompt_tokens"] is not None]
    completed = [t for t in turns if t["completed"]]
    completion_total = sum(r["completion_tokens"] or 0 for r in ok)
    return {
        "requests": len(requests),
        "requests_ok": len(ok),
        "requests_failed": len(failed),
        "requests_by_kind": dict(sorted(Counter(r["kind"] for r in requests).items())),
        "retries": sum(r["kind"] == "retry" for r in requests),
        "retries_by_status": {str(k): v for k, v in sorted(Counter(r["status"] for r in requests
                                                                   if r["kind"] == "retry").items())},
        "retry_wait_s_total": round(sum(r["wait_s"] or 0 for r in requests if r["kind"] == "retry"), 3),
        "errors": dict(sorted(Counter(r["error"] for r in failed).items())),
        "cut_off": sum(bool(r.get("cut_off")) for r in requests),
        "ttft_p50_s": pct(ttft, 50),
        "ttft_p95_s": pct(ttft, 95),
        "request_p50_s": pct(e2e, 50),
        "request_p95_s": pct(e2e, 95),
        "decode_tok_s_p50": pct(decode, 50, 1),
        "decode_tok_s_p10": pct(decode, 10, 1),
        **user_speed(ok),
        "turns_started": len(turns),
        "turns_completed": len(completed),
        "turn_ends": dict(sorted(Counter(t["end"] for t in turns).items())),
        "turn_model_p50_s": pct([t["model_s"] for t in completed], 50),
        "turn_model_p95_s": pct([t["model_s"] for t in completed], 95),
        "turn_total_p50_s": pct([t["turn_s"] for t in completed], 50),
        "turn_total_p95_s": pct([t["turn_s"] for t in completed], 95),
        "steps_per_turn_p50": pct([t["steps"] for t in completed], 50, 1),
        "prompt_tokens_p50": pct(agent_prompts, 50, 0),
        "prompt_tokens_p95": pct(agent_prompts, 95, 0),
        "prompt_tokens_max": max(agent_prompts, default=None),
        "usage_estimated": sum(1 for r in ok if not r["usage_reported"]),
        "compactions": sum(t["compactions"] for t in turns),
        "tool_calls": sum(t["tool_calls"] for t in turns),
        "scripted_tool_calls": sum(t["scripted_tool_calls"] for t in turns),
        "tool_errors": sum(t["tool_errors"] for t in turns),
        "test_runs": sum(t["test_runs"] for t in turns),
        "test_failures": sum(t["test_failures"] for t in turns),
        "prompt_tokens_total": sum(r["prompt_tokens"] or 0 for r in ok if r["usage_reported"]),
        "completion_tokens_total": completion_total,
        "output_tok_s": round(completion_total / wall_s, 2) if wall_s > 0 else None,
        "requests_per_min": round(60 * len(final) / wall_s, 2) if wall_s > 0 else None,
    }


def _decodes(r: dict) -> bool:
    return (r["completion_tokens"] or 0) > DECODE_MIN_TOKENS and r["ttft_s"] is not None \
        and r["e2e_s"] is not None and r["e2e_s"] > r["ttft_s"]


def user_speed(ok: list[dict]) -> dict[str, float | None]:
    """Each user's output speed: their decoded tokens over their time spent decoding."""
    tokens: Counter[int] = Counter()
    seconds: Counter[int] = Counter()
    for r in ok:
        if _decodes(r):
            tokens[r["user"]] += r["completion_tokens"] - 1
            seconds[r["user"]] += r["e2e_s"] - r["ttft_s"]
    speeds = [tokens[u] / seconds[u] for u in tokens if seconds[u] > 0]
    return {"user_output_tok_s_p50": pct(speeds, 50, 1), "user_output_tok_s_min": round(min(speeds), 1) if speeds
            else None}


# ---------------------------------------------------------------- the results folder


def stamp(when: datetime | None = None) -> str:
    return (when or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")


def write_results(out_dir: Path, outcome: Outcome, summary: dict[str, Any]) -> Path:
    """Write every file into a hidden folder, then rename it into place: a results folder
    is either whole or absent."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = f"classroom-{stamp()}"
    folder, n = out_dir / base, 1
    while folder.exists():
        n += 1
        folder = out_dir / f"{base}-{n}"
    tmp = out_dir / f".{folder.name}.partial"
    tmp.mkdir()
    try:
        (tmp / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (tmp / "summary.csv").write_text(to_csv(summary), encoding="utf-8")
        (tmp / "summary.md").write_text(to_markdown(summary), encoding="utf-8")
        (tmp / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in outcome.requests), encoding="utf-8")
        (tmp / "turns.jsonl").write_text("".join(json.dumps(t) + "\n" for t in outcome.turns), encoding="utf-8")
        os.replace(tmp, folder)
    except BaseException:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
        raise
    return folder


def rows(summary: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(section, figure, value) for every figure; dicts and lists as compact JSON."""
    out = []
    for section in ("client", "server", "meta"):
        for key, value in (summary.get(section) or {}).items():
            text = json.dumps(value) if isinstance(value, dict | list) else "" if value is None else str(value)
            out.append((section, key, text))
    return out


def to_csv(summary: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["section", "figure", "value"])
    writer.writerows(rows(summary))
    return buf.getvalue()


# The figures a person reads first, in order, with their labels.
HEADLINE = (
    ("client", "requests", "requests (all attempts)"),
    ("client", "requests_ok", "succeeded"),
    ("client", "requests_failed", "failed"),
    ("client", "retries", "retries after 429/503"),
    ("client", "ttft_p50_s", "TTFT p50 (s)"),
    ("client", "ttft_p95_s", "TTFT p95 (s)"),
    ("client", "request_p50_s", "request time p50 (s)"),
    ("client", "request_p95_s", "request time p95 (s)"),
    ("client", "user_output_tok_s_p50", "output speed per user p50 (tok/s)"),
    ("client", "decode_tok_s_p10", "request decode p10 (tok/s)"),
    ("client", "turns_completed", "user requests completed"),
    ("client", "turn_model_p50_s", "model time per user request p50 (s)"),
    ("client", "turn_model_p95_s", "model time per user request p95 (s)"),
    ("client", "prompt_tokens_p50", "prompt tokens p50"),
    ("client", "prompt_tokens_max", "prompt tokens max"),
    ("client", "compactions", "compactions"),
    ("client", "tool_calls", "tool calls"),
    ("client", "tool_errors", "tool errors"),
    ("client", "test_failures", "failed test runs"),
    ("client", "output_tok_s", "output tok/s (all users)"),
    ("server", "running_peak", "server running peak"),
    ("server", "waiting_peak", "server waiting peak"),
    ("server", "kv_usage_peak_percent", "KV cache peak (%)"),
    ("server", "preemptions", "preemptions"),
    ("server", "prefix_cache_hit_rate_percent", "prefix-cache hit rate (%)"),
)


def headline(summary: dict[str, Any]) -> list[tuple[str, str]]:
    out = []
    for section, key, label in HEADLINE:
        values = summary.get(section) or {}
        if key in values:
            value = values[key]
            out.append((label, "—" if value is None else str(value)))
    if not (summary.get("server") or {}).get("available"):
        out.append(("server metrics", (summary.get("server") or {}).get("reason", "not read")))
    return out


def to_markdown(summary: dict[str, Any]) -> str:
    m = summary["meta"]
    lines = [f"# Classroom run {m['started']}", "",
             f"{m['users']} users ({m['scenario']}) against `{m['model']}` at {m['base_url']}, "
             f"{m['wall_s']} s wall, seed {m['seed']}, time scale {m['time_scale']}.", "",
             row(["figure", "value"]), rule(2, spaced=True), *(row(cells) for cells in headline(summary))]
    errors = summary["client"]["errors"]
    if errors:
        lines += ["", row(["error", "count"]), rule(2, spaced=True), *(row(cells) for cells in errors.items())]
    return "\n".join(lines) + "\n"


def summary_table(summary: dict[str, Any]) -> Table:
    from rich.table import Table  # here: the stdlib entry point (classroom_standalone) has no rich

    m = summary["meta"]
    table = Table("figure", "value", title=f"classroom: {m['users']} users, {m['model']}")
    for label, value in headline(summary):
        table.add_row(label, value)
    return table

