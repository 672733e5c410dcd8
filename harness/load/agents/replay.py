"""N concurrent copies of an agent trace against an OpenAI-compatible server.

Copy c starts `c * stagger_s` after the first; within a copy each session runs its turns in
order, one request in flight, and waits the recorded think time after each answer before the
next request (measured from the answer's last byte to the next request's start, on the
loop's monotonic clock; timers on harness/replay/precise_loop.py's loop, so microseconds,
not epoll's milliseconds). A child session starts after its parent's fork turn ends (plus the
recorded gap); the parent's rejoin turn waits for the later of its own think after its previous
answer and the recorded gap after the child's end.
Each copy's prompts come from its own `Synth` (distinct words, same block structure).

With `warm_prefixes`, a session whose first turn the server answered partly from its cache
(`cached_tokens`: the prefix another session left there, e.g. the launch smoke's system prompt
and tool list) gets that prefix sent once before the run starts, untimed and never reported:
its first turn then reads the same share from the cache, as the original did. Each copy warms
its own words, so copies still share no cache.

With `feed_answers`, a turn that appends to its session's previous prompt (every full block of it
reused, and room for the answer) is sent as that previous request's messages, then the answer the
server streamed this copy for it (an assistant message), then a user message of the turn's new
words sized so the whole counts the turn's recorded prompt tokens (the server's tokenizer where it
has one, else a word a token). An agent's next prompt holds its previous answer, which the
server's prefix cache holds too (a model's own generated tokens are cached as it writes them):
the replayed turn then reads the same share from the cache as the original did, rather than
prefilling the answer's length again. A turn that cannot be fed so (the first, a shrink, a
failed previous answer, a count that does not come out exact) is sent as its own single message.
The sizing runs in the think before the request, never inside its timing.

Steady state (`duration_s` > 0): each copy replays the trace again as soon as a pass ends (a
lap; AIPerf's AgentX recycles finished sessions the same way), each lap with new words (its own
`Synth` salt: no lap reads a cache an earlier lap left, as AgentX busts each recycled session's
cache), its first-turn prefixes warmed again (untimed, as before the run). Turns that start in
the first `warmup_s` are sent but not measured (`measured` False); no turn starts after
`warmup_s + duration_s`; turns in flight then finish. Without a duration each copy runs once and
every turn is measured.

Bounded: every request has an idle timeout, the laps a count (MAX_LAPS), and the whole run a
wall-clock limit after which unfinished turns are cancelled and reported as such.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field

from harness.load.agents.exact import Counter, count_words, fit
from harness.load.agents.synth import Synth
from harness.load.agents.trace import AgentTrace, Session, Turn
from harness.load.client import CHAT_PATH, StreamClient, chat_payload
from harness.replay.precise_loop import precise_loop, sleep_until


@dataclass
class TurnResult:
    copy: int
    session: str
    turn: int
    ok: bool
    error: str | None = None
    start_s: float = 0.0  # request start, seconds after the run's start
    end_s: float | None = None
    think_target_s: float | None = None  # the wait asked for before this request
    think_s: float | None = None  # the wait kept: previous answer's end (or the awaited child's) to this start
    ttft_s: float | None = None
    turn_s: float | None = None  # request start to the answer's end
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    decode_tok_s: float | None = None  # (tokens - 1) / (last token - first token)
    cached_tokens: int | None = None  # the server's usage.prompt_tokens_details.cached_tokens
    fed: bool = False  # sent with the previous answer (feed_answers)
    lap: int = 0  # the copy's pass through the trace (steady state recycles it)
    measured: bool = True  # started inside the measured window (not in the warm-up)


@dataclass
class ReplayOptions:
    base_url: str
    model: str
    copies: int
    stagger_s: float = 1.0
    salt: int = 0
    api_key: str | None = None
    request_timeout_s: float = 600.0
    limit_s: float = 3600.0
    # Prompt lengths exact on the server's own tokenizer (exact.py), measured before the run starts;
    # False (or a server with no tokenizer endpoint): Synth's words, one a token
    exact_tokens: bool = False
    # Before the run: each session's first-turn cached prefix sent once, untimed (see the module doc)
    warm_prefixes: bool = False
    # Each appending turn carries this copy's previous answer (see the module doc)
    feed_answers: bool = False
    # Steady state (see the module doc): 0 runs each copy once
    duration_s: float = 0.0
    warmup_s: float = 0.0


MAX_LAPS = 10_000  # passes one copy may make in one run


@dataclass
class ReplayResult:
    copies: int
    turns: list[TurnResult] = field(default_factory=list)
    timed_out: bool = False
    wall_s: float = 0.0
    exact_tokens: bool | None = None  # None: not asked; False: the server offers no tokenizer endpoint
    warmed: int = 0  # prefixes sent before the run (warm_prefixes)
    warm_errors: list[str] = field(default_factory=list)
    window_s: float | None = None  # the measured window's length (steady state); None: one pass, its span
    warmup_s: float = 0.0

    def as_dict(self) -> dict:
        return {"copies": self.copies, "timed_out": self.timed_out, "wall_s": self.wall_s,
                "exact_tokens": self.exact_tokens, "warmed": self.warmed, "warm_errors": self.warm_errors,
                "window_s": self.window_s, "warmup_s": self.warmup_s, "turns": [asdict(t) for t in self.turns]}


@dataclass
class _Prepared:
    body: bytes  # the whole HTTP request
    messages: list[dict]
    fed: bool


def appends(prev: Turn, t: Turn, block_size: int) -> bool:
    """Whether `t` grows `prev`'s prompt by appending (its every full block reused) with room for
    at least `prev`'s answer and one new token: a turn the agent built on its previous answer."""
    return (t.reused_blocks >= prev.prompt_tokens // block_size
            and t.prompt_tokens > prev.prompt_tokens + prev.output_tokens)


