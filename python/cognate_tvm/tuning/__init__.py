"""Tuning: rank a space with the cost model, measure, re-time, keep the fastest correct config.

One concept per module, as in TVM MetaSchedule:

- `options`: `TuneOptions` (how `tune` searches) and the defaults;
- `search`: the search strategies (which configs are measured, in what order);
- `measuring`: creating a backend and the batched measuring loop;
- `retime`: re-timing the finalists side by side and the checked choice;
- `oracle`: the sweep of the space that a choice is compared with;
- `result`: `TuneResult`, `OracleResult`; `report`: their JSON forms;
- `export`: writing kernels out, and CUDA's compile-only ranking;
- `tuner`: `tune` itself.

The CLIs (`cognate_tvm.tune`, `cognate_tvm.measure`) only parse arguments and print.
"""
from .export import compile_top_k, write_kernel, write_outputs
from .measuring import BATCH, create_backend, measure_configs, vendor_report
from .options import (DEFAULT_BUDGET, DEFAULT_FIXED, DEFAULT_TOP_K, FINAL_ROUNDS, FINALISTS, ORACLE_SAMPLE,
                      ORACLE_WHOLE_SPACE, TuneOptions, check_tune_options)
from .oracle import measure_oracle, oracle_configs
from .report import matrix_report, measure_report, tune_report
from .result import OracleResult, TuneResult, chosen_time_ms
from .retime import choose, retime_finalists
from .search import DEFAULT_STRATEGY, STRATEGIES, SearchStrategy, fixed_candidates, pick_top, sample_configs
from .tuner import tune

__all__ = ["BATCH", "DEFAULT_BUDGET", "DEFAULT_FIXED", "DEFAULT_STRATEGY", "DEFAULT_TOP_K", "FINAL_ROUNDS",
           "FINALISTS", "ORACLE_SAMPLE", "ORACLE_WHOLE_SPACE", "STRATEGIES", "OracleResult", "SearchStrategy",
           "TuneOptions", "TuneResult", "check_tune_options", "choose", "chosen_time_ms", "compile_top_k",
           "create_backend", "fixed_candidates", "matrix_report", "measure_configs", "measure_oracle",
           "measure_report", "oracle_configs", "pick_top", "retime_finalists", "sample_configs", "tune",
           "tune_report", "vendor_report", "write_kernel", "write_outputs"]
