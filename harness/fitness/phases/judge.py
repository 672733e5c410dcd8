"""`judge` (advisory, optional): open-ended answers graded by an LLM judge against binary
checklists, and a cross-judge agreement check. Judge metrics never gate the exit code.

Runs only with a judge configured (`judge.url`, `judge.model`, `judge.key_env` — the NAME of
the variable holding the key, read at the moment of each request, never written anywhere).

1. the served model answers each task (`judge_tasks.jsonl`: a prompt and 3-4 binary checks);
2. the judge grades each answer: one true/false per check, as a JSON object;
3. with `judge.cross` set, a second judge (another model family) grades the same answers;
   agreement = checks on which both judges agree / checks both graded. Below
   `judge.agreement_min` (75 %): a loud warning (stderr, results.json, report.md), and the
   divergent items listed with both judges' notes — do not trust the judge numbers.

Checkpointed per item under `<report>/judge/` (answers.jsonl, verdicts-judge.jsonl,
verdicts-cross.jsonl): running again with the same `--report-dir` reuses every answer and
verdict already paid for (keyed by task, model, seed, prompt, answer hash and judge model) and asks
only for the rest. A judge that fails (after 429s honoured per Retry-After, clamped) leaves
the phase skipped with the reason and what was kept: never a change of the exit code.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from harness.errors import UserError
from harness.fitness.config import FitnessConfig, JudgeCfg, JudgeEndpointCfg
from harness.fitness.data import read_jsonl
from harness.fitness.phases import Ctx, Skip
from harness.wire.retry import RETRIED, Busy, Retrier, busy
from harness.wire.tls import tls

TASKS = Path(__file__).resolve().parent.parent / "judge_tasks.jsonl"
BODY_QUOTE = 400
MARK = "[llms-benchmark judge] task"
SYSTEM = ("You are a strict, fair grader. You receive a task, an answer to it, and a numbered checklist. "
          "For each checklist item decide whether the answer satisfies it. Reply with one JSON object only: "
          '{"verdicts": [true or false, one per checklist item, in order], "notes": "one short sentence"}')


class JudgeError(Exception):
    """The judge could not be asked or did not answer (the message quotes its body)."""


# ----------------------------------------------------------------------------------- config, data
def tasks_path(cfg: FitnessConfig) -> Path:
    return cfg.judge.tasks or TASKS


def load_tasks(cfg: FitnessConfig) -> list[dict[str, Any]]:
    tasks = read_jsonl(tasks_path(cfg), field="judge.tasks", what="task",
                       file_fix="point judge.tasks at a JSONL file of {id, prompt, checklist}, or drop it",
                       line_fix='each line: {"id": "...", "prompt": "...", "checklist": ["...", ...]}',
                       valid=lambda task: isinstance(task, dict) and isinstance(task.get("id"), str)
                       and isinstance(task.get("prompt"), str) and isinstance(task.get("checklist"), list)
                       and task["checklist"] and all(isinstance(c, str) for c in task["checklist"]))
    return tasks[:cfg.judge.limit] if cfg.judge.limit else tasks


def check_offline(cfg: FitnessConfig) -> str:
    j = cfg.judge
    if not j.configured():
        return "no judge configured (judge.url, judge.model, judge.key_env): the phase will be skipped"
    for name, ep in (("judge", j), ("judge.cross", j.cross)):
        if name == "judge.cross" and not any((ep.url, ep.model, ep.key_env)):
            continue
        if not ep.configured():
            raise UserError("a judge needs url, model and key_env together", field=name,
                            fix=f"set {name}.url, {name}.model and {name}.key_env (or none of them)")
        if not ep.url.startswith(("http://", "https://")):
            raise UserError(f"'{ep.url}' is not an http(s) URL", field=f"{name}.url",
                            fix=f"set {name}.url to the judge's base URL, e.g. https://api.openai.com/v1")
        if not os.environ.get(ep.key_env):
            raise UserError(f"${ep.key_env} is not set", field=f"{name}.key_env",
                            fix=f"export {ep.key_env}=<the judge's key> (the config names the variable, never the key)")
    tasks = load_tasks(cfg)
    cross = f"; cross-judge {j.cross.model}" if j.cross.configured() else "; no cross-judge"
    return f"judge {j.model} (key in ${j.key_env}){cross}; {len(tasks)} tasks ({tasks_path(cfg)})"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ----------------------------------------------------------------------------------- the judge's wire
def ask_judge(ep: JudgeEndpointCfg, cfg: JudgeCfg, messages: list[dict[str, str]], *,
              sleep: Callable[[float], None] = time.sleep) -> str:
    """One chat completion from a judge: its text. 429 and 5xx are retried (Retry-After honoured,
    clamped), at most `cfg.attempts` tries; the key is read now and never quoted back."""
    key = os.environ.get(ep.key_env or "") or ""
    if not key:
        raise JudgeError(f"${ep.key_env} is not set")
    url = ep.url.rstrip("/").removesuffix("/v1") + "/v1/chat/completions"
    body = {"model": ep.model, "messages": messages, "temperature": 0, "max_tokens": cfg.judge_max_tokens}
    retrier = Retrier(cfg, sleep, transient=lambda exc: "connect" if isinstance(exc, httpx.HTTPError) else None)
    try:
        for attempt in retrier:
            with attempt:
                resp = busy(httpx.post(url, json=body, headers={"Authorization": f"Bearer {key}"},
                                       timeout=cfg.timeout_s, verify=tls()), RETRIED)
    except Busy as exc:
        resp = exc.response
    except httpx.HTTPError as exc:
        raise JudgeError(f"{ep.model} at {ep.url}: {type(exc).__name__}: {exc} (after {retrier.attempt} attempt(s))") \
            from None
    if resp.status_code == 200:
        try:
            msg = resp.json()["choices"][0]["message"]
            return (msg.get("content") or "") or (msg.get("reasoning_content") or "")
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError(f"not a chat completion: {_quote(resp.text, key)}") from None
    # 401, 404, a bad model name: retrying will not change it
    raise JudgeError(f"{ep.model} at {ep.url}: HTTP {resp.status_code}: {_quote(resp.text, key)} "
                     f"(after {retrier.attempt} attempt(s))")


def _quote(text: str, key: str) -> str:
    return text[:BODY_QUOTE].replace(key, "***") if key else text[:BODY_QUOTE]


def judge_prompt(task: dict[str, Any], answer: str) -> list[dict[str, str]]:
    checks = "\n".join(f"{n}. {c}" for n, c in enumerate(task["checklist"], 1))
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"{MARK} {task['id']}\n\n## Task\n{task['prompt']}\n\n## Answer\n{answer}\n\n"
                                        f"## Checklist\n{checks}\n\nReply with the JSON object only."}]


def parse_verdicts(text: str, n: int) -> tuple[list[bool] | None, str]:
    """The judge's booleans (exactly n) and notes; (None, why) when the reply is not that."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    for m in re.finditer(r"\{", text):
        try:
            doc, _ = json.JSONDecoder().raw_decode(text[m.start():])
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("verdicts"), list):
            v = doc["verdicts"]
            if len(v) == n and all(isinstance(x, bool) for x in v):
                return v, str(doc.get("notes") or "")[:300]
            return None, f"{len(v)} verdicts for {n} checks, or not all true/false"
    return None, f"no JSON object with 'verdicts' in the reply: {text[:160]!r}"


