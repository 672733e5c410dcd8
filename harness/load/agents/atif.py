"""Any agent's ATIF trajectory as our agent trace: another harness's run as load.

ATIF (Harbor's RFC 0001; the pinned `atif` package's models validate it) records an agent's
steps; each agent step is one model call (or several, `llm_call_count` > 1, with metrics summed).
An agent step that called the model becomes a turn (trace.py); one with `llm_call_count` n > 1
becomes n equal turns back to back (its metrics summed: one summed prompt could exceed the
model's context):

- prompt_tokens / output_tokens / cached_tokens: the step's `metrics`. Absent, they are
  estimated from the text at CHARS_PER_TOKEN characters a token: the prompt from every message,
  answer and observation before the step (what the agent sent back), the output from the step's
  own message, reasoning and tool-call arguments;
- think_s: the previous model call's end to this one's start (the tools' and the client's time).
  ATIF gives a step one `timestamp`; the start and end of its model call come from the step's
  `extra` or its metrics' `extra` where a writer put them (STARTED_KEYS / ENDED_KEYS; ours,
  harness/trajectory/atif_out.py, writes the wire log's `started` / `first_data` / `ended`). With
  the timestamp alone, the gap between two agent steps also holds the recorded model's own time:
  think_s is that gap (an upper bound: the replay puts less load than the agent did). Without
  timestamps think_s is 0 (each answer followed at once: more load than the agent put);
- reused_blocks: with `metrics.prompt_token_ids` on both steps, the full blocks of their common
  prefix; else the append rule of trace.py (a grown prompt reuses the previous one whole);
- sessions: the trajectory is one (`s0`); each subagent it delegates to (`subagent_trajectory_ref`:
  embedded `subagent_trajectories` or a file beside this one) a child (`s0.1`, ...) forked after
  the turn of the delegating step and rejoined at the parent's next turn. The ids are ours (an
  ATIF id can be any string). A `continued_trajectory_ref` (the rest after a summarization)
  goes on in the same session.

Every assumption is a note: printed by the CLI and kept in the trace's `notes`. What ATIF cannot
carry (opencode's prefix block hashes, which session a compaction opened) is not made up.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from datetime import datetime
from pathlib import Path, PurePosixPath

from atif import Step, Trajectory
from pydantic import ValidationError

from harness.errors import UserError
from harness.load.agents.trace import DEFAULT_BLOCK_SIZE, MAX_TURNS, AgentTrace, Session, Turn

MAX_BYTES = 64 * 1024 * 1024  # one ATIF file (Harbor's keep token ids and logprobs: large, not unbounded)
MAX_FILES = 64  # subagent and continuation files followed from one trajectory
MAX_DEPTH = 8  # subagents of subagents
CHARS_PER_TOKEN = 4.0  # the common rule of thumb for English and code under BPE tokenizers
# where a writer records a step's model call start, first data and end (ISO 8601), in the step's
# `extra` or its metrics' (the names of our wire log, which atif_out.py copies; never `request_ended`,
# which the wire log uses for the request's upload, nor `completed`, opencode's message after its tools)
STARTED_KEYS = ("started", "start_time")
ENDED_KEYS = ("ended", "end_time")
FIRST_DATA_KEYS = ("first_data", "first_token")
FIX = "give an ATIF trajectory JSON file (Harbor's RFC 0001, validated by the `atif` package)"


def sniff(path: Path) -> bool:
    """Whether `path` is an ATIF file: by content (a JSON object whose schema_version starts
    "ATIF"), never by name. The key is looked for in the first 64 KiB (writers put it first);
    a JSON document without it there is parsed whole (at most MAX_BYTES) to be sure."""
    try:
        with path.open("rb") as fh:
            head = fh.read(65536)
            if not head.lstrip().startswith(b"{"):
                return False
            if re.search(rb'"schema_version"\s*:\s*"ATIF', head):
                return True
            if b'"schema_version"' not in head and len(head) < 65536:
                return False  # the whole file, without the key
            if os.fstat(fh.fileno()).st_size > MAX_BYTES:
                return False
            data = json.loads(head + fh.read())
    except (OSError, ValueError, RecursionError):
        return False  # JSON Lines (a wire log) stops at its second line
    return isinstance(data, dict) and str(data.get("schema_version", "")).startswith("ATIF")


def _read_json(path: Path) -> object:
    """The file's JSON; hostile input: no link followed, the size bounded before reading."""
    if path.is_symlink():
        raise UserError(f"{path} is a symbolic link; not followed", file=path, fix="give the file itself")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise UserError(f"cannot open {path}: {exc.strerror}", file=path, fix=FIX) from None
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{path} is not a regular file", file=path, fix=FIX)
        if info.st_size > MAX_BYTES:
            raise UserError(f"{path} is {info.st_size} bytes, over the {MAX_BYTES} read", file=path,
                            fix="drop token ids and logprobs from its metrics, or split it (continued_trajectory_ref)")
        raw = fh.read(MAX_BYTES + 1)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise UserError(f"{path}: not JSON", file=path, fix=FIX) from None


