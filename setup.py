"""Build cognate-tvm: the Python package plus its C++ extensions, built by CMake.

The C++ parts (sparse format conversions in src/formats, the SPADE model in
src/spade) are compiled by CMake and placed next to the Python package, so
`pip install .` on a machine without a GPU gives a working install.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    """An extension whose build is delegated to the top-level CMakeLists.txt."""

    def __init__(self, name: str, target: str):
        super().__init__(name, sources=[])
        self.target = target


class CMakeBuild(build_ext):
    """Configure once, build each CMake target, copy it where setuptools expects it."""

    def build_extension(self, ext: CMakeExtension) -> None:
        import pybind11

        out_path = Path(self.get_ext_fullpath(ext.name)).resolve()
        out_path.parent.mkdir(parents=True, exist_ok=True)
        build_dir = Path(self.build_temp).resolve() / "cmake"
        build_dir.mkdir(parents=True, exist_ok=True)
        config = "Debug" if self.debug else "Release"
        ninja = shutil.which("ninja")
        if ninja is None:
            raise RuntimeError("ninja is not on PATH: install the build requirements of pyproject.toml "
                               "(pip does this unless --no-build-isolation is given)")
        configure = [
            "cmake", str(ROOT), "-G", "Ninja",
            f"-DCMAKE_MAKE_PROGRAM={ninja}",
            f"-DCMAKE_BUILD_TYPE={config}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DCOGNATE_OUTPUT_DIR={out_path.parent}",
        ]
        # One CMake tree serves every extension of this build. A tree configured by
        # another build (an isolated build environment that pip has since deleted, an
        # editable install writing elsewhere) caches stale paths: start it afresh.
        stamp = build_dir / "cognate-configure.json"
        if not (build_dir / "CMakeCache.txt").exists() or not stamp.is_file() \
                or json.loads(stamp.read_text()) != configure:
            shutil.rmtree(build_dir)
            build_dir.mkdir(parents=True)
            subprocess.run(configure, cwd=build_dir, check=True)
            stamp.write_text(json.dumps(configure))
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", ".", "--target", ext.target, "-j", jobs],
                       cwd=build_dir, check=True)


# Runtime dependencies, as ranges: what `pip install .` (and any project that depends
# on this one) needs. requirements.txt pins the exact versions CI runs. The lower bounds
# of numpy, scipy, pandas, pyarrow, pyamg, tqdm, cloudpickle, psutil and xgboost-cpu
# were installed together (with torch 2.13.0, apache-tvm 0.27.0.post1), and the matrix,
# data, simulator, model, baseline and tune tests and the CPU kernels' run tests passed
# on them. torch's lower bound comes from the APIs used and has not been run; TVM has
# only been run at 0.27.0.post1.
INSTALL_REQUIRES = [
    # tvm.tirx / tvm.s_tir module names and the TensorIR syntax the kernels use are 0.27's.
    "apache-tvm>=0.27.0,<0.28",
    # 0.1.15.x segfaults MetaSchedule in tvm::ffi::ToJSONGraph when a TuneContext gets a space generator.
    "apache-tvm-ffi>=0.1.14,<0.1.15",
    # MetaSchedule's LocalBuilder imports psutil; apache-tvm does not declare it.
    "psutil>=5.9,<8",
    # MetaSchedule pickles runner callables into its worker processes.
    "cloudpickle>=3.0,<4",
    # The newest tested torch is 2.13. On Linux, PyPI's torch wheels are the CUDA
    # builds (several GB with their nvidia-* dependencies); a CPU-only user installs
    # torch from https://download.pytorch.org/whl/cpu first (see the README).
    "torch>=2.4,<2.14",
    "numpy>=2.0,<3",
    "ml_dtypes>=0.5,<1",  # numpy's bfloat16, for the bfloat16 dense operands of the CPU kernels
    "scipy>=1.15,<2",  # scipy.sparse.random_array(..., rng=)
    "pandas>=2.2.2,<4",  # the first pandas built for numpy 2
    "pyarrow>=16",  # the first pyarrow built for numpy 2
    "tqdm>=4.64,<5",
    "pyamg>=5.2,<6",  # stencil and Poisson generators; 5.0 imports pkg_resources, 5.1 np.deprecate
    "scikit-fem>=12,<13",  # finite-element assembly of the realistic corpus's stiffness matrices
    # The XGBoost ranking baseline. `xgboost-cpu` is the same `import xgboost` without
    # the 469 MB NCCL dependency; it ships wheels for Linux and Windows only.
    "xgboost-cpu>=2.1.1,<4; platform_system == 'Linux' or platform_system == 'Windows'",
    "xgboost>=2.1,<4; platform_system != 'Linux' and platform_system != 'Windows'",
]

EXTRAS_REQUIRE = {
    # The test suite and the benchmarks' plots.
    "dev": ["pytest>=8", "matplotlib>=3.8,<4", "pillow>=10"],
    # Intel MKL as the CPU vendor baseline (x86-64 only; without it scipy is the reference).
    "mkl": ["sparse_dot_mkl>=0.9,<1; platform_machine == 'x86_64' or platform_machine == 'AMD64'",
            "mkl>=2024; platform_machine == 'x86_64' or platform_machine == 'AMD64'"],
    # Scale-out: a Ray cluster for collection, TVM's RPC tracker (tvm.exec.rpc_tracker needs tornado).
    "distributed": ["ray>=2.9,<3", "tornado>=6.0,<7"],
    # PyTorch Geometric, whose Data objects cognate_tvm.torch.pyg reads (its layers need only torch).
    "pyg": ["torch_geometric>=2.5,<3"],
    # Running the cuda target: the CUDA 13 runtime that TVM's CUDA module loads and NVRTC
    # (through cuda-bindings) to compile device code; the NVIDIA driver comes from the system.
    # Not yet exercised on a GPU (see the README's GPU section).
    "gpu": ["nvidia-cuda-runtime>=13,<14", "nvidia-cuda-nvrtc>=13,<14", "cuda-bindings>=13,<14"],
}

setup(
    name="cognate-tvm",
    version="0.1.0",
    description="Learned, transferable cost model for sparse tensor programs (COGNATE) as a TVM plugin",
    package_dir={"": "python"},
    packages=find_packages("python"),
    # The bundled example matrices and the shipped cost models
    # (pretrained/<op>-<platform>/<file>, see cognate_tvm.model.pretrained).
    package_data={"cognate_tvm": ["sample_matrices/*", "pretrained/*/*", "matrix/import_graph.npz"]},
    python_requires=">=3.10",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    ext_modules=[
        CMakeExtension("cognate_tvm._formats", target="_formats"),
        CMakeExtension("cognate_tvm._spade", target="_spade"),
    ],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["cognate-measure=cognate_tvm.measure:main",
                                    "cognate-tune=cognate_tvm.tune:main"]},
    zip_safe=False,
)
