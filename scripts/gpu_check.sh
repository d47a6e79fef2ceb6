#!/usr/bin/env bash
# Attention backends on CUDA: parity with dense_masked (float32 and bfloat16, outputs and
# gradients) and the attention benchmark at the paper shape, printed as one JSON document.
# Needs a CUDA device; refuses clearly without one. Finishes in under 5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
if [ ! -x "$PY" ]; then PY="$(command -v python3)"; fi
exec timeout --signal=INT 290 "$PY" scripts/gpu_check.py "$@"
