"""Build the warp_perspective operator with setuptools (chapter 06, the third of three ways).

    cd csrc/warp_perspective
    python setup.py build_ext --build-lib ../../build/setuptools/warp_perspective/lib \
                              --build-temp ../../build/setuptools/warp_perspective/temp

The result is a plain shared library, not a Python module (it has no PyInit function): load it with
torch.ops.load_library(path) and call torch.ops.workbook_cv.warp_perspective. The custom class of
chapter 07 is left out; the CMake build has both.
"""

import shutil
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension


def opencv_include_dirs():
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--cflags-only-I", "opencv4"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            return [flag[2:] for flag in found.stdout.split()]
    return ["/usr/include/opencv4"]


setup(
    name="workbook_warp_perspective",
    ext_modules=[
        CppExtension(
            "workbook_warp_perspective",
            ["ops.cpp", "cpu/warp_perspective_cpu.cpp"],
            include_dirs=opencv_include_dirs(),
            libraries=["opencv_core", "opencv_imgproc"],
            # setuptools compiles with -g -O3 by default; without debug information the build is faster.
            extra_compile_args=["-g0", "-O2"],
        )
    ],
    # A library for torch.ops.load_library, so no Python ABI tag in its file name.
    cmdclass={"build_ext": BuildExtension.with_options(no_python_abi_suffix=True)},
)