def _gap(parent_end_s: float | None, start_s: float) -> float:
    return max(0.0, start_s - parent_end_s) if parent_end_s is not None else 0.0


class _Copy:
    def __init__(self, trace: AgentTrace, copy: int, opts: ReplayOptions, client: StreamClient,
                 loop: asyncio.AbstractEventLoop, t0: float, out: list[TurnResult], lap: int = 0) -> None:
        self.trace, self.copy, self.opts, self.client, self.loop, self.t0 = trace, copy, opts, client, loop, t0
        self.lap = lap
        # lap 0 keeps the plain salt (one pass reads as it always did); later laps new words
        self.synth = Synth(trace, copy, opts.salt if lap == 0 else f"{opts.salt}/{lap}")
        self.measure_from: float | None = None  # loop clock: turns starting before are the warm-up
        self.stop_at: float | None = None  # loop clock: no turn starts from here on
        self.texts: dict[tuple[str, int], str] | None = None  # exact-length prompts (exact.py), if measured
        self.count: Counter | None = None  # the server's tokenizer, if it has one and exact_tokens asked for it
        self.sent: dict[str, list[dict]] = {}  # session -> the messages of its last answered request
        self.answers: dict[str, str] = {}  # session -> that request's answer (feed_answers)
        self.out = out
        self.ends: dict[tuple[str, int], float] = {}  # (session, turn) -> answer's end (loop clock)
        self.done: dict[str, asyncio.Event] = {s.id: asyncio.Event() for s in trace.sessions}
        self.session_end: dict[str, float] = {}
        self.forked: dict[tuple[str, int], list[Session]] = {}
        self.joins: dict[tuple[str, int], list[Session]] = {}
        for s in trace.sessions:
            if s.parent is not None:
                self.forked.setdefault((s.parent, s.fork_after_turn), []).append(s)
                if s.rejoin_before_turn is not None:
                    self.joins.setdefault((s.parent, s.rejoin_before_turn), []).append(s)
        self.tasks: list[asyncio.Task] = []

    def _recorded_end(self, s: Session, i: int) -> float | None:
        t = s.turns[i]
        return t.start_s + t.duration_s if t.duration_s is not None else None

    async def run(self, start_at: float) -> None:
        await sleep_until(self.loop, start_at)
        roots = [s for s in self.trace.sessions if s.parent is None]
        first = min(s.turns[0].start_s for s in roots)
        self.tasks = [asyncio.ensure_future(self.session(s, start_at + s.turns[0].start_s - first, None))
                      for s in roots]
        try:
            done = 0
            while done < len(self.tasks):  # children append themselves as they fork
                await self.tasks[done]
                done += 1
        finally:  # cancelled at the run's limit: no session of this copy is left running
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

    async def session(self, s: Session, start_at: float, after: float | None) -> None:
        prev_end = after
        try:
            await sleep_until(self.loop, start_at)
            for i, t in enumerate(s.turns):
                if self.stop_at is not None and self.loop.time() >= self.stop_at:
                    return  # the measured window is over: this lap sends nothing more
                # each wait is (from, how long): the own think after the previous answer, and for every
                # child that rejoins here the recorded gap after its end; the latest deadline binds
                waits = [(prev_end, t.think_s)] if i > 0 and prev_end is not None and t.think_s is not None else []
                for child in self.joins.get((s.id, i), []):
                    await self.done[child.id].wait()
                    rec = self._recorded_end(child, len(child.turns) - 1)
                    waits.append((self.session_end[child.id], _gap(rec, t.start_s)))
                wait_from, target = max(waits, key=lambda w: w[0] + w[1], default=(None, None))
                request = await self.prepare(s, i)  # built before the wait, so the wait is the whole delay
                if wait_from is not None:
                    await sleep_until(self.loop, wait_from + target)
                if self.stop_at is not None and self.loop.time() >= self.stop_at:
                    return
                prev_end = await self.request(s, i, request, target, wait_from)
                for child in self.forked.get((s.id, i), []):
                    rec = self._recorded_end(s, i)
                    delay = _gap(rec, child.turns[0].start_s)
                    self.tasks.append(asyncio.ensure_future(self.session(child, prev_end + delay, prev_end)))
        finally:
            self.session_end[s.id] = prev_end if prev_end is not None else self.loop.time()
            self.done[s.id].set()

    def _text(self, s: Session, i: int) -> str:
        return self.texts[(s.id, i)] if self.texts is not None else self.synth.prompt(s.id, i)

    def _chat(self, text: str | list[dict], max_tokens: int) -> bytes:
        payload = chat_payload(self.opts.model, text, max_tokens)
        if self.opts.feed_answers:
            # The answer's text with its special tokens: under ignore_eos the model can write an
            # end of turn mid-answer, which the text leaves out by default; fed back without it,
            # the answer tokenises short of the ids the server cached, and the cache match ends
            # there (vLLM: 1/8 answers token for token without, 8/8 with; bench/agents_retokenize.py).
            # Servers without the field ignore it.
            payload["skip_special_tokens"] = False
        return self.client.request_bytes("POST", CHAT_PATH, json.dumps(payload).encode())

    async def prepare(self, s: Session, i: int) -> _Prepared:
        t = s.turns[i]
        if self.opts.feed_answers and i > 0 and s.id in self.answers:
            # the tokenizer's calls block: off the loop, which is timing the other copies' streams
            fed = (await self.loop.run_in_executor(None, self._fed, s, i) if self.count is not None
                   else self._fed(s, i))
            if fed is not None:
                return _Prepared(self._chat(fed, t.output_tokens), fed, True)
        messages = [{"role": "user", "content": self._text(s, i)}]
        return _Prepared(self._chat(messages, t.output_tokens), messages, False)

    def _fed(self, s: Session, i: int) -> list[dict] | None:
        """Turn i's messages: the previous request's, its answer, then new words to the recorded
        count; None where the turn does not append or the count cannot be met exactly."""
        prev, t = s.turns[i - 1], s.turns[i]
        if not appends(prev, t, self.trace.block_size):
            return None
        base = [*self.sent[s.id], {"role": "assistant", "content": self.answers[s.id]}]
        # the turn's words past the previous prompt: its new blocks, this copy's own
        words = self.synth.words(s.id, i)[prev.prompt_tokens:]
        if not words:
            return None
        made, got, _ = fit(words, t.prompt_tokens, self.count or count_words,
                           lambda text: [*base, {"role": "user", "content": text}],
                           t.prompt_tokens - prev.prompt_tokens - prev.output_tokens)
        return made if got == t.prompt_tokens else None

    def warm_prefix(self, s: Session) -> bytes | None:
        """The request that leaves `s`'s first-turn cached prefix in the server's cache: the first
        whole blocks of that turn's own prompt within `cached_tokens`, one token asked; None if the
        original read nothing from the cache there."""
        t = s.turns[0]
        size = self.trace.block_size
        keep = min(t.cached_tokens or 0, t.prompt_tokens) // size * size
        if not keep:
            return None
        # Words are one token each for Synth; an exact-length text has about one a token too.
        return self._chat(" ".join(self._text(s, 0).split(" ")[:keep]), 1)

    async def request(self, s: Session, i: int, request: _Prepared, target: float | None,
                      wait_from: float | None) -> float:
        r = await self.client.send(request.body, keep_text=self.opts.feed_answers)
        if self.opts.feed_answers:
            if r.ok and r.text:
                self.sent[s.id], self.answers[s.id] = request.messages, "".join(r.text)
            else:  # nothing to feed: the session's next turn goes as its own message
                self.sent.pop(s.id, None)
                self.answers.pop(s.id, None)
        if r.ok and not r.token_ns:  # as StreamClient.stream judges a stream
            r.ok, r.error = False, "no output tokens received"
        start, end = r.start_ns / 1e9, (r.end_ns or r.start_ns) / 1e9
        decode = None
        if r.completion_tokens and r.completion_tokens > 1 and len(r.token_ns) > 1 and r.token_ns[-1] > r.token_ns[0]:
            decode = (r.completion_tokens - 1) / ((r.token_ns[-1] - r.token_ns[0]) / 1e9)
        error = r.error
        if error == "timeout" and (r.detail or "").startswith("connecting"):
            error = "connect timeout"  # no connection: a fault (sweep.is_fault), not a slow answer
        self.out.append(TurnResult(
            copy=self.copy, session=s.id, turn=i, ok=r.ok, error=error, start_s=start - self.t0, end_s=end - self.t0,
            think_target_s=target, think_s=None if wait_from is None else start - wait_from, ttft_s=r.ttft_s,
            turn_s=r.e2e_s, prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
            decode_tok_s=decode, cached_tokens=r.cached_tokens, fed=request.fed, lap=self.lap,
            measured=self.measure_from is None or start >= self.measure_from))
        return end


