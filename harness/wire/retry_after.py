"""Retry-After, read in one place: how long a server that answered 429 or 503 asks to be
left alone. Its two forms (RFC 9110 §10.2.3): delay-seconds, or an HTTP-date. The fitness
retry policy (harness/wire/retry.py) clamps what this reads; the classroom student
(harness/load/classroom_student.py) waits it on its own clock. Standard library only: the
student imports it from a bare `python3 -S` (seed 002).
"""

from __future__ import annotations

import math
import time
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Protocol


class Headers(Protocol):
    def get(self, name: str, default: str | None = None) -> str | None: ...


def seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value, never below 0 (a date past is now); None
    when there is none or it reads as neither form. A date without a zone is GMT, as HTTP's are."""
    if value is None:
        return None
    try:
        wait = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        wait = when.timestamp() - (time.time() if now is None else now)
    return None if math.isnan(wait) else max(0.0, wait)


def from_headers(headers: Headers) -> float | None:
    """`retry-after-ms` (OpenAI's and its SDK's, milliseconds) where it reads, else Retry-After."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            wait = float(ms) / 1000
        except ValueError:
            wait = math.nan
        if not math.isnan(wait):
            return max(0.0, wait)
    return seconds(headers.get("retry-after"))
