"""Measurement datasets: collection, storage as parquet, grouping and splitting.

`store`: the format on disk (a directory of parts, one per task measured, and ``meta.json``;
`COLUMNS`), writing parts atomically and reading them back (`save_results`, `load_frame`).
`collection`: planning a sweep as tasks and measuring them on an executor into the store
(`collect`, resumable). `matrices`: a matrix's pattern hash and its source (a CSR matrix or a
recipe). `groups`: the unit of ranking (`Group`) built from a frame. `splits`: train /
validation / test splits and small picks of matrices.
"""
from .collection import MeasureTask, collect, plan_tasks, run_task
from .groups import Group, groups_from_frame
from .matrices import matrix_hash
from .splits import pick_across_sizes, pick_diverse, select, split_by_matrix
from .store import COLUMNS, FORMAT_VERSION, META_FILE, load_frame, results_frame, save_results

__all__ = ["COLUMNS", "FORMAT_VERSION", "META_FILE", "Group", "MeasureTask", "collect", "groups_from_frame",
           "load_frame", "matrix_hash", "pick_across_sizes", "pick_diverse", "plan_tasks", "results_frame",
           "run_task", "save_results", "select", "split_by_matrix"]
