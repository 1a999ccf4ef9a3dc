"""TensorIR kernels for SpMM and SDDMM on CUDA GPUs (SparseTIR-style), and their build.

A GPU config (`cognate_tvm.space.gpu.GPUConfig`) selects one kernel *variant*
(`KernelKey`): the storage layout (plain column-panel CSR, or ELL buckets of
short rows plus a CSR remainder, "hyb"), how panels are combined (serially in
the thread, or in parallel with `atomicAdd`), threads along the dense dimension
tx and the vector width v, which are compile-time constants. The number of
panels, the rows per block I (`blockDim.y`, a launch parameter), the matrix
shape, nnz and the dense width are runtime arguments, so one compiled kernel
serves every matrix, `parts`, `rows_per_block` and `feat`: compile each variant
once and cache it (plain configs: SpMM 48 variants, SDDMM 24).

Chunked configs (`chunk` > 0) use the "chunk" layout: a table of row chunks
(`cuda_prep.chunk_table`) walked by one thread group per chunk, with vectors
per thread CPT and row caching as further compile-time constants; the chunk
length and the swizzle are host-side preparation only, so they add no
variant (SpMM: 12 chunk variants, SDDMM: 12; 96 in all).

Dense operands are passed as [rows, nvec * v] float32 arrays (nvec = number of
v-wide vectors per dense row); vector loads are `float2`/`float4` and aligned
because every row starts at a multiple of v. The argument arrays each variant
needs are built by `cognate_tvm.kernels.cuda_prep`.

SpMM threads: (blockIdx.x: I-row groups, blockIdx.y: tx*v dense chunks,
[blockIdx.z: panels when atomic]) x (threadIdx.y: I rows, threadIdx.x: tx);
each thread keeps a v-wide accumulator in registers. SDDMM threads: a group of
tx lanes per row walks the row's nonzeros; each lane accumulates a partial dot
product over its vectors and the group sums it with `__shfl_xor_sync`.
Chunk kernels: (blockIdx.x: I-chunk groups, [SpMM blockIdx.y: tx*v*CPT dense
chunks]) x (threadIdx.y: I chunks, threadIdx.x: tx), each thread holding CPT
v-wide vectors strided by tx; SpMM launches a zeroing kernel for split rows first.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from ..errors import CognateError, InvalidConfigError
from ..ops import Op, get_op
from ..space.gpu import ELL_WIDTHS, GPUConfig

if TYPE_CHECKING:  # pragma: no cover
    import tvm

logger = logging.getLogger(__name__)

ARCHS = ("sm_80", "sm_90")

# (op, layout, combine) variants: combine says how panels reach the output.
SPMM_VARIANTS = (("csr", "serial"), ("csr", "atomic"), ("hyb", "store"), ("hyb", "atomic"))
SDDMM_VARIANTS = (("csr", "parallel"), ("hyb", "parallel"))
# Chunked configs: SpMM stores single-chunk rows and adds the chunks of split rows ("mixed").
CHUNK_COMBINE = {"spmm": "mixed", "sddmm": "parallel"}


@dataclass(frozen=True)
class KernelKey:
    """What the generated code depends on; many configs share one key."""

    op: str
    layout: str    # "csr" | "hyb"
    combine: str   # SpMM: "serial" | "atomic" | "store"; SDDMM: "parallel"
    tx: int
    vec: int
    cpt: int = 1         # chunk layout: vectors per thread
    cache: bool = False  # chunk layout: row caching

    @property
    def name(self) -> str:
        name = f"{self.op}_{self.layout}_{self.combine}_t{self.tx}_v{self.vec}"
        if self.layout == "chunk":
            name += f"_c{self.cpt}" + ("_rc" if self.cache else "")
        return name

    @property
    def kernel_names(self) -> tuple[str, ...]:
        """Names of the CUDA `__global__` functions TVM emits for this key."""
        if self.layout == "chunk":
            count = 1 + (self.op == "spmm")  # SpMM: the zeroing of split rows, then the chunks
        elif self.layout == "csr":
            count = 1 + (self.combine == "atomic")
        else:
            count = len(ELL_WIDTHS) + 1 + (self.op == "spmm")
        return tuple(f"{self.name}_kernel" if n == 0 else f"{self.name}_kernel_{n}" for n in range(count))


def kernel_key(op: str | Op, config: GPUConfig) -> KernelKey:
    """The kernel variant that runs `config` for `op`."""
    op = get_op(op)
    if not isinstance(config, GPUConfig):
        raise InvalidConfigError(f"CUDA kernels take a GPUConfig, got {config!r}")
    if config.chunked:
        return KernelKey(op.name, "chunk", CHUNK_COMBINE[op.name], config.tx, config.vec,
                         config.cols_per_thread, config.cache)
    layout = "hyb" if config.bucketing else "csr"
    if op.name == "sddmm":
        combine = "parallel"
    elif config.atomics:
        combine = "atomic"
    else:
        combine = "store" if config.bucketing else "serial"
    return KernelKey(op.name, layout, combine, config.tx, config.vec)


def all_keys(op: str | Op) -> list[KernelKey]:
    """Every kernel variant of `op` (the union over its whole space)."""
    op = get_op(op)
    variants = SPMM_VARIANTS if op.name == "spmm" else SDDMM_VARIANTS
    from ..space.gpu import CHUNK_LANES, CHUNK_VEC, TX, VEC

    plain = [KernelKey(op.name, layout, combine, t, v) for layout, combine in variants
             for t in TX for v in VEC]
    return plain + [KernelKey(op.name, "chunk", CHUNK_COMBINE[op.name], t, v, w, c)
                    for t, w in CHUNK_LANES for v in CHUNK_VEC for c in (False, True)]


def cuda_target(arch: str = "sm_80") -> "tvm.target.Target":
    """TVM target for an NVIDIA GPU of compute capability `arch` (host code for x86 LLVM)."""
    from tvm.target import Target

    if arch not in ARCHS:
        raise InvalidConfigError(f"arch {arch!r} not supported; valid: {', '.join(ARCHS)}")
    return Target({"kind": "cuda", "arch": arch}, host={"kind": "llvm"})


@functools.lru_cache(maxsize=None)
def _generic_prim_func(op: str, layout: str, combine: str, cache: bool):
    """The variant's PrimFunc with TX, V (LOG_TX, CPT) still scalar parameters."""
    from . import cuda_tir, cuda_tir_chunk

    if layout == "chunk":
        return {"spmm": cuda_tir_chunk.spmm_chunk, "sddmm": cuda_tir_chunk.sddmm_chunk}[op](combine, cache)
    builders = {("spmm", "csr"): cuda_tir.spmm_csr, ("spmm", "hyb"): cuda_tir.spmm_hyb,
                ("sddmm", "csr"): cuda_tir.sddmm_csr, ("sddmm", "hyb"): cuda_tir.sddmm_hyb}
    return builders[op, layout](combine)


