"""Read counters from a served unit's Prometheus `/metrics` (vLLM's names, with
llama.cpp's as a fallback), parsed with prometheus_client's own parser."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

# Counter families as the parser names them (without the `_total` suffix).
GENERATED = ("vllm:generation_tokens", "llamacpp:tokens_predicted")


def counter(base_url: str, names: tuple[str, ...], *, api_key: str | None = None) -> float | None:
    """The first family of `names` the server exposes, summed over its samples; None if unreadable."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(f"{base_url}/metrics", headers=headers, timeout=10)
        resp.raise_for_status()
        families = {f.name: f for f in text_string_to_metric_families(resp.text)}
    except (httpx.HTTPError, ValueError):
        return None
    for name in names:
        family = families.get(name) or families.get(f"{name}_total")
        if family is not None:
            return sum(s.value for s in family.samples if not s.name.endswith("_created"))
    return None