async def _prepare(c: _Copy, trace: AgentTrace, count: Counter | None, loop: asyncio.AbstractEventLoop) -> None:
    if count is not None:
        from harness.load.agents.exact import exact_prompts

        c.texts = await loop.run_in_executor(None, exact_prompts, trace, c.synth, count)
        c.count = count


async def _warm(c: _Copy, trace: AgentTrace, client: StreamClient, result: ReplayResult) -> None:
    for s in trace.sessions:
        warm = c.warm_prefix(s)
        if warm is not None:
            r = await client.send(warm)
            if r.ok:
                result.warmed += 1
            else:  # the run goes on: that first turn reads no cache, and the result says why
                result.warm_errors.append(f"copy {c.copy} lap {c.lap} session {s.id}: {r.error}")


async def _run(trace: AgentTrace, opts: ReplayOptions) -> ReplayResult:
    loop = asyncio.get_running_loop()
    client = StreamClient(opts.base_url, api_key=opts.api_key, idle_timeout=opts.request_timeout_s)
    result = ReplayResult(copies=opts.copies, warmup_s=opts.warmup_s if opts.duration_s else 0.0,
                          window_s=opts.duration_s or None)
    copies = [_Copy(trace, c, opts, client, loop, 0.0, result.turns) for c in range(opts.copies)]
    count: Counter | None = None
    if opts.exact_tokens:
        from harness.load.agents.exact import counter

        count = await loop.run_in_executor(None, counter, opts.base_url, opts.model, opts.api_key)
        result.exact_tokens = count is not None
        for c in copies:
            await _prepare(c, trace, count, loop)
    if opts.warm_prefixes:
        for c in copies:
            await _warm(c, trace, client, result)
    # The run starts once the prompts are measured and the prefixes warmed. loop.time() and
    # perf_counter_ns() read the same monotonic clock on Linux (CLOCK_MONOTONIC).
    t0 = time.perf_counter()
    base = loop.time() + 0.05
    measure_from = stop_at = None
    if opts.duration_s:
        measure_from, stop_at = base + opts.warmup_s, base + opts.warmup_s + opts.duration_s

    async def lane(first: _Copy) -> None:
        """One copy's laps: the trace again as soon as a pass ends, until the window closes."""
        c, start_at = first, base + first.copy * opts.stagger_s
        for lap in range(MAX_LAPS):
            c.t0, c.measure_from, c.stop_at = t0, measure_from, stop_at
            await c.run(start_at)
            if stop_at is None or loop.time() >= stop_at:
                return
            c = _Copy(trace, first.copy, opts, client, loop, t0, result.turns, lap=lap + 1)
            await _prepare(c, trace, count, loop)
            if opts.warm_prefixes:
                await _warm(c, trace, client, result)
            start_at = loop.time()

    tasks = [asyncio.ensure_future(lane(c)) for c in copies]
    try:
        _, pending = await asyncio.wait(tasks, timeout=opts.limit_s)
        if pending:
            result.timed_out = True
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()
    finally:
        await client.aclose()
    result.wall_s = time.perf_counter() - t0
    result.turns.sort(key=lambda t: (t.copy, t.start_s))
    return result


def replay(trace: AgentTrace, opts: ReplayOptions) -> ReplayResult:
    """Run the copies to the end (or `limit_s`); every turn's timings."""
    if opts.copies < 1:
        raise ValueError("copies must be at least 1")
    if opts.duration_s < 0 or opts.warmup_s < 0:
        raise ValueError("duration and warm-up cannot be negative")
    loop = precise_loop()
    try:
        return loop.run_until_complete(_run(trace, opts))
    finally:
        loop.close()