def read(path: Path) -> Trajectory:
    """An ATIF file validated by the pinned `atif` models; a fault names the file and the field."""
    data = _read_json(path)
    version = data.get("schema_version") if isinstance(data, dict) else None
    if not isinstance(version, str) or not version.startswith("ATIF"):
        raise UserError(f"{path}: not an ATIF trajectory (schema_version {version!r})", file=path,
                        field="schema_version", fix=FIX)
    if not re.fullmatch(r"ATIF-v1\.\d+", version):
        raise UserError(f"{path}: schema_version {version!r} is not ATIF v1.x, the version read here", file=path,
                        field="schema_version", fix="give an ATIF-v1.x trajectory (the `atif` package pins v1.8)")
    try:
        return Trajectory.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        if not where:  # a check of the whole document: the `atif` models name the field in the message
            named = re.match(r"Value error, ([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+)?)", first["msg"])
            where = named.group(1) if named else ""
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise UserError(f"{first['msg']}{more}", file=path, field=where or "(the document)",
                        fix="correct that field (ATIF RFC 0001; validated by the `atif` package's models)") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deep", file=path, fix=FIX) from None


def _time(value: object) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _pick(extra: dict | None, keys: tuple[str, ...]) -> float | None:
    for key in keys:
        if extra and (t := _time(extra.get(key))) is not None:
            return t
    return None


def _chars(value: object) -> int:
    """The characters of a message, observation content or tool arguments, as sent to a model."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):  # ContentPart arrays: their text (images and audio are not counted)
        return sum(len(p.text or "") for p in value)
    return len(json.dumps(value, default=str))


def _said(step: Step) -> int:
    """What the step's model call wrote: its message, reasoning and tool calls."""
    calls = sum(len(c.function_name) + _chars(c.arguments) for c in step.tool_calls or [])
    return _chars(step.message) + _chars(step.reasoning_content) + calls


def _observed(step: Step) -> int:
    return sum(_chars(r.content) for r in (step.observation.results if step.observation else []))


