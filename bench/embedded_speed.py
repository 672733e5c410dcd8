"""CPU serving options for the embedded model, measured with llama.cpp's own llama-bench.

Prefill (pp) and decode (tg) at a depth like opencode's first prompt, for each combination
of flash attention and KV-cache type: what SPEED_FLAGS in harness/stacks/llamacpp.py is
chosen from. Each combination runs in its own process (an invalid one, a quantized V cache
without flash attention, fails alone). `--bench` points at another build's llama-bench (the
`dispatch` flavour installed in a scratch venv, say) to compare builds; the CPU backend each
run loaded (a dispatch build picks one variant at start) is printed beside its figures.

    .venv/bin/python bench/embedded_speed.py [--model HF_ID] [--depth 4096] [--threads N]
                                             [--bench PATH] [--only-shipped] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.embedded import models  # noqa: E402
from harness.markdown_table import row, rule  # noqa: E402
from harness.stacks.llamacpp import CPU_BACKEND, llama_server_binary  # noqa: E402

CONFIGS = [  # (flash attention, K type, V type)
    ("0", "f16", "f16"), ("1", "f16", "f16"), ("1", "q8_0", "q8_0"), ("0", "q8_0", "f16"),
]
SHIPPED = ("0", "f16", "f16")  # SPEED_FLAGS: --flash-attn off, f16 KV cache


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="Qwen/Qwen2.5-Coder-1.5B-Instruct", choices=list(models.MODELS))
    ap.add_argument("--depth", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--bench", type=Path, help="a llama-bench binary (default: the installed build's)")
    ap.add_argument("--only-shipped", action="store_true", help="only the combination SPEED_FLAGS ships")
    ap.add_argument("--repeats", type=int, default=1, help="llama-bench -r: runs averaged per figure")
    args = ap.parse_args()
    gguf = models.installed(models.MODELS[args.model])
    server = llama_server_binary()
    if gguf is None or (server is None and args.bench is None):
        raise SystemExit("run `make setup` first")
    bench = args.bench or server.with_name("llama-bench")
    print(row(["fa", "K", "V", f"pp1024 @ d{args.depth} tok/s", f"tg32 @ d{args.depth} tok/s", "CPU backend"]))
    print(rule(6, spaced=True))
    for fa, k, v in [SHIPPED] if args.only_shipped else CONFIGS:
        out = subprocess.run([str(bench), "-m", str(gguf), "-t", str(args.threads), "-p", "1024", "-n", "32",
                              "-d", str(args.depth), "-fa", fa, "-ctk", k, "-ctv", v, "-r", str(args.repeats),
                              "-o", "csv"], capture_output=True, text=True, timeout=1800)
        speeds = [line.split(",")[-2].strip('"') for line in out.stdout.splitlines()[1:] if line.strip()]
        cells = (speeds + ["failed", "failed"])[:2] if out.returncode == 0 else ["failed", "failed"]
        loaded = CPU_BACKEND.search(out.stderr)  # a dispatch build names the variant it loaded
        print(row([fa, k, v, cells[0], cells[1], loaded["lib"] if loaded else "built in"]), flush=True)


if __name__ == "__main__":
    main()
