"""The torch guardrail (seed 003): none of the fitness tools needs torch, and a transitive
upgrade that pulls it in (gigabytes, a CUDA build) must fail the image's build, not slip in.

    python -m harness.fitness.guard [--python PATH ...]

Exit 1 naming each interpreter where torch is importable or installed (this one, and each
`--python`: the checkers' own venv), else 0. Standard library only. Dockerfile.fitness runs it
after every install.
"""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("torch",)
PROBE = ("import importlib.metadata as m, importlib.util as u, sys\n"
         "names = {(d.metadata['Name'] or '').lower() for d in m.distributions()}\n"
         f"bad = [n for n in {FORBIDDEN!r} if u.find_spec(n) is not None or n in names]\n"
         "print(','.join(bad)); sys.exit(1 if bad else 0)\n")


def check(python: str) -> str | None:
    """None when `python` has no forbidden package, else what it has."""
    done = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=120)
    if done.returncode == 0:
        return None
    return done.stdout.strip() or f"the probe failed: {done.stderr.strip()[-300:]}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pythons = [sys.executable]
    while argv:
        flag, *argv = argv
        if flag != "--python" or not argv:
            print("usage: python -m harness.fitness.guard [--python PATH ...]", file=sys.stderr)
            return 2
        path, *argv = argv
        pythons.append(path)
    failed = False
    for python in pythons:
        found = check(python)
        if found:
            failed = True
            print(f"torch guardrail: {python} has {found}: no fitness tool needs it; find the package that "
                  "pulled it in (pip show / pipdeptree) and pin it back", file=sys.stderr)
    if not failed:
        print(f"torch guardrail: none of {', '.join(FORBIDDEN)} in {len(pythons)} interpreter(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
