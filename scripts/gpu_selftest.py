"""Self-test of a TVM install for the `cuda` target: import, build, compile, and (with a GPU) run.

Run first on a GPU host (`bash scripts/gpu_run.sh run` does, from the offline payload), and on an
unpacked payload to check it without a GPU:

1. `import tvm` (and say where it came from);
2. build a small TensorIR CUDA kernel and one SpMM and one SDDMM variant of the
   project for `--arch`, emit their CUDA source;
3. compile that source with nvcc to PTX (the project's path) and to a fatbin
   through TVM's own `tvm.support.nvcc.compile_cuda` (what TVM does when it
   loads a module onto a GPU in nvcc mode);
4. where the NVIDIA driver sees a GPU: TVM's CUDA runtime must load, the small
   kernel must run and give the right answer, and the baseline SpMM and SDDMM
   configs must pass the NaN-filled check. A GPU that TVM cannot use is a
   failure here, never a skip.

Exit status 0 when every step that applies passed; prints one line per step.
"""
from __future__ import annotations

import argparse
import sys
import time


def step(name: str, fn):
    t0 = time.perf_counter()
    try:
        detail = fn()
    except Exception as err:  # noqa: BLE001 - reported, then the exit status says it
        print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
        return False
    print(f"ok   {name} ({time.perf_counter() - t0:.1f} s){': ' + str(detail) if detail else ''}", flush=True)
    return True


def vector_add(n: int):
    from tvm.script import tirx as T

    @T.prim_func
    def add(a: T.handle, b: T.handle, c: T.handle):
        T.func_attr({"global_symbol": "add", "tirx.noalias": True})
        A = T.match_buffer(a, (n,), "float32")
        B = T.match_buffer(b, (n,), "float32")
        C = T.match_buffer(c, (n,), "float32")
        for bx in T.thread_binding((n + 127) // 128, thread="blockIdx.x"):
            for tx in T.thread_binding(128, thread="threadIdx.x"):
                if bx * 128 + tx < n:
                    C[bx * 128 + tx] = A[bx * 128 + tx] + B[bx * 128 + tx]
    return add


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90", choices=("sm_80", "sm_90"))
    args = parser.parse_args(argv)
    ok = True
    state: dict = {}

    def imports():
        try:
            import torch  # noqa: F401 - first, so TVM links against torch's CUDA runtime
        except ImportError:
            pass
        import tvm
        import tvm_ffi

        state["tvm"] = tvm
        return f"tvm {tvm.__version__} from {tvm.__file__}; tvm_ffi {tvm_ffi.__version__}"
    if not step("import tvm", imports):
        return 1
    tvm = state["tvm"]
    from cognate_tvm.kernels import cuda as kcuda

    def runtime():
        state["status"] = status = kcuda.cuda_runtime_status(0)
        return {k: status[k] for k in ("driver_gpus", "tvm_runtime_error", "tvm_device", "compile_mode", "nvcc")}
    ok &= step("CUDA runtime status", runtime)
    status = state.get("status", {"driver_gpus": 0, "tvm_device": False})

    def build_small():
        target = kcuda.cuda_target(args.arch)
        with target:
            state["small"] = lib = tvm.tirx.build(tvm.IRModule({"add": vector_add(1000)}), target=target)
        return f"{len(kcuda.cuda_source(lib))} chars of CUDA"
    ok &= step(f"build a TensorIR CUDA kernel for {args.arch}", build_small)

    def build_variants():
        keys = [kcuda.all_keys("spmm")[0], kcuda.all_keys("sddmm")[-1]]
        state["variants"] = lib = kcuda.build(keys, arch=args.arch)
        state["source"] = source = kcuda.cuda_source(lib)
        return f"{[k.name for k in keys]}: {len(source)} chars of CUDA"
    ok &= step("build an SpMM and an SDDMM variant", build_variants)

    if kcuda.find_nvcc() is not None and "source" in state:
        def ptx():
            entries = kcuda.ptx_entries(kcuda.compile_ptx(state["source"], arch=args.arch))
            return f"{len(entries)} kernels in the PTX"
        ok &= step("nvcc --ptx (the project's compile-only path)", ptx)

        def fatbin():
            from tvm.support import nvcc

            with kcuda.cuda_target(args.arch):
                data = nvcc.compile_cuda(state["source"], target_format="fatbin", compiler="nvcc")
            return f"{len(data)} bytes of fatbin"
        ok &= step("tvm.support.nvcc.compile_cuda fatbin (TVM's load-time path)", fatbin)
    else:
        print("skip nvcc steps: nvcc not found")
        ok &= status["driver_gpus"] == 0  # a GPU machine must have a compiler for the device code

    if status["driver_gpus"] == 0:
        print("skip GPU steps: the NVIDIA driver reports no GPU here")
        return 0 if ok else 1

    def tvm_sees_gpu():
        if not status["tvm_device"]:
            raise RuntimeError(f"a GPU is present but TVM cannot use it: {status['tvm_runtime_error']}")
        return tvm.cuda(0).device_name
    if not step("TVM sees the GPU", tvm_sees_gpu):
        return 1

    def run_small():
        import numpy as np

        dev = tvm.cuda(0)
        a, b = (np.random.default_rng(s).standard_normal(1000).astype("float32") for s in (0, 1))
        target = kcuda.cuda_target(args.arch)
        with target:
            lib = tvm.tirx.build(tvm.IRModule({"add": vector_add(1000)}), target=target)
        c = tvm.runtime.tensor(np.full(1000, np.nan, "float32"), dev)
        lib["add"](tvm.runtime.tensor(a, dev), tvm.runtime.tensor(b, dev), c)
        dev.sync()
        np.testing.assert_allclose(c.numpy(), a + b, rtol=1e-6)
        return "1000 sums right"
    ok &= step("run it on the GPU", run_small)

    def baselines():
        from cognate_tvm import backends, space
        from cognate_tvm.matrix import generate

        backend = backends.create("cuda", arch=args.arch, number=2, repeat=2)
        matrix = generate("rmat", 2048, 0)
        out = []
        for op in ("spmm", "sddmm"):
            result = backend.measure(op, matrix, [space.create("gpu", op).baseline()], 61, check=True)[0]
            if not (result.ok and result.correct):
                raise RuntimeError(f"{op} baseline: error={result.error} extra={result.extra}")
            out.append(f"{op} {result.time_ms:.4f} ms")
        return ", ".join(out)
    ok &= step("baseline SpMM and SDDMM configs, NaN-filled and checked", baselines)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
