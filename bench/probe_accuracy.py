"""How close does the speed probe come to known rates?

Serves the replay server's timed fallback at several (prefill, decode) rates and
compares what `run_probe` measures with what the server was told to do. Loopback
only; each run is bounded by the probe's own request timeouts.

    .venv/bin/python bench/probe_accuracy.py [--long 16000]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.probe import run_probe

RATES = [(2_000, 50), (20_000, 100), (50_000, 400)]  # (prefill tok/s, decode tok/s)


def serve(trajectory: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "harness.replay.server", "--trajectory", str(trajectory),
                             "--port", "0", "--served-model-name", "timed", "--max-model-len", "131072"],
                            stdout=subprocess.PIPE, text=True)
    port = re.search(r":(\d+)$", proc.stdout.readline().strip()).group(1)
    return proc, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--long", type=int, default=16_000, help="long-context probe size (tokens)")
    args = parser.parse_args()
    print(f"{'prefill':>8} {'decode':>7} | {'prefill meas.':>13} {'err':>6} | {'decode meas.':>12} {'err':>6} "
          f"| {'decode@long':>11} {'err':>6} | long tokens")
    with tempfile.TemporaryDirectory() as tmp:
        for prefill, decode in RATES:
            trajectory = Path(tmp) / "timed.yaml"
            trajectory.write_text(f"fallback: {{prefill_tps: {prefill}, decode_tps: {decode}}}\ntrajectories: []\n")
            proc, url = serve(trajectory)
            try:
                p = run_probe(url, "timed", max_model_len=131072, long_target=args.long, short_tokens=128,
                              long_output=64)
            finally:
                proc.terminate()
                proc.wait(timeout=10)

            def err(measured, true):
                return f"{100 * (measured - true) / true:+5.1f}%"

            print(f"{prefill:>8} {decode:>7} | {p.prefill_tps:>13} {err(p.prefill_tps, prefill):>6} | "
                  f"{p.decode_short_tps:>12} {err(p.decode_short_tps, decode):>6} | "
                  f"{p.decode_long_tps:>11} {err(p.decode_long_tps, decode):>6} | {p.long_context_tokens}")


if __name__ == "__main__":
    main()
