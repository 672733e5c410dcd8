"""Speed probe of a served model: decode on a short prompt, decode at a long context,
and prefill, each from streamed timings of real chat completions.

Every prompt starts with a unique tag so no prefix cache serves it (cache-cold).
Requests go through the load benchmark's streaming client, so the probe and
`llms-benchmark load` time chunks the same way (see harness.load.client).
Token counts come from the server's `usage`, never from our own estimate; the
long prompt is sized by calibrating the server's tokenizer on filler text first.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass

import httpx

from harness.load.client import CHAT_PATH, StreamClient, chat_payload
from harness.records.record import Probe

LONG_TARGET = 82_000  # tokens, where the context allows
FILLER_WORDS = (
    "river stone amber lantern quiet meadow copper signal harbor violet thunder maple "
    "orbit canvas ember willow granite falcon prism velvet cedar beacon tundra compass"
).split()


@dataclass
class Timing:
    sent: float
    first: float | None
    last: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    chunks: int

    @property
    def ttft(self) -> float | None:
        return self.first - self.sent if self.first else None

    def decode_tps(self) -> float | None:
        n = self.completion_tokens or self.chunks
        if not (self.first and self.last) or n < 2 or self.last <= self.first:
            return None
        # The first token's time belongs to prefill; decode is the rest.
        return (n - 1) / (self.last - self.first)


def _filler(words: int, tag: str) -> str:
    body = " ".join(FILLER_WORDS[i % len(FILLER_WORDS)] for i in range(words))
    return f"[{tag}] Read the following notes, then continue the list of words.\n{body}"


class Prober:
    """Streams one request at a time through the load benchmark's client (harness.load.client),
    on a private event loop so the connection is kept alive between the probe's requests."""

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 900) -> None:
        self.model = model
        try:
            self.client = StreamClient(base_url, api_key=api_key, idle_timeout=timeout_s)
        except ValueError as exc:
            raise httpx.UnsupportedProtocol(str(exc)) from None
        # One loop for all the probe's requests; its close cancels a request an interrupt cut short.
        self.runner = asyncio.Runner()

    def close(self) -> None:
        try:
            self.runner.run(self.client.aclose())
        finally:
            self.runner.close()

    def stream(self, prompt: str, max_tokens: int) -> Timing:
        # temperature 0 and ignore_eos (vLLM and llama.cpp: decode exactly max_tokens), usage in the stream
        payload = chat_payload(self.model, prompt, max_tokens)
        result = self.runner.run(self.client.stream(CHAT_PATH, payload))
        if not result.ok and result.error != "no output tokens received":
            raise httpx.HTTPError(f"{result.error}: {(result.detail or '')[:300]}")
        first = result.token_ns[0] / 1e9 if result.token_ns else None
        last = result.token_ns[-1] / 1e9 if result.token_ns else None
        return Timing(result.start_ns / 1e9, first, last, result.prompt_tokens, result.completion_tokens,
                      result.chunks)

    def tokens_per_word(self) -> float:
        """Calibrate the server's tokenizer on the filler (two sizes cancel the template)."""
        tag = uuid.uuid4().hex[:12]
        small = self.stream(_filler(50, tag), 1).prompt_tokens
        big = self.stream(_filler(550, tag + "b"), 1).prompt_tokens
        if not small or not big or big <= small:
            return 1.3  # a server that reports no usage: a common English ratio
        return (big - small) / 500


def run_probe(base_url: str, model: str, *, max_model_len: int | None, api_key: str | None = None,
              long_target: int = LONG_TARGET, short_tokens: int = 128, long_output: int = 64) -> Probe:
    prober = Prober(base_url, model, api_key=api_key)
    probe = Probe()
    try:
        short = prober.stream(f"[{uuid.uuid4().hex[:12]}] Count upwards from one, one number per line.", short_tokens)
        probe.decode_short_tps = _round(short.decode_tps())
        probe.ttft_short_s = _round(short.ttft, 3)

        room = (max_model_len or long_target) - long_output - 512  # template + calibration slack
        target = min(long_target, room)
        if target < long_target:
            probe.notes.append(f"long context capped at {target} tokens by max-model-len {max_model_len}")
        per_word = prober.tokens_per_word()
        words = max(1, int(target / per_word))
        long = prober.stream(_filler(words, uuid.uuid4().hex[:12]), long_output)
        probe.long_context_tokens = long.prompt_tokens
        probe.decode_long_tps = _round(long.decode_tps())
        probe.ttft_long_s = _round(long.ttft, 3)
        if long.prompt_tokens and long.ttft:
            probe.prefill_tps = _round(long.prompt_tokens / long.ttft)
    finally:
        prober.close()
    return probe


def _round(value: float | None, digits: int = 1) -> float | None:
    return round(value, digits) if value is not None else None


def api_key_from_env(name: str | None) -> str | None:
    return os.environ.get(name) if name else None


def unit_api_key(stack, unit) -> str | None:
    """The key a client sends to `unit`, read at the last moment and held in memory only:
    a stack that keeps it itself (azure: the app's secret) answers `api_key(unit)`;
    otherwise it is the environment variable the unit names."""
    read = getattr(stack, "api_key", None)
    key = read(unit) if callable(read) else None
    return key if key is not None else api_key_from_env(unit.api_key_env)
