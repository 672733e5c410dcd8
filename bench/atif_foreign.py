"""Foreign ATIF trajectories as load: each file loaded, validated (the pinned `atif` models),
converted to our agent trace (harness/load/agents/atif.py) and, given a server, replayed once.

Inputs are ATIF files named on the command line, or with --harbor-git the golden test outputs of
a Harbor checkout (a bare git directory, e.g. the `fetch` tool's mirror), read from git into a
temporary folder (never into this repository): `tests/golden/<agent>/<case>.trajectory<rest>.json`
becomes `<tmp>/<agent>-<case>/trajectory<rest>.json`, the names Harbor's agents write, so the
subagent and continuation files a trajectory names resolve beside it.

    .venv/bin/python bench/atif_foreign.py --harbor-git DIR [--rev HEAD] [--timed | --url URL --model M] \
        [--out bench/results/atif-foreign.md] [FILE.json ...]

--timed replays against the harness's timed replay server on loopback (`harness.replay.server
--timed`: the OpenAI stream with set timings, no model): it shows the trace drives load-agents'
replay, not what a real server sustains. --url replays against a served model instead.
"""

from __future__ import annotations

import argparse
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.errors import UserError  # noqa: E402
from harness.markdown_table import row as md_row, rule as md_rule  # noqa: E402
from harness.load.agents.atif import convert, read, sniff  # noqa: E402
from harness.load.agents.replay import ReplayOptions, replay  # noqa: E402

GOLDEN = re.compile(r"tests/golden/(?P<agent>[^/]+)/(?P<case>[^/]+?)\.(?P<rest>trajectory[^/]*\.json)$")


def extract(git_dir: Path, rev: str, into: Path) -> tuple[list[Path], str]:
    """Harbor's golden trajectories at `rev`, written under `into`; and the commit read."""
    def git(*args: str) -> str:
        return subprocess.run(["git", f"--git-dir={git_dir}", *args], check=True, capture_output=True, text=True,
                              timeout=60).stdout
    commit = git("rev-parse", rev).strip()
    files = []
    for name in git("ls-tree", "-r", "--name-only", commit, "tests/golden").splitlines():
        m = GOLDEN.fullmatch(name)
        if not m:
            continue
        dest = into / f"{m['agent']}-{m['case']}" / m["rest"]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{name}"], check=True,
                                        capture_output=True, timeout=60).stdout)
        files.append(dest)
    return sorted(files), commit


