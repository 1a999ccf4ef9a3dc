#!/usr/bin/env bash
# Runs the GPU check on the GPU machine from the payload of scripts/gpu_bundle.sh (docs/gpu.md).
#
#   bash scripts/gpu_run.sh stage          # a call that only brings payload files: keep them, probe
#   bash scripts/gpu_run.sh run [ARGS...]  # unpack, set up, run benchmarks/gpu_check.py --quick ARGS
#   bash scripts/gpu_run.sh selftest       # unpack and set up, then import tvm and run one CUDA kernel
#
# Nothing is installed into the machine's Python: the payload is unpacked under
# .gpu_bundle/site-cpXY and put on PYTHONPATH (the optional `extra` group, numpy/scipy/pandas,
# goes *after* the machine's own packages, so it only fills what is missing). Results go to
# $OUT/gpu_check (the device tool brings $OUT back), or .gpu_bundle/out when OUT is unset.
# Environment: COGNATE_GPU_PYTHON (default /opt/torch/.venv/bin/python, else python3).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-run}
[ $# -gt 0 ] && shift

PY=${COGNATE_GPU_PYTHON:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
TAG=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
BUNDLE=$ROOT/.gpu_bundle/$TAG
STAGED=$ROOT/.gpu_bundle/staged-$TAG
SITE=$ROOT/.gpu_bundle/site-$TAG
RESULTS=${OUT:-$ROOT/.gpu_bundle/out}
mkdir -p "$STAGED" "$RESULTS"
log() { echo "[gpu_run $(date -u +%H:%M:%S)] $*"; }

stage() {
  # keep every carried part; a later call's carry never names these paths
  local n=0
  for f in "$BUNDLE"/call*/*; do
    [ -f "$f" ] || continue
    cp -f "$f" "$STAGED/" && n=$((n + 1))
  done
  log "staged $n file(s) from $BUNDLE/call*/ into $STAGED: $(ls "$STAGED" | tr '\n' ' ')"
}

probe() {
  log "python: $PY ($("$PY" -V 2>&1)), tag $TAG; its own packages (the payload brings tvm, tvm_ffi,"
  log "ml_dtypes, tqdm, pyamg and pybind11's headers; its optional extra group numpy, scipy, pandas):"
  "$PY" - <<'EOF'
import importlib, shutil, subprocess
for name in ("numpy", "scipy", "pandas", "torch", "tqdm", "pyamg", "ml_dtypes", "cuda.bindings.nvrtc", "pybind11"):
    try:
        mod = importlib.import_module(name)
        print(f"  {name:22s} {getattr(mod, '__version__', 'present')}")
    except Exception as err:
        print(f"  {name:22s} MISSING ({type(err).__name__}: {err})")
try:
    import torch
    print(f"  torch.cuda: {torch.version.cuda}, available {torch.cuda.is_available()}",
          torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
except Exception as err:
    print("  torch.cuda:", err)
for tool in ("nvcc", "g++", "xz", "nvidia-smi"):
    print(f"  {tool:10s} {shutil.which(tool) or 'not on PATH'}")
EOF
  ls /usr/local/cuda/bin/nvcc 2>/dev/null | sed 's/^/  /'
  command -v nvidia-smi >/dev/null && nvidia-smi -L | sed 's/^/  /'
  df -h "$ROOT" | tail -1 | sed 's/^/  disk: /'
}

setup() {
  stage
  local manifest=$STAGED/manifest.json
  if [ ! -f "$manifest" ]; then
    log "no manifest in $STAGED: carry the .gpu_bundle/$TAG/callN directories (docs/gpu.md)"; return 1
  fi
  log "checking and unpacking the payload"
  "$PY" scripts/gpu_bundle.py unpack --manifest "$manifest" --from "$STAGED" --site "$SITE" || return 1
  export PYTHONPATH="$ROOT/python:$SITE/core:$SITE/tvm${PYTHONPATH:+:$PYTHONPATH}"
  [ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
  # the project's C++ extension: the payload's build for this Python, else compile it here
  local suffix
  suffix=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  if [ -f "$SITE/core/_cognate/_formats$suffix" ]; then
    cp -f "$SITE/core/_cognate/_formats$suffix" "$ROOT/python/cognate_tvm/"
  fi
  if ! "$PY" -c 'import cognate_tvm.formats' 2>/dev/null; then
    log "compiling cognate_tvm._formats here"
    local inc
    inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    g++ -O3 -shared -fPIC -std=c++17 -fvisibility=hidden -I"$inc" -I"$SITE/core/_cognate/pybind11/include" \
      -Isrc/formats src/formats/*.cc -o "$ROOT/python/cognate_tvm/_formats$suffix" || return 1
  fi
  "$PY" -c 'import cognate_tvm.formats' || return 1
  # TVM compiles device code with NVRTC (needs cuda-bindings) or nvcc; the Python code decides
  # the same way (cognate_tvm.kernels.cuda.select_compile_mode); exported here for any child.
  if [ -z "${TVM_CUDA_COMPILE_MODE:-}" ] && ! "$PY" -c 'import cuda.bindings.nvrtc' 2>/dev/null; then
    export TVM_CUDA_COMPILE_MODE=nvcc
  fi
  log "PYTHONPATH=$PYTHONPATH TVM_CUDA_COMPILE_MODE=${TVM_CUDA_COMPILE_MODE:-nvrtc}"
}

# runs a script with the `extra` group appended to sys.path (used only where a package is missing)
pyrun() {
  "$PY" -c 'import runpy, sys; sys.path.append(sys.argv[1]); sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name="__main__")' \
    "$SITE/extra" "$@"
}

case "$MODE" in
  stage)
    stage; probe ;;
  selftest)
    setup || exit 1
    pyrun scripts/gpu_selftest.py ;;
  run)
    probe
    setup || exit 1
    pyrun scripts/gpu_selftest.py || { log "selftest failed; gpu_check not run"; exit 1; }
    log "gpu_check --quick $* -> $RESULTS/gpu_check"
    pyrun benchmarks/gpu_check.py --quick --out "$RESULTS/gpu_check" "$@"
    status=$?
    log "gpu_check exit status $status"
    exit $status ;;
  *)
    echo "usage: bash scripts/gpu_run.sh {stage|selftest|run} [gpu_check args]" >&2; exit 2 ;;
esac
