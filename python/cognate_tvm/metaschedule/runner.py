"""Builder, runner and built kernels of the sparse workloads.

Real CSR arrays reach the runner (random index arrays read out of bounds):
`tune_sparse` writes them to an ``.npz`` file and the ``LocalRunner``'s
``f_alloc_argument`` is :func:`alloc_sparse_arguments` bound to that path.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp
import tvm
from tvm.s_tir import meta_schedule as ms

from ..backends.base import check_output, rotated_order
from ..errors import ShapeError
from ..ops import Op, get_op
from .workload import workload_csr

SEED_DENSE = 7  # seed of the dense operands fed to the runner
BUILD_TIMEOUT_S = 180  # per batch of builds; the default 30 s is too short on a loaded 2-core machine


def record_ms(run_secs) -> float:
    """A MetaSchedule measurement's time in ms: the mean of its repeats (`run_secs`, TVM floats)."""
    return 1e3 * float(np.mean([float(s) for s in run_secs]))



def save_sparse_arguments(op: str | Op, matrix: sp.csr_matrix, feat: int, path: str | os.PathLike, *,
                          seed: int = SEED_DENSE) -> Path:
    """Write the workload's input arrays (CSR and seeded dense operands) for :func:`alloc_sparse_arguments`."""
    op = get_op(op)
    path = Path(path)
    np.savez(path, *_host_inputs(op, matrix, feat, seed))
    return path


def _host_inputs(op: Op, matrix: sp.csr_matrix, feat: int, seed: int) -> list[np.ndarray]:
    csr = workload_csr(op, matrix)
    dense = op.make_dense_inputs(sp.csr_matrix(matrix), int(feat), seed=seed)
    return [csr.indptr.astype(np.int32), csr.indices.astype(np.int32), csr.data.astype(np.float32)] + dense


def device_inputs(op: str | Op, matrix: sp.csr_matrix, feat: int, seed: int = 11, device=None) -> list:
    """The workload's inputs on `device` (the CPU by default): CSR arrays and seeded dense operands, as
    `BuiltKernel` passes them to every kernel of `matrix`."""
    op, device = get_op(op), device or tvm.cpu()
    return [tvm.runtime.tensor(a, device)
            for a in _host_inputs(op, sp.csr_matrix(matrix, dtype=np.float32), feat, seed)]


def alloc_sparse_arguments(device, args_info, alloc_repeat: int, *, path: str) -> list[list]:
    """LocalRunner ``f_alloc_argument``: the workload's inputs from the `.npz` at `path`, output last."""
    arrays = np.load(path)
    host = [arrays[f"arr_{n}"] for n in range(len(arrays.files))]
    shapes = [tuple(int(d) for d in info[2]) for info in args_info]
    if len(shapes) != len(host) + 1:
        raise ShapeError(f"{path}: {len(host)} input arrays where the kernel takes {len(shapes) - 1}")
    for array, shape in zip(host, shapes):
        if array.shape != shape:
            raise ShapeError(f"{path}: array of shape {array.shape} where the kernel takes {shape}")
    return [[tvm.runtime.tensor(a, device) for a in host] + [tvm.runtime.empty(shapes[-1], "float32", device)]
            for _ in range(alloc_repeat)]


def build_kernel(mod, target, _params=None):
    """LocalBuilder ``f_build``: plain ``tvm.tirx.build``.

    MetaSchedule's default build first imports ``tvm.s_tir.tensor_intrin`` in
    every builder process (88 s in a fresh process with TVM's ``inspect.stack``
    calls; ``tvm_intrinsics`` says why); these kernels use no tensor intrinsics.
    """
    return tvm.tirx.build(mod, target=target)


def _set_num_threads(num_threads: int) -> None:
    """Runner worker initializer: size TVM's thread pool before it starts."""
    os.environ["TVM_NUM_THREADS"] = str(int(num_threads))


