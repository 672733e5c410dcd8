"""What every client of an OpenAI-compatible server agrees on, said once: the server's root
URL (what people paste ends in `/v1` or `/` as often as not), the bearer header, and the
`/v1/models` listing. The load client, the load and classroom checks, the `/metrics` reader,
the unit's readiness wait and the grader use these; each keeps its own error messages,
which name its own flags.
"""

from __future__ import annotations

from typing import Any


def root_url(url: str) -> str:
    """`http://host:port[/v1][/]` → `http://host:port`: callers add `/v1/...` and `/metrics`."""
    return url.rstrip("/").removesuffix("/v1")


def is_http_url(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def bearer(api_key: str | None) -> dict[str, str]:
    """The Authorization header for `api_key`; none without a key (a local server may need none)."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def models_url(root: str) -> str:
    return f"{root}/v1/models"


def model_ids(listing: Any) -> list[str]:
    """The ids of a `/v1/models` answer (`{"data": [{"id": ...}, ...]}`); ValueError when it is
    not such a list."""
    try:
        return [m["id"] for m in listing["data"]]
    except (KeyError, TypeError) as exc:
        raise ValueError("not a model list") from exc
