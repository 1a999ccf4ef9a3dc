"""The fast registration of TVM's tensor intrinsics (cognate_tvm/tvm_intrinsics.py)."""
from __future__ import annotations

import importlib
import inspect
import os
import subprocess
import sys

import pytest

from cognate_tvm import tvm_intrinsics

# a module that records both stacks on one line, at import time: its outer frames are the import machinery's
STACKS_MODULE = """
import inspect
from cognate_tvm.tvm_intrinsics import _stack_of_source_frames
ours, theirs = _stack_of_source_frames(), inspect.stack()
"""
OURS_MODULE = """
from cognate_tvm.tvm_intrinsics import _stack_of_source_frames
ours = _stack_of_source_frames()
"""


def _import_stacks_module(tmp_path, name, text=STACKS_MODULE):
    (tmp_path / f"{name}.py").write_text(text)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


def test_the_stack_has_inspects_frames_files_lines_and_source_lines(tmp_path):
    module = _import_stacks_module(tmp_path, "stacks_at_import")
    ours, theirs = module.ours, module.theirs
    assert len(ours) == len(theirs) > 5
    assert any(not os.path.exists(r.filename) for r in theirs)  # the import machinery's frames are there
    assert [r.frame for r in ours] == [r.frame for r in theirs]
    fields = ("filename", "lineno", "function", "code_context", "index")
    assert [tuple(getattr(r, f) for f in fields) for r in ours] == [tuple(getattr(r, f) for f in fields)
                                                                      for r in theirs]
    assert ours[0].code_context == ["ours, theirs = _stack_of_source_frames(), inspect.stack()\n"]


def test_frames_without_a_source_file_are_not_looked_up(tmp_path, monkeypatch):
    looked_up = []
    getframeinfo = inspect.getframeinfo

    def recording_getframeinfo(frame, context=1):
        looked_up.append(frame.f_code.co_filename)
        return getframeinfo(frame, context)

    monkeypatch.setattr(inspect, "getframeinfo", recording_getframeinfo)
    module = _import_stacks_module(tmp_path, "stacks_looked_up", OURS_MODULE)
    assert looked_up and all(os.path.exists(f) for f in looked_up)
    assert sum(1 for r in module.ours if not os.path.exists(r.filename)) > 0


def test_cognate_model_registers_the_intrinsics_and_restores_inspect():
    # MetaSchedule's builder and runner workers import cognate_tvm.metaschedule: that alone must not parse
    # the intrinsics; the CognateModel that goes into a TuneContext must
    code = ("import inspect, sys, tvm\n"
            "original = inspect.stack\n"
            "from cognate_tvm import metaschedule\n"
            "assert 'tvm.s_tir.tensor_intrin' not in sys.modules\n"
            "metaschedule.CognateModel()\n"
            "assert 'tvm.s_tir.tensor_intrin' in sys.modules\n"
            "assert inspect.stack is original\n"
            "from tvm.s_tir import TensorIntrin\n"
            "from tvm.s_tir.tensor_intrin.x86 import VNNI_DOT_16x4_INTRIN\n"
            "from tvm.s_tir.tensor_intrin.cuda import WMMA_SYNC_16x16x16_f16f16f32_INTRIN\n"
            "for name in (VNNI_DOT_16x4_INTRIN, WMMA_SYNC_16x16x16_f16f16f32_INTRIN):\n"
            "    assert TensorIntrin.get(name).desc is not None, name\n"
            "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


def test_inspect_is_restored_when_the_import_fails(monkeypatch):
    original = inspect.stack

    def failing_import(name):
        assert inspect.stack is tvm_intrinsics._stack_of_source_frames
        raise ImportError(name)

    monkeypatch.delitem(sys.modules, "tvm.s_tir.tensor_intrin", raising=False)
    monkeypatch.setattr(tvm_intrinsics.importlib, "import_module", failing_import)
    tvm_intrinsics.load_tensor_intrinsics.cache_clear()
    try:
        with pytest.raises(ImportError, match="tensor_intrin"):
            tvm_intrinsics.load_tensor_intrinsics()
        assert inspect.stack is original
    finally:
        tvm_intrinsics.load_tensor_intrinsics.cache_clear()
