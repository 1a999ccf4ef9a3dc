#!/usr/bin/env bash
# Runs the project's GPU work on a GPU host without network access, from the payload of
# scripts/gpu_bundle.sh (docs/gpu.md, "Hosts without network access").
#
#   bash scripts/gpu_run.sh stage            # keep the payload parts brought so far, probe the host
#   bash scripts/gpu_run.sh all [ARGS...]    # the prepared run, inside COGNATE_GPU_BUDGET_S seconds (default 450)
#   bash scripts/gpu_run.sh run [ARGS...]    # self-test, then benchmarks/gpu_check.py --quick ARGS
#   bash scripts/gpu_run.sh selftest         # import TVM, build, compile and run one CUDA kernel
#   bash scripts/gpu_run.sh collect ARGS...  # python -m cognate_tvm.collect --target cuda ARGS (a dataset)
#   bash scripts/gpu_run.sh gnn [ARGS...]    # benchmarks/gnn_end_to_end.py --device cuda ARGS (GCN epochs vs
#                                            # torch.sparse on cuSPARSE), inside COGNATE_GPU_BUDGET_S seconds
#
# The payload's parts may come over in several copies, each replacing .gpu_bundle/cpXY/callN/ in the
# checkout. So every mode first copies the parts present now (.gpu_bundle/cpXY/callN/) to the
# stage, $COGNATE_GPU_STAGE (default /tmp/cognate-gpu-stage/cpXY, outside the repository), where they
# add up, and the payload is checked and unpacked there, once. Nothing is installed into the host's
# Python: the unpacked groups and python/ go on PYTHONPATH (the
# optional `extra` group after the host's own packages, so it only fills what is missing).
#
# Results go to $OUT, or to .gpu_bundle/out where OUT is unset. `all` writes: gpu_run.log (everything printed),
# gpu_run_steps.tsv (each step's exit status and seconds, appended as it ends), gpu_check.json and
# gpu_check.md (rewritten after every phase), gpu_sweep_dataset.tar.gz (the sweep in the dataset
# format, rewritten after every matrix) and gpu_tune_cli.json, so a run killed at any point still
# leaves what it measured. `collect` writes collect_dataset.tar.gz and collect.json; `gnn` writes
# gnn_run.log, gnn_end_to_end.{md,json,png} and gpu_run_steps.tsv.
#
# Environment: COGNATE_GPU_PYTHON (default /opt/torch/.venv/bin/python, else python3),
# COGNATE_GPU_STAGE, COGNATE_GPU_BUDGET_S, COGNATE_GPU_ARCH (default: the GPU's, from nvidia-smi;
# sm_90 where it cannot be read), COGNATE_GPU_MATRICES (the matrices `all` sweeps, in order),
# COGNATE_GPU_BUNDLE (default .gpu_bundle/cpXY), COGNATE_GPU_DRY_RUN=1 (`all` logs each step's
# command and time limit instead of running it).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MODE=${1:-run}
[ $# -gt 0 ] && shift

PY=${COGNATE_GPU_PYTHON:-/opt/torch/.venv/bin/python}
[ -x "$PY" ] || PY=$(command -v python3)
TAG=$("$PY" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
BUNDLE=${COGNATE_GPU_BUNDLE:-$ROOT/.gpu_bundle/$TAG}
STAGE=${COGNATE_GPU_STAGE:-/tmp/cognate-gpu-stage/$TAG}
PARTS=$STAGE/parts
SITE=$STAGE/site
RESULTS=${OUT:-$ROOT/.gpu_bundle/out}
BUDGET_S=${COGNATE_GPU_BUDGET_S:-450}
# Sweep order: the matrices that must be shown first (3 R-MAT power-law graphs of 100k+ rows,
# regular matrices of 1M+ nonzeros), then others; none of them is in the earlier H200 sweeps.
MATRICES=${COGNATE_GPU_MATRICES:-rmat:131072:101,stencil2d:262144:102,rmat:200000:103,banded:200000:104,rmat:300000:105,stencil3d:160000:106,uniform:120000:107,block_diagonal:100000:108,bipartite:150000:109,road:300000:110,rmat:150000:111:perm,stencil2d:40000:112,bipartite:30000:113,uniform:20000:114}
TUNE_MATRIX=rmat:131072:101
mkdir -p "$PARTS" "$STAGE/results" "$RESULTS"
case "$STAGE/" in "$ROOT"/*) echo "COGNATE_GPU_STAGE must lie outside the repository ($ROOT)" >&2; exit 2 ;; esac
log() { echo "[gpu_run $(date -u +%H:%M:%S) +${SECONDS}s] $*"; }

stage() {
  # the parts present now join those staged earlier (kept on the stage, outside the tree)
  local n=0 f
  for f in "$BUNDLE"/call*/*; do
    [ -f "$f" ] || continue
    cp -f "$f" "$PARTS/" && n=$((n + 1))
  done
  log "staged $n file(s) from $BUNDLE/call*/ into $PARTS: $(ls "$PARTS" | tr '\n' ' ')"
}

probe() {
  log "python: $PY ($("$PY" -V 2>&1)), tag $TAG; its own packages (the payload brings tvm, tvm_ffi,"
  log "ml_dtypes, tqdm, pyamg and pybind11's headers; its optional extra group numpy, scipy, pandas):"
  "$PY" - <<'EOF'
import importlib, shutil
for name in ("numpy", "scipy", "pandas", "pyarrow", "torch", "tqdm", "pyamg", "ml_dtypes", "cuda.bindings.nvrtc",
             "pybind11"):
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
  df -h "$STAGE" | tail -1 | sed 's/^/  stage disk: /'
}

gpu_arch() {
  # sm_XY of GPU 0 (nvidia-smi's compute capability), else sm_90 (H100 / H200)
  local cap
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  case "$cap" in 80|90) echo "sm_$cap" ;; *) echo sm_90 ;; esac
}

