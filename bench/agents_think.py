"""How exactly `load-agents` keeps a trace's think times, against the timed replay server.

A trace of one session of TURNS turns (think 50..250 ms, 2k..6k-token prompts, 32 tokens out)
runs as N concurrent copies for each N; printed per N: the client's think error (the wait
kept, previous answer's last byte to the next request's start, minus the recorded think)
p50/p99, and the server's view of the same gap (its last token written to the next request's
arrival, minus the think), which adds the loopback and the server's own lateness.

    .venv/bin/python bench/agents_think.py [--copies 1,8,32] [--turns 10] [--out bench/results/agents-think.md]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.load.agents.replay import ReplayOptions, replay  # noqa: E402
from harness.markdown_table import row as md_row, rule  # noqa: E402
from harness.load.agents.trace import AgentTrace, Session, Turn  # noqa: E402


def trace(turns: int) -> AgentTrace:
    rng = np.random.default_rng(37)
    out, prompt, start = [], 2000, 0.0
    for i in range(turns):
        think = None if i == 0 else float(rng.uniform(0.05, 0.25))
        out.append(Turn(start_s=start, prompt_tokens=prompt, reused_blocks=0 if i == 0 else (prompt - 400) // 16,
                        output_tokens=32, think_s=think, duration_s=0.2))
        start += 0.2 + (think or 0)
        prompt += 400
    return AgentTrace(block_size=16, sessions=[Session(id="s0", turns=out)])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", default="1,8,32")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    t = trace(args.turns)
    lines = [f"# load-agents think-time accuracy ({args.turns} turns a copy, timed replay server ttft 20 ms, "
             "itl 2 ms)", "", md_row(["copies", "client think error p50 ms", "p99 ms", "server-seen error p50 ms", "p99 ms"]),
             rule(5)]
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "served.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "harness.replay.server", "--timed", "--host", "127.0.0.1",
                                 "--port", "0", "--served-model-name", "m", "--served-log", str(log),
                                 "--ttft", "0.02", "--itl", "0.002"], stdout=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parents[1])
        try:
            url = re.search(r"(http://\S+)", proc.stdout.readline()).group(1)
            for n in [int(x) for x in args.copies.split(",")]:
                log.write_text("")
                r = replay(t, ReplayOptions(base_url=url, model="m", copies=n, stagger_s=0.01, limit_s=600))
                client = [1000 * (x.think_s - x.think_target_s) for x in r.turns if x.think_target_s is not None]
                rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
                by: dict[str, list[dict]] = defaultdict(list)
                for row in rows:
                    by[row["tag"]].append(row)
                server = []
                for seq in by.values():
                    seq.sort(key=lambda row: row["received_mono"])
                    for i in range(1, len(seq)):
                        gap = seq[i]["received_mono"] - seq[i - 1]["last_token_mono"]
                        server.append(1000 * (gap - t.sessions[0].turns[i].think_s))
                c50, c99 = np.percentile(client, [50, 99])
                s50, s99 = np.percentile(server, [50, 99])
                lines.append(md_row([n, f"{c50:.3f}", f"{c99:.3f}", f"{s50:.3f}", f"{s99:.3f}"]))
                print(lines[-1], flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
