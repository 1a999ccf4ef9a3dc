"""Tiny stand-ins for the shipped models: fitted in seconds, saved as `load_pretrained` expects them.

The pre-trained models ship as package data (`cognate_tvm.model.pretrained`);
tests must not depend on them, so they fit a small COGNATE model on synthetic
CPU measurements (`toy_space.synthetic_time_ms`) and save it under
``<root>/<op>-<platform>/``; the tuner is pointed at `root`.
"""
from __future__ import annotations

from pathlib import Path

import torch

from cognate_tvm import space
from cognate_tvm.model import CognateCostModel
from cognate_tvm.model.pretrained import pretrained_path
from toy_space import fast_model_config, measured_groups, small_corpus


def tiny_cpu_model(*, seed: int = 0) -> CognateCostModel:
    """A COGNATE model fitted on synthetic times of 48 CPU configs x 8 small matrices (raw knobs)."""
    torch.set_num_threads(1)
    cpu = space.create("cpu", "spmm")
    config = fast_model_config(knob_encoder="pad", **{"train.epochs": 6, "train.finetune_epochs": 5,
                                                        "latent.epochs": 50})
    model = CognateCostModel(config, seed=seed)
    model.fit(measured_groups(cpu, small_corpus(1, seed=seed), configs_per_matrix=48, seed=seed), space=cpu)
    return model


def ship(model: CognateCostModel, root: Path, ops=("spmm", "sddmm"), platform: str = "cpu") -> Path:
    """Save `model` as the shipped model of each op on `platform` under `root`; returns `root`."""
    for op in ops:
        model.save(pretrained_path(op, platform, root=root))
    return root
