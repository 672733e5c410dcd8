"""Results over time: one JSON line per run appended to the pipeline log (the seed's
`pipeline.log`), regressions against the previous run of the same model, and the
cross-judge's schedule (the first run of a model, then every n-th).

A regression: a metric worse than in the latest earlier run of the same model that measured
it, by more than `regression_se` (2) standard errors of the difference where both runs give
an SE (accuracies: binomial; KL: over positions); metrics without an SE (timings, counts)
are flagged as drift when worse by more than `drift` (10 %) of the earlier value — labelled
as such, since one timing has no error bar.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from harness.fitness.config import HistoryCfg
from harness.fitness.metrics import lookup

MAX_LINE = 1 << 20  # a line longer than this is not one of ours


def log_path(root: Path, cfg: HistoryCfg) -> Path:
    return Path(cfg.log) if cfg.log else Path(root) / "bench-results" / "fitness" / "pipeline.log"


def read(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The runs in the log, oldest first, and how many lines were not runs (kept, never fatal)."""
    runs, bad = [], 0
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line) if len(line) < MAX_LINE else None
        except ValueError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("run_id"), str) and isinstance(row.get("metrics"), dict):
            runs.append(row)
        else:
            bad += 1
    return runs, bad


def append(path: Path, line: dict[str, Any]) -> None:
    """One line, written whole with a single O_APPEND write (two runs never interleave)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _binomial(p: float | None, n: int | None) -> float | None:
    if p is None or not n or not 0 <= p <= 1:
        return None
    return math.sqrt(p * (1 - p) / n)


def errors_of(doc: dict[str, Any]) -> dict[str, float]:
    """The standard error of each metric of a run where one is known."""
    se: dict[str, float] = {}
    phases = {p["name"]: p for p in doc.get("phases", []) if p.get("repeat", 1) == 1 and p.get("status") == "ran"}
    m = doc.get("metrics", {})
    for suite, v in (phases.get("capability", {}).get("details", {}).get("suites") or {}).items():
        if v.get("se") is not None:
            se[f"capability.{suite}_accuracy"] = v["se"]
    thinking = phases.get("capability", {}).get("details", {}).get("thinking") or {}
    if thinking.get("se") is not None:  # the thinking lane: binomial too
        se["capability.humaneval_thinking_accuracy"] = thinking["se"]
    lme = (phases.get("capability", {}).get("details", {}).get("lmeval") or {}).get("suites") or {}
    for suite, v in lme.items():  # lm-eval's lane (capability.lmeval): binomial too
        if v.get("se") is not None:
            se[f"capability.lmeval_{suite}_accuracy"] = v["se"]
    tu = phases.get("tooluse", {}).get("details", {})
    asks = len(tu.get("asks") or [])
    for key in ("tooluse.wellformed_rate", "tooluse.expected_tool_rate", "tooluse.stream_agreement_rate"):
        if asks and (s := _binomial(m.get(key), asks)) is not None:
            se[key] = s
    if (tu.get("bfcl") or {}).get("se") is not None:
        se["tooluse.bfcl_accuracy"] = tu["bfcl"]["se"]
    ju = phases.get("judge", {}).get("details", {})
    checks = sum(len(i.get("verdicts") or []) for i in ju.get("items") or [])
    if checks and (s := _binomial(m.get("judge.checklist_rate"), checks)) is not None:
        se["judge.checklist_rate"] = s
    kl = (phases.get("kl", {}).get("details", {}).get("summary")) or {}
    for key, src in (("kl.sym_kl_mean", "sym_kl_se"), ("kl.js_mean", "js_se"), ("kl.top1_agreement", "top1_se")):
        if kl.get(src) is not None:
            se[key] = kl[src]
    return {k: round(v, 6) for k, v in se.items()}


def line_of(doc: dict[str, Any], report_dir: Path | None) -> dict[str, Any]:
    """The run's summary line."""
    phases = [p for p in doc.get("phases", []) if p.get("repeat", 1) == 1]
    judge = next((p for p in phases if p["name"] == "judge"), {})
    cross = ((judge.get("details") or {}).get("cross") or {}).get("status")
    return {"run_id": doc["run_id"], "finished_utc": doc.get("finished_utc"), "tag": doc.get("tag"),
            "model": doc.get("model") or doc.get("target"), "target": doc.get("target"),
            "verdict": doc.get("verdict"), "exit_code": doc.get("exit_code"),
            "report_dir": str(report_dir) if report_dir else None,
            "metrics": {k: v for k, v in (doc.get("metrics") or {}).items() if v is not None},
            "se": errors_of(doc), "phases": {p["name"]: p["status"] for p in phases},
            "retries": sum((p.get("requests") or {}).get("retries", 0) for p in doc.get("phases", [])),
            "errors": len(doc.get("errors") or []), "cross_judge": cross}


def same_model(runs: list[dict[str, Any]], model: str | None) -> list[dict[str, Any]]:
    return [r for r in runs if r.get("model") == model]


def regressions(earlier: list[dict[str, Any]], line: dict[str, Any], cfg: HistoryCfg) -> list[dict[str, Any]]:
    """Each metric of `line` worse than in the latest earlier run (same model) that measured it."""
    flagged = []
    for key, value in sorted(line["metrics"].items()):
        metric = lookup(key)
        if metric is None or not isinstance(value, (int, float)):
            continue
        prev = next((r for r in reversed(earlier) if isinstance(r["metrics"].get(key), (int, float))), None)
        if prev is None:
            continue
        then = prev["metrics"][key]
        worse = (then - value) if metric.better == "higher" else (value - then)
        if worse <= 0:
            continue
        se_now, se_then = line["se"].get(key), (prev.get("se") or {}).get(key)
        if se_now is not None and se_then is not None:
            se = math.sqrt(se_now ** 2 + se_then ** 2)
            if worse > cfg.regression_se * se:
                flagged.append({"metric": key, "value": value, "previous": then, "previous_run": prev["run_id"],
                                "kind": "regression", "why": f"worse by {worse:.4g} > {cfg.regression_se:g}·SE "
                                                              f"({cfg.regression_se * se:.4g})"})
        elif abs(then) > 0 and worse / abs(then) > cfg.drift or then == 0:
            flagged.append({"metric": key, "value": value, "previous": then, "previous_run": prev["run_id"],
                            "kind": "drift", "why": f"worse by {worse:.4g} ({(worse / abs(then)) if then else 1:.0%}"
                                                    f" > {cfg.drift:.0%}; no SE for this metric)"})
    return flagged


def cross_due(earlier: list[dict[str, Any]], every_n: int) -> tuple[bool, str]:
    """The seed's schedule: the first run of this model, then every n-th (`earlier`: the logged runs
    of the model whose judge phase ran)."""
    index = len(earlier)
    if every_n <= 1:
        return True, "every run (judge.cross.every_n_runs: 1)"
    if index % every_n == 0:
        return True, f"judged run {index + 1} of this model: the first, then every {every_n}"
    return False, (f"not due: judged run {index + 1} of this model; the cross-judge runs on the first and then every "
                   f"{every_n} judged runs (judge.cross.every_n_runs), next on run {index + every_n - index % every_n + 1}")
