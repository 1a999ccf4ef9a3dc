"""Build cognate-tvm: the Python package plus its C++ extensions, built by CMake.

The C++ parts (sparse format conversions in src/formats, the SPADE model in
src/spade) are compiled by CMake and placed next to the Python package, so
`pip install .` on a machine without a GPU gives a working install.
"""
from __future__ import annotations

import os
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
        configure = [
            "cmake", str(ROOT), "-G", "Ninja",
            f"-DCMAKE_BUILD_TYPE={config}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DCOGNATE_OUTPUT_DIR={out_path.parent}",
        ]
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.run(configure, cwd=build_dir, check=True)
        jobs = str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", ".", "--target", ext.target, "-j", jobs],
                       cwd=build_dir, check=True)


setup(
    name="cognate-tvm",
    version="0.1.0",
    description="Learned, transferable cost model for sparse tensor programs (COGNATE) as a TVM plugin",
    package_dir={"": "python"},
    packages=find_packages("python"),
    package_data={"cognate_tvm": ["sample_matrices/*.mtx"]},
    python_requires=">=3.10",
    ext_modules=[
        CMakeExtension("cognate_tvm._formats", target="_formats"),
        CMakeExtension("cognate_tvm._spade", target="_spade"),
    ],
    cmdclass={"build_ext": CMakeBuild},
    entry_points={"console_scripts": ["cognate-measure=cognate_tvm.measure:main"]},
    zip_safe=False,
)
