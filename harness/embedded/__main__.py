"""`python -m harness.embedded`: what `make setup` runs for the embedded CPU default.

Builds (once per machine and flags) and installs the portable llama.cpp server, then
assembles and verifies every embedded model. Idempotent: a second run does nothing.
"""

from __future__ import annotations

import subprocess
import sys

from harness.embedded import models, server


def main() -> int:
    say = lambda msg: print(f"llms-benchmark setup: {msg}", flush=True)  # noqa: E731
    try:
        build = server.install(say)
        say(f"llama-server {build['version']} ({build['flavour']}: {' '.join(build['cmake_args'])})")
        models.remove_stale()
        for model in models.MODELS.values():
            path = models.install(model, say)
            say(f"{model.hf_id}: {path}")
    except (subprocess.CalledProcessError, ValueError, FileNotFoundError) as exc:
        print(f"llms-benchmark setup failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
