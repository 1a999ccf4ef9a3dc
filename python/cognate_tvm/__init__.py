"""cognate-tvm: a learned, transferable cost model for sparse tensor programs.

Subpackages import lazily: `cognate_tvm.matrix` and `cognate_tvm.space` need
neither torch nor TVM, and ``import cognate_tvm`` imports neither.
``from cognate_tvm import CognateModel`` (the MetaSchedule cost model) imports
TVM on first use.
"""
__version__ = "0.1.0"

# name -> module that defines it, imported on first access (PEP 562)
_LAZY = {"CognateModel": "cognate_tvm.metaschedule", "tune_sparse": "cognate_tvm.metaschedule"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'cognate_tvm' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