# ----------------------------------------------------------------------------------- checkpoints
class Checkpoint:
    """One JSONL file of finished items, keyed; appended (and flushed) after each item."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: dict[str, dict[str, Any]] = {}
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    self.done[row["key"]] = row
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by a crash: that item is asked again
        self.reused = 0

    def get(self, key: str) -> dict[str, Any] | None:
        row = self.done.get(key)
        if row is not None:
            self.reused += 1
        return row

    def put(self, row: dict[str, Any]) -> None:
        self.done[row["key"]] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())


def grade_all(role: str, ep: JudgeEndpointCfg, ctx: Ctx, tasks: list[dict[str, Any]],
              answers: dict[str, dict[str, Any]], folder: Path) -> tuple[dict[str, dict[str, Any]], str | None, int]:
    """Each answer graded by one judge, checkpointed; (verdict rows by task, the error that
    stopped it if any, how many came from the checkpoint)."""
    cfg = ctx.cfg.judge
    ck = Checkpoint(folder / f"verdicts-{role}.jsonl")
    rows: dict[str, dict[str, Any]] = {}
    asked = 0
    for task in tasks:
        if ctx.cancelled():
            return rows, "cancelled", ck.reused
        answer = answers[task["id"]]
        key = sha(json.dumps([task["id"], task["checklist"], answer["answer_sha256"], ep.model]))
        row = ck.get(key)
        if row is None:
            if asked and cfg.request_delay_s:
                time.sleep(cfg.request_delay_s)
            asked += 1
            try:
                reply = ask_judge(ep, cfg, judge_prompt(task, answer["answer"]))
            except JudgeError as exc:
                return rows, str(exc), ck.reused
            verdicts, notes = parse_verdicts(reply, len(task["checklist"]))
            row = {"key": key, "task": task["id"], "judge": ep.model, "verdicts": verdicts, "notes": notes,
                   "reply": reply[:1000]}
            ck.put(row)
        rows[task["id"]] = row
    return rows, None, ck.reused


# ----------------------------------------------------------------------------------- the phase
def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    j = ctx.cfg.judge
    if not j.configured():
        raise Skip("no judge endpoint configured (set judge.url, judge.model and judge.key_env)")
    tasks = load_tasks(ctx.cfg)
    folder = ctx.out_dir / "judge"
    folder.mkdir(parents=True, exist_ok=True)
    # pass 1: the served model's answers (checkpointed: a rerun reuses them)
    ck = Checkpoint(folder / "answers.jsonl")
    answers: dict[str, dict[str, Any]] = {}
    for task in tasks:
        if ctx.cancelled():
            raise Skip("cancelled")
        key = sha(json.dumps([task["id"], task["prompt"], ctx.endpoint.model, ctx.cfg.seed, j.answer_max_tokens]))
        row = ck.get(key)
        if row is None:
            got = ctx.endpoint.chat([{"role": "user", "content": task["prompt"]}], temperature=0,
                                    max_tokens=j.answer_max_tokens, seed=ctx.cfg.seed)
            text = got.content or ""
            row = {"key": key, "task": task["id"], "model": ctx.endpoint.model, "answer": text,
                   "answer_sha256": sha(text)}
            ck.put(row)
        answers[task["id"]] = row
    reused = {"answers": ck.reused}
    # pass 2: the judge (and the cross-judge), each item checkpointed
    primary, error, reused["judge"] = grade_all("judge", j, ctx, tasks, answers, folder)
    details: dict[str, Any] = {"tasks": len(tasks), "judge": j.model, "folder": str(folder), "reused": reused,
                               "manifest": {"path": str(tasks_path(ctx.cfg)),
                                            "sha256": hashlib.sha256(tasks_path(ctx.cfg).read_bytes()).hexdigest(),
                                            "items": len(tasks)},
                               "warnings": []}
    if error:
        raise Skip(f"the judge failed after {len(primary)} of {len(tasks)} items: {error}; what was graded is kept "
                   f"in {folder} — run again with the same --report-dir to resume")
    graded = [r for r in primary.values() if r["verdicts"] is not None]
    checks = [v for r in graded for v in r["verdicts"]]
    metrics: dict[str, float | None] = {"judge.checklist_rate": round(sum(checks) / len(checks), 4) if checks else None,
                                        "judge.cross_agreement": None}
    details["items"] = [{"task": t["id"], "checklist": t["checklist"], "verdicts": primary[t["id"]]["verdicts"],
                         "notes": primary[t["id"]]["notes"]} for t in tasks]
    details["unparsed"] = [r["task"] for r in primary.values() if r["verdicts"] is None]
    # the seed's schedule (decided from the history by the runner); a started cross pass is always resumed
    resuming = (folder / "verdicts-cross.jsonl").is_file()
    if j.cross.configured() and not (ctx.cross_due or resuming):
        details["cross"] = {"status": "not due", "reason": ctx.cross_why}
    elif j.cross.configured():
        cross, cerror, reused["cross"] = grade_all("cross", j.cross, ctx, tasks, answers, folder)
        if cerror:
            details["cross"] = {"status": "failed", "reason": f"{cerror}; run again with the same --report-dir "
                                                              "to resume"}
            details["warnings"].append(f"cross-judge {j.cross.model} failed: {cerror}: judge numbers unchecked")
        else:
            details["cross"] = agreement(tasks, primary, cross, j)
            metrics["judge.cross_agreement"] = details["cross"]["agreement"]
            if details["cross"]["agreement"] is None or details["cross"]["agreement"] < j.agreement_min:
                details["warnings"].append(
                    f"JUDGE NOT TRUSTED: cross-judge agreement {_pct(details['cross']['agreement'])} is below "
                    f"{j.agreement_min:.0%} ({j.model} vs {j.cross.model}); do not trust judge-layer numbers until "
                    f"the judges are reconciled ({len(details['cross']['divergent'])} divergent checks listed in the report)")
    else:
        details["cross"] = {"status": "off", "reason": "no cross-judge configured (judge.cross)"}
    for w in details["warnings"]:
        ctx.say(f"WARNING: {w}")
    return metrics, details


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0%}"


def agreement(tasks: list[dict[str, Any]], a: dict[str, dict], b: dict[str, dict], j: JudgeCfg) -> dict[str, Any]:
    same = total = 0
    divergent = []
    for t in tasks:
        va, vb = a[t["id"]]["verdicts"], b[t["id"]]["verdicts"]
        if va is None or vb is None:
            continue
        for n, (x, y) in enumerate(zip(va, vb)):
            total += 1
            same += x == y
            if x != y:
                divergent.append({"task": t["id"], "check": t["checklist"][n], j.model or "judge": x,
                                  (j.cross.model or "cross") + " (cross)": y,
                                  "notes": {"judge": a[t["id"]]["notes"], "cross": b[t["id"]]["notes"]}})
    rate = round(same / total, 4) if total else None
    return {"status": "ran", "judge": j.cross.model, "agreement": rate, "checks_compared": total,
            "trusted": rate is not None and rate >= j.agreement_min, "min": j.agreement_min, "divergent": divergent}
