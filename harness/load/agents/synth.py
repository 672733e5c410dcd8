"""Prompt text for one copy of a trace: the trace's lengths and KV-block structure, new words.

Every block of a turn has an id (the same ids the AIPerf export writes, see `block_ids`): a
turn's first `reused_blocks` ids are its previous turn's, the rest are new. A block's words
are drawn from a hash of (salt, copy, block id), so within a copy a reused block is the same
text (its session keeps its prefix reuse) and across copies no block is (copies share no
cache). The prompt's first word is a tag `[a<copy>-<session>]`, the same on every turn of a
session (so the prefix holds), which the replay server logs.

Lengths are exact in whitespace words (one token each on the timed replay server); on a real
tokenizer each word here is a common English word, one token for BPE vocabularies with a
leading space, so lengths are close but not exact (the realism check is issue 37 item 4).
"""

from __future__ import annotations

import hashlib

from harness.load.agents.trace import AgentTrace, blocks

WORDS = tuple((" the of and to in is it on that for with as was by at be this from or an are not have had "
               "but what all were when we there can said which do their if will up other about out many then "
               "them these so some her would make like him into time has look two more write go see number no "
               "way could people my than first water been call who oil its now find long down day did get come "
               "made may part").split())


def block_ids(trace: AgentTrace) -> dict[tuple[str, int], list[int]]:
    """(session, turn) -> the ids of its prompt's blocks; ids are unique across the trace."""
    out: dict[tuple[str, int], list[int]] = {}
    next_id = 0
    for s in trace.sessions:
        prev: list[int] = []
        for i, t in enumerate(s.turns):
            n = blocks(t.prompt_tokens, trace.block_size)
            ids = prev[:t.reused_blocks] + list(range(next_id, next_id + n - t.reused_blocks))
            next_id += n - t.reused_blocks
            out[(s.id, i)] = prev = ids
    return out


class Synth:
    """Prompt texts of one copy (`copy` distinct per concurrent agent)."""

    def __init__(self, trace: AgentTrace, copy: int, salt: int = 0) -> None:
        self.trace, self.copy, self.salt = trace, copy, salt
        self.ids = block_ids(trace)
        self._blocks: dict[int, list[str]] = {}

    def _block(self, hid: int) -> list[str]:
        if hid not in self._blocks:
            # a hash, not an RNG per block: ~1 us a block, so a 100k-token prompt is built within a think
            raw, k = b"", 0
            while len(raw) < self.trace.block_size:
                raw += hashlib.blake2b(f"{self.salt}:{self.copy}:{hid}:{k}".encode(), digest_size=64).digest()
                k += 1
            self._blocks[hid] = [WORDS[b % len(WORDS)] for b in raw[:self.trace.block_size]]
        return self._blocks[hid]

    def words(self, session: str, turn: int) -> list[str]:
        """The turn's prompt_tokens words, the session's tag first."""
        t = self.trace.session(session).turns[turn]
        words: list[str] = []
        for hid in self.ids[(session, turn)]:
            words += self._block(hid)
        words = words[:t.prompt_tokens]
        words[0] = f"[a{self.copy}-{session}]"
        return words

    def prompt(self, session: str, turn: int) -> str:
        return " ".join(self.words(session, turn))
