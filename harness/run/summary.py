"""What a person sees at the end of a launch: one rich table over the run record."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from harness.records.record import RunRecord


def minutes_seconds(seconds: float) -> str:
    """`NmSSs`, minutes not rolled into hours (the results tables' format)."""
    total = round(seconds)
    return f"{total // 60}m{total % 60:02d}s"


def run_summary_table(rec: RunRecord, record_path: str | None = None) -> Table:
    title = f"run {rec.run_id}: {rec.status.value}"
    if rec.scripted:
        title += " — SCRIPTED TRAJECTORY (replay), not a model"
    table = Table("", "", title=title, show_header=False, title_justify="left")
    rows: list[tuple[str, str]] = [
        ("preset / effort", f"{rec.key.preset} / {rec.key.effort} (asked {rec.key.effort_requested})"),
        ("environment / GPU", f"{rec.environment} ({rec.stack}) / {rec.key.gpu}"),
        ("mission", rec.mission),
    ]
    if rec.trial:
        t = rec.trial
        rows.append(("trial", f"{t.index} of {t.of} on one serve" + ("" if t.index == 1 else
                                                                    f" (served, probed and smoked in run {t.group})")))
    if rec.reason:
        rows.append(("reason", f"{rec.reason} (stopped at {rec.stopped_at})"))
    if rec.unit_death:
        d = rec.unit_death
        rows.append(("unit died", d.summary() + ("\nlast log lines:\n  " + "\n  ".join(d.log_tail[-5:])
                                                  if d.log_tail else "")))
    if info := rec.serving_config.get("system_info"):
        rows.append(("server", str(info)))
    if rec.probe:
        p = rec.probe
        rows.append(("probe", f"decode {p.decode_short_tps} tok/s short, {p.decode_long_tps} tok/s at "
                              f"{p.long_context_tokens} tokens; prefill {p.prefill_tps} tok/s"))
    if rec.smoke:
        rows.append(("smoke", rec.smoke))
    if figures := rec.figures():
        tokens, turns, median_s = figures
        source = "the wire" if rec.wire is not None else "opencode's store"
        rows.append(("tokens", f"input {tokens.input:,} · output {tokens.output:,} · cache {tokens.cache:,} "
                               f"(from {source})"))
        median = f"{median_s:.1f}s" if median_s is not None else "—"
        compactions = rec.session.compactions if rec.session else 0
        rows.append(("turns", f"{turns} (median turn {median}), compactions {compactions}"))
    if rec.wire is not None and rec.wire.store_disagrees:
        rows.append(("store check", "opencode's store disagrees with the wire: " + "; ".join(rec.wire.store_disagrees)))
    t = rec.times
    if t.mission_start and t.mission_end:
        rows.append(("mission time", minutes_seconds((t.mission_end - t.mission_start).total_seconds())))
    if t.serve_start and t.destroyed:
        shared = f", shared by the {rec.trial.of} trials" if rec.trial else ""
        rows.append(("served", f"{minutes_seconds((t.destroyed - t.serve_start).total_seconds())} "
                               f"(GPU-hours {rec.gpu_hours}{shared})"))
    rows.append(("record", record_path or f".llms-benchmark/runs/{rec.run_id}/run.json"))
    for key, value in rows:
        table.add_row(key, escape(value))  # reasons quote logs and paths: never rich markup
    return table
