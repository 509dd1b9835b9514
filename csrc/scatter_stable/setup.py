"""setuptools build of wb_scatter_stable: the scatter ops against the LibTorch stable ABI, as one
wheel for every CPython >= 3.10 (abi3) and every torch >= 2.10 (stable ABI).

    pip wheel --no-build-isolation --no-deps -w dist ./csrc/scatter_stable

Two promises, two switches:
- py_limited_api=True: torch's BuildExtension then compiles with -DPy_LIMITED_API=0x030A0000 (its
  `min_supported_cpython`, CPython 3.10) and links without libtorch_python; the bdist_wheel option
  below tags the wheel cp310-abi3 to match. The library includes no Python header at all: its ops
  reach Python through the dispatcher, not through a Python module.
- -DTORCH_TARGET_VERSION=0x020a000000000000: build for the stable ABI of torch 2.10 and later. With
  it defined, every non-stable torch header (ATen, c10, torch/library.h) is an #error, and stable
  APIs newer than 2.10 are hidden, so the library can only use what libtorch 2.10 already offers.

The CUDA kernels (cuda/*.cu) are compiled when this torch has CUDA, a CUDA toolkit is found, and either a GPU is
visible or TORCH_CUDA_ARCH_LIST names the architectures; set WB_SCATTER_CPU_ONLY=1 to leave them out. -DUSE_CUDA declares the CUDA part of the C shim
(aoti_torch_get_current_cuda_stream, torch_c10_cuda_check_msg).
"""

import os
from pathlib import Path

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = Path(__file__).resolve().parent
TORCH_TARGET_VERSION = "0x020a000000000000"  # [major 2][minor 10][patch 0][abi tag 0], one byte each from the top
PYTHON_ABI = "cp310"  # matches cpp_extension's min_supported_cpython (0x030A0000)
CPU_SOURCES = ["scatter_stable.cpp"]  # relative to setup.py, as setuptools wants
CPU_SOURCES += [f"cpu/scatter_stable_cpu{part}.cpp" for part in ("", "_sum", "_mean", "_min", "_max")]
CUDA_SOURCES = sorted(str(p.relative_to(HERE)) for p in (HERE / "cuda").glob("*.cu"))
with_cuda = (
    bool(CUDA_SOURCES)
    and torch.version.cuda is not None
    and CUDA_HOME is not None
    and os.environ.get("WB_SCATTER_CPU_ONLY", "") in ("", "0")
    # Without a visible GPU, torch cannot pick the architectures to compile for unless told.
    and (torch.cuda.is_available() or bool(os.environ.get("TORCH_CUDA_ARCH_LIST")))
)

# -g0: setuptools adds -g, which only makes the build slower here. No -fopenmp: the stable
# parallel_for runs on libtorch's own thread pool.
# -fvisibility=hidden: torch::stable and torch::headeronly are hidden namespaces (every
# extension keeps its own copy of that code, so extensions built against different torch
# versions can share a process); our types, which hold torch::stable::Tensor, follow suit
# (else gcc warns), and the library exports nothing: libtorch finds the ops through the
# registrations its static initialisers make.
target = f"-DTORCH_TARGET_VERSION={TORCH_TARGET_VERSION}"
cxx_flags = ["-O3", "-g0", "-fvisibility=hidden", target]
nvcc_flags = ["-O3", "-Xcompiler", "-fvisibility=hidden", target, "-DUSE_CUDA"]
Extension = CUDAExtension if with_cuda else CppExtension
extension = Extension(
    # Loaded with torch.ops.load_library: it registers ops and defines no Python module.
    name="wb_scatter_stable._C",
    sources=CPU_SOURCES + (CUDA_SOURCES if with_cuda else []),
    extra_compile_args={"cxx": cxx_flags, "nvcc": nvcc_flags} if with_cuda else cxx_flags,
    py_limited_api=True,
)

# Inside the workbook, keep build products in the repository's git-ignored build/ folder.
repository = HERE.parent.parent
options = {"bdist_wheel": {"py_limited_api": PYTHON_ABI}}
if (repository / "workbook").is_dir():
    build_dir = Path(os.environ.get("WORKBOOK_BUILD_DIR") or repository / "build")  # another torch builds elsewhere
    options["build"] = {"build_base": str(build_dir / "stable" / "setuptools")}

setup(
    name="wb-scatter-stable",
    version="0.1.0",
    description="scatter_sum/mean/min/max on the LibTorch stable ABI (Extending PyTorch workbook)",
    packages=["wb_scatter_stable"],
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch>=2.10"],
    python_requires=">=3.10",
    options=options,
    zip_safe=False,
)