def make_prim_func(key: KernelKey):
    """The TensorIR PrimFunc of `key` (constants specialized in), named `key.name`.

    Its last runtime parameter is I, the rows (chunks) per block, passed at launch time.
    """
    generic = _generic_prim_func(key.op, key.layout, key.combine, key.cache)
    values = {"TX": key.tx, "V": key.vec, "LOG_TX": key.tx.bit_length() - 1, "CPT": key.cpt}
    return _specialize(generic, values, key.name)


def serial_prim_func(key: KernelKey):
    """`key`'s chunk kernel with plain loops for its thread loops and one lane per group (TX = 1, so
    a shuffle is the lane's own value and an atomic add a plain one): lowers for `llvm`, and runs
    the kernel's indexing (chunks, CPT vectors, X slices, split rows) on a CPU."""
    if key.layout != "chunk":
        raise InvalidConfigError(f"only chunk kernels have a serial form, not {key.name}")
    from . import cuda_tir_chunk

    builder = {"spmm": cuda_tir_chunk.spmm_chunk, "sddmm": cuda_tir_chunk.sddmm_chunk}[key.op]
    values = {"TX": 1, "V": key.vec, "LOG_TX": 0, "CPT": key.cpt}
    return _specialize(builder(key.combine, key.cache, serial=True), values, f"{key.name}_serial")


def _specialize(generic, values: dict, name: str):
    binding = {p: values[p.name] for p in generic.params if p.name in values}
    return generic.specialize(binding).with_attr("global_symbol", name)