class _Builder:
    def __init__(self, root: Path, block_size: int) -> None:
        self.root, self.block = root, block_size
        self.sessions: list[dict] = []  # {"id", "turns": [dict], "parent", "fork", "rejoin"}
        self.counts: Counter = Counter()  # assumption -> agent steps it applied to
        self.notes: list[str] = []
        self.read_paths: set[Path] = set()  # the files read, the first included
        self.turns = 0  # model calls
        self.steps = 0  # agent steps that called the model

    # ---- files a trajectory names: beside the first one, never outside its folder

    def _beside(self, ref: str, what: str) -> Trajectory | None:
        shown = repr(ref if len(ref) <= 200 else ref[:200] + "...")
        rel = PurePosixPath(ref.removeprefix("file://"))
        if "://" in str(rel) or rel.is_absolute() or ".." in rel.parts or not rel.parts:
            self.notes.append(f"{what} {shown}: not a file beside the trajectory; left out")
            return None
        path = self.root.joinpath(*rel.parts)
        if path.is_symlink() or not path.is_file():
            self.notes.append(f"{what} {shown}: no such file beside the trajectory (links are not followed); "
                              f"left out")
            return None
        if path.resolve() in self.read_paths:  # a continuation naming an earlier part: a loop
            self.notes.append(f"{what} {shown}: read already (a loop); not read again")
            return None
        self.read_paths.add(path.resolve())
        if len(self.read_paths) > MAX_FILES:
            raise UserError(f"more than {MAX_FILES} trajectory files referenced", file=path,
                            field="subagent_trajectory_ref", fix="give a trajectory with fewer subagent files")
        return read(path)

    # ---- one trajectory (and its continuations) -> one session, its subagents -> children

    def session(self, traj: Trajectory, sid: str, depth: int) -> dict:
        """The trajectory's session (appended to self.sessions), its subagents after it."""
        if depth > MAX_DEPTH:
            raise UserError(f"subagents nested deeper than {MAX_DEPTH}", field="subagent_trajectories",
                            fix="give a trajectory with shallower delegation")
        me = {"id": sid, "turns": [], "parent": None, "fork": None, "rejoin": None}
        self.sessions.append(me)
        children: list[tuple[Trajectory, int | None]] = []  # (subagent, the turn it forks after)
        embedded = {t.trajectory_id: t for t in traj.subagent_trajectories or []}
        taken: set[int] = set()  # a subagent named twice is replayed once
        part = traj
        while part is not None:
            context = 0  # the characters the model was sent so far in this part (a continuation starts anew)
            for step in part.steps:
                if step.source == "agent" and step.llm_call_count != 0 and not step.is_copied_context:
                    self._turn(me, step, context)
                elif step.is_copied_context:
                    self.counts["is_copied_context"] += 1
                context += _said(step) + _observed(step)
                for result in step.observation.results if step.observation else []:
                    for ref in result.subagent_trajectory_ref or []:
                        child = embedded.get(ref.trajectory_id) if ref.trajectory_id else None
                        if child is None and ref.trajectory_path:
                            child = self._beside(ref.trajectory_path, "subagent_trajectory_ref.trajectory_path")
                        elif child is None:
                            self.notes.append(f"subagent_trajectory_ref {ref.trajectory_id[:200]!r} names no "
                                              f"entry of subagent_trajectories; left out")
                        if child is not None and id(child) not in taken:
                            taken.add(id(child))
                            children.append((child, len(me["turns"]) - 1 if me["turns"] else None))
            ref = part.continued_trajectory_ref
            part = self._beside(ref, "continued_trajectory_ref") if ref else None
        for tid, child in embedded.items():
            if id(child) not in taken:
                self.notes.append(f"subagent_trajectories {tid[:200]!r}: no step delegates to it; replayed as a "
                                  f"session of its own from the start")
                children.append((child, None))
        if not me["turns"]:  # no model call of its own (a dispatcher): its subagents start on their own
            self.sessions.remove(me)
        for n, (child, fork) in enumerate(children, 1):
            kid = self.session(child, f"{sid}.{n}", depth + 1)
            if me["turns"] and fork is not None and kid["turns"]:
                kid["parent"], kid["fork"] = sid, fork
                kid["rejoin"] = fork + 1 if fork + 1 < len(me["turns"]) else None
        return me

    def _turn(self, me: dict, step: Step, context: int) -> None:
        m = step.metrics
        calls = step.llm_call_count or 1
        self.turns += calls
        self.steps += 1
        if self.turns > MAX_TURNS:
            raise UserError(f"more than {MAX_TURNS} model calls", field="steps", fix="split the trajectory")
        prompt = m.prompt_tokens if m and m.prompt_tokens else None
        if prompt is None:
            self.counts["metrics.prompt_tokens"] += 1
            prompt = round(context / CHARS_PER_TOKEN)
        out = m.completion_tokens if m and m.completion_tokens is not None else None
        if out is None:
            self.counts["metrics.completion_tokens"] += 1
            out = round(_said(step) / CHARS_PER_TOKEN)
        # the model call's times: the step's extra, else its metrics' (ours: harness/trajectory/atif_out.py)
        extras = [step.extra or {}, (m.extra if m else None) or {}]
        start = next((t for e in extras if (t := _pick(e, STARTED_KEYS)) is not None), None)
        end = next((t for e in extras if (t := _pick(e, ENDED_KEYS)) is not None), None) if start else None
        first = next((t for e in extras if (t := _pick(e, FIRST_DATA_KEYS)) is not None), None) if start else None
        stamp = _time(step.timestamp)
        if start is None:
            self.counts["timestamp only" if stamp is not None else "timestamp"] += 1
        turn = {"start": start if start is not None else stamp, "end": end, "first": first,
                "cached": m.cached_tokens if m else None, "ids": m.prompt_token_ids if m else None,
                "tools": [c.function_name for c in step.tool_calls or []][:1000]}
        if calls == 1:
            me["turns"].append({**turn, "prompt": max(1, prompt), "out": max(1, out)})
            return
        # metrics summed over several calls: replayed as that many equal calls back to back (one
        # summed prompt could exceed the model's context); the first starts, the last ends, the step
        self.counts["llm_call_count>1"] += 1
        def share(total: int, k: int) -> int:  # the sums stay the step's: the remainder to the first calls
            return total // calls + (k < total % calls)
        for k in range(calls):
            me["turns"].append({**turn, "start": turn["start"] if k == 0 else None,
                                "end": turn["end"] if k == calls - 1 else None, "first": turn["first"] if k == 0
                                else None, "cached": None if turn["cached"] is None else share(turn["cached"], k),
                                "ids": None, "tools": turn["tools"] if k == calls - 1 else [],
                                "prompt": max(1, share(prompt, k)), "out": max(1, share(out, k))})

    # ---- the dicts -> trace.py's models

    def trace(self, source: str) -> AgentTrace:
        if not self.sessions:
            raise UserError(f"{source}: no agent step that called a model", field="steps",
                            fix="give a trajectory with agent steps (source 'agent')")
        known = [t["start"] for s in self.sessions for t in s["turns"] if t["start"] is not None]
        t0 = min(known, default=0.0)
        sessions = []
        for s in self.sessions:
            turns, prev = [], None
            for t in s["turns"]:
                reused, how = self._reuse(prev, t)
                think = None
                if prev is not None:  # from the previous call's end where recorded, else its start (an upper bound)
                    anchor = prev["end"] if prev["end"] is not None else prev["start"]
                    think = 0.0 if t["start"] is None or anchor is None else round(max(0.0, t["start"] - anchor), 6)
                start = t["start"] if t["start"] is not None else (t0 if prev is None else prev["_at"])
                t["_at"] = start

                def since_start(at: float | None, t: dict = t) -> float | None:
                    return None if at is None or t["start"] is None else round(max(0.0, at - t["start"]), 6)
                turns.append(Turn(
                    start_s=round(max(0.0, start - t0), 6), prompt_tokens=t["prompt"], reused_blocks=reused,
                    reuse=how, output_tokens=t["out"], think_s=think, duration_s=since_start(t["end"]),
                    ttft_s=since_start(t["first"]), cached_tokens=t["cached"], tool_calls=t["tools"]))
                prev = t
            sessions.append(Session(id=s["id"], parent=s["parent"], fork_after_turn=s["fork"],
                                    rejoin_before_turn=s["rejoin"], turns=turns))
        return AgentTrace(source=source, block_size=self.block, sessions=sessions, notes=self._notes())

    def _reuse(self, prev: dict | None, t: dict) -> tuple[int, str]:
        if prev is None:
            return 0, "none"
        if prev["ids"] and t["ids"]:
            common = 0
            for a, b in zip(prev["ids"], t["ids"], strict=False):
                if a != b:
                    break
                common += 1
            blocks = min(common, prev["prompt"], t["prompt"]) // self.block
            return blocks, "append" if blocks else "none"
        if t["prompt"] < prev["prompt"]:
            return 0, "none"
        return prev["prompt"] // self.block, "append"

    def _notes(self) -> list[str]:
        said = {
            "metrics.prompt_tokens": "steps[].metrics.prompt_tokens absent (or 0) on {n} of {of} agent steps: "
                                     "estimated as the conversation's text before the step at "
                                     f"{CHARS_PER_TOKEN:g} characters a token",
            "metrics.completion_tokens": "steps[].metrics.completion_tokens absent on {n} of {of} agent steps: "
                                         "estimated from the step's message, reasoning and tool calls at "
                                         f"{CHARS_PER_TOKEN:g} characters a token",
            "timestamp only": "{n} of {of} agent steps give a timestamp but not their model call's start and end "
                              f"(`{STARTED_KEYS[0]}` / `{ENDED_KEYS[0]}` in steps[].extra or steps[].metrics.extra): "
                              "think time is the gap between agent steps, which holds the recorded model's time "
                              "too (an upper bound: less load than the agent put)",
            "timestamp": "steps[].timestamp absent on {n} of {of} agent steps: their think time is 0 (each answer "
                         "followed at once: more load than the agent put) and they start with their session",
            "llm_call_count>1": "{n} agent steps made several model calls (llm_call_count > 1, metrics summed): "
                                "each is replayed as that many equal calls back to back (think 0 between them)",
            "is_copied_context": "{n} steps copied from a prior trajectory (is_copied_context) are not replayed",
        }
        of = self.steps
        return [said[k].format(n=n, of=of) for k, n in self.counts.items()] + self.notes


def convert(path: Path, *, block_size: int = DEFAULT_BLOCK_SIZE, source: str = "") -> AgentTrace:
    """An ATIF file (and the subagent and continuation files it names beside it) as our trace;
    what the conversion assumed is in the trace's `notes`."""
    if block_size < 1:
        raise UserError(f"block size {block_size} is below 1", field="--block-size", fix="give 16 (vLLM's default)")
    traj = read(path)
    builder = _Builder(path.parent, block_size)
    builder.read_paths.add(path.resolve())
    builder.session(traj, "s0", 0)
    return builder.trace(source or path.name)
