"""What the `load-trace` and `load-agents` verbs do, without the command line."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import httpx

from harness.errors import UserError
from harness.load.agents import aiperf, weka
from harness.load.agents.replay import ReplayOptions, replay
from harness.load.agents.slo import PRODUCT_MEASURE, PRODUCT_SLO, Measure, Slo
from harness.load.agents.sweep import LevelStats, SweepResult, is_fault, sweep
from harness.load.agents.trace import AgentTrace, dump, from_run, from_wire, load
from harness.load.agents.watch import Watcher
from harness.load.agents import atif as atif_in
from harness.wire.openai import bearer, model_ids, models_url, root_url
from harness.wire.tls import tls


def _check_writable(path: Path, field: str, what: str) -> None:
    """A file the command will write: refused before anything is read or written when its folder
    is missing (a typo is likelier than a wish for new folders) or when it names a folder."""
    path = Path(path)
    folder = path.parent
    try:
        is_dir, folder_ok = path.is_dir(), folder.is_dir()
    except OSError as exc:  # a name the OS refuses (too long, ...)
        raise UserError(f"cannot write {what} here: {exc.strerror or exc}", file=path, field=field,
                        fix="give a shorter path, in a folder that exists") from None
    if is_dir:
        raise UserError(f"is a folder, not a file to write {what} into", file=path, field=field,
                        fix=f"name a file inside it, e.g. {field} {path / ('NAME' + _suffix(field))}")
    if not folder_ok:
        raise UserError(f"the folder {folder} does not exist, so {what} cannot be written there", file=path,
                        field=field, fix=f"create it first (mkdir -p {folder}), or name a file in a folder that exists")


def _suffix(field: str) -> str:
    return ".trace.jsonl" if field == "--out" else ".jsonl"


def _writing(path: Path, field: str, write: Callable[[], object]) -> None:
    """Run `write`; a failure of the OS to write (no space, no permission) is one UserError."""
    try:
        write()
    except OSError as exc:
        raise UserError(f"could not be written: {exc.strerror or exc}", file=path, field=field,
                        fix="check that you may write there and the disk has room") from None


def make_trace(source: Path, out: Path, *, block_size: int, mooncake: Path | None = None,
               weka_dir: Path | None = None) -> AgentTrace:
    """A run folder, its wire.jsonl or an ATIF trajectory (any agent's, told by its content) -> our
    trace file, and AIPerf's Mooncake / Weka files if asked. Where they go is checked first."""
    _check_writable(out, "--out", "the trace")
    if mooncake is not None:
        _check_writable(mooncake, "--mooncake", "the Mooncake trace")
    if weka_dir is not None and weka_dir.exists() and not weka_dir.is_dir():
        raise UserError("is a file, not the folder the Weka traces are written into", file=weka_dir,
                        field="--weka", fix="name a folder (it is created when missing)")
    if source.is_dir():  # a run folder: its session tree from opencode's store when it keeps one
        trace = from_run(source, block_size=block_size)
    elif atif_in.sniff(source):
        trace = atif_in.convert(source, block_size=block_size)
    else:
        trace = from_wire(source, block_size=block_size, source=str(source))
    _writing(out, "--out", lambda: dump(trace, out))
    if mooncake is not None:
        _writing(mooncake, "--mooncake", lambda: aiperf.export(trace, mooncake))
    if weka_dir is not None:
        _writing(weka_dir, "--weka", lambda: weka.export(trace, weka_dir))
    return trace


def read_trace(path: Path, *, mooncake_block_size: int | None = None, is_weka: bool = False) -> AgentTrace:
    if is_weka:
        if not path.exists():
            raise UserError(f"no Weka trace at {path}", file=path, fix="give a Weka trace file or a folder of them")
        return weka.import_paths([path])
    if mooncake_block_size is not None:
        return aiperf.import_file(path, block_size=mooncake_block_size)
    if atif_in.sniff(path):  # an ATIF trajectory, converted as `load-trace` would
        return atif_in.convert(path)
    return load(path)


def served_model(base_url: str, api_key: str | None) -> str:
    url = models_url(root_url(base_url))
    try:
        answer = httpx.get(url, headers=bearer(api_key), timeout=10, verify=tls())
        answer.raise_for_status()
        ids = model_ids(answer.json())
    except (httpx.HTTPError, ValueError) as exc:
        raise UserError(f"could not list the served models at {url}: {exc}", field="--model",
                        fix="check the server is up, or name the model with --model") from None
    if not ids:
        raise UserError(f"{url} lists no model", field="--model", fix="name the served model with --model")
    return ids[0]


def server_gone(base_url: str, api_key: str | None, unit_alive: Callable[[], bool] | None = None) -> str | None:
    """Why the server no longer serves (its unit ended, or its model listing does not answer); None if it does."""
    if unit_alive is not None and not unit_alive():
        return "its unit is no longer running"
    url = models_url(root_url(base_url))
    try:
        httpx.get(url, headers=bearer(api_key), timeout=10, verify=tls()).raise_for_status()
    except httpx.HTTPStatusError as exc:
        return f"GET /v1/models answers HTTP {exc.response.status_code}"
    except httpx.HTTPError as exc:
        return f"GET /v1/models: {type(exc).__name__}"
    return None


def run_agents(trace: AgentTrace, *, base_url: str, model: str, levels: list[int], slo: Slo = PRODUCT_SLO,
               stagger_s: float, limit_s: float, out_root: Path, api_key: str | None = None, bisect: bool = True,
               on_level: Callable[[LevelStats], None] | None = None,
               sample_interval_s: float = 1.0, exact_tokens: bool = False, warm_prefixes: bool = False,
               feed_answers: bool = False, folder: Path | None = None, measure: Measure = PRODUCT_MEASURE,
               unit_alive: Callable[[], bool] | None = None) -> tuple[SweepResult, Path]:
    """The sweep; every level's turns and figures written to out_root/<UTC>-agents/agents.json
    (or `folder`/agents.json). The file is fit to commit: no address, key or path of this machine
    (the trace is named by its source's last part), and with the trace beside it a level's table
    is rebuilt from it alone (bench/agents_capacity.py)."""
    model = model or served_model(base_url, api_key)
    folder = folder or out_root / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ-agents")
    folder.mkdir(parents=True, exist_ok=True)
    turns: dict[int, list] = {}
    runs: dict[int, list] = {}  # each repeat's run: what rebuild.py needs beside its turns
    measured: dict[int, bool | None] = {}  # whether the level's prompts were sized on the server's tokenizer

    def level(n: int) -> LevelStats:
        results = []
        with Watcher(base_url, api_key=api_key, interval_s=sample_interval_s) as watcher:
            for r in range(measure.repeats):
                results.append(replay(trace, ReplayOptions(
                    base_url=base_url, model=model, copies=n, stagger_s=stagger_s, api_key=api_key, limit_s=limit_s,
                    exact_tokens=exact_tokens, warm_prefixes=warm_prefixes, feed_answers=feed_answers,
                    duration_s=measure.duration_s, warmup_s=measure.warmup_s,
                    salt=n + 1000 * r)))  # no level or repeat reads a cache an earlier one left
                if any(not t.ok and is_fault(t.error) for t in results[-1].turns):
                    break  # the level is invalid already: no more load on a broken server
        turns[n] = [{**t, "repeat": r} for r, res in enumerate(results) for t in res.as_dict()["turns"]]
        runs[n] = [{k: v for k, v in res.as_dict().items() if k != "turns"} for res in results]
        measured[n] = results[0].exact_tokens
        stats = LevelStats.of(results, slo)
        stats.server = asdict(watcher.figures())
        return stats

    outcome = sweep(level, levels, slo, bisect=bisect, on_level=on_level, measure=measure,
                    alive=lambda: server_gone(base_url, api_key, unit_alive))
    path = folder / "agents.json"
    path.write_text(json.dumps({"trace": _named(trace.source), "sessions": len(trace.sessions),
                                "exact_tokens": exact_tokens, "warm_prefixes": warm_prefixes,
                                "feed_answers": feed_answers,
                                "turns_per_copy": sum(len(s.turns) for s in trace.sessions), "model": model,
                                "stagger_s": stagger_s, "limit_s": limit_s, **outcome.as_dict(),
                                "exact_tokens_by_level": measured, "runs_by_level": runs, "turns_by_level": turns},
                               indent=1) + "\n")
    return outcome, path


def _named(source: str) -> str:
    """A trace's source as the record may keep it: each file's last part, never where it lay here."""
    return ",".join(part.rstrip("/").rsplit("/", 1)[-1] for part in source.split(",")) if source else ""
