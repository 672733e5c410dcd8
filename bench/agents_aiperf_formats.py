"""Do AIPerf's own models accept our agent-trace exports? (issue 37: "AIPerf accepts the exported file")

Writes a trace with a subagent in AIPerf's Mooncake and Weka formats (harness/load/agents/
aiperf.py, weka.py) and validates every row / file with AIPerf's pydantic models
(MooncakeTrace, WekaTrace) in AIPerf's own venv, plus the Mooncake loader's block check at our
block size. AIPerf lives in its own venv (its pins conflict with ours): bench/peers.sh builds
it under /tmp/llms-benchmark-peers/aiperf. A full `aiperf profile` replay needs a tokenizer
download, so it is not run here.

    .venv/bin/python bench/agents_aiperf_formats.py [--aiperf-python /tmp/llms-benchmark-peers/aiperf/bin/python]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--aiperf-python", default="/tmp/llms-benchmark-peers/aiperf/bin/python")
    args = ap.parse_args()
    if not Path(args.aiperf_python).exists():
        print(f"no AIPerf venv at {args.aiperf_python}: run bench/peers.sh first", file=sys.stderr)
        return 2
    t = trace()
    with tempfile.TemporaryDirectory() as tmp:
        mooncake, folder = Path(tmp) / "t.mooncake.jsonl", Path(tmp) / "weka"
        aiperf.export(t, mooncake)
        weka.export(t, folder, model="m")
        done = subprocess.run([args.aiperf_python, "-c", CHECK, str(t.block_size), str(mooncake), str(folder)],
                              capture_output=True, text=True, timeout=300)
    print(done.stdout.strip() or done.stderr.strip()[-2000:])
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
