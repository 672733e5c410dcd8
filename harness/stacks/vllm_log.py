"""What vLLM says about its KV cache at start, read from the unit's log for the run record.

The lines, as vLLM 0.32 logs them (read in its source: vllm/v1/core/kv_cache_utils.py
`update_kv_cache_capacity`, v1/worker/gpu_worker.py, v1/worker/cpu_worker.py):
- "GPU KV cache size: 178,880 tokens, Maximum concurrency for 32,768 tokens per request: 5.46x"
  (one line; the device is "GPU" for CUDA, else the device type upper-cased, so the CPU build logs
  "CPU KV cache size", and "GPU + host" with a host-memory sparse pool);
- the memory it holds: "Available KV cache memory: 8.11 GiB" on a GPU (what is left of
  `--gpu-memory-utilization` after the weights and the profile run), or, on the CPU build,
  "Explicitly set (2.0/23.47) GiB for KV cache" (VLLM_CPU_KVCACHE_SPACE) or "Auto set (...)".
A log line prefix (timestamp, process name, ANSI colours) is ignored: the patterns search.
Every stack that serves vLLM (a local process, Docker, Apple metal, Azure) reads the same lines.
"""

from __future__ import annotations

import re

_KV_TOKENS = re.compile(r"\b(?P<device>[A-Z]{2,5}(?: \+ host)?) KV cache size: (?P<n>[\d,]+) tokens")
_CONCURRENCY = re.compile(r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x")
_AVAILABLE = re.compile(r"Available KV cache memory: (?P<gib>[\d.]+) GiB")
_CPU_SPACE = re.compile(r"(?:Explicitly|Auto) set \((?P<gib>[\d.]+)/[\d.]+\) GiB for KV cache")


def kv_facts(log_text: str) -> dict[str, str]:
    """The first of each line the log holds (a restart inside one unit logs them again; the
    first is the one the run was served with). Missing lines are missing keys, never guesses."""
    facts: dict[str, str] = {}
    if m := _KV_TOKENS.search(log_text):
        facts["kv_cache_tokens"] = m["n"].replace(",", "")
        facts["kv_cache_device"] = m["device"]
    if m := _AVAILABLE.search(log_text) or _CPU_SPACE.search(log_text):
        facts["kv_cache_gib"] = m["gib"]
    if m := _CONCURRENCY.search(log_text):
        facts["kv_max_concurrency"] = f"{m['x']}x at {m['len'].replace(',', '')} tokens per request"
    return facts
