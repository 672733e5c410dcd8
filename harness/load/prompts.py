"""Seeded, cache-cold prompts of a given size for the load benchmark.

Each prompt starts with a unique tag (`[<run>-<shape>-<level>-<index>]`), so no two
requests share even their first KV block, then an instruction and filler words
drawn with a seeded RNG from common one-token English and programming words.
`target` counts whitespace-separated words, which is about one token each for
common tokenizers (and exactly one for the timed replay server); what a server
really counted is read back from its `usage`, never from this estimate.
"""

from __future__ import annotations

import random

INSTRUCTION = "Summarize the following notes in one paragraph."
WORDS = (
    "the of and to in is it for on with as at by from that this be are was or an not but all "
    "can will one time new data file code test build run value list type user server request model "
    "cache token memory thread queue error log state event client table index query update delete "
    "create read write open close start stop check load save send call line word note plan step "
    "task work team day week year small large fast slow high low first last next back out up down "
    "over under before after while other same each some many most more less good best"
).split()


HEAD_WORDS = 1 + len(INSTRUCTION.split())  # the tag is one word


class Prompts:
    """Prompts of one shape: the seeded filler is drawn once and rotated per request, so making
    one (even of 16k words) costs a slice and a join, not thousands of random draws."""

    def __init__(self, run_tag: str, seed: int, shape: str, target: int) -> None:
        self.run_tag, self.shape = run_tag, shape
        self.filler = max(target - HEAD_WORDS, 8)
        rng = random.Random(f"{seed}:{shape}:{target}")
        self.words = [rng.choice(WORDS) for _ in range(self.filler)]

    def tag(self, level: int, index: int) -> str:
        return f"{self.run_tag}-{self.shape}-{level}-{index}"

    def make(self, level: int, index: int) -> tuple[str, str]:
        """(tag, prompt): `[tag] instruction`, a blank line, then the filler rotated by the request."""
        tag = self.tag(level, index)
        k = (level * 7919 + index * 104729) % len(self.words)
        body = " ".join(self.words[k:] + self.words[:k])
        return tag, f"[{tag}] {INSTRUCTION}\n\n{body}"
