"""The embedded default's decode when the box gets busy in the middle of a mission (issue 62):
shipped (threads chosen once, at the serve) against chosen (the pace monitor's readings of
others' CPU demand, the retune cutting the request in flight through the sandbox's bridge).

The embedded 1.5B model is served as a launch serves it (llama.cpp, threads chosen for the box
at the start, from an idle box). A mission is stood in for by `--turns` chat turns of a growing
conversation (a ~2k-token opening, `--answer` tokens each, streamed through a real Bridge with
its wire log); the client sends a call the bridge cut again after 2 s, as opencode does. A
CPU-bound process (`python3 -c 'while True: pass'`, outside our tree) starts at 0 %, 25 % and
50 % of the mission's idle duration (measured first). Each figure: tokens streamed after the
busy process started over the seconds since (prefill and any restart included), and its share
of the box's idle llama-bench decode (best of 1 and 2 threads, tg64 at a depth of 2,048).
A mission is capped at `--cap` seconds (shipped collapses: its tokens so far count).

    .venv/bin/python bench/busy_mid_run.py [--starts 0,25,50] [--turns 6] [--answer 96] [--out bench/results/busy-mid-run.md]
"""

from __future__ import annotations

import argparse
import datetime
import json
import socket
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cpu_threads import MODEL, start_hog, stop_hog  # noqa: E402
from harness.embedded import models  # noqa: E402
from harness.markdown_table import row, rule  # noqa: E402
from harness.sandbox.net import Bridge  # noqa: E402
from harness.sandbox.wirelog import WireLog, read_log  # noqa: E402
from harness.serving.pace import PaceMonitor  # noqa: E402
from harness.serving.retune import Retuner  # noqa: E402
from harness.load.metrics import running_requests  # noqa: E402
from harness.stacks.llamacpp import LlamaCppStack, cpu_label, llama_server_binary  # noqa: E402
from harness.run.unitlog import UnitLogCollector, wait_ready  # noqa: E402
from harness.vot.environment import load_environment  # noqa: E402
from harness.vot.preset import load_preset  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PRESET = "cpu-qwen2-5-coder-1-5b"
OPENING = ("You are reviewing a small web service. " * 8 + "Here is its code:\n"
           + "def handler(request):\n    return respond(request.args, status=200)\n" * 60)


def idle_reference(depth: int = 2048, beside_hog: bool = False) -> tuple[float, str]:
    """The box's decode: llama-bench tg64 at `depth`, best of 1 and 2 threads (idle, or beside a
    busy process: the most any thread setting gets then)."""
    import subprocess

    hog = start_hog() if beside_hog else None
    try:
        return _bench_best(depth)
    finally:
        if hog is not None:
            stop_hog(hog)


def _bench_best(depth: int) -> tuple[float, str]:
    import subprocess

    gguf, bench = models.installed(models.MODELS[MODEL]), llama_server_binary().with_name("llama-bench")
    best, how = 0.0, ""
    for threads in (1, 2):
        out = subprocess.run([str(bench), "-m", str(gguf), "-t", str(threads), "-p", "0", "-n", "64", "-d", str(depth),
                              "-fa", "0", "-r", "2", "-o", "csv"], capture_output=True, text=True, timeout=1800)
        if out.returncode != 0:
            raise SystemExit(f"llama-bench failed: {out.stderr[-1500:]}")
        rows = [line for line in out.stdout.splitlines()[1:] if line.strip()]
        tps = float(rows[-1].split(",")[-2].strip('"'))
        if tps > best:
            best, how = tps, f"{threads} thread{'s' if threads > 1 else ''}"
    return best, how


