"""Writing a config's kernel out: the `export_kernel` of the backends that build kernels.

A backend's ``export_kernel(op, config, feat, directory, stem)`` writes the kernel of `config`
under `directory` and returns what it wrote (file names, how to call it). `Backend.export_kernel`
writes nothing (a simulator has no kernel); the local and the remote backend of a target share
one writer here, as both build the same kernels on this machine.
"""
from __future__ import annotations

from pathlib import Path

from ..ops import Op
from ..space.base import Config


def export_llvm_kernel(backend, op: Op, config: Config, feat: int, directory: Path, stem: str) -> dict:
    """The exported TVM library of `config`'s kernel (entry "main"); see cognate_tvm.kernels.cpu_operands for its arguments.

    `backend` gives the threads and the CPU (``num_threads``, ``mcpu``) the kernel is built for.
    """
    from ..kernels.cpu import build_kernel, cpu_target

    path = directory / f"{stem}.so"
    dtype = getattr(backend, "dtype", "float32")  # a remote backend builds float32 kernels only
    # Built afresh (~0.1 s): a library the kernel cache loaded from disk cannot be exported again.
    build_kernel(op, config, feat, cpu_target(backend.num_threads, backend.mcpu),
                 dtype=dtype).export_library(str(path))
    return {"library": path.name, "entry": "main",
            "arguments": "m, ncols, nnz, npanels, indptr, indices, vals, [perm (SDDMM with column panels)], "
                         "dense operands padded to padded_width, output (cognate_tvm.kernels.cpu_operands."
                         "kernel_arguments builds them; register-blocked configs take the row-block form)",
            "padded_width": config.padded_width(feat), "dense_dtype": dtype}


def export_cuda_kernel(backend, op: Op, config: Config, feat: int, directory: Path, stem: str) -> dict:
    """The CUDA source of `config`'s kernel variant and its PTX (when nvcc is found).

    `backend` gives the architecture and nvcc (``arch``, ``nvcc``).
    """
    from ..kernels import cuda as kcuda

    key = kcuda.kernel_key(op, config)
    source = kcuda.cuda_source(kcuda.build([key], arch=backend.arch))
    (directory / f"{stem}.cu").write_text(source)
    out = {"source": f"{stem}.cu", "kernels": list(key.kernel_names), "arch": backend.arch, "ptx": None}
    try:
        ptx = kcuda.compile_ptx(source, arch=backend.arch, nvcc=backend.nvcc)
    except kcuda.NvccError as exc:
        out["ptx_error"] = str(exc)
        return out
    (directory / f"{stem}.ptx").write_text(ptx)
    out["ptx"] = f"{stem}.ptx"
    return out
