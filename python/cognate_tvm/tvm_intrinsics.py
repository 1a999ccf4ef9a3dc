"""Register TVM's tensor intrinsics in seconds rather than minutes.

Every ``TuneContext`` imports ``tvm.s_tir.tensor_intrin``, which parses about
250 TVMScript functions. Each ``@T.prim_func`` calls ``inspect.stack()``,
which looks up a source line for every frame on the stack; for a frame with no
source file (the import machinery's ``<frozen importlib._bootstrap>``)
``inspect.getmodule`` scans all of ``sys.modules`` each time. With torch, TVM
and this package's model loaded (about 2,900 modules) the import took 170 s on
a 2-core machine, and 7 s with the stack below
(``scripts/check_tensor_intrinsics.py`` compares the two).

While that one import runs, ``inspect.stack`` is swapped for
:func:`_stack_of_source_frames`: the same frames, files, lines and source
lines, except that a frame whose file does not exist skips the search for its
source line and records none (and no column positions), which is what
``inspect`` finds for such a frame anyway.
TVM's parser reads only the frames and the source line of the decorator's
caller (a file on disk), so what it parses does not change.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import sys


def _frame_record(frame, context: int) -> inspect.FrameInfo:
    if os.path.exists(frame.f_code.co_filename):
        info = inspect.getframeinfo(frame, context)
        return inspect.FrameInfo(frame, *info, positions=info.positions)
    return inspect.FrameInfo(frame, frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None, None)


def _stack_of_source_frames(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack(context)`` that looks for source lines only in files that exist."""
    frame = sys._getframe(1)  # the caller's frame, as inspect.stack starts there
    records = []
    while frame is not None:
        records.append(_frame_record(frame, context))
        frame = frame.f_back
    return records


@contextlib.contextmanager
def _shallow_inspect_stack():
    original = inspect.stack
    inspect.stack = _stack_of_source_frames
    try:
        yield
    finally:
        inspect.stack = original


@functools.cache
def load_tensor_intrinsics() -> None:
    """Import ``tvm.s_tir.tensor_intrin`` (once per process) with the fast stack."""
    if "tvm.s_tir.tensor_intrin" in sys.modules:
        return
    with _shallow_inspect_stack():
        importlib.import_module("tvm.s_tir.tensor_intrin")
