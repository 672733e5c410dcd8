"""The report folder: `results.json` (everything, the source of truth), `summary.json`
(the compact webhook/API shape) and `report.md` (for people), all from one document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.atomic import write_atomic
from harness.markdown_table import row, rule, table
from harness.fitness import host_checks


def _kl_summary(phases: dict[str, Any]) -> dict[str, Any] | None:
    kl = phases.get("kl", {})
    if kl.get("status") != "ran":
        return None
    d = kl["details"]
    s = d["summary"]
    return {"reference": d["reference"]["model"], "candidate": d["candidate"]["model"], "positions": s["positions"],
            "top_k": d["top_k"], "sym_kl_mean": s["sym_kl_mean"], "sym_kl_se": s["sym_kl_se"],
            "sym_kl_p99": s["sym_kl_p99"], "js_mean": s["js_mean"], "top1_agreement": s["top1_agreement"],
            "kl_ref_cand_mean": s["kl_ref_cand_mean"], "units": "nats"}


def seed_verdict(doc: dict[str, Any]) -> str | None:
    """The seed's verdict_per_model value, always in its set PASS|FAIL|null: null when the run
    completed with no bar active or could not judge (ERROR: its errors are beside it, in `errors`,
    and ours in `verdict`); WARN (no fail bar crossed) is a PASS, `verdict` saying WARN."""
    verdict = doc.get("verdict")
    if verdict == "ERROR" or (doc.get("exit_code") == 0 and not doc.get("gating_bars")):
        return None
    return {"PASS": "PASS", "WARN": "PASS", "FAIL": "FAIL"}.get(verdict)


def summary(doc: dict[str, Any], report_dir: Path | None = None) -> dict[str, Any]:
    """The compact JSON a webhook receives and `GET /api/runs/<id>/report` returns: every field
    the seed's schema names, with ours beside them where ours say more."""
    phases = {p["name"]: p for p in doc.get("phases", []) if p.get("repeat", 1) == 1}
    tp = phases.get("throughput", {}).get("details", {}).get("by_context", {})
    cap = phases.get("capacity", {})
    capd = cap.get("details", {})
    caps = phases.get("capability", {}).get("details", {}).get("suites", {})
    metrics = doc.get("metrics", {})
    model = doc.get("model") or doc.get("target")
    ran = {s: v for s, v in caps.items() if v.get("status") == "ran"}
    lme_doc = phases.get("capability", {}).get("details", {}).get("lmeval") or {}
    lme, lme_version = lme_doc.get("suites") or {}, (lme_doc.get("versions") or {}).get("lm_eval", "?")
    row = {
        "model": model,
        "throughput_by_ctx": {k: {"gen_tps": v.get("decode_tps"), "prefill_tps": v.get("prefill_tps"),
                                  "ttft_any_s": v.get("ttft_s"), "vram_peak_gib": v.get("vram_peak_gib")}
                              for k, v in tp.items()},
        "capacity": {"peak_aggregate_tps": metrics.get("capacity.peak_output_tps"), "best_n": capd.get("best_n"),
                     "carried_n": metrics.get("capacity.carried_concurrency"),
                     "levels": [{k: lv[k] for k in ("n", "aggregate_tps", "ttft_ms_p95", "itl_ms_p95")}
                                for lv in capd.get("levels", [])]} if cap.get("status") == "ran" else None,
        # the seed's name for the capability accuracies: lm-eval's own where its lane ran
        # (capability.lmeval), this harness's scorers' for the rest (`lmeval_scored_by` says which)
        "lmeval": {s: v.get("accuracy") for s, v in ran.items()} | {s: v.get("accuracy") for s, v in lme.items()},
        "lmeval_scored_by": {s: "harness" for s in ran} | {s: f"lm-eval {lme_version}" for s in lme},
        "tooluse": {k.split(".", 1)[1]: v for k, v in metrics.items() if k.startswith("tooluse.")},
        "capability": {s: {"accuracy": v.get("accuracy"), "se": v.get("se"), "n": v.get("n")} for s, v in ran.items()},
        "warmup_s": metrics.get("warmup.first_answer_s"),
        "judge_checklist_rate": metrics.get("judge.checklist_rate"),  # advisory
        "judge_cross_agreement": metrics.get("judge.cross_agreement"),
    }
    fails = [v["metric"] for v in doc.get("verdicts", []) if v["verdict"] == "FAIL" and v["gates"]]
    warns = [v["metric"] for v in doc.get("verdicts", []) if v["verdict"] == "WARN" and v["gates"]]
    text = (f"fitness {doc['verdict']} (exit {doc['exit_code']}) for {model}: "
            f"{len(fails)} fail, {len(warns)} warn" + (f"; failing: {', '.join(fails)}" if fails else "")
            + (f"; errors: {'; '.join(doc['errors'])[:300]}" if doc.get("errors") else "")
            + (f"; warnings: {'; '.join(doc['warnings'])[:300]}" if doc.get("warnings") else ""))
    return {"run_id": doc["run_id"], "tag": doc.get("tag"), "finished_utc": doc.get("finished_utc"),
            "verdict_per_model": {model: seed_verdict(doc)}, "verdict": doc["verdict"], "exit_code": doc["exit_code"],
            "summary": [row], "report_path": str((report_dir / "report.md").resolve()) if report_dir else None,
            "kl_divergence": _kl_summary(phases), "vram_baseline": doc.get("vram_baseline"),
            "vram_baseline_reason": doc.get("vram_baseline_reason"),
            "phases": {p["name"]: {"status": p["status"], "reason": p["reason"]}
                       for p in doc.get("phases", []) if p.get("repeat", 1) == 1},
            "errors": doc.get("errors", []), "retries": sum(v.get("retries", 0) for v in (doc.get("retries") or {}).values()),
            "regressions": (doc.get("history") or {}).get("regressions", []),
            "text": text}


