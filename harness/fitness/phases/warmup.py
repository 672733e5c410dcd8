"""`warmup`: seconds from the first request to its complete answer (a swap-in, a cold
cache and graph capture all land here, before anything is timed)."""

from __future__ import annotations

import time
from typing import Any

from harness.fitness.phases import Ctx

PROMPT = "Reply with the single word: ready"


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    t0 = time.monotonic()
    answer = ctx.endpoint.chat([{"role": "user", "content": PROMPT}], max_tokens=8, temperature=0)
    seconds = round(time.monotonic() - t0, 3)
    return {"warmup.first_answer_s": seconds}, {"answer": (answer.content or answer.reasoning)[:200],
                                                "finish": answer.finish}
