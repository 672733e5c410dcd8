"""GPU memory in use, from the gauges a /metrics endpoint exposes — where it exposes any.

llama.cpp and vLLM publish no device-memory gauge of their own (vLLM's KV-cache percentage
is not memory in GiB; `process_resident_memory_bytes` is host RAM), so the seed's
`vram_baseline` / `vram_peak_gib` come from a GPU exporter's gauges served at the same
/metrics (a gateway that merges them, or a DCGM / nvidia-smi / ROCm exporter): otherwise
they are null, with the reason said.
"""

from __future__ import annotations

# gauge name -> bytes per unit (summed over the GPUs, as the snapshot's `raw` sums label sets)
GAUGES = {
    "DCGM_FI_DEV_FB_USED": 2**20,  # NVIDIA DCGM exporter: framebuffer used, MiB
    "nvidia_smi_memory_used_bytes": 1,  # nvidia_gpu_exporter
    "gpu_memory_used_bytes": 1,
    "amd_gpu_used_vram": 2**20,  # AMD device-metrics-exporter, MiB
    "vram_used_bytes": 1,
}
NOT_EXPOSED = ("the server's /metrics exposes no GPU memory gauge (looked for " + ", ".join(GAUGES) + "); "
               "llama.cpp and vLLM publish none of their own")


def used_gib(raw: dict[str, float]) -> tuple[float | None, str]:
    """(GiB in use, the gauge it came from) or (None, why not)."""
    for name, scale in GAUGES.items():
        if name in raw:
            return round(raw[name] * scale / 2**30, 3), name
    return None, NOT_EXPOSED
