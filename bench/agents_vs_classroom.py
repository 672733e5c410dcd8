"""Seed 002's classroom beside the agents sweep (issue 37): on one serve, the number of
concurrent agents the engine sustains replaying a run's own sessions (`load-agents`' sweep,
prefixes warmed and answers fed, as `launch --capacity` runs it), and seed 002's simulated
classroom at the same number of students, judged by the same SLO.

The two loads differ by design: the agents are this model's own sessions on a mission (their
prompt sizes, outputs and think times as recorded); the classroom is seed 002's simulated
students (a lab project, opencode-style tools, 20-90 s pauses scaled by `--time-scale`, the
model choosing its answers' length). The table sets, per level, each load's TTFT and turn
(agents) or request (classroom) time at p50 and p99, its requests, and whether it meets the
SLO (p99s at most the bounds, no failed request); the sweep's capacity figure and its stopping
rule are written beside it.

    .venv/bin/python bench/agents_vs_classroom.py TRACE --serve ENV PRESET [--levels 1,2,4]
        [--ttft-p99 S] [--turn-p99 S] [--limit S] [--classroom-duration S] [--classroom-grace S]
        [--time-scale X]
    .venv/bin/python bench/agents_vs_classroom.py --agents-from RUN_DIR --serve ENV PRESET [...]

With `--agents-from`, the agents side is a run's own `launch --capacity` sweep (its
capacity/agents.json and record: levels, SLO, trace), and only the classroom runs here, at
those levels and under that SLO, on the run's preset served again. The preset is served here
(`llms-benchmark serve`) and destroyed after, whatever happens.
Loopback only; every level bounded (`--limit` for the agents, duration + grace for the
classroom). Writes bench/results/agents-vs-classroom.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.errors import UserError  # noqa: E402
from harness.markdown_table import row as md_row, rule as md_rule  # noqa: E402
from harness.load.agents.run import read_trace, run_agents  # noqa: E402
from harness.load.agents.sweep import Slo  # noqa: E402

OUT = REPO / "bench" / "results" / "agents-vs-classroom.md"
CLI = str(REPO / ".venv" / "bin" / "llms-benchmark")


def p(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def classroom_level(base_url: str, model: str, users: int, stagger: float, duration: float, grace: float,
                    scale: float, out: Path) -> dict:
    """Seed 002's classroom at `users` students: its own summary, and p50/p99 from its requests."""
    from harness.load.classroom import run_classroom
    from harness.load.classroom_config import ClassroomConfig

    cfg = ClassroomConfig(base_url=base_url, model=model, users=users, duration_s=duration, grace_s=grace,
                          ramp_up_s=users * stagger, time_scale=scale, out_dir=out)
    result = run_classroom(cfg)
    rows = [json.loads(x) for x in (Path(result.folder) / "requests.jsonl").read_text().splitlines() if x.strip()]
    final = [r for r in rows if r["kind"] != "retry"]
    ok = [r for r in final if r["ok"]]
    failed = [r for r in final if not r["ok"] and not r.get("cut_off")]
    ttft = [r["ttft_s"] for r in ok if r["ttft_s"] is not None]
    e2e = [r["e2e_s"] for r in ok if r["e2e_s"] is not None]
    prompts = [r["prompt_tokens"] for r in ok if r.get("prompt_tokens") is not None]
    outputs = [r["completion_tokens"] for r in ok if r.get("completion_tokens") is not None]
    return {"requests": len(final), "ok": len(ok), "failed": len(failed),
            "cut_off": sum(bool(r.get("cut_off")) for r in rows), "retries": len(rows) - len(final),
            "ttft_p50": p(ttft, 50), "ttft_p99": p(ttft, 99), "time_p50": p(e2e, 50), "time_p99": p(e2e, 99),
            "prompt_p50": p(prompts, 50), "output_p50": p(outputs, 50), "folder": str(result.folder)}


def from_run(run_dir: Path) -> dict:
    """A run's own capacity sweep: its agents.json, levels, SLO and headline, from its record."""
    from harness.records.record import RunRecord

    rec = RunRecord.load(run_dir / "run.json")
    cap = rec.capacity
    if cap is None or not cap.results or not (run_dir / cap.results).is_file():
        raise UserError(f"run {run_dir.name} has no capacity sweep", file=run_dir / "run.json", field="capacity",
                        fix="give a run folder launched with --capacity")
    results = run_dir / cap.results
    return {"agents": json.loads(results.read_text()), "trace": results.parent / "trace.jsonl",
            "levels": [lv.model_dump() for lv in cap.levels],
            "ttft_p99_s": cap.ttft_p99_s, "turn_p99_s": cap.turn_p99_s, "headline": cap.headline(), "rule": cap.rule}


