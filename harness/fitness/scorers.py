"""Scorers of the capability suites, each checkable on known answers without a model:
HumanEval programs (prompt + completion + the problem's own tests, run sandboxed) and
GSM8K final numbers."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal, InvalidOperation
from typing import Any

from harness.fitness.sandbox_exec import Outcome, run_python

_FENCE = re.compile(r"```(?:python|py|Python)?[ \t]*\n(.*?)```", re.S)


# ---------------------------------------------------------------- HumanEval

def extract_code(answer: str) -> str:
    """The first fenced code block of a chat answer (an unterminated one to its end), else the answer."""
    m = _FENCE.search(answer)
    if m:
        return m.group(1)
    open_fence = re.search(r"```(?:python|py|Python)?[ \t]*\n(.*)", answer, re.S)
    return open_fence.group(1) if open_fence else answer


def program(problem: dict[str, Any], completion: str) -> str:
    """prompt + completion (a body, or a whole function that redefines the prompt's) + tests + check()."""
    entry = problem["entry_point"]
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", completion, re.M):
        body = problem["prompt"] + "\n    pass\n\n" + completion  # the prompt's imports and helpers, then the answer
    else:
        body = problem["prompt"] + completion
    return f"{body}\n\n{problem['test']}\n\ncheck({entry})\n"


def run_humaneval(problems: list[dict[str, Any]], completions: list[str], *, timeout_s: float, workers: int,
                  confined: bool = True) -> list[Outcome]:
    """Each problem's program with its completion, executed in the sandbox; order kept."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda pc: run_python(program(*pc), timeout_s, confined=confined),
                             zip(problems, completions)))


# ---------------------------------------------------------------- GSM8K

_NUMBER = r"-?\$?\s?\d[\d,]*(?:\.\d+)?"


def final_number(text: str) -> str | None:
    """The answer's final number: after '####', else after 'answer is', else the last number."""
    for pattern in (rf"####\s*({_NUMBER})", rf"answer is[:\s]*\**\s*({_NUMBER})", rf"\\boxed\{{\s*({_NUMBER})"):
        found = re.findall(pattern, text, re.I)
        if found:
            return _clean(found[-1])
    found = re.findall(_NUMBER, text)
    return _clean(found[-1]) if found else None


def _clean(number: str) -> str:
    return number.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")


def gsm8k_correct(answer: str, expected: str) -> bool:
    got = final_number(answer)
    if got is None:
        return False
    try:
        return Decimal(got) == Decimal(_clean(expected))
    except InvalidOperation:
        return False
