"""The scripted trajectory the replay server plays back.

A trajectory file names a few scripted agent runs (each picked by a substring of
the first user message) and a fallback speed model for every other request.
It is a fake model for tests and demos: everything it serves is written here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness.errors import UserError
from harness.vot.loader import load_yaml

DEFAULT_LABEL = "scripted trajectory (not a model)"
DEFAULT_TTFT = 0.05
# A step with no `duration` ends this long after its first token.
DEFAULT_TAIL = 0.05

StepKind = Literal["tool_calls", "text", "stall", "error"]


class _Strict(BaseModel):
    # A typo in a trajectory file should fail loudly, not be silently ignored.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Usage(_Strict):
    """Token counts as the OpenAI usage object reports them."""

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    cached_tokens: int = Field(default=0, ge=0)
    reasoning_tokens: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _parts_fit(self) -> Usage:
        if self.cached_tokens > self.prompt_tokens:
            raise ValueError("cached_tokens cannot exceed prompt_tokens")
        if self.reasoning_tokens > self.completion_tokens:
            raise ValueError("reasoning_tokens cannot exceed completion_tokens")
        return self

    def openai(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        }


class ToolCall(_Strict):
    name: str = Field(min_length=1)
    # A mapping is sent as JSON; a string is sent verbatim (so a file can script
    # malformed arguments on purpose).
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class ErrorReply(_Strict):
    status: int = Field(ge=400, le=599)
    message: str = Field(min_length=1)
    type: str | None = None


class Step(_Strict):
    """One assistant turn: exactly one of tool_calls (optionally with text), text, stall, error."""

    tool_calls: list[ToolCall] | None = Field(default=None, min_length=1)
    text: str | None = None
    reasoning: str | None = None
    stall: float | None = Field(default=None, gt=0)
    error: ErrorReply | None = None
    usage: Usage | None = None
    ttft: float = Field(default=DEFAULT_TTFT, ge=0)
    duration: float | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _one_kind(self) -> Step:
        given = [k for k in ("tool_calls", "stall", "error") if getattr(self, k) is not None]
        if self.text is not None and self.tool_calls is None:
            given.append("text")
        if len(given) != 1:
            raise ValueError(
                "a step needs exactly one of tool_calls, text, stall, error"
                f" (got {', '.join(given) or 'none'})"
            )
        if given[0] in ("stall", "error"):
            extra = {"reasoning", "usage", "ttft", "duration"} & self.model_fields_set
            if extra:
                raise ValueError(f"a {given[0]} step takes no {', '.join(sorted(extra))}")
        if self.duration is not None and self.duration < self.ttft:
            raise ValueError("duration includes ttft, so it cannot be shorter than ttft")
        return self

    @property
    def kind(self) -> StepKind:
        if self.tool_calls is not None:
            return "tool_calls"
        if self.stall is not None:
            return "stall"
        if self.error is not None:
            return "error"
        return "text"

    @property
    def total_duration(self) -> float:
        return self.duration if self.duration is not None else self.ttft + DEFAULT_TAIL


class Scenario(_Strict):
    """One scripted run, chosen by a substring of the first user message."""

    name: str = Field(min_length=1)
    match: str = Field(min_length=1)
    steps: list[Step] = Field(min_length=1)


class Fallback(_Strict):
    """Simulated speed for requests that match no scenario (e.g. a speed probe)."""

    prefill_tps: float = Field(default=4000.0, gt=0)
    decode_tps: float = Field(default=200.0, gt=0)


class Trajectory(_Strict):
    """A whole trajectory file."""

    label: str = Field(default=DEFAULT_LABEL, min_length=1)
    fallback: Fallback = Field(default_factory=Fallback)
    trajectories: list[Scenario] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> Trajectory:
        names = [s.name for s in self.trajectories]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate trajectory names: {', '.join(dupes)}")
        return self

    def find(self, first_user_text: str) -> Scenario | None:
        """The first scenario whose `match` occurs in the text (file order wins)."""
        for scenario in self.trajectories:
            if scenario.match in first_user_text:
                return scenario
        return None


def load_trajectory(path: str | Path) -> Trajectory:
    """Read and validate a trajectory YAML file, or raise a UserError that says what to fix."""
    path = Path(path)
    raw = load_yaml(path)  # missing file, bad YAML (with its line), not a mapping
    try:
        return Trajectory.model_validate(raw)
    except ValidationError as exc:
        raise _user_error(exc, path) from None


def _user_error(exc: ValidationError, path: Path) -> UserError:
    first = exc.errors()[0]
    field = _dotted(first["loc"])
    more = exc.error_count() - 1
    message = first["msg"].removeprefix("Value error, ")
    if more:
        message += f" (and {more} more problem{'s' if more > 1 else ''})"
    return UserError(
        message,
        file=path,
        field=field or None,
        fix="see harness/replay/trajectory.py for the trajectory format",
    )


def _dotted(loc: tuple[int | str, ...]) -> str:
    """('trajectories', 0, 'steps', 1) -> 'trajectories[0].steps[1]'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
