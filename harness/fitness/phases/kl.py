"""`kl` (optional): the quant check. The served model (the candidate, e.g. a Q4) and a
reference of the same weights (`kl.reference`: another quantization behind its own URL, or
another model behind the same gateway) are teacher-forced on frozen prompts
(`kl_prompts.jsonl`): at every position both give the top-k (20) logprobs of the next token
through their native API (harness/fitness/logprobs.py), and harness/fitness/divergence.py
compares them: symmetric KL, Jensen-Shannon, top-1 agreement, in nats, with SEs.

Refused by name, before any position is asked, when the two do not share a tokenizer: the
same ids for every frozen prompt (and a probe of odd text), and on llama.cpp the same
vocabulary size and type. Different tokenizers make position-wise distributions meaningless.

The first `kl.skip_first` (4) positions of each prompt are not compared: with one or two tokens
of context (and no BOS token, as in Qwen) the next-token distribution is a degenerate guess
that swings with any rounding — measured here, Q4_K_M vs a Q8_0 of the very same weights read
a symmetric KL above 1 nat at position 1 and ~0.001 from position 2 on. llama.cpp's own
`llama-perplexity --kl-divergence` likewise scores only positions with context behind them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from harness.errors import UserError
from harness.fitness import divergence
from harness.fitness.config import FitnessConfig
from harness.fitness.data import read_jsonl
from harness.fitness.endpoint import PhaseError
from harness.fitness.logprobs import Native, detect
from harness.fitness.phases import Ctx, Skip

PROMPTS = Path(__file__).resolve().parent.parent / "kl_prompts.jsonl"
# Odd text on which two different tokenizers rarely agree: accents, CJK, emoji, code, numbers.
PROBE = "naïve café — 東京 🚀 x≠y; for(i=0;i<10;i++){} 3.14159 0xDEADBEEF\t\n  "


def prompts_path(cfg: FitnessConfig) -> Path:
    return cfg.kl.prompts or PROMPTS


def load_prompts(cfg: FitnessConfig) -> list[dict[str, str]]:
    rows = read_jsonl(prompts_path(cfg), field="kl.prompts", what="prompt",
                      file_fix="point kl.prompts at a JSONL file of {id, text}, or drop it",
                      line_fix='each line: {"id": "...", "text": "..."}',
                      valid=lambda row: isinstance(row, dict) and isinstance(row.get("id"), str)
                      and isinstance(row.get("text"), str) and row["text"].strip())
    return rows[:cfg.kl.limit] if cfg.kl.limit else rows


def check_offline(cfg: FitnessConfig) -> str:
    k = cfg.kl
    if not k.configured():
        return "no reference configured (kl.reference.url): the phase will be skipped"
    if not k.reference.url.startswith(("http://", "https://")):
        raise UserError(f"'{k.reference.url}' is not an http(s) URL", field="kl.reference.url",
                        fix="set kl.reference.url to the reference server's base URL, e.g. http://127.0.0.1:8001")
    if k.reference.key_env and not os.environ.get(k.reference.key_env):
        raise UserError(f"${k.reference.key_env} is not set", field="kl.reference.key_env",
                        fix=f"export {k.reference.key_env}=<the reference's key>, or drop key_env")
    return (f"reference {k.reference.model or '(its first model)'} at {k.reference.url}; "
            f"{len(load_prompts(cfg))} prompts ({prompts_path(cfg)}), top-{k.top_k}, ≤ {k.positions} positions each")


def _native(ctx: Ctx, url: str, model: str | None, key: str | None) -> Native:
    api = ctx.cfg.kl.api if ctx.cfg.kl.api != "auto" else detect(url, key)
    if api is None:
        raise PhaseError(f"{url} is neither llama.cpp (/props with build_info) nor vLLM (/version): set kl.api")
    ep = ctx.endpoint
    return Native(url, model, api, key, min(ctx.cfg.request_timeout_s, 300.0), ep.retry, ep.tally, ep.sleep)


def same_tokenizer(a: Native, b: Native, texts: list[str]) -> tuple[list[list[int]], dict[str, Any]]:
    """The prompts' token ids, after checking both sides tokenize identically; PhaseError naming the
    difference otherwise."""
    va, vb = a.vocabulary(), b.vocabulary()
    for key in ("n_vocab", "vocab_type"):
        if key in va and key in vb and va[key] != vb[key]:
            raise PhaseError(f"refused: different tokenizers — {key} {va[key]} ({a.model} at {a.base_url}) vs "
                             f"{vb[key]} ({b.model} at {b.base_url}); the KL check compares two quantizations of "
                             "one model, same tokenizer only")
    ids = []
    for n, text in enumerate([*texts, PROBE]):
        ta, tb = a.tokenize(text), b.tokenize(text)
        if ta != tb:
            first = next((i for i, (x, y) in enumerate(zip(ta, tb)) if x != y), min(len(ta), len(tb)))
            what = "the probe text" if n == len(texts) else f"prompt {n + 1}"
            raise PhaseError(f"refused: different tokenizers — {what} tokenizes differently from token {first} "
                             f"({len(ta)} vs {len(tb)} tokens; {a.model} vs {b.model}); the KL check compares two "
                             "quantizations of one model, same tokenizer only")
        ids.append(ta)
    return ids[:-1], {**va, "probe_tokens": len(ids[-1])}


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    k = ctx.cfg.kl
    if not k.configured():
        raise Skip("no reference configured (set kl.reference.url, and kl.reference.model behind a gateway)")
    prompts = load_prompts(ctx.cfg)
    ep = ctx.endpoint
    ref_key = os.environ.get(k.reference.key_env) if k.reference.key_env else None
    ref_url = k.reference.url.rstrip("/").removesuffix("/v1")
    cand = _native(ctx, ep.base_url, ep.model, ep.api_key)
    ref = _native(ctx, ref_url, k.reference.model or ep.model, ref_key)
    if (ref.base_url, ref.model) == (cand.base_url, cand.model):
        raise PhaseError("the reference is the served model itself (same URL and model): set kl.reference.model "
                         "or kl.reference.url to the other quantization")
    ids, vocab = same_tokenizer(ref, cand, [p["text"] for p in prompts])
    rows: list[divergence.Compared] = []
    per_prompt = []
    for prompt, tokens in zip(prompts, ids):
        if ctx.cancelled():
            break
        first = k.skip_first + 1
        last = min(k.skip_first + k.positions, len(tokens) - 1)
        if last < first:
            continue
        dists_ref = ref.next_tokens(tokens, first, last, k.top_k)
        dists_cand = cand.next_tokens(tokens, first, last, k.top_k)
        got = [divergence.compare(r, c) for r, c in zip(dists_ref, dists_cand)]
        rows += got
        s = divergence.summarise(got)
        per_prompt.append({"id": prompt["id"], "positions": s["positions"], "sym_kl_mean": _r(s["sym_kl_mean"]),
                           "js_mean": _r(s["js_mean"]), "top1_agreement": _r(s["top1_agreement"])})
    total = divergence.summarise(rows)
    if not rows:
        raise PhaseError("no position was compared (every prompt is a single token, or the run was cancelled)")
    metrics = {"kl.sym_kl_mean": _r(total["sym_kl_mean"]), "kl.sym_kl_p99": _r(total["sym_kl_p99"]),
               "kl.js_mean": _r(total["js_mean"]), "kl.top1_agreement": _r(total["top1_agreement"])}
    return metrics, {"reference": {"url": ref.base_url, "model": ref.model, "api": ref.api},
                     "candidate": {"url": cand.base_url, "model": cand.model, "api": cand.api},
                     "tokenizer": vocab, "top_k": k.top_k, "skip_first": k.skip_first, "summary": {key: _r(v) for key, v in total.items()},
                     "per_prompt": per_prompt, "prompts": {"path": str(prompts_path(ctx.cfg)), "n": len(prompts)},
                     "units": "nats; sym_kl = ½(KL(ref‖cand) + KL(cand‖ref)); top-k tails estimated "
                              "(harness/fitness/divergence.py)"}


def _r(x: Any, digits: int = 6) -> Any:
    return round(x, digits) if isinstance(x, float) else x
