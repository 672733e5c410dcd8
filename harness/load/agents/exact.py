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
from harness.wire.openai import bearer, root_url
from harness.wire.tls import tls

MAX_STEPS = 8  # tokenizer calls per turn to find the word count
# Then, where a word of several tokens leaves the count a few off, what it lacks is made up with
# one of these short words, repeated (one token each on common vocabularies)
FILLERS = ("the", "of", "and", "to", "in", "is", "it", "on")
Counter = Callable[[str], int]  # a user message's text -> prompt tokens the server would count


def counter(base_url: str, model: str, api_key: str | None = None, timeout_s: float = 30.0) -> Counter | None:
    """The server's own prompt-token count of a one-user-message chat, or None if it offers none."""
    root = root_url(base_url)
    client = httpx.Client(headers=bearer(api_key), timeout=timeout_s, verify=tls())

    def messages(text: str) -> list[dict]:
        return [{"role": "user", "content": text}]

    def vllm(text: str) -> int:
        r = client.post(f"{root}/tokenize", json={"model": model, "messages": messages(text),
                                                  "add_generation_prompt": True})
        r.raise_for_status()
        return int(r.json()["count"])

    def llamacpp(text: str) -> int:
        r = client.post(f"{root}/apply-template", json={"messages": messages(text)})
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
        guess = None  # the previous turn's template overhead, a good first guess for the next
        for i, t in enumerate(s.turns):
            words = synth.words(s.id, i)
            n = max(1, min(len(words), t.prompt_tokens - (guess if guess is not None else 0)))
            best = None
            for _ in range(MAX_STEPS):
                got = count(" ".join(words[:n]))
                if best is None or abs(got - t.prompt_tokens) < abs(best[1] - t.prompt_tokens):
                    best = (n, got)
                if got == t.prompt_tokens:
                    break
                step = t.prompt_tokens - got
                nxt = max(1, min(len(words), n + step))
                if nxt == n:
                    break
                n = nxt
            text = " ".join(words[:best[0]])
            if best[1] != t.prompt_tokens:
                text = _swap_tail(words, best[0], t.prompt_tokens, count) or text
            guess = best[1] - best[0]
            out[(s.id, i)] = text
    return out


def _swap_tail(words: list[str], n: int, target: int, count: Counter) -> str | None:
    """A text of the first k words (k at most n) and then as many short fillers as the count
    lacks, that counts exactly `target`, if one does."""
    for k in range(min(n, len(words)), max(0, n - 4), -1):
        lack = target - count(" ".join(words[:k]))
        if not 0 < lack <= 8:
            continue
        for filler in FILLERS[:3]:
            text = " ".join([*words[:k], *[filler] * lack])
            if count(text) == target:
                return text
    return None
