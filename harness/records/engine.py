"""Which engine served, at which version, from which image, as the run record keeps it
(`serving.engine` reads it from the server)."""

from __future__ import annotations

from pydantic import BaseModel


class EngineInfo(BaseModel):
    name: str  # "vllm", "llama.cpp", "replay" or what /v1/models says owns the model
    version: str | None = None
    read_from: str | None = None  # the endpoint the version came from
    image: str | None = None  # a container's image reference, as served
    image_digest: str | None = None  # its content digest (sha256:...), where the stack could read it

    def describe(self) -> str:
        text = f"{self.name} {self.version or '(version unknown)'}"
        if self.image:
            text += f", image {self.image}" + (f"@{self.image_digest}" if self.image_digest else "")
        return text