class Mission:
    """`turns` streamed turns through the bridge; each content chunk's arrival time kept."""

    def __init__(self, url: str, model: str, turns: int, answer: int, cap_s: float) -> None:
        self.url, self.model, self.turns, self.answer, self.cap_s = url, model, turns, answer, cap_s
        self.chunks: list[float] = []
        self.turn_chunks: list[list[float]] = []  # each answer's content chunks (a resent call: its own list)
        self.resent = 0
        self.started = self.ended = 0.0

    def run(self) -> None:
        messages = [{"role": "user", "content": OPENING + "\nDescribe the service in detail."}]
        self.started = time.monotonic()
        deadline = self.started + self.cap_s
        for _ in range(self.turns):
            text = None
            while text is None and time.monotonic() < deadline:
                # a connection a turn: llama.cpp closes a streamed answer's connection, and a client
                # that reused it would meet a dead socket (counted as a resend it is not)
                with httpx.Client(timeout=httpx.Timeout(30, read=self.cap_s), headers={"Connection": "close"}) as c:
                    text = self._turn(c, messages, deadline)
                if text is None:
                    self.resent += 1
                    time.sleep(2.0)  # opencode's first retry comes after ~2 s
            if text is None:
                break
            messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "Go on."}]
        self.ended = time.monotonic()

    def _turn(self, client: httpx.Client, messages: list[dict], deadline: float) -> str | None:
        body = {"model": self.model, "messages": messages, "max_tokens": self.answer, "stream": True,
                "ignore_eos": True}
        parts, done = [], False
        self.turn_chunks.append([])
        try:
            with client.stream("POST", f"{self.url}/v1/chat/completions", json=body) as r:
                for line in r.iter_lines():
                    if time.monotonic() > deadline:
                        return None
                    if line == "data: [DONE]":
                        done = True
                    elif line.startswith("data: "):
                        delta = (json.loads(line[6:]).get("choices") or [{}])[0].get("delta") or {}
                        if delta.get("content"):
                            parts.append(delta["content"])
                            self.chunks.append(time.monotonic())
                            self.turn_chunks[-1].append(self.chunks[-1])
        except httpx.HTTPError:
            return None
        return "".join(parts) if done else None

    def after(self, t0: float) -> float:
        end = self.ended
        return sum(1 for t in self.chunks if t >= t0) / max(end - t0, 1e-3)

    def decode_after(self, t0: float) -> float | None:
        """Decode alone: tokens per second between an answer's first and last token, over the
        answers streamed after t0 (their prefill and any restart left out), pooled."""
        tokens = seconds = 0.0
        for chunks in self.turn_chunks:
            chunks = [t for t in chunks if t >= t0]
            if len(chunks) >= 2:
                tokens += len(chunks) - 1
                seconds += chunks[-1] - chunks[0]
        return tokens / seconds if seconds else None


