"""Capacity, as the launches found it (issues 37, 52): one table per `launch … --capacity` run
folder, written from what the sweep recorded, never retyped.

A run folder's `capacity/agents.json` and `capacity/trace.jsonl` are committed with its record
(.gitignore keeps them; run.py writes agents.json with no address, key or path of the machine).
Where agents.json keeps every turn (`turns_by_level`, `runs_by_level`), the table is rebuilt
from those turns (harness/load/agents/rebuild.py) and checked against the figures the sweep
saved: a difference is printed, not hidden. An older agents.json is read as saved; a folder with
none falls back to the run record's `capacity` (the levels' p99s and verdicts only). The SLO,
the measurement (steady state, repeats), the stopping rule and the trace replayed are the
sweep's own words. Column names for the per-level metrics are AIPerf's.

    .venv/bin/python bench/agents_capacity.py RUN_DIR [RUN_DIR ...] [--out FILE]

A folder that holds no capacity sweep exits 2 naming the file and the fix.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.load.agents import rebuild  # noqa: E402
from harness.markdown_table import table  # noqa: E402


def _fmt(value, spec: str = ".1f", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def _ms(value):
    return None if value is None else 1000 * value


def _band(iv) -> str:
    return "" if not iv else f" ({iv[0]:.2f}-{iv[1]:.2f})"


def _pct(value) -> str:
    return "—" if value is None else f"{100 * value:.0f} %"


def load(run_dir: Path) -> dict:
    """The run record's identity and capacity, with the sweep's full levels where the folder has them."""
    record_path = run_dir / "run.json"
    try:
        record = json.loads(record_path.read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{record_path}: cannot read the run record ({exc}); give a run folder "
                         "from .llms-benchmark/runs/") from None
    capacity = record.get("capacity")
    if not capacity:
        print(f"{record_path}: field capacity is empty: this run made no sweep; launch it with "
              "--capacity", file=sys.stderr)
        raise SystemExit(2)
    full, rebuilt, drift = None, None, []
    agents = run_dir / (capacity.get("results") or "capacity/agents.json")
    if agents.is_file():
        full = json.loads(agents.read_text())
        try:
            rebuilt = [asdict(level) for level in rebuild.levels(full)]
        except rebuild.NotRebuildable:
            rebuilt = None
        for again, saved in zip(rebuilt or [], full.get("levels") or [], strict=False):
            for key in ("verdict", "turns", "failed", "faults", "stat", "ttft_p99_s", "turn_p99_s", "goodput_per_s"):
                if not _same(again.get(key), saved.get(key)):
                    drift.append(f"{saved['copies']} agents {key}: saved {saved.get(key)!r}, rebuilt {again.get(key)!r}")
    return {"record": record, "capacity": capacity, "full": full, "rebuilt": rebuilt, "drift": drift,
            "name": run_dir.name}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    return a == b


def render(run: dict) -> str:
    rec, cap, full = run["record"], run["capacity"], run["full"]
    engine = (rec.get("engine") or {}).get("name") or rec.get("stack")
    lines = [f"### {run['name']}", ""]
    if cap.get("sustained") is None:
        verdict = f"no capacity: {cap.get('error')}"
    else:
        verdict = f"{'' if cap.get('limit_found') else '≥ '}{cap['sustained']} agent{'' if cap['sustained'] == 1 else 's'} sustained"
        if cap.get("ended_by"):
            verdict += " (a lower bound: the sweep ended on a fault)"
        elif not cap.get("limit_found"):
            verdict += f" ({max(level['copies'] for level in cap['levels'])} the most tried: a lower bound)"
    lines += [
        f"- **{verdict}** under {cap.get('slo')}",
        f"- engine {engine}, preset {(rec.get('key') or {}).get('preset')}, mission {rec.get('mission')} "
        f"({rec.get('status')})",
        f"- trace: {cap.get('trace')}; {cap.get('sessions')} session(s), {cap.get('turns_per_copy')} turns a copy"
        + ("" if full is None else f"; prefixes warmed: {full.get('warm_prefixes')}, answers fed: "
           f"{full.get('feed_answers')}, stagger {full.get('stagger_s')} s"),
        f"- rule: {cap.get('rule')}",
        f"- sweep {cap.get('started')} → {cap.get('ended')}; host load (1 min) at start and end "
        f"{cap.get('host_load')}",
        "",
    ]
    levels = run["rebuilt"] if run.get("rebuilt") is not None else (full or {}).get("levels")
    if full is None:
        lines.insert(-1, "- read from the run record alone: its `capacity/` folder (every turn) was never committed, "
                     "so the levels' p99s and verdicts are as the sweep saved them, not rebuilt")
    if full is not None and full.get("measure"):
        lines.insert(-1, f"- measured: {full['measure'].get('text')}")
    if full is not None and full.get("ended_by"):
        lines.insert(-1, f"- **the sweep ended: {full['ended_by']}**")
    if run.get("rebuilt") is not None:
        lines.insert(-1, "- the table is rebuilt from every turn the sweep kept (capacity/agents.json)"
                     + ("; it differs from the saved figures: " + "; ".join(run["drift"]) if run["drift"]
                        else ", and matches the figures the sweep saved"))
    if levels is not None and any("verdict" in level for level in levels):
        rows = []
        for level in sorted(levels, key=lambda x: x["copies"]):
            server = level.get("server") or {}
            rows.append([
                level["copies"], level["turns"], f"{level['failed']} / {level.get('faults', 0)}",
                f"{_fmt(level.get('ttft_p50_s'), '.2f')} / {level.get('stat')} {_fmt(level.get('ttft_p99_s'), '.2f')}"
                f"{_band(level.get('ttft_interval_s'))} s",
                f"{_fmt(level.get('turn_p50_s'), '.2f')} / {level.get('stat')} {_fmt(level.get('turn_p99_s'), '.2f')}"
                f"{_band(level.get('turn_interval_s'))} s",
                _fmt(_ms(level.get("inter_token_latency_p50_s")), suffix=" ms"),
                _fmt(level.get("request_throughput_per_s"), ".2f", " req/s"),
                _fmt(level.get("output_token_throughput_per_s"), ".1f", " tok/s"),
                _fmt(level.get("goodput_per_s"), ".2f", " req/s"), _pct(server.get("kv_usage_peak")),
                _pct(server.get("prefix_cache_hit")), _fmt(server.get("preemptions"), ".0f"),
                level["verdict"] + ("" if level["verdict"] == "pass" else ": " + level["why"])])
        lines.append(table(["agents", "turns", "failed / faults", "TTFT p50 / stat (95 % interval)",
                            "turn p50 / stat (95 % interval)", "inter_token_latency p50", "request_throughput",
                            "output_token_throughput", "goodput", "KV peak", "prefix hit", "preemptions", "verdict"],
                           rows))
    elif levels is not None:
        rows = []
        for level in sorted(levels, key=lambda x: x["copies"]):
            server = level.get("server") or {}
            rows.append([
                level["copies"], level["turns"], level["failed"],
                f"{_fmt(level.get('ttft_p50_s'))} / {_fmt(level.get('ttft_p99_s'))} s",
                f"{_fmt(level.get('turn_p50_s'))} / {_fmt(level.get('turn_p99_s'))} s",
                _fmt(level.get("decode_p50_tok_s"), suffix=" tok/s"), _pct(server.get("kv_usage_peak")),
                _pct(server.get("prefix_cache_hit")), _fmt(server.get("preemptions"), ".0f"),
                _fmt(server.get("waiting_peak"), ".0f"), "yes" if level["passed"] else "no: " + level["why"]])
        lines.append(table(["agents", "turns", "failed", "TTFT p50 / p99", "turn p50 / p99", "decode p50", "KV peak",
                            "prefix hit", "preemptions", "waiting peak", "within the SLO"], rows))
    else:
        lines.append(table(["agents", "turns", "failed", "TTFT p99", "turn p99", "within the SLO"], (
            [level["copies"], level["turns"], level["failed"], f"{_fmt(level.get('ttft_p99_s'))} s",
             f"{_fmt(level.get('turn_p99_s'))} s", "yes" if level["passed"] else "no: " + level["why"]]
            for level in sorted(cap["levels"], key=lambda x: x["copies"]))))
    return "\n".join(lines) + "\n"


def across_section(runs: list[dict]) -> str:
    """The launches of one preset, effort, CLI and GPU cell under one SLO, read together
    (harness/load/agents/across.py): the figure that holds across them, or "not repeatable"."""
    from harness.load.agents.across import Launch, combine, workload
    from harness.records.capacity import CapacityFigures

    groups: dict[tuple, list] = {}
    for run in runs:
        cap, key = run["capacity"], run["record"].get("key") or {}
        if cap.get("sustained") is None:
            continue
        figures = CapacityFigures.model_validate(cap)
        group = (key.get("preset"), key.get("effort"), key.get("cli"), key.get("gpu"),
                 workload(figures, run["record"].get("mission")), figures.ttft_p99_s, figures.turn_p99_s)
        groups.setdefault(group, []).append(Launch(run["name"], figures))
    rows = [[f"`{preset}`", effort, gpu, what, f"TTFT p99 ≤ {ttft:g} s, turn p99 ≤ {turn:g} s", len(launches),
             combine(launches).cell()]
            for (preset, effort, _cli, gpu, what, ttft, turn), launches in sorted(groups.items(), key=lambda g: str(g[0]))]
    return ("## Across launches\n\n"
            + table(["preset", "effort", "GPU", "replayed", "SLO", "launches", "agents sustained across them"], rows)
            + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run folders launched with --capacity")
    ap.add_argument("--out", type=Path, help="write the tables here (else stdout)")
    args = ap.parse_args(argv)
    runs = [load(run_dir) for run_dir in args.runs]
    command = " ".join(["bench/agents_capacity.py", *(str(r) for r in args.runs)]
                       + (["--out", str(args.out)] if args.out else []))
    # No clock of its own: the same committed inputs write the same file (tests/test_capacity_across.py).
    head = (f"# Capacity: concurrent agents each launch's serve sustained\n\n`.venv/bin/python {command}`, "
            "written from the committed records, one section a launch, then the launches of one preset read "
            "together.\n\n")
    text = head + "\n".join(render(run) for run in runs) + "\n" + across_section(runs)
    if args.out:
        args.out.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