def start_timed(folder: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "harness.replay.server", "--timed", "--host", "127.0.0.1",
                             "--port", "0", "--served-model-name", "timed-model", "--ttft", "0.02", "--itl", "0.002",
                             "--served-log", str(folder / "served.jsonl")],
                            cwd=Path(__file__).resolve().parents[1], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    line = proc.stdout.readline().strip()  # the banner: "... listening on http://127.0.0.1:PORT"
    match = re.search(r"listening on (http://\S+)$", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the timed replay server did not start: {line!r}")
    return proc, match.group(1)


def row(path: Path, shown: str, url: str | None, model: str) -> tuple[str, list[str]]:
    if not sniff(path):
        return md_row([shown, 'not ATIF (no schema_version "ATIF...")', *[""] * 8]), []
    try:
        traj = read(path)
        trace = convert(path)
    except UserError as exc:
        return md_row([shown, f"refused: {exc.message} ({exc.field})", *[""] * 8]), []
    turns = [t for s in trace.sessions for t in s.turns]
    thinks = [t.think_s for t in turns if t.think_s is not None]
    replayed = ""
    if url:
        result = replay(trace, ReplayOptions(base_url=url, model=model, copies=1, stagger_s=0, limit_s=300))
        ok = [t for t in result.turns if t.ok]
        ttft = statistics.median(t.ttft_s for t in ok) if ok else None
        replayed = f"{len(ok)}/{len(turns)} ok" + (f", TTFT p50 {ttft * 1000:.0f} ms" if ttft is not None else "")
    agent_steps = sum(1 for s in traj.steps if s.source == "agent")
    total = traj.final_metrics.total_prompt_tokens if traj.final_metrics else None
    return md_row([shown, f"{traj.agent.name} {traj.agent.version} · {traj.schema_version}",
                   f"{len(traj.steps)} ({agent_steps} agent)", len(trace.sessions), len(turns),
                   f"{sum(t.prompt_tokens for t in turns):,}", "" if total is None else f"{total:,}",
                   f"{sum(t.output_tokens for t in turns):,}", f"{sum(thinks):.2f}", replayed]), trace.notes


def round_trip(run_dir: Path, tmp: Path) -> str:
    """One run folder: wire log -> trace against wire log -> ATIF (atif_out) -> trace."""
    import json

    from harness.load.agents.trace import from_run
    from harness.trajectory.atif_out import build_trajectory

    path = tmp / f"{run_dir.name}.trajectory.json"
    try:
        path.write_text(json.dumps(build_trajectory(run_dir).to_json_dict()))
        direct, via = from_run(run_dir), convert(path)
    except UserError as exc:
        return md_row([run_dir.name, f"refused: {exc.message}", *[""] * 4])
    a = sorted(direct.sessions, key=lambda x: x.turns[0].start_s)
    b = sorted(via.sessions, key=lambda x: x.turns[0].start_s)
    pairs = [(s, t) for x, y in zip(a, b, strict=False) for s, t in zip(x.turns, y.turns, strict=False)]
    sizes = ("prompt_tokens", "output_tokens", "cached_tokens", "reused_blocks", "tool_calls")
    same = sum(all(getattr(s, k) == getattr(t, k) for k in sizes) for s, t in pairs)
    gaps = [abs(s.think_s - t.think_s) for s, t in pairs if s.think_s is not None and t.think_s is not None]
    return md_row([run_dir.name, f"{len(a)} / {len(b)}", f"{sum(len(x.turns) for x in a)} / {sum(len(y.turns) for y in b)}",
                   f"{same}/{len(pairs)}", f"{max(gaps, default=0) * 1e6:.1f}", len(via.notes)])


def shown_argv() -> list[str]:
    """The command line as the report shows it: no folder of this machine."""
    out, hide = [], False
    for a in sys.argv[1:]:
        out.append("HARBOR_GIT" if hide else a if not a.startswith("/") else Path(a).name)
        hide = a == "--harbor-git"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--harbor-git", type=Path, help="a Harbor checkout's git directory: its tests/golden trajectories")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--source", default="", help="where --harbor-git came from, for the report (e.g. owner/repo)")
    ap.add_argument("--url", default="", help="replay each trace once (1 copy) against this served base URL")
    ap.add_argument("--model", default="", help="the served model name (with --url)")
    ap.add_argument("--timed", action="store_true", help="replay against the timed replay server on loopback")
    ap.add_argument("--runs", type=Path, nargs="*", default=[], help="run folders with a wire log: round trips")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        files, shown_root, where = list(args.files), {}, []
        if args.harbor_git:
            golden, commit = extract(args.harbor_git, args.rev, tmp / "golden")
            files += golden
            shown_root = {f: f.relative_to(tmp / "golden") for f in golden}
            where.append(f"Harbor's golden test trajectories (`tests/golden/`), {args.source or args.harbor_git} "
                         f"at {commit[:12]}, read from git into a temporary folder")
        if not files and not args.runs:
            raise SystemExit("no file: give ATIF files, --harbor-git or --runs")
        trips = [round_trip(r, tmp) for r in args.runs]
        proc, url, model = None, args.url or None, args.model
        if args.timed:
            proc, url = start_timed(tmp)
            model = "timed-model"
            where.append("replayed once (1 copy) against `harness.replay.server --timed` on loopback (TTFT 20 ms, "
                         "2 ms a token, no model)")
        elif url:
            where.append(f"replayed once (1 copy) against a served model ({model or 'first listed'})")
        if url and not model:
            from harness.load.agents.run import served_model

            model = served_model(url, None)
        started = time.monotonic()
        try:
            rows, notes = [], []
            for f in files:
                shown = str(shown_root.get(f, f.name))
                line, said = row(f, shown, url, model)
                rows.append(line)
                notes += [f"- `{shown}`: {n}" for n in said]
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)
    lines = ["# Foreign ATIF trajectories as load (issue 50)", "",
             "Each file: validated by the pinned `atif` models (1.8), converted by `llms-benchmark load-trace` "
             "(harness/load/agents/atif.py)" + (", " + "; ".join(where) if where else "") + ".", "",
             f"    .venv/bin/python bench/atif_foreign.py {shlex.join(shown_argv())}", "",
             "Sessions and turns follow the subagent and continuation files a trajectory names beside it; each "
             "subagent file is also a row of its own. Prompt tokens: the trace's sum, beside the file's own "
             "`final_metrics.total_prompt_tokens` (which also counts the files a trajectory names, present or not). "
             "Think = the sum of the trace's think times (s).", "",
             md_row(["file", "agent · schema", "steps", "sessions", "turns", "prompt tokens", "file's total",
                     "output tokens", "think s", "replayed"]), md_rule(10), *rows, "",
             "What each conversion assumed (printed by `load-trace`, kept in the trace's `notes`):", "", *notes, "",
             f"Bench wall time {time.monotonic() - started:.1f} s."]
    if trips:
        lines[-1:-1] = [
            "Round trips (`--runs`): each run folder's wire log -> trace (`load-trace RUN`), against wire log -> "
            "ATIF (harness/trajectory/atif_out.py) -> trace; sessions paired by first start. Sizes = prompt, "
            "output and cached tokens, reused blocks and tool names all equal. Runs are named by their id: the "
            "committed runs keep no wire log (tests/test_atif_in.py compares them in their token sums), so these are "
            "run folders a launch left here.", "",
            md_row(["run", "sessions (wire / via ATIF)", "turns", "turns equal in sizes", "max think Δ µs", "notes"]),
            md_rule(6), *trips, ""]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