def seed_fields(doc: dict[str, Any], report_dir: Path | None) -> dict[str, Any]:
    """The seed's field names for results.json, beside ours (which keep their own names)."""
    s = summary(doc, report_dir)
    return {k: s[k] for k in ("verdict_per_model", "summary", "report_path", "kl_divergence")}


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _rel(path: Any, folder: Path | None) -> str:
    """A path inside the report folder as relative to it (a committed report names no checkout)."""
    if folder is None or not path:
        return str(path)
    try:
        return str(Path(path).resolve().relative_to(Path(folder).resolve())) or "."
    except ValueError:
        return str(path)


def markdown(doc: dict[str, Any], folder: Path | None = None) -> str:
    r = doc["reproducibility"]
    lines = [f"# Fitness: {doc.get('model') or doc['target']} — **{doc['verdict']}** (exit {doc['exit_code']})", "",
             f"Run `{doc['run_id']}`, {doc['started_utc']} → {doc['finished_utc']} ({doc['wall_s']:.1f}s); "
             f"target {doc['target']}; engine {r.get('engine') or 'unknown (not reached)'} "
             f"{r.get('engine_version') or ''}".rstrip() + ".", ""]
    if r.get("scripted"):
        lines += ["> Scripted replay trajectory, not a model: these numbers describe the script.", ""]
    for w in doc.get("warnings", []):
        lines.append(f"> **WARNING:** {w}")
    if doc.get("warnings"):
        lines.append("")
    for e in doc.get("errors", []):
        lines.append(f"> **error:** {e}")
    if doc.get("errors"):
        lines.append("")
    lines += ["## Verdicts", ""]
    if doc["verdicts"]:
        lines.append(table(["metric", "value", "bars", "verdict", "why"], (
            [v["metric"], _fmt(v["value"]), v["bars"],
             v["verdict"] + ("" if v["gates"] or v["verdict"] == "OFF" else " (advisory)"), v["why"]]
            for v in doc["verdicts"]), align="lr"))
    else:
        lines.append("No bar is set: every metric is reported, none judged (see thresholds.yaml).")
    lines += ["", "## Phases", "", row(["phase", "pass", "status", "wall", "retries", "answers (empty)", "note"]),
              rule(7, "lrlrlr")]
    for p in doc["phases"]:
        q = p.get("requests") or {}
        tries = (f"{q['retries']} ({', '.join(f'{k}×{v}' for k, v in q['by_status'].items())}; {q['waited_s']:.0f}s)"
                 if q.get("retries") else "—")
        answers = f"{q['answers']} ({q['empty']})" if q.get("answers") else "—"
        lines.append(row([p["name"], p["repeat"], p["status"], f"{p['wall_s']:.1f}s", tries, answers, p["reason"] or ""]))
    lines += ["", "VRAM before the run (the seed's `vram_baseline`): "
              + (f"{doc['vram_baseline']:g} GiB" if doc.get("vram_baseline") is not None
                 else f"null — {doc.get('vram_baseline_reason')}") + "."]
    by = {(p["name"], p["repeat"]): p for p in doc["phases"]}
    tp = by.get(("throughput", 1))
    if tp and tp["status"] == "ran":
        lines += ["", "## Throughput (single request, cache-cold)", "",
                  table(["context", "prompt tokens", "TTFT s", "prefill tok/s", "decode tok/s", "note"], (
                      [size, _fmt(c["prompt_tokens"]), _fmt(c["ttft_s"]), _fmt(c["prefill_tps"]), _fmt(c["decode_tps"]),
                       c["reason"] or ""] for size, c in tp["details"]["by_context"].items()), align="rrrrrl")]
    cap = by.get(("capacity", 1))
    if cap and cap["status"] == "ran":
        d = cap["details"]
        lines += ["", f"## Capacity (closed loop, ~{d['input_tokens']} tokens in, {d['output_tokens']} out)", "",
                  table(["in flight", "requests", "failed", "aggregate tok/s", "TTFT p95 ms", "ITL p95 ms"], (
                      [lv["n"], lv["requests"], lv["failed"], _fmt(lv["aggregate_tps"]), _fmt(lv["ttft_ms_p95"]),
                       _fmt(lv["itl_ms_p95"])] for lv in d["levels"]), align="rrrrrr")]
        lines.append(f"\nCarried: {_fmt(doc['metrics'].get('capacity.carried_concurrency'))} in flight within "
                     f"p95 TTFT ≤ {d['ttft_slo_s']:g}s. Files: `{_rel(d['files'], folder)}`.")
    tu = by.get(("tooluse", 1))
    if tu and tu["status"] == "ran":
        lines += ["", "## Tool use (streamed tool calls)", "",
                  table(["ask", "expected", "well-formed", "streamed = whole", "note"], (
                      [a["ask"], a["expected"], "yes" if a["wellformed"] else "NO", "yes" if a["agree"] else "NO", a["why"]]
                      for a in tu["details"]["asks"]))]
        b = tu["details"]["bfcl"]
        if b.get("status") == "ran":
            cats = ", ".join(f"{c} {v['correct']}/{v['n']}" for c, v in b["by_category"].items())
            lines.append(f"\nBFCL v4 subset (BFCL's own AST checker): {b['correct']}/{b['n']} = "
                         f"{_fmt(b['accuracy'])} ± {_fmt(b['se'])} ({cats}). Transcripts: `bfcl.jsonl`.")
        else:
            lines.append(f"\nBFCL: {b.get('status')} ({b.get('reason')}).")
    ca = by.get(("capability", 1))
    if ca and ca["status"] == "ran":
        lines += ["", "## Capability (frozen subsets, greedy)", "",
                  row(["suite", "n", "correct", "accuracy ± SE", "note"]), rule(5, "lrr")]
        for s, v in ca["details"]["suites"].items():
            if v["status"] == "ran":
                note = (f"prompt-level strict; loose {_fmt(v.get('loose_accuracy'))}; {v.get('left_out')} prompts left "
                        f"out (their checkers need NLTK data)" if s == "ifbench" else "")
                lines.append(row([s, v["n"], v["correct"], f"{_fmt(v['accuracy'])} ± {_fmt(v['se'])}", note]))
            else:
                lines.append(row([s, "—", "—", "—", f"skipped: {v['reason']}"]))
        for s, d in (doc.get("baseline") or {}).get("deltas", {}).items():
            lines.append(f"\n{s}: {d['delta']:+.3f} vs baseline {d['baseline']} (2·SE {2 * d['se']:.3f})"
                         + (" — **noise**" if d["noise"] else ""))
        th = ca["details"].get("thinking")
        if th:
            lines += ["", f"Thinking lane (opt-in: enable_thinking, temperature 1.0, top_p 0.95, {th['max_tokens']} "
                          f"tokens): humaneval {th['correct']} / {th['n']} = {_fmt(th['accuracy'])} ± {_fmt(th['se'])}; "
                          f"{th['with_reasoning']} answers carried reasoning, {th['empty']} were empty"]
        lme = ca["details"].get("lmeval")
        if lme:
            lines += ["", f"lm-eval {(lme.get('versions') or {}).get('lm_eval', '?')} over the same frozen files "
                          "(/v1/completions, greedy, no chat template):", "",
                      table(["suite", "task", "n", "exact match ± SE"], [
                          *([s, v["task"], v["n"], f"{_fmt(v['accuracy'])} ± {_fmt(v.get('se'))}"]
                            for s, v in lme.get("suites", {}).items()),
                          *([s, "—", "—", f"not by lm-eval here: {why}"] for s, why in (lme.get("skipped") or {}).items())],
                            align="llr")]
        lines.append("\nRead some transcripts (capability/*.jsonl) before believing a delta.")
    ju = by.get(("judge", 1))
    if ju and ju["status"] == "ran":
        d = ju["details"]
        cross = d.get("cross") or {}
        lines += ["", f"## Judge (advisory: never gates) — {d['judge']}", "",
                  f"Share of checklist items met: {_fmt(doc['metrics'].get('judge.checklist_rate'))} "
                  f"({d['tasks']} tasks)"
                  + (f"; unparsed replies: {', '.join(d['unparsed'])}" if d.get("unparsed") else "") + ".",
                  "Reused from the checkpoints in `judge/`: "
                  + ", ".join(f"{k} {v}" for k, v in d["reused"].items()) + "."]
        if cross.get("status") == "ran":
            lines.append(f"Cross-judge {cross['judge']}: agreement {_fmt(cross['agreement'])} on "
                         f"{cross['checks_compared']} checks (≥ {cross['min']:.0%} needed) — "
                         + ("trusted." if cross["trusted"] else "**NOT TRUSTED**."))
            if cross["divergent"]:
                rows = []
                for dv in cross["divergent"]:
                    a, b = [v for k, v in dv.items() if k not in ("task", "check", "notes")]
                    rows.append([dv["task"], dv["check"], a, b, f"{dv['notes']['judge']} / {dv['notes']['cross']}"])
                lines += ["", table(["task", "check", "judge", "cross", "notes"], rows)]
        else:
            lines.append(f"Cross-judge: {cross.get('status')} ({cross.get('reason')}).")
    kl = by.get(("kl", 1))
    if kl and kl["status"] == "ran":
        d, sm = kl["details"], kl["details"]["summary"]
        lines += ["", f"## Quant check (KL): {d['candidate']['model']} vs {d['reference']['model']}", "",
                  f"Teacher-forced on {d['prompts']['n']} frozen prompts, {sm['positions']} positions, top-{d['top_k']} "
                  f"logprobs from each server's native API ({d['candidate']['api']} / {d['reference']['api']}); "
                  f"{d['units']}.", "",
                  table(["figure", "value", "± SE"], [
                      ["symmetric KL, mean", _fmt(sm["sym_kl_mean"]), _fmt(sm["sym_kl_se"])],
                      ["symmetric KL, median / p99 / max",
                       f"{_fmt(sm['sym_kl_median'])} / {_fmt(sm['sym_kl_p99'])} / {_fmt(sm['sym_kl_max'])}", ""],
                      ["KL(reference ‖ served), mean", _fmt(sm["kl_ref_cand_mean"]), _fmt(sm["kl_ref_cand_se"])],
                      ["Jensen-Shannon, mean", _fmt(sm["js_mean"]), _fmt(sm["js_se"])],
                      ["top-1 agreement", _fmt(sm["top1_agreement"]), _fmt(sm["top1_se"])]], align="lrr")]
    hist = doc.get("history") or {}
    if hist.get("log"):
        lines += ["", "## History", "", f"Run {hist.get('run_number', '?')} of this model in `{hist['log']}`"
                  + (f"; previous run `{hist['previous_run']}`" if hist.get("previous_run") else "; its first run")
                  + (f"; trend plot: `{hist['plot']}`" if hist.get("plot") else "") + "."]
        if hist.get("error"):
            lines.append(f"\n{hist['error']}")
        for f in hist.get("regressions") or []:
            lines.append(f"- **{f['kind'].upper()}** {f['metric']}: {f['value']:g} vs {f['previous']:g} "
                         f"(run `{f['previous_run']}`): {f['why']}")
        if hist.get("previous_run") and not hist.get("regressions"):
            lines.append("\nNo metric is worse than in the previous run beyond 2·SE (or 10 % where no SE is known).")
    if doc["repeats"]["disagreements"]:
        lines += ["", "## Repeats that disagree (> 10 %)", ""]
        for d in doc["repeats"]["disagreements"]:
            lines.append(f"- {d['metric']}: passes {d['passes']} ({d['difference']:.0%} apart; the worse one counts)")
    checks = folder / host_checks.FILE if folder is not None else None
    if checks is not None and checks.is_file():  # folded in by host_checks.py (seed 003's host-side companion)
        try:
            lines += ["", host_checks.render_markdown(json.loads(checks.read_text(encoding="utf-8"))).rstrip("\n")]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            lines += ["", "## Host checks", "", f"`{host_checks.FILE}` could not be read: {exc}"]
    lines += ["", "## Reproducibility", "", "```json", json.dumps({k: v for k, v in r.items() if k != "config"},
                                                                  indent=2, default=str), "```",
              "", f"Percentiles: {doc['percentiles']}.", ""]
    return "\n".join(lines)


def write_report(folder: Path, doc: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    full = {**doc, **{k: v for k, v in seed_fields(doc, folder).items() if k not in doc}}
    write_atomic(folder / "results.json", json.dumps(full, indent=2, default=str) + "\n")
    write_atomic(folder / "summary.json", json.dumps(summary(doc, folder), indent=2, default=str) + "\n")
    write_atomic(folder / "report.md", markdown(doc, folder))