class BuiltKernel:
    """A scheduled workload built once, on `matrix` with seeded dense operands: its output can be
    checked and it can be timed as often as asked (re-timing rounds reuse one build)."""

    def __init__(self, op: str | Op, mod, matrix: sp.csr_matrix, feat: int, target, *, seed: int = 11,
                 inputs: Sequence | None = None):
        self.op, self.feat, self.seed = get_op(op), int(feat), seed
        self.matrix = sp.csr_matrix(matrix, dtype=np.float32)
        self.lib = tvm.tirx.build(mod, target=target)
        self.dev = tvm.cpu()
        # Kernels of one matrix only read their inputs, so they may share one copy (`device_inputs`):
        # a hundred kernels of a 100k-row matrix, each with its own, held 24 GB.
        self.args = list(inputs) if inputs is not None else device_inputs(self.op, self.matrix, feat, seed)
        self.out_shape = ((self.matrix.shape[0], self.feat) if self.op.name == "spmm"
                          else (int(workload_csr(self.op, self.matrix).nnz),))

    def output(self) -> np.ndarray:
        """One run into a NaN-filled output (an unwritten element stays NaN)."""
        out = tvm.runtime.tensor(np.full(self.out_shape, np.nan, dtype=np.float32), self.dev)
        self.lib["main"](*self.args, out)
        return out.numpy()

    def correct(self) -> bool:
        """True when the output matches scipy's."""
        dense = self.op.make_dense_inputs(self.matrix, self.feat, seed=self.seed)
        return check_output(self.op, self.matrix, dense, self.output())

    def time_ms(self, *, repeat: int = 7, min_repeat_ms: int = 20) -> float:
        """Median time in ms over `repeat` runs of TVM's time_evaluator."""
        out = tvm.runtime.empty(self.out_shape, "float32", self.dev)
        timer = self.lib.time_evaluator("main", self.dev, number=1, repeat=int(repeat),
                                        min_repeat_ms=int(min_repeat_ms))
        return float(np.median(np.asarray(timer(*self.args, out).results)) * 1e3)


def time_side_by_side(kernels: Sequence[BuiltKernel], rounds: int, *,
                      timer: Callable[[int], float | None] | None = None) -> list[list]:
    """Each kernel's time in ms in each of `rounds` rounds that time them all, the order rotated every
    round (`rotated_order`). `timer(n)` times kernel n (default: its `time_ms()`)."""
    timer = timer or (lambda n: kernels[n].time_ms())
    samples: list[list] = [[] for _ in kernels]
    for r in range(rounds):
        for n in rotated_order(len(kernels), r):
            samples[n].append(timer(n))
    return samples


def run_schedule(op: str | Op, mod, matrix: sp.csr_matrix, feat: int, target, *, seed: int = 11) -> np.ndarray:
    """Build the scheduled `mod` and run it once on `matrix` with seeded dense operands; returns the output."""
    return BuiltKernel(op, mod, matrix, feat, target, seed=seed).output()


def time_module(op: str | Op, mod, matrix: sp.csr_matrix, feat: int, target, *, repeat: int = 7,
                min_repeat_ms: int = 20, seed: int = 11) -> float:
    """Median time in ms of the (scheduled or default) workload `mod` on `matrix`, with TVM's time_evaluator."""
    return BuiltKernel(op, mod, matrix, feat, target, seed=seed).time_ms(repeat=repeat, min_repeat_ms=min_repeat_ms)


def schedule_is_correct(op: str | Op, mod, matrix: sp.csr_matrix, feat: int, target, *, seed: int = 11) -> bool:
    """True when the scheduled `mod`'s output matches scipy's on `matrix`."""
    return BuiltKernel(op, mod, matrix, feat, target, seed=seed).correct()


def builder_and_runner(inputs: str | os.PathLike, num_threads: int) -> tuple:
    """MetaSchedule's LocalBuilder (plain `build_kernel`) and LocalRunner (the workload's real inputs from the
    `.npz` at `inputs`, kernels on `num_threads` threads), as `tune_sparse`'s searches measure."""
    runner = ms.runner.LocalRunner(
        # 3 repeats (each >= 20 ms), their mean the record: with 1, one noisy sample on a shared machine
        # decided a record, and the search's ranking of its own measurements
        evaluator_config=ms.runner.EvaluatorConfig(number=3, repeat=3, min_repeat_ms=20),
        f_alloc_argument=functools.partial(alloc_sparse_arguments, path=str(inputs)),
        initializer=functools.partial(_set_num_threads, num_threads))
    builder = ms.builder.LocalBuilder(max_workers=max(1, num_threads), timeout_sec=BUILD_TIMEOUT_S,
                                      f_build=build_kernel)
    return builder, runner

