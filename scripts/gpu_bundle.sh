#!/usr/bin/env bash
# Build the payload that brings TVM to a GPU host without network access (docs/gpu.md):
#
#   bash scripts/gpu_bundle.sh                 # for a host's Python 3.12
#   bash scripts/gpu_bundle.sh --python 3.11   # for this machine's Python (local check)
#   bash scripts/gpu_bundle.sh --tree-mib 20   # planned for a copied checkout of that size
#   python scripts/gpu_bundle.py check         # there: does each transfer fit beside that tree?
#
# Writes .gpu_bundle/cpXY/{manifest.json,call1/,call2/,...}; each callN/ is what one transfer
# of at most --call-mib (default 64 MiB, checkout included) brings. It fails (exit 3), naming the
# working tree's heaviest folders, when the payload needs more than 2 of them (--max-calls). Compression runs at the lowest CPU priority (the machine is shared),
# and the compressed tvm archive is cached in ~/.cache/cognate-gpu-bundle, so a second build for
# another Python version takes seconds. Options: python scripts/gpu_bundle.py build --help.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=$(command -v python3); fi
fi
exec nice -n 19 "$PY" scripts/gpu_bundle.py build "$@"