def one(stack: LlamaCppStack, env, preset, variant: str, start_s: float | None, args, tmp: Path) -> dict:
    unit = stack.serve(stack.plan(env, preset), env, preset)
    collector = UnitLogCollector(stack, unit, tmp / f"{variant}-unit.log")
    collector.start()
    port = int(unit.base_url.rsplit(":", 1)[1])
    bridge = Bridge([port], wire=(port, WireLog(tmp / f"{variant}-wire.jsonl")))
    listener = socket.create_server(("127.0.0.1", 0))
    bridge.adopt(listener, port)
    pace = retuner = None
    hog = None
    try:
        wait_ready(unit, stack.ready_timeout_s, collector)
        first = stack.threads_now.threads
        if variant == "chosen":
            retuner = Retuner(stack, unit, env, preset, lambda s: print("  " + s, file=sys.stderr),
                              net=bridge, running=lambda: running_requests(unit.base_url))
            pace = PaceMonitor(unit.base_url, server_pid=lambda: unit.pid, on_reading=retuner,
                               timeline=tmp / f"{variant}-pace.jsonl")
            retuner.pace = pace
            pace.start()
        mission = Mission(f"http://127.0.0.1:{listener.getsockname()[1]}", preset.served_name,
                          args.turns, args.answer, args.cap)
        worker = threading.Thread(target=mission.run)
        worker.start()
        t_busy = None
        if start_s is not None:
            time.sleep(start_s)
            hog, t_busy = start_hog(), time.monotonic()
        worker.join()
        return {"threads": first, "threads_end": stack.threads_now.threads, "seconds": mission.ended - mission.started,
                "tps_after": mission.after(t_busy if t_busy is not None else mission.started),
                "decode_after": mission.decode_after(t_busy if t_busy is not None else mission.started),
                "tokens": len(mission.chunks), "resent": mission.resent,
                "retunes": len(retuner.done) if retuner else 0,
                "cut": sum(1 for e in read_log(tmp / f"{variant}-wire.jsonl") if e.get("cut")),
                "capped": mission.ended - mission.started >= args.cap - 1}
    finally:
        if hog is not None:
            stop_hog(hog)
        if pace is not None:
            pace.stop()
        bridge.close()
        collector.stop()
        stack.destroy(unit)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--starts", default="0,25,50", help="when the busy process starts, % of the idle mission")
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--answer", type=int, default=96)
    ap.add_argument("--cap", type=float, default=300.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if models.installed(models.MODELS[MODEL]) is None or llama_server_binary() is None:
        raise SystemExit("run `make setup` first")
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="busy-mid-run-"))
    env = load_environment(ROOT, "cpu")
    env = env.model_copy(update={"config": {k: v for k, v in env.config.items() if k != "threads"}})
    preset = load_preset(ROOT, PRESET).resolve(env.stack)
    stack = LlamaCppStack(tmp)
    reference, ref_how = idle_reference()
    print(f"idle llama-bench decode: {reference:.2f} tok/s ({ref_how})", file=sys.stderr, flush=True)
    busy_best, busy_how = idle_reference(beside_hog=True)
    print(f"beside a busy process: {busy_best:.2f} tok/s ({busy_how})", file=sys.stderr, flush=True)
    idle = one(stack, env, preset, "shipped", None, args, tmp)
    print(f"idle mission: {idle}", file=sys.stderr, flush=True)
    lines = [f"# The embedded default's decode when the box gets busy mid-mission ({datetime.date.today()})", "",
             f"`{' '.join(['.venv/bin/python bench/busy_mid_run.py', *sys.argv[1:]])}` on {cpu_label()}; "
             f"{PRESET} (llama.cpp), a mission of {args.turns} streamed turns of {args.answer} tokens through the "
             f"sandbox's bridge, capped at {args.cap:.0f} s. The box's idle decode (llama-bench tg64 at depth 2048, "
             f"best of 1 and 2 threads): **{reference:.2f} tok/s** ({ref_how}); beside one busy process the most "
             f"any thread setting gets: {busy_best:.2f} tok/s ({busy_how}, {busy_best / reference:.0%} of idle). "
             f"Idle mission: {idle['seconds']:.0f} s, decode {idle['decode_after']:.2f} tok/s on {idle['threads']} "
             "threads.", "",
             "*Decode*: tokens per second between each answer's first and last token, over the answers streamed "
             "after the busy process started (pooled); *streamed*: every token after it over the seconds since "
             "(prefill, the retune's restart and resent calls included).", "",
             row(["busy from", "shipped threads", "decode tok/s", "of idle", "streamed tok/s", "mission s",
                  "chosen threads", "decode tok/s", "of idle", "streamed tok/s", "mission s", "cut / resent"]),
             rule(12, spaced=True)]
    for pct in [int(x) for x in args.starts.split(",")]:
        start = idle["seconds"] * pct / 100
        got = {v: one(stack, env, preset, v, start, args, tmp) for v in ("shipped", "chosen")}
        print(f"{pct}%: {got}", file=sys.stderr, flush=True)
        s, c = got["shipped"], got["chosen"]
        def dec(v):
            return "—" if v is None else f"{v:.2f}"

        def share(v):
            return "—" if v is None else f"{v / reference:.0%}"

        lines.append(row([f"{pct} % ({start:.0f} s)", s["threads"], dec(s["decode_after"]), share(s["decode_after"]),
                          f"{s['tps_after']:.2f}", f"{s['seconds']:.0f}" + (" (cap)" if s["capped"] else ""),
                          f"{c['threads']} → {c['threads_end']}", dec(c["decode_after"]), share(c["decode_after"]),
                          f"{c['tps_after']:.2f}", f"{c['seconds']:.0f}" + (" (cap)" if c["capped"] else ""),
                          f"{c['cut']} / {c['resent']}"]))
        print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
