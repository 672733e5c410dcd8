"""The classroom simulation from a stock Python: standard library only (seed 002: "the
simulator needs only Python, so it runs in a stock container"). From the repository root:

    python3 -m harness.load.classroom_standalone --base-url https://llm.lab.example:8443 \\
        --api-keys-file keys/api-keys.csv --cacert keys/ca.pem --users 40 --duration 900 --yes

The same students, tools, clock and records as `llms-benchmark classroom` (harness/load/
classroom*.py), their HTTP through harness/load/stdlib_http.py instead of httpx; the server's
/metrics are not sampled here (record them on the server's host). Exit 0 when a request was
answered, 1 when none was, 2 on bad input (one message naming the option and the fix).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.errors import UserError
from harness.load.classroom import run_classroom
from harness.load.classroom_config import ClassroomConfig
from harness.load.classroom_report import headline


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m harness.load.classroom_standalone",
                                description="Simulate a class of students, each with a coding agent, against a "
                                            "real OpenAI-compatible endpoint (standard library only).")
    p.add_argument("--base-url", required=True, help="The server, e.g. https://llm.lab.example:8443.")
    p.add_argument("--model", default="", help="Served model name (default: the first GET /v1/models lists).")
    p.add_argument("--api-keys-file", "--keys-file", dest="keys_file", type=Path,
                   help="API keys, one a line or user_id,api_key (one per student).")
    p.add_argument("--api-key-env", default="", help="Env var holding one key for all.")
    p.add_argument("--cacert", type=Path, help="PEM bundle of the private CA that signed the server's certificate.")
    p.add_argument("--users", type=int, default=40)
    p.add_argument("--scenario", default="java", help="java (the default), python, or mixed.")
    p.add_argument("--duration", type=float, default=900, help="Real seconds during which students start requests.")
    p.add_argument("--grace", type=float, default=300)
    p.add_argument("--ramp-up", type=float, default=120)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--prompt-file", type=Path, help="Captured opencode {system, tools} JSON.")
    p.add_argument("--seed", type=int, default=20260929)
    p.add_argument("--time-scale", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=600, help="Per-read idle timeout of a request (s).")
    p.add_argument("--out-dir", type=Path, default=Path("bench-results"))
    p.add_argument("--no-title", action="store_true", help="Do not send opencode's title request.")
    p.add_argument("--yes", action="store_true", help="Accepted: nothing is ever asked.")
    p.add_argument("--json", action="store_true", help="Print the summary as JSON.")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    cfg = ClassroomConfig(
        base_url=args.base_url, model=args.model, users=args.users, scenario=args.scenario,
        duration_s=args.duration, grace_s=args.grace, ramp_up_s=args.ramp_up, max_turns=args.max_turns,
        keys_file=args.keys_file, api_key_env=args.api_key_env or None, prompt_file=args.prompt_file,
        cacert=args.cacert, title=not args.no_title, metrics=False, seed=args.seed, time_scale=args.time_scale,
        read_timeout_s=args.timeout, out_dir=args.out_dir, stdlib=True)
    try:
        result = run_classroom(cfg, lambda message: print(f"classroom {message}", file=sys.stderr, flush=True))
    except UserError as exc:
        print(f"error: {exc.render()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    if args.json:
        print(json.dumps({**result.summary, "folder": str(result.folder)}, default=str))
    else:
        for label, value in headline(result.summary):
            print(f"{label}: {value}")
        print(f"results: {result.folder}")
    return 0 if result.summary["client"]["requests_ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
