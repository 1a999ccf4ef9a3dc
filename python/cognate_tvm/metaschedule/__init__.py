"""COGNATE inside TVM MetaSchedule: a cost-model adapter and sparse (CSR SpMM, SDDMM) workloads.

>>> from cognate_tvm import CognateModel                                        # doctest: +SKIP
>>> from cognate_tvm.metaschedule import tune_sparse                            # doctest: +SKIP
>>> result = tune_sparse("spmm", A, feat=128, max_trials=16, work_dir="ms", cost_model=CognateModel())  # doctest: +SKIP

One module per concept, as MetaSchedule splits them:

- `workload`: the TensorIR of the sparse workloads, specialized to one matrix;
- `space`: the design space (structural variants, sampled tiles) and its map onto the CPU space;
- `cost_model`: `CognateModel`, the ``PyCostModel`` adapter of a `CognateCostModel`;
- `runner`: the builder and runner of the searches, the workload's real inputs, built kernels;
- `trial_log`: the measure callback that keeps every trial in search order;
- `tuning`: `tune_sparse`, a search whose best records are confirmed side by side;
- `backend`: `MetaScheduleBackend`, a measurement backend of these kernels (for datasets).
"""
from ..tvm_intrinsics import load_tensor_intrinsics
from .backend import MetaScheduleBackend
from .cost_model import METASCHEDULE_PLATFORM, OUTSIDE_CANDIDATES, CognateModel, merit, shipped_platform
from .runner import (BUILD_TIMEOUT_S, SEED_DENSE, BuiltKernel, alloc_sparse_arguments, build_kernel,
                     builder_and_runner, device_inputs, record_ms, run_schedule, save_sparse_arguments,
                     schedule_is_correct, time_module, time_side_by_side)
from .space import (KNOB_ORDER, NONZERO_MAJOR, ORDERS, SPARSE_INNERMOST, TILE_MAJOR, VARIANT_ANNOTATION, Variant,
                    config_from_knobs, j_tiles, knobs_from_trace, reachable_configs, schedule_config,
                    schedule_variant, space_coverage, sparse_space, variants)
from .trial_log import TrialLog
from .tuning import MetaScheduleResult, tune_sparse
from .workload import ROW_BLOCK, UPDATE_BLOCK, kernel_csr, sparse_module, sparse_prim_func, workload_csr

__all__ = ["BUILD_TIMEOUT_S", "BuiltKernel", "CognateModel", "KNOB_ORDER", "METASCHEDULE_PLATFORM",
           "MetaScheduleBackend", "MetaScheduleResult", "NONZERO_MAJOR", "ORDERS", "OUTSIDE_CANDIDATES",
           "ROW_BLOCK", "SEED_DENSE", "SPARSE_INNERMOST", "TILE_MAJOR", "TrialLog", "UPDATE_BLOCK",
           "VARIANT_ANNOTATION", "Variant", "alloc_sparse_arguments", "build_kernel", "builder_and_runner",
           "config_from_knobs", "device_inputs", "j_tiles", "kernel_csr", "knobs_from_trace",
           "load_tensor_intrinsics", "merit", "reachable_configs", "record_ms", "run_schedule",
           "save_sparse_arguments", "schedule_config", "schedule_is_correct", "schedule_variant",
           "shipped_platform", "space_coverage", "sparse_module", "sparse_prim_func", "sparse_space",
           "time_module", "time_side_by_side", "tune_sparse", "variants", "workload_csr"]
