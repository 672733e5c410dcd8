"""Error bars: binomial standard error per accuracy, and whether a delta is noise (< 2·SE)."""

from __future__ import annotations

import math
from typing import Any


def binomial_se(correct: int, n: int) -> float | None:
    if n <= 0:
        return None
    p = correct / n
    return math.sqrt(p * (1 - p) / n)


def delta(current: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """current - baseline accuracy, the SE of the difference, and `noise` when |delta| < 2·SE."""
    se_a, se_b = current.get("se") or 0.0, baseline.get("se") or 0.0
    diff = current["accuracy"] - baseline["accuracy"]
    se = math.sqrt(se_a ** 2 + se_b ** 2)
    return {"delta": round(diff, 4), "se": round(se, 4), "noise": abs(diff) < 2 * se,
            "baseline": baseline["accuracy"], "baseline_n": baseline.get("n")}
