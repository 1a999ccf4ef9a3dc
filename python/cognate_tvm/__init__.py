"""cognate-tvm: a learned, transferable cost model for sparse tensor programs.

Subpackages import lazily: `cognate_tvm.matrix` and `cognate_tvm.space` need
neither torch nor TVM.
"""
__version__ = "0.1.0"
