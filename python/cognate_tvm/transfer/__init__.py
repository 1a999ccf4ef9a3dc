"""The CPU -> SPADE transfer protocol as a library (`benchmarks/transfer.py` drives it; docs/transfer.md).

- `params`: every size and choice of the protocol (`Params`, `SIZES`);
- `datasets`: the SPADE evaluation split, the training pool, and the draws of target training matrices;
- `evaluation`: scoring a ranker on groups, the oracle ranker, the summary over seeds;
- `recipes`: the recipe grids of the learned methods, chosen on validation, and the guarded refit;
- `report`: labels and markdown tables.
"""
from .datasets import TargetData, evaluation_split, finetune_draw, target_data
from .evaluation import COLUMNS, SUMMARY_KEY, OracleRanker, evaluate_groups, samples, summarize_runs, val_score
from .params import SIZES, Params, with_eval_matrices, with_pool_matrices
from .recipes import (audit_metrics, best_epoch, chosen_on_validation, epochs_trained, finetune_on_validation,
                      guarded_refit, pretrain_from_scratch, pretrain_variant, reinitialized, source_sizes,
                      target_loss, train_no_transfer, warm_embeddings, xgboost_on_validation)
from .report import (LABELS, ablation_methods, audit_lines, fmt, label, main_methods, markdown, recipe_text,
                     refit_text, same_point, shown_path, write_markdown)

__all__ = ["COLUMNS", "LABELS", "SIZES", "SUMMARY_KEY", "OracleRanker", "Params", "TargetData", "ablation_methods",
           "audit_lines", "audit_metrics", "best_epoch", "chosen_on_validation", "epochs_trained", "evaluate_groups",
           "evaluation_split", "finetune_draw", "finetune_on_validation", "fmt", "guarded_refit", "label",
           "main_methods", "markdown", "pretrain_from_scratch", "pretrain_variant", "recipe_text",
           "refit_text", "reinitialized", "same_point", "samples", "shown_path", "source_sizes", "summarize_runs",
           "target_data", "target_loss", "train_no_transfer", "val_score", "warm_embeddings", "with_eval_matrices",
           "with_pool_matrices", "write_markdown", "xgboost_on_validation"]
