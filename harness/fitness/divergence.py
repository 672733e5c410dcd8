"""Divergence of two next-token distributions known only by their top-k (log)probabilities.

Servers return the k most likely tokens, not the whole vocabulary, so both distributions are
completed the same way before comparing: over the union U of both top-k lists, a token that
is missing from one side's list gets that side's tail estimate — no more than its own k-th
probability (it was not in its top-k) and no more than an equal share of its leftover mass —
and whatever mass is left goes to one "rest of the vocabulary" bucket. Every probability is
floored at EPS and renormalised. The result is an estimate of the full-vocabulary figure that
is exact when both lists hold (nearly) all the mass; it reads low, never high, when two
tails differ in detail the top-k cannot see.

All figures are in nats: KL(P‖Q), the symmetric KL ½(KL(P‖Q) + KL(Q‖P)), the Jensen-Shannon
divergence (bounded by ln 2), and whether the two most likely tokens agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

EPS = 1e-10
REST = object()  # the bucket of every token outside U


@dataclass(frozen=True)
class Compared:
    kl_pq: float  # KL(reference ‖ candidate): llama.cpp's own direction (base ‖ quant)
    kl_qp: float
    sym_kl: float
    js: float
    top1_agree: bool


def _complete(top: dict, union: list) -> np.ndarray:
    probs = {t: math.exp(lp) for t, lp in top.items()}
    missing = [t for t in union if t not in probs]
    rest = max(0.0, 1.0 - sum(probs.values()))
    share = min(min(probs.values()), rest / (len(missing) + 1)) if missing and probs else 0.0
    vec = [probs.get(t, share) for t in union] + [max(rest - share * len(missing), 0.0)]
    arr = np.maximum(np.asarray(vec, dtype=np.float64), EPS)
    return arr / arr.sum()


def _kl(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.sum(p * np.log(p / q)))


def compare(reference: dict, candidate: dict) -> Compared:
    """Two top-k maps {token: logprob} of the same position."""
    if not reference or not candidate:
        raise ValueError("an empty top-k list")
    union = list(dict.fromkeys([*reference, *candidate]))
    p, q = _complete(reference, union), _complete(candidate, union)
    m = (p + q) / 2
    pq, qp = _kl(p, q), _kl(q, p)
    top_p = max(reference, key=reference.get)
    top_q = max(candidate, key=candidate.get)
    return Compared(pq, qp, (pq + qp) / 2, (_kl(p, m) + _kl(q, m)) / 2, top_p == top_q)


def summarise(rows: list[Compared]) -> dict[str, float | int | None]:
    """Means with their standard error, median, p99 and max over positions (numpy, type 7)."""
    if not rows:
        return {"positions": 0}
    sym = np.array([r.sym_kl for r in rows])
    js = np.array([r.js for r in rows])
    pq = np.array([r.kl_pq for r in rows])
    agree = sum(r.top1_agree for r in rows)
    n = len(rows)

    def se(a: np.ndarray) -> float | None:
        return float(a.std(ddof=1) / math.sqrt(n)) if n > 1 else None

    top1 = agree / n
    return {"positions": n,
            "sym_kl_mean": float(sym.mean()), "sym_kl_se": se(sym), "sym_kl_median": float(np.percentile(sym, 50)),
            "sym_kl_p99": float(np.percentile(sym, 99)), "sym_kl_max": float(sym.max()),
            "kl_ref_cand_mean": float(pq.mean()), "kl_ref_cand_se": se(pq),
            "js_mean": float(js.mean()), "js_se": se(js),
            "top1_agreement": top1, "top1_se": math.sqrt(top1 * (1 - top1) / n)}
