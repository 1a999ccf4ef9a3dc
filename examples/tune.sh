#!/usr/bin/env bash
# The tune CLI in three commands. Usage: examples/tune.sh [OUT_DIR]
# COGNATE_PRETRAINED_DIR, when set, is passed as --pretrained-dir (a directory of <op>-<platform>/ models);
# PYTHON picks the interpreter (default: python).
set -euo pipefail
PY=${PYTHON:-python}
OUT=${1:-tuned}
MODELS=()
if [ -n "${COGNATE_PRETRAINED_DIR:-}" ]; then MODELS=(--pretrained-dir "$COGNATE_PRETRAINED_DIR"); fi

# 1. CPU: the shipped model ranks the whole space; baseline + top-3 measured, the winner checked against
#    scipy and re-timed beside the baseline; the kernel (a TVM library), its config and the report go to $OUT/spmm.
"$PY" -m cognate_tvm.tune spmm --target llvm --feat 64 --top-k 3 --quiet --out "$OUT/spmm" "${MODELS[@]}"

# 2. SPADE (simulated): measure 8 sampled configs first and fine-tune the model on them (--budget),
#    then sweep all 256 configs (--oracle) to see how close the pick is.
"$PY" -m cognate_tvm.tune spmm --target spade --feat 64 --budget 8 --oracle --quiet --json \
    "${MODELS[@]}" > "$OUT/spade.json"

# 3. GPU without a GPU: rank, then write the top-3 kernels' CUDA sources and PTX (no timing).
"$PY" -m cognate_tvm.tune spmm --target cuda --compile-only --top-k 3 --feat 64 --out "$OUT/cuda" "${MODELS[@]}"
