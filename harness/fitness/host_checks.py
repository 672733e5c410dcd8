#!/usr/bin/env python3
"""Seed 003's host-side companion (optional; needs a shell on the box that serves): run next to
llama.cpp, fold the results into a fitness run's folder as `host_checks.json`; the run's
report.md renders them (a section between markers, rewritten on each fold, and every report
`fitness run` writes into a folder that already holds one).

    python3 harness/fitness/host_checks.py --run-dir bench-results/fitness/<run> \\
        [--llama-bench PATH --model GGUF] [--smi auto|nvidia-smi|rocm-smi|none] \\
        [--perplexity PATH --quant-a GGUF --quant-b GGUF --text FILE]

    llama_bench  llama-bench -o json on --model: prompt (pp) and generation (tg) tok/s ± SD
    gpu_log      the GPU's memory, power and temperature from nvidia-smi or rocm-smi, --smi-samples
                 readings --smi-interval s apart (none found: skipped, said why)
    perplexity   the two-quant triage: llama-perplexity over --text with each quant, the final
                 PPL ± its error, B/A and (B-A) in combined SEs (> 2: the quants differ beyond noise)

A step whose tool is not named or not found is skipped with why; a named tool that fails is an
error (exit 3). Exit 0 otherwise; a usage error exits 3 (the fitness contract: 2 means FAIL).
Standard library only, like the smoke path.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

FILE = "host_checks.json"
BEGIN, END = "<!-- host_checks: begin -->", "<!-- host_checks: end -->"
PPL = re.compile(r"Final estimate:\s*PPL\s*=\s*([0-9.]+)\s*\+/-\s*([0-9.]+)")
PIPELINE_ERROR = 3


class StepError(Exception):
    pass


def _run(argv: list[str], timeout_s: float) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise StepError(f"{Path(argv[0]).name} ran past {timeout_s:.0f}s") from None
    except OSError as exc:
        raise StepError(f"{argv[0]}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        raise StepError(f"{Path(argv[0]).name} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-400:]}")
    return done.stdout


def llama_bench(args) -> dict:
    if not args.llama_bench:
        return {"status": "skipped", "reason": "no --llama-bench named"}
    if not args.model:
        raise StepError("--llama-bench needs --model (the GGUF to bench)")
    out = _run([args.llama_bench, "-m", args.model, "-o", "json", "-p", str(args.bench_prompt), "-n",
                str(args.bench_gen), "-r", str(args.bench_repeats)], args.timeout)
    try:
        rows = json.loads(out)
    except ValueError:
        raise StepError(f"llama-bench -o json printed no JSON: {out[:200]!r}") from None
    tests = []
    for r in rows if isinstance(rows, list) else []:
        kind = f"pp{r.get('n_prompt')}" if r.get("n_prompt") and not r.get("n_gen") else f"tg{r.get('n_gen')}"
        tests.append({"test": kind, "tok_s": r.get("avg_ts"), "sd": r.get("stddev_ts"), "backends": r.get("backends"),
                      "threads": r.get("n_threads"), "gpu_layers": r.get("n_gpu_layers")})
    if not tests:
        raise StepError("llama-bench reported no test")
    first = rows[0]
    return {"status": "ran", "model": first.get("model_type"), "model_file": args.model,
            "cpu": first.get("cpu_info"), "gpu": first.get("gpu_info"), "build": first.get("build_commit"),
            "tests": tests}


def _smi_tool(choice: str) -> tuple[str, str] | None:
    names = ("nvidia-smi", "rocm-smi") if choice == "auto" else (choice,)
    for name in names:
        path = shutil.which(name)
        if path:
            return name, path
    return None


def gpu_log(args) -> dict:
    if args.smi == "none":
        return {"status": "skipped", "reason": "--smi none"}
    found = _smi_tool(args.smi)
    if found is None:
        if args.smi != "auto":
            raise StepError(f"{args.smi} is not on PATH")
        return {"status": "skipped", "reason": "neither nvidia-smi nor rocm-smi is on PATH (no GPU tool here)"}
    name, path = found
    samples = []
    for i in range(args.smi_samples):
        if i:
            time.sleep(args.smi_interval)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if name == "nvidia-smi":
            out = _run([path, "--query-gpu=index,name,memory.used,memory.total,power.draw,temperature.gpu",
                        "--format=csv,noheader,nounits"], 60)
            for line in out.strip().splitlines():
                cells = [c.strip() for c in line.split(",")]
                if len(cells) < 6:
                    raise StepError(f"nvidia-smi printed an unexpected line: {line[:200]!r}")
                samples.append({"at": at, "gpu": cells[0], "name": cells[1], "mem_used_mib": _num(cells[2]),
                                "mem_total_mib": _num(cells[3]), "power_w": _num(cells[4]), "temp_c": _num(cells[5])})
        else:
            out = _run([path, "--showmeminfo", "vram", "--showpower", "--showtemp", "--json"], 60)
            try:
                doc = json.loads(out)
            except ValueError:
                raise StepError(f"rocm-smi --json printed no JSON: {out[:200]!r}") from None
            for card, v in doc.items():
                if not isinstance(v, dict):
                    continue
                used = next((x for k, x in v.items() if "VRAM Total Used Memory" in k), None)
                total = next((x for k, x in v.items() if "VRAM Total Memory" in k), None)
                power = next((x for k, x in v.items() if "Power" in k), None)
                temp = next((x for k, x in v.items() if "Temperature" in k), None)
                samples.append({"at": at, "gpu": card, "name": card,
                                "mem_used_mib": _num(used) / 2**20 if _num(used) is not None else None,
                                "mem_total_mib": _num(total) / 2**20 if _num(total) is not None else None,
                                "power_w": _num(power), "temp_c": _num(temp)})
    return {"status": "ran", "tool": name, "samples": samples}


def _num(text) -> float | None:
    try:
        return float(str(text).strip())
    except (TypeError, ValueError):
        return None


def perplexity(args) -> dict:
    if not args.perplexity:
        return {"status": "skipped", "reason": "no --perplexity named"}
    if not (args.quant_a and args.quant_b and args.text):
        raise StepError("--perplexity needs --quant-a, --quant-b and --text")
    got = {}
    for label, gguf in (("a", args.quant_a), ("b", args.quant_b)):
        out = _run([args.perplexity, "-m", gguf, "-f", args.text, "-c", str(args.ppl_ctx), "--chunks",
                    str(args.ppl_chunks)], args.timeout)
        found = PPL.findall(out)
        if not found:
            raise StepError(f"llama-perplexity printed no 'Final estimate: PPL = …' for {gguf}")
        ppl, err = map(float, found[-1])
        got[label] = {"model": gguf, "ppl": ppl, "se": err}
    a, b = got["a"], got["b"]
    combined = math.sqrt(a["se"] ** 2 + b["se"] ** 2)
    z = (b["ppl"] - a["ppl"]) / combined if combined > 0 else None
    return {"status": "ran", "a": a, "b": b, "ratio_b_over_a": round(b["ppl"] / a["ppl"], 4) if a["ppl"] else None,
            "delta_in_se": round(z, 2) if z is not None else None,
            "verdict": None if z is None else ("differ beyond noise" if abs(z) > 2 else "within noise (< 2 SE)"),
            "context": args.ppl_ctx, "chunks": args.ppl_chunks, "text": args.text}


STEPS = {"llama_bench": llama_bench, "gpu_log": gpu_log, "perplexity": perplexity}


def render_markdown(doc: dict) -> str:
    """The report's section for a host_checks.json (the fitness report renders it too)."""
    lines = [BEGIN, "## Host checks", "", f"Folded {doc.get('finished_utc', '?')} on {doc.get('host', '?')} "
             f"(`{FILE}`).", ""]
    steps = doc.get("steps") or {}
    for name, step in steps.items():
        status = step.get("status")
        if status != "ran":
            lines.append(f"- **{name}**: {status}" + (f" — {step.get('reason')}" if step.get("reason") else ""))
    bench = steps.get("llama_bench") or {}
    if bench.get("status") == "ran":
        lines += ["", f"llama-bench, {bench.get('model')} ({bench.get('cpu') or ''} {bench.get('gpu') or ''}):", "",
                  "| test | tok/s | SD | backends | threads |", "|---|---:|---:|---|---:|"]
        lines += [f"| {t['test']} | {_fmt(t['tok_s'])} | {_fmt(t['sd'])} | {t.get('backends')} | {t.get('threads')} |"
                  for t in bench.get("tests", [])]
    gpu = steps.get("gpu_log") or {}
    if gpu.get("status") == "ran":
        lines += ["", f"{gpu.get('tool')}:", "", "| at | GPU | memory used / total MiB | power W | temp °C |",
                  "|---|---|---:|---:|---:|"]
        lines += [f"| {s['at']} | {s['gpu']} {s['name']} | {_fmt(s['mem_used_mib'])} / {_fmt(s['mem_total_mib'])} | "
                  f"{_fmt(s['power_w'])} | {_fmt(s['temp_c'])} |" for s in gpu.get("samples", [])]
    ppl = steps.get("perplexity") or {}
    if ppl.get("status") == "ran":
        lines += ["", "Two-quant perplexity triage:", "", "| quant | PPL ± SE |", "|---|---:|",
                  f"| A {ppl['a']['model']} | {ppl['a']['ppl']:.4f} ± {ppl['a']['se']:.4f} |",
                  f"| B {ppl['b']['model']} | {ppl['b']['ppl']:.4f} ± {ppl['b']['se']:.4f} |", "",
                  f"B/A {ppl.get('ratio_b_over_a')}; B−A = {ppl.get('delta_in_se')} combined SE: {ppl.get('verdict')}."]
    lines += [END]
    return "\n".join(lines) + "\n"