def build(keys: Iterable[KernelKey], *, arch: str = "sm_80"):
    """Build the kernels of `keys` into one TVM module (host + CUDA device code).

    Works without a GPU: device code is generated as CUDA source and compiled
    when the module is first loaded on a device (TVM calls nvcc/NVRTC then).
    """
    import tvm

    keys = sorted(set(keys), key=lambda k: k.name)
    mod = tvm.IRModule({key.name: make_prim_func(key) for key in keys})
    target = cuda_target(arch)
    logger.debug("building %d CUDA kernel variants for %s", len(keys), arch)
    # Constant-extent loops marked unroll become `#pragma unroll` for nvcc instead of
    # being expanded in TIR (an ELL row of 32 slots would otherwise be copied 32 times).
    config = {"tirx.UnrollLoop": {"explicit_unroll": False}}
    with target, tvm.transform.PassContext(config=config):
        return tvm.tirx.build(mod, target=target)


def cuda_source(lib) -> str:
    """The CUDA C++ source of a module returned by `build`."""
    return lib.imports[0].inspect_source()


class NvccError(CognateError, RuntimeError):
    """nvcc is missing or rejected a CUDA source (the message carries its diagnostics)."""


def find_nvcc(nvcc: str | os.PathLike | None = None) -> str | None:
    """Path of the nvcc to use: `nvcc` if given, else the one on PATH or in /usr/local/cuda."""
    if nvcc is not None:
        return str(nvcc) if Path(nvcc).is_file() else None
    found = shutil.which("nvcc")
    if found:
        return found
    default = Path("/usr/local/cuda/bin/nvcc")
    return str(default) if default.is_file() else None


def compile_ptx(source: str, *, arch: str = "sm_80", nvcc: str | os.PathLike | None = None,
                timeout_s: float = 600.0) -> str:
    """Compile CUDA `source` to PTX for `arch` with nvcc and return the PTX text.

    Raises NvccError when nvcc is missing, fails, or runs past `timeout_s`.
    """
    if arch not in ARCHS:
        raise InvalidConfigError(f"arch {arch!r} not supported; valid: {', '.join(ARCHS)}")
    exe = find_nvcc(nvcc)
    if exe is None:
        raise NvccError(f"nvcc not found (looked for {nvcc or 'nvcc on PATH and /usr/local/cuda/bin'})")
    with tempfile.TemporaryDirectory(prefix="cognate_nvcc_") as tmp:
        src, out = Path(tmp) / "kernels.cu", Path(tmp) / "kernels.ptx"
        src.write_text(source)
        # TVM's code leaves a few unused temporaries (warning 177): not worth a line each.
        cmd = [exe, "--ptx", f"-arch={arch}", "-O3", "-diag-suppress", "177", "-o", str(out), str(src)]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise NvccError(f"nvcc ran past {timeout_s} s on {len(source)} characters of CUDA") from None
        if proc.returncode != 0:
            raise NvccError(f"nvcc -arch={arch} failed (exit {proc.returncode}): "
                            f"{(proc.stderr or proc.stdout)[-2000:]}")
        return out.read_text()


def ptx_entries(ptx: str) -> set[str]:
    """Names of the kernels (`.entry`) defined in a PTX text."""
    return set(re.findall(r"\.entry\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(", ptx))


# -- the CUDA runtime: finding it, and telling "no GPU" from "GPU but TVM cannot use it" --------
CUDART_SONAME = "libcudart.so.13"  # what the PyPI TVM wheel's libtvm_runtime_cuda.so links
COMPILE_MODE_ENV = "TVM_CUDA_COMPILE_MODE"


def driver_gpu_count() -> tuple[int, str]:
    """GPUs the NVIDIA driver reports (libcuda.so.1, independent of TVM and torch), and how it knows.

    Returns (count, detail); count 0 with the reason when there is no driver or no device.
    """
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError as err:
        return 0, f"no NVIDIA driver (libcuda.so.1 does not load: {err})"
    status = libcuda.cuInit(0)
    if status != 0:
        return 0, f"the NVIDIA driver is present but cuInit failed (CUresult {status})"
    count = ctypes.c_int(0)
    status = libcuda.cuDeviceGetCount(ctypes.byref(count))
    if status != 0:
        return 0, f"cuDeviceGetCount failed (CUresult {status})"
    return int(count.value), f"the NVIDIA driver reports {count.value} GPU(s)"