setup() {
  stage
  local manifest=$PARTS/manifest.json
  if [ ! -f "$manifest" ]; then
    log "no manifest in $PARTS: carry the .gpu_bundle/$TAG/callN directories (docs/gpu.md)"; return 1
  fi
  log "checking and unpacking the payload into $SITE"
  "$PY" scripts/gpu_bundle.py unpack --manifest "$manifest" --from "$PARTS" --site "$SITE" || return 1
  export PYTHONPATH="$ROOT/python:$SITE/core:$SITE/tvm${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONUNBUFFERED=1
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
    # pybind11's headers: the payload's, else those of a pybind11 this Python already has
    local pyb=$SITE/core/_cognate/pybind11/include
    [ -d "$pyb" ] || pyb=$("$PY" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null) || true
    g++ -O3 -shared -fPIC -std=c++17 -fvisibility=hidden -I"$inc" ${pyb:+-I"$pyb"} \
      -Isrc/formats src/formats/*.cc -o "$ROOT/python/cognate_tvm/_formats$suffix" || return 1
  fi
  "$PY" -c 'import cognate_tvm.formats' || return 1
  # TVM compiles device code with NVRTC (needs cuda-bindings) or nvcc; the Python code decides
  # the same way (cognate_tvm.kernels.cuda.select_compile_mode); exported here for any child.
  if [ -z "${TVM_CUDA_COMPILE_MODE:-}" ] && ! "$PY" -c 'import cuda.bindings.nvrtc' 2>/dev/null; then
    export TVM_CUDA_COMPILE_MODE=nvcc
  fi
  ARCH=${COGNATE_GPU_ARCH:-$(gpu_arch)}
  log "PYTHONPATH=$PYTHONPATH TVM_CUDA_COMPILE_MODE=${TVM_CUDA_COMPILE_MODE:-nvrtc} arch=$ARCH"
}

# PYRUN script|-m module ARGS: runs it with the `extra` group appended to sys.path (used only where a
# package is missing); a command (not a function), so `timeout` can run it
PYRUN=("$PY" -c 'import runpy, sys
sys.path.append(sys.argv[1])
args = sys.argv[2:]
if args[0] == "-m":
    sys.argv = args[1:]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)
else:
    sys.argv = args
    runpy.run_path(args[0], run_name="__main__")' "$SITE/extra")

left() { echo $((BUDGET_S - SECONDS)); }

# step NAME LIMIT_S CMD...: CMD under `timeout` (skipped below 10 s); its exit status and seconds
# are appended to gpu_run_steps.tsv as soon as it ends
step() {
  local name=$1 limit=$2 t0=$SECONDS rc
  shift 2
  if [ "$limit" -lt 10 ]; then
    log "$name: skipped (${limit} s of the budget left)"
    printf '%s\tskipped\t0\t%s\n' "$name" "$limit" >>"$RESULTS/gpu_run_steps.tsv"
    return 0
  fi
  local shown="$*"
  [ "$1" = "${PYRUN[0]}" ] && [ "$2" = -c ] && shown="python ${*:5}"  # not the wrapper's code
  log "$name: up to ${limit} s: $shown"
  if [ -n "${COGNATE_GPU_DRY_RUN:-}" ]; then
    rc=dry-run  # the budget arithmetic and the commands, without running them
  else
    timeout -k 10 "$limit" "$@"
    rc=$?
  fi
  [ "$rc" = 124 ] && log "$name: stopped at its ${limit} s limit (what it wrote so far stays)"
  log "$name: exit status $rc after $((SECONDS - t0)) s"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" "$limit" >>"$RESULTS/gpu_run_steps.tsv"
  return 0
}

# the one prepared command: self-test, gpu_check (correctness of every config, the sweep into the
# dataset, tune with the shipped GPU model, side by side with cuSPARSE), then tune's command line
prepared() {
  local check_s tune_s
  printf 'step\texit_status\tseconds\tlimit_s\n' >"$RESULTS/gpu_run_steps.tsv"
  step selftest "$(( $(left) < 90 ? $(left) : 90 ))" "${PYRUN[@]}" scripts/gpu_selftest.py --arch "$ARCH"
  tune_s=45  # kept for tune's command line, after gpu_check
  check_s=$(( $(left) - tune_s - 15 ))
  # gpu_check's own budget ends 20 s before its hard limit: the environment phase and the summary
  step gpu_check "$check_s" "${PYRUN[@]}" benchmarks/gpu_check.py --arch "$ARCH" --new-matrices "$MATRICES" \
    --finetune 0 --repeat 3 --budget-s "$((check_s - 20))" --reserve-s "$(( (check_s - 20) * 3 / 10 ))" \
    --out "$RESULTS" --dataset "$STAGE/results/gpu_sweep_dataset" \
    --dataset-archive "$RESULTS/gpu_sweep_dataset.tar.gz" "$@"
  local spec=(${TUNE_MATRIX//:/ }) matrix=$STAGE/results/${TUNE_MATRIX//:/_}.npz
  "$PY" -c 'import sys, scipy.sparse as sp
from cognate_tvm.matrix import generate
sp.save_npz(sys.argv[4], generate(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))' "${spec[@]}" "$matrix" &&
    step tune_cli "$(( $(left) - 5 < 60 ? $(left) - 5 : 60 ))" bash -c \
      'out=$1; shift; "$@" >"$out"' _ "$RESULTS/gpu_tune_cli.json" \
      "$PY" -m cognate_tvm.tune spmm --target cuda --arch "$ARCH" --matrix "$matrix" --vendor --json --quiet
  rm -f "$RESULTS"/*.tmp
  log "results in $RESULTS: $(ls "$RESULTS" | tr '\n' ' ')"
}

collect() {
  local args=("$@") out="$STAGE/collect_dataset" a
  for a in "${args[@]}"; do [ "$a" = --out ] && out=; done
  [[ " ${args[*]} " == *" --target "* ]] || args=(--target cuda "${args[@]}")
  # --arch is a cuda backend option; another target (a local check with llvm) takes none
  if [[ " ${args[*]} " == *" --target cuda "* && " ${args[*]} " != *" --arch "* ]]; then args+=(--arch "$ARCH"); fi
  [ -n "$out" ] && args+=(--out "$out")
  "${PYRUN[@]}" -m cognate_tvm.collect "${args[@]}" | tee "$RESULTS/collect.json"
  local status=${PIPESTATUS[0]}
  out=${out:-$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["out"])' "$RESULTS/collect.json" 2>/dev/null)}
  if [ -n "$out" ] && [ -d "$out" ]; then
    tar -czf "$RESULTS/collect_dataset.tar.gz" -C "$(dirname "$out")" "$(basename "$out")" &&
      log "dataset $out packed into $RESULTS/collect_dataset.tar.gz"
  fi
  return "$status"
}

case "$MODE" in
  stage)
    stage; probe ;;
  selftest)
    setup || exit 1
    "${PYRUN[@]}" scripts/gpu_selftest.py --arch "$ARCH" ;;
  run)
    probe
    setup || exit 1
    "${PYRUN[@]}" scripts/gpu_selftest.py --arch "$ARCH" || { log "selftest failed; gpu_check not run"; exit 1; }
    log "gpu_check --quick $* -> $RESULTS/gpu_check"
    "${PYRUN[@]}" benchmarks/gpu_check.py --quick --arch "$ARCH" --out "$RESULTS/gpu_check" \
      --dataset "$STAGE/results/gpu_check_dataset" --dataset-archive "$RESULTS/gpu_check/dataset.tar.gz" "$@"
    status=$?
    log "gpu_check exit status $status"
    exit $status ;;
  all)
    exec > >(tee -a "$RESULTS/gpu_run.log") 2>&1
    log "the prepared run, budget $BUDGET_S s"
    probe
    setup || { log "setup failed: nothing else runs"; exit 1; }
    prepared "$@" ;;
  collect)
    setup || exit 1
    collect "$@" ;;
  gnn)
    exec > >(tee -a "$RESULTS/gnn_run.log") 2>&1
    probe
    setup || { log "setup failed: nothing else runs"; exit 1; }
    printf 'step\texit_status\tseconds\tlimit_s\n' >"$RESULTS/gpu_run_steps.tsv"
    # the tuned kernels' choices are cached on the stage, so a second call measures nothing again
    step gnn "$(( $(left) - 10 ))" "${PYRUN[@]}" benchmarks/gnn_end_to_end.py --device cuda \
      --cache-dir "$STAGE/results/gnn_tuned" --out "$RESULTS" "$@" ;;
  *)
    echo "usage: bash scripts/gpu_run.sh {stage|all|run|selftest|collect|gnn} [ARGS]" >&2; exit 2 ;;
esac
