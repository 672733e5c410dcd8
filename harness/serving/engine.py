"""Which engine served, at which version, from which image: what the server says of itself.

vLLM answers `GET /version` ({"version": "0.32.0"}) and lists its models as owned by
"vllm"; llama.cpp's server answers `GET /props` with its `build_info` ("b6123-4b2f..."); the
replay stack lists its trajectory as owned by "llms-benchmark-replay". The image is the
stack's (a container serves it), its digest where the stack could read one. Best effort:
a server that answers none of these is "unknown", never a guess.
"""

from __future__ import annotations

from typing import Any

import httpx

from harness.records.engine import EngineInfo
from harness.wire.tls import tls

REPLAY_OWNER = "llms-benchmark-replay"
ENDPOINTS = ("/v1/models", "/version", "/props")


def read_identity(root: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> dict[str, Any]:
    """The server's own answers at `ENDPOINTS` (by name without the slash), those it gave as JSON."""
    identity: dict[str, Any] = {}
    for path in ENDPOINTS:
        try:
            resp = httpx.get(f"{root.rstrip('/')}{path}", headers=headers or {}, timeout=timeout, verify=tls())
            if resp.status_code == 200:
                identity["models" if path == "/v1/models" else path.strip("/")] = resp.json()
        except (httpx.HTTPError, ValueError):
            continue
    return identity


def engine_of(identity: dict[str, Any]) -> EngineInfo:
    """The engine and version from what the server said (`read_identity`)."""
    props = identity.get("props") if isinstance(identity.get("props"), dict) else {}
    version = identity.get("version") if isinstance(identity.get("version"), dict) else {}
    data = (identity.get("models") or {}).get("data") if isinstance(identity.get("models"), dict) else None
    owned = (data[0] or {}).get("owned_by") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    if owned == REPLAY_OWNER:
        return EngineInfo(name="replay", version=None, read_from="/v1/models")
    if props.get("build_info"):
        return EngineInfo(name="llama.cpp", version=str(props["build_info"]), read_from="/props")
    if version.get("version"):
        return EngineInfo(name="vllm" if owned == "vllm" else str(owned or "unknown"),
                          version=str(version["version"]), read_from="/version")
    return EngineInfo(name=str(owned or "unknown"))


def identify(root: str, api_key: str | None = None, image: str | None = None,
             image_digest: str | None = None) -> EngineInfo:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    info = engine_of(read_identity(root, headers))
    info.image, info.image_digest = image, image_digest
    return info