def meets(ttft_p99: float | None, time_p99: float | None, failed: int, slo: Slo) -> bool:
    return (failed == 0 and ttft_p99 is not None and time_p99 is not None
            and ttft_p99 <= slo.ttft_p99_s and time_p99 <= slo.turn_p99_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", type=Path, nargs="?", help="a *.trace.jsonl (llms-benchmark load-trace)")
    ap.add_argument("--agents-from", type=Path, help="a run folder launched with --capacity: its sweep, not a new one")
    ap.add_argument("--serve", nargs=2, metavar=("ENV", "PRESET"), required=True)
    ap.add_argument("--levels", default="1,2,4", help="agents (and students) per level")
    ap.add_argument("--ttft-p99", type=float, default=60.0)
    ap.add_argument("--turn-p99", type=float, default=300.0)
    ap.add_argument("--limit", type=float, default=900.0, help="one agents level's wall-clock limit (s)")
    ap.add_argument("--stagger", type=float, default=1.0)
    ap.add_argument("--classroom-duration", type=float, default=180.0, help="real seconds students start requests")
    ap.add_argument("--classroom-grace", type=float, default=120.0, help="real seconds after, to finish them")
    ap.add_argument("--time-scale", type=float, default=0.25, help="the classroom's simulated pauses x this")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    try:
        levels = sorted({int(x) for x in args.levels.split(",") if x.strip()})
        given = from_run(args.agents_from) if args.agents_from else None
        if given is None and args.trace is None:
            raise UserError("give a TRACE or --agents-from RUN_DIR", field="trace", fix="name one")
        trace = read_trace(args.trace) if given is None else read_trace(given["trace"])
        if given is not None:  # the run's levels and SLO, so both loads are judged alike
            levels = [lv["copies"] for lv in given["levels"]]
            args.ttft_p99, args.turn_p99 = given["ttft_p99_s"], given["turn_p99_s"]
    except ValueError:
        print(f"agents_vs_classroom: --levels {args.levels!r} is not a list of integers", file=sys.stderr)
        return 2
    except UserError as exc:
        print(f"agents_vs_classroom: {exc.render()}", file=sys.stderr)
        return 2
    env, preset = args.serve
    up = subprocess.run([CLI, "serve", env, preset, "--json"], capture_output=True, text=True, cwd=REPO,
                        timeout=900, stdin=subprocess.DEVNULL)
    if up.returncode:
        print(f"agents_vs_classroom: could not serve {preset} on {env}: {up.stderr.strip()[-500:]}", file=sys.stderr)
        return 2
    unit = json.loads(up.stdout)
    slo = Slo(ttft_p99_s=args.ttft_p99, turn_p99_s=args.turn_p99)
    started = datetime.now(UTC)
    loads = [round(os.getloadavg()[0], 2)]
    classroom: dict[int, dict] = {}
    try:
        if given is None:
            outcome, path = run_agents(trace, base_url=unit["base_url"], model=unit["served_name"], levels=levels,
                                       slo=slo, stagger_s=args.stagger, limit_s=args.limit,
                                       out_root=Path(tempfile.mkdtemp()), exact_tokens=True, warm_prefixes=True,
                                       feed_answers=True, bisect=False,
                                       on_level=lambda lv: print(f"agents {lv.copies}: {lv.why}", flush=True))
            loads.append(round(os.getloadavg()[0], 2))
            agents = json.loads(path.read_text())
            headline, rule, where = outcome.headline(), outcome.rule, "this serve, before the classroom"
        else:
            agents = given["agents"]
            headline, rule = given["headline"], given["rule"]
            where = (f"run `{args.agents_from.name}`'s own `launch --capacity` sweep, on its serve after its "
                     f"mission (the classroom on the same preset served again here)")
        out = Path(tempfile.mkdtemp())
        for n in levels:
            classroom[n] = classroom_level(unit["base_url"], unit["served_name"], n, args.stagger,
                                           args.classroom_duration, args.classroom_grace, args.time_scale, out)
            loads.append(round(os.getloadavg()[0], 2))
            print(f"classroom {n}: {classroom[n]}", flush=True)
    finally:
        subprocess.run([CLI, "destroy", env, preset], capture_output=True, text=True, cwd=REPO, timeout=300,
                       stdin=subprocess.DEVNULL)
    ended = datetime.now(UTC)

    def f(v: float | None, digits: int = 2) -> str:
        return "—" if v is None else f"{v:.{digits}f}"

    by_level = {lv["copies"]: lv for lv in agents["levels"]}
    lines = ["# Seed 002's classroom beside the agents sweep, one serve", "",
             f"`.venv/bin/python bench/agents_vs_classroom.py {' '.join(shlex.quote(a) for a in sys.argv[1:])}` "
             f"({started:%Y-%m-%d %H:%M}–{ended:%H:%M} UTC; host load average (1 min) "
             f"{', '.join(f'{x:g}' for x in loads)} at the start and after each load, on {os.cpu_count()} CPUs).", "",
             f"Served: `{preset}` on `{env}` (`llms-benchmark serve`, destroyed after), model `{unit['served_name']}`. "
             f"The agents ({where}): `{trace.source or args.trace.name}`, {len(trace.sessions)} session(s), "
             f"{sum(len(s.turns) for s in trace.sessions)} turns a copy, copies {args.stagger:g} s apart, prompts "
             f"sized on the server's tokenizer, first-turn prefixes warmed and answers fed (as `launch --capacity`). "
             f"The classroom: seed 002's simulated students (`llms-benchmark classroom`, Java lab, up to 4 requests "
             f"each), as many as the level's agents, one starting a second (the agents' stagger), "
             f"{args.classroom_duration:g} s of starts and {args.classroom_grace:g} s of grace, pauses "
             f"x{args.time_scale:g}.", "",
             f"SLO for both: {slo.describe()}, and no failed request (a classroom request is one model call; an "
             f"agents turn is one model call too).", "",
             md_row(["level", "load", "requests (ok / failed)", "TTFT p50 s", "TTFT p99 s", "turn/request p50 s",
                     "turn/request p99 s", "prompt tokens p50", "output tokens p50", "meets the SLO"]),
             md_rule(10, spaced=True)]
    for n in levels:
        turns = agents["turns_by_level"].get(str(n), [])
        ok = [t for t in turns if t["ok"]]
        lv = by_level.get(n)
        a_ttft = [t["ttft_s"] for t in ok if t["ttft_s"] is not None]
        a_turn = [t["turn_s"] for t in ok if t["turn_s"] is not None]
        lines.append(md_row([n, "agents", f"{len(ok)} / {len(turns) - len(ok)}", f(p(a_ttft, 50)), f(p(a_ttft, 99)),
                             f(p(a_turn, 50)), f(p(a_turn, 99)),
                             f(p([t["prompt_tokens"] for t in ok if t["prompt_tokens"]], 50), 0),
                             f(p([t["completion_tokens"] for t in ok if t["completion_tokens"]], 50), 0),
                             "yes" if lv and lv["passed"] else "no" if lv else "not run (the sweep stopped)"]))
        c = classroom.get(n)
        if c:
            lines.append(md_row([n, "classroom", f"{c['ok']} / {c['failed']}"
                                 + (f" (+{c['cut_off']} cut off at the end)" if c["cut_off"] else ""),
                                 f(c["ttft_p50"]), f(c["ttft_p99"]), f(c["time_p50"]), f(c["time_p99"]),
                                 f(c["prompt_p50"], 0), f(c["output_p50"], 0),
                                 "yes" if meets(c["ttft_p99"], c["time_p99"], c["failed"], slo) else "no"]))
    sustained_classroom = max((n for n in levels if classroom.get(n) and meets(
        classroom[n]["ttft_p99"], classroom[n]["time_p99"], classroom[n]["failed"], slo)
        and all(classroom.get(m) and meets(classroom[m]["ttft_p99"], classroom[m]["time_p99"], classroom[m]["failed"],
                                           slo) for m in levels if m < n)), default=0)
    lines += ["", f"**Agents (this model's own sessions): {headline}.** The rule: {rule}", "",
              f"**Classroom (seed 002) at the same levels: {sustained_classroom} student(s) sustained** under the same "
              "SLO (the largest level passing with none failing beneath it).", ""]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
