#!/usr/bin/env bash
# Build the payload that carries TVM to the GPU machine (see docs/gpu.md):
#
#   bash scripts/gpu_bundle.sh                 # for the H200 machine's Python 3.12
#   bash scripts/gpu_bundle.sh --python 3.11   # for this machine's Python (local check)
#   bash scripts/gpu_bundle.sh --tree-mib 20   # planned for the tree the device calls will send
#   python scripts/gpu_bundle.py check         # there: does each call fit beside that tree?
#
# Writes .gpu_bundle/cpXY/{manifest.json,call1/,call2/,...}; each callN/ is what one
# device call carries. It fails (exit 3), naming the working tree's heaviest folders, when the
# payload needs more than 2 calls beside the tree (--max-calls). Compression runs at the lowest CPU priority (the machine is shared),
# and the compressed tvm archive is cached in ~/.cache/cognate-gpu-bundle, so a second build for
# another Python version takes seconds. Options: python scripts/gpu_bundle.py build --help.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3); fi
fi
exec nice -n 19 "$PY" scripts/gpu_bundle.py build "$@"
