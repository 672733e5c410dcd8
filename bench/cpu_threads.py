"""llama.cpp's threads on a busy box: shipped (one per core) against chosen (the cores others
leave free, harness/stacks/cpu_threads.py), idle and beside 1 and 2 CPU-bound processes.

Each condition starts its busy processes (`python3 -c 'while True: pass'`), lets the harness
choose as a launch would (1 s of /proc/stat), then runs llama.cpp's own llama-bench with the
shipped and the chosen thread counts: prefill (pp) and decode (tg) of the embedded model.
The goal (issue 47): beside one busy process, decode >= 50 % of idle; idle no slower.

    .venv/bin/python bench/cpu_threads.py [--busy 0,1,2] [--repeats 3] [--out bench/results/cpu-threads.md]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.embedded import models  # noqa: E402
from harness.markdown_table import row, rule  # noqa: E402
from harness.stacks import cpu_threads  # noqa: E402
from harness.stacks.llamacpp import cpu_label, llama_server_binary  # noqa: E402

MODEL = "Qwen/Qwen2.5-Coder-1.5B-Instruct"


def llama_bench(bench: Path, gguf: Path, threads: int, prompt: int, gen: int, repeats: int) -> tuple[float, float]:
    """(prefill tok/s, decode tok/s), llama-bench's averages over `repeats` runs."""
    started = time.monotonic()
    out = subprocess.run([str(bench), "-m", str(gguf), "-t", str(threads), "-p", str(prompt), "-n", str(gen),
                          "-fa", "0", "-r", str(repeats), "-o", "csv"], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"llama-bench failed: {out.stderr[-2000:]}")
    rows = [line for line in out.stdout.splitlines()[1:] if line.strip()]
    speeds = [float(line.split(",")[-2].strip('"')) for line in rows]
    print(f"  llama-bench -t {threads}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)
    return speeds[0], speeds[1]


def start_hog() -> int:
    """A CPU-bound process outside this process's tree (its shell parent exits, so it is
    re-parented): the harness counts its own descendants as its own load, never as others'."""
    shell = subprocess.run(["sh", "-c", f"'{sys.executable}' -c 'while True: pass' >/dev/null 2>&1 & echo $!"],
                           capture_output=True, text=True, check=True, timeout=30)
    return int(shell.stdout.strip())


def stop_hog(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--busy", default="0,1,2", help="CPU-bound processes beside, one condition each")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    gguf, server = models.installed(models.MODELS[MODEL]), llama_server_binary()
    if gguf is None or server is None:
        raise SystemExit("run `make setup` first")
    bench = server.with_name("llama-bench")
    usable, source = cpu_threads.usable_cores()
    shipped = len(os.sched_getaffinity(0))
    lines = [f"# llama.cpp threads on a busy box ({datetime.date.today()})", "",
             f"`{' '.join(['.venv/bin/python bench/cpu_threads.py', *sys.argv[1:]])}` on {cpu_label()}; "
             f"{MODEL} Q4_K_M, llama-bench pp{args.prompt} / tg{args.gen}, {args.repeats} repeats each; "
             f"usable cores: {source}. Shipped before issue 47: `--threads {shipped}` (one per core).", "",
             row(["beside", "others busy (measured)", "shipped threads", "pp tok/s", "tg tok/s", "chosen threads",
                  "pp tok/s", "tg tok/s", "chosen tg / idle tg"]), rule(9, spaced=True)]
    idle_tg = None
    for n in [int(x) for x in args.busy.split(",")]:
        hogs = [start_hog() for _ in range(n)]
        try:
            time.sleep(1.0)
            choice = cpu_threads.choose_now()
            pp_s, tg_s = llama_bench(bench, gguf, shipped, args.prompt, args.gen, args.repeats)
            if choice.threads == shipped:
                pp_c, tg_c = pp_s, tg_s
            else:
                pp_c, tg_c = llama_bench(bench, gguf, choice.threads, args.prompt, args.gen, args.repeats)
        finally:
            for hog in hogs:
                stop_hog(hog)
        if n == 0:
            idle_tg = tg_c
        ratio = f"{tg_c / idle_tg:.0%}" if idle_tg else "—"
        same = " (same run)" if choice.threads == shipped else ""
        lines.append(row([f"{n} busy", f"{choice.busy_cores:.2f}", shipped, f"{pp_s:.1f}", f"{tg_s:.1f}",
                          f"{choice.threads}{same}", f"{pp_c:.1f}", f"{tg_c:.1f}", ratio]))
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
