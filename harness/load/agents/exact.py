"""Prompt lengths exact on a real tokenizer: each turn's synthesised text trimmed until the
server's own tokenizer counts the recorded prompt tokens, chat template included.

Synth (synth.py) writes one word a token, exact on the timed replay server (which counts
whitespace words) but not on a real tokenizer (a tag is several tokens, the chat template adds
its own). Here the server is asked, before the replay starts (never during its timing):

- vLLM: `POST /tokenize {"model", "messages", "add_generation_prompt": true}` -> `count`;
- llama.cpp: `POST /apply-template {"messages"}` -> `prompt`, then
  `POST /tokenize {"content": prompt, "add_special": true}` -> `tokens`;
- neither (the replay servers): None, and Synth's word counts stand.

For each turn the number of the copy's words is moved by the difference between the count
and the recorded prompt tokens until they agree (at most `MAX_STEPS` tries); where a word of
several tokens leaves it a few off, the text is cut a word or more earlier and made up with short
filler words, one token each (`FILLERS`); failing that the closest is kept, and the replay's own
usage then says what the server counted. Words are cut only at the end, so a turn's
text still starts with the blocks it shares with the previous turn (its prefix reuse holds).
"""

from __future__ import annotations

from collections.abc import Callable

import httpx

from harness.load.agents.synth import Synth
from harness.load.agents.trace import AgentTrace
from harness.load.client import as_messages
from harness.wire.openai import bearer, root_url
from harness.wire.tls import tls

MAX_STEPS = 8  # tokenizer calls per turn to find the word count
# Then, where a word of several tokens leaves the count a few off, what it lacks is made up with
# one of these short words, repeated (one token each on common vocabularies)
FILLERS = ("the", "of", "and", "to", "in", "is", "it", "on")
# A user message's text, or a whole message list -> the prompt tokens the server would count
Counter = Callable[[str | list[dict]], int]


def count_words(value: str | list[dict]) -> int:
    """The count where the server has no tokenizer endpoint: one token a word (exact on the timed
    replay server, which counts the words of every message)."""
    return sum(len(m["content"].split()) for m in as_messages(value) if isinstance(m.get("content"), str))


def counter(base_url: str, model: str, api_key: str | None = None, timeout_s: float = 30.0) -> Counter | None:
    """The server's own prompt-token count of a chat, or None if it offers none."""
    root = root_url(base_url)
    client = httpx.Client(headers=bearer(api_key), timeout=timeout_s, verify=tls())

    def vllm(value: str | list[dict]) -> int:
        r = client.post(f"{root}/tokenize", json={"model": model, "messages": as_messages(value),
                                                  "add_generation_prompt": True})
        r.raise_for_status()
        return int(r.json()["count"])

    def llamacpp(value: str | list[dict]) -> int:
        r = client.post(f"{root}/apply-template", json={"messages": as_messages(value)})
        r.raise_for_status()
        prompt = r.json()["prompt"]
        r = client.post(f"{root}/tokenize", json={"content": prompt, "add_special": True})
        r.raise_for_status()
        return len(r.json()["tokens"])

    for way in (vllm, llamacpp):
        try:
            if way("hello") > 0:
                return way
        except (httpx.HTTPError, KeyError, TypeError, ValueError):
            continue
    client.close()
    return None


def exact_prompts(trace: AgentTrace, synth: Synth, count: Counter) -> dict[tuple[str, int], str]:
    """(session, turn) -> a prompt the server counts as the turn's recorded prompt tokens (or the closest)."""
    out: dict[tuple[str, int], str] = {}
    for s in trace.sessions:
        guess = 0  # the previous turn's template overhead, a good first guess for the next
        for i, t in enumerate(s.turns):
            words = synth.words(s.id, i)
            text, got, n = fit(words, t.prompt_tokens, count, str, t.prompt_tokens - guess)
            guess = got - n
            out[(s.id, i)] = text
    return out


def fit(words: list[str], target: int, count: Counter, make: Callable[[str], str | list[dict]],
        first: int) -> tuple[str | list[dict], int, int]:
    """(made, its count, words used): `make` of the text of the first n of `words` (n tried from
    `first`, at most MAX_STEPS counts), the one counted `target` where one is, else the closest.
    `make` turns the text into what is counted and sent (the text itself, or a message list)."""
    n = max(1, min(len(words), first))
    best = None
    for _ in range(MAX_STEPS):
        got = count(make(" ".join(words[:n])))
        if best is None or abs(got - target) < abs(best[1] - target):
            best = (n, got)
        if got == target:
            break
        nxt = max(1, min(len(words), n + target - got))
        if nxt == n:
            break
        n = nxt
    made = make(" ".join(words[:best[0]]))
    if best[1] != target:
        swapped = _swap_tail(words, best[0], target, count, make)
        if swapped is not None:
            return swapped, target, best[0]
    return made, best[1], best[0]


def _swap_tail(words: list[str], n: int, target: int, count: Counter,
               make: Callable[[str], str | list[dict]]) -> str | list[dict] | None:
    """`make` of the first k words (k at most n) and then as many short fillers as the count
    lacks, where that counts exactly `target`; None if none does."""
    for k in range(min(n, len(words)), max(0, n - 4), -1):
        lack = target - count(make(" ".join(words[:k])))
        if not 0 < lack <= 8:
            continue
        for filler in FILLERS[:3]:
            made = make(" ".join([*words[:k], *[filler] * lack]))
            if count(made) == target:
                return made
    return None
