"""Timing clocks: a one-thread kernel is timed by its thread's CPU time, so waiting for a core is not counted."""
import time

import pytest

from cognate_tvm.backends.base import median_time_ms
from cognate_tvm.backends.cpu import LLVMBackend
from cognate_tvm.matrix import generate
from cognate_tvm.space.cpu import CPUSpace


def test_thread_clock_leaves_out_time_spent_off_the_cpu():
    def off_cpu():
        time.sleep(0.005)  # like a thread descheduled on a loaded machine

    assert median_time_ms(off_cpu, warmup=0, repeats=3) >= 5.0
    assert median_time_ms(off_cpu, warmup=0, repeats=3, clock=time.thread_time) < 1.0


def test_a_long_call_is_a_sample_itself():
    calls = []

    def kernel():
        calls.append(1)
        time.sleep(0.003)

    assert median_time_ms(kernel, warmup=0, repeats=2, min_seconds=0.001) >= 3.0
    assert len(calls) == 2  # no extra sizing call when one call outlasts min_seconds
    calls.clear()
    # a short call only sizes the samples: warm-up, sizing call, then 3 samples of several calls each
    median_time_ms(kernel, warmup=1, repeats=3, min_seconds=0.05)
    assert len(calls) >= 1 + 1 + 3 * 2


def test_backend_clock_choice_and_metadata():
    assert LLVMBackend(num_threads=1, cache_dir=None).clock == "thread"
    assert LLVMBackend(num_threads=2, cache_dir=None).clock == "wall"
    with pytest.raises(ValueError, match="clock 'thread' needs num_threads=1"):
        LLVMBackend(num_threads=2, clock="thread", cache_dir=None)
    with pytest.raises(ValueError, match="clock must be"):
        LLVMBackend(num_threads=1, clock="cpu", cache_dir=None)
    backend = LLVMBackend(num_threads=1, cache_dir=None, repeats=3)
    assert backend.metadata()["clock"] == "thread"
    matrix = generate("banded", 3000, seed=1)
    result, = backend.measure("spmm", matrix, [CPUSpace("spmm").baseline()], 32, check=True)
    # the kernel runs on the calling thread: its CPU time is its latency, not zero
    assert result.ok and result.correct and result.time_ms > 1e-4
