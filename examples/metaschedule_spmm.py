"""Tune a CSR SpMM with TVM MetaSchedule, COGNATE as the cost model; print the default and tuned times.

    python examples/metaschedule_spmm.py [--matrix A.mtx] [--feat 64] [--trials 16] [--threads 2]

`CognateModel()` with no arguments uses the shipped CPU cost model of the
workload's op (``--pretrained-dir`` points it at another directory of models).
"""
import argparse
import tempfile

from cognate_tvm import CognateModel
from cognate_tvm.kernels.cpu import cpu_target
from cognate_tvm.matrix import load_matrix
from cognate_tvm.metaschedule import sparse_module, time_module, tune_sparse
from cognate_tvm.matrix import EXAMPLE_MATRIX

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--matrix", default=EXAMPLE_MATRIX)
parser.add_argument("--feat", type=int, default=64)
parser.add_argument("--trials", type=int, default=16)
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--pretrained-dir", default=None)
args = parser.parse_args()

A = load_matrix(args.matrix)
with tempfile.TemporaryDirectory() as work_dir:
    result = tune_sparse("spmm", A, feat=args.feat, max_trials=args.trials, num_threads=args.threads,
                         work_dir=work_dir, cost_model=CognateModel(pretrained_root=args.pretrained_dir))
target = cpu_target(args.threads)
default_ms = time_module("spmm", sparse_module("spmm", A, args.feat), A, args.feat, target)
tuned_ms = time_module("spmm", result.schedule.mod, A, args.feat, target)
print(f"default schedule: {default_ms:.4f} ms")
print(f"tuned schedule:   {tuned_ms:.4f} ms ({default_ms / tuned_ms:.2f}x), {result.records} trials, "
      f"output checked against scipy")
print(f"config: {result.config.to_json()}")