def cudart_candidates() -> list[Path]:
    """Places a CUDA 13 runtime library may live: CUDA_HOME/CUDA_PATH, /usr/local/cuda, and the
    `nvidia` wheels next to torch (nvidia/cu13/lib, nvidia/cuda_runtime/lib) on sys.path."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    dirs = [Path(r) / sub for r in roots if r for sub in ("lib64", "lib", "targets/x86_64-linux/lib")]
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        dirs += [base / "cu13" / "lib", base / "cuda_runtime" / "lib"]
    return [d / CUDART_SONAME for d in dirs if (d / CUDART_SONAME).is_file()]


def preload_cudart() -> str | None:
    """Load libcudart.so.13 with RTLD_GLOBAL so TVM's CUDA runtime links against it.

    A copy the process already has (e.g. torch's) is reused, since the dynamic
    loader matches by soname. Returns the path (or soname) loaded, None if none is found.
    """
    try:
        ctypes.CDLL(CUDART_SONAME, mode=os.RTLD_GLOBAL)
        return CUDART_SONAME
    except OSError:
        pass
    for path in cudart_candidates():
        try:
            ctypes.CDLL(str(path), mode=os.RTLD_GLOBAL)
            return str(path)
        except OSError as err:
            logger.debug("cannot load %s: %s", path, err)
    return None


def select_compile_mode(environ: dict | None = None) -> str:
    """Choose how TVM compiles CUDA device code and set `TVM_CUDA_COMPILE_MODE` if unset.

    TVM 0.27 compiles a CUDA module's source when the module is created on a
    machine with a GPU, through `tvm_callback_cuda_compile`: NVRTC (its default)
    needs the `cuda-bindings` package, nvcc needs nvcc on PATH. NVRTC is kept
    when `cuda.bindings.nvrtc` imports; otherwise nvcc is chosen, and the
    directory of `find_nvcc()` is put on PATH when nvcc is not there yet.
    An explicit setting is respected. Returns the mode in force.
    """
    environ = os.environ if environ is None else environ
    if environ.get(COMPILE_MODE_ENV):
        return environ[COMPILE_MODE_ENV].lower()
    try:
        has_nvrtc = importlib.util.find_spec("cuda.bindings.nvrtc") is not None
    except (ImportError, ValueError):
        has_nvrtc = False
    mode = "nvrtc" if has_nvrtc else "nvcc"
    environ[COMPILE_MODE_ENV] = mode
    if mode == "nvcc" and shutil.which("nvcc", path=environ.get("PATH")) is None:
        nvcc = find_nvcc()
        if nvcc is not None:
            environ["PATH"] = os.pathsep.join([str(Path(nvcc).parent), environ.get("PATH", "")])
    return mode


def load_tvm_cuda_runtime() -> str | None:
    """Make TVM's CUDA runtime (libtvm_runtime_cuda.so) usable; None on success, else why not.

    `import tvm` tries to load it once and silently gives up when libcudart.so.13
    or libcuda.so.1 cannot be found, after which `tvm.cuda(0).exist` is False
    even on a GPU machine. This preloads the CUDA runtime and loads TVM's
    library again, returning the loader's message when it still fails.
    """
    preload_cudart()
    from tvm.base import _LOADED_LIBS
    from tvm_ffi.libinfo import load_lib_ctypes

    if "tvm_runtime_cuda" in _LOADED_LIBS:
        return None
    runtime_dir = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
    try:
        _LOADED_LIBS["tvm_runtime_cuda"] = load_lib_ctypes(package="tvm", target_name="tvm_runtime_cuda",
                                                            extra_lib_paths=[runtime_dir], mode="RTLD_LOCAL")
    except (OSError, FileNotFoundError, RuntimeError) as err:
        return f"{type(err).__name__}: {err}"
    return None


def cuda_runtime_status(device_id: int = 0) -> dict:
    """What a GPU run needs, checked in order: driver GPUs, TVM's CUDA runtime, TVM's device.

    Keys: driver_gpus, driver (detail), tvm_runtime_error (None when loaded),
    tvm_device (tvm.cuda(device_id).exist), compile_mode, nvcc.
    """
    gpus, detail = driver_gpu_count()
    mode = select_compile_mode()
    error = load_tvm_cuda_runtime()
    import tvm

    exists = bool(tvm.cuda(device_id).exist) if error is None else False
    return {"driver_gpus": gpus, "driver": detail, "tvm_runtime_error": error, "tvm_device": exists,
            "compile_mode": mode, "nvcc": shutil.which("nvcc") or find_nvcc()}
