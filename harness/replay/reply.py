"""A replay answer as planned: a timeline of deltas (`Piece`s) and how it ends (`Reply`),
decided before anything is played; `plan` writes it, `wire` and the servers play it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.replay.trajectory import Usage


@dataclass(frozen=True)
class Piece:
    """One delta, `at` seconds after the request arrived, carrying `tokens` generated tokens."""

    at: float
    delta: dict[str, Any]
    tokens: int = 0


@dataclass(frozen=True)
class Reply:
    """Everything the server will do for one chat request, decided before it starts."""

    kind: str  # tool_calls | text | stall | error | fallback | end
    trajectory: str | None
    step: int | None
    status: int = 200
    pieces: tuple[Piece, ...] = ()  # the first one is the role chunk, at time-to-first-token
    finish_at: float = 0.0
    finish_reason: str | None = None
    usage: Usage | None = None
    stall: float = 0.0
    error: dict[str, Any] | None = None  # OpenAI error body

    @property
    def prompt_tokens(self) -> int:
        return self.usage.prompt_tokens if self.usage else 0