def _fmt(v) -> str:
    return "—" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def fold_into_report(report: Path, section: str) -> bool:
    """Replace (or append) the section in an existing report.md; False when there is none."""
    if not report.is_file():
        return False
    text = report.read_text(encoding="utf-8")
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section.rstrip("\n") + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    report.write_text(text, encoding="utf-8")
    return True


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(PIPELINE_ERROR)


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="host_checks.py", description="seed 003's host-side checks, folded into a fitness run")
    p.add_argument("--run-dir", required=True, help="the fitness run's report folder")
    p.add_argument("--llama-bench", default="", help="path of llama-bench")
    p.add_argument("--model", default="", help="the GGUF llama-bench runs")
    p.add_argument("--bench-prompt", type=int, default=512)
    p.add_argument("--bench-gen", type=int, default=128)
    p.add_argument("--bench-repeats", type=int, default=3)
    p.add_argument("--smi", default="auto", choices=("auto", "nvidia-smi", "rocm-smi", "none"))
    p.add_argument("--smi-samples", type=int, default=3)
    p.add_argument("--smi-interval", type=float, default=1.0)
    p.add_argument("--perplexity", default="", help="path of llama-perplexity")
    p.add_argument("--quant-a", default="")
    p.add_argument("--quant-b", default="")
    p.add_argument("--text", default="", help="the text both quants are scored on")
    p.add_argument("--ppl-ctx", type=int, default=512)
    p.add_argument("--ppl-chunks", type=int, default=16)
    p.add_argument("--timeout", type=float, default=1800, help="seconds per tool run")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        p.error(f"--run-dir {run_dir}: not a folder (give a fitness run's report folder)")
    for flag in ("bench_prompt", "bench_gen", "bench_repeats", "smi_samples", "ppl_ctx", "ppl_chunks"):
        if getattr(args, flag) < 1 or getattr(args, flag) > 1_000_000:
            p.error(f"--{flag.replace('_', '-')} must be 1 to 1000000")
    for flag in ("llama_bench", "perplexity"):
        path = getattr(args, flag)
        if path and not (Path(path).is_file() or shutil.which(path)):
            p.error(f"--{flag.replace('_', '-')} {path}: no such program")
    doc = {"host": __import__("socket").gethostname(), "python": sys.version.split()[0], "steps": {}}
    code = 0
    for name, step in STEPS.items():
        t0 = time.monotonic()
        try:
            got = step(args)
        except StepError as exc:
            got, code = {"status": "error", "reason": str(exc)}, PIPELINE_ERROR
        got["wall_s"] = round(time.monotonic() - t0, 3)
        doc["steps"][name] = got
        print(f"host_checks {name}: {got['status']}" + (f" - {got['reason']}" if got.get("reason") else ""),
              file=sys.stderr)
    doc["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc["exit_code"] = code
    (run_dir / FILE).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    folded = fold_into_report(run_dir / "report.md", render_markdown(doc))
    print(f"host_checks: {run_dir / FILE}" + (" (rendered in report.md)" if folded else ""), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
