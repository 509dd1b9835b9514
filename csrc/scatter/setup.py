"""setuptools build of the wb_scatter package: the same sources as the JIT build and the CMake build.

    pip install --no-build-isolation ./csrc/scatter         # into the current environment
    pip wheel --no-build-isolation --no-deps -w dist ./csrc/scatter

torch's BuildExtension adds torch's include folders and the C++ standard torch needs (-std=c++20),
leaves the C++ ABI to the compiler's default (torch 2.13 passes no _GLIBCXX_USE_CXX11_ABI flag), and
compiles with ninja (in parallel, and only what changed). CUDA kernels (cuda/*.cu) are compiled when this torch
has CUDA, a CUDA toolkit is found, and either a GPU is visible or TORCH_CUDA_ARCH_LIST names the architectures
(without either, torch cannot choose them); set WB_SCATTER_CPU_ONLY=1 to leave them out.
"""

import os
from pathlib import Path

import torch
from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

HERE = Path(__file__).resolve().parent
# Paths relative to setup.py, as setuptools wants them. scatter_unity.cpp includes the six op-level .cpp files,
# so torch's headers are parsed once for all six (it says more); the four loop files are compiled apart.
CPU_SOURCES = ["scatter_unity.cpp"]
CPU_SOURCES += [f"cpu/scatter_cpu_{reduction}.cpp" for reduction in ("sum", "mean", "min", "max")]
CUDA_SOURCES = sorted(str(p.relative_to(HERE)) for p in (HERE / "cuda").glob("*.cu"))
with_cuda = (
    bool(CUDA_SOURCES)
    and torch.version.cuda is not None
    and CUDA_HOME is not None
    and os.environ.get("WB_SCATTER_CPU_ONLY", "") in ("", "0")
    # Without a visible GPU, torch cannot pick the architectures to compile for unless told.
    and (torch.cuda.is_available() or bool(os.environ.get("TORCH_CUDA_ARCH_LIST")))
)

# -fopenmp: at::parallel_for uses threads only when compiled with OpenMP. -g0: setuptools adds -g,
# which makes objects large and builds slower; this package has no use for debug info.
cxx_flags = ["-O3", "-g0", "-fopenmp"]
Extension = CUDAExtension if with_cuda else CppExtension
extension = Extension(
    # The library is loaded with torch.ops.load_library (it registers ops; it defines no Python
    # module), so it needs no PyInit function; the name only places the file in the package.
    name="wb_scatter._C",
    sources=CPU_SOURCES + (CUDA_SOURCES if with_cuda else []),
    extra_compile_args={"cxx": cxx_flags, "nvcc": ["-O3"]} if with_cuda else cxx_flags,
    extra_link_args=["-fopenmp"],
)

# Inside the workbook, keep build products in the repository's git-ignored build/ folder, not in
# csrc/scatter/build/ next to the sources.
repository = HERE.parent.parent
options = {}
if (repository / "workbook").is_dir():
    build_dir = Path(os.environ.get("WORKBOOK_BUILD_DIR") or repository / "build")  # another torch builds elsewhere
    options["build"] = {"build_base": str(build_dir / "scatter_pkg" / "setuptools")}

setup(
    name="wb-scatter",
    version="0.1.0",
    description="scatter_sum/mean/min/max with torch_scatter's signature (Extending PyTorch workbook)",
    packages=["wb_scatter"],
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension},
    install_requires=["torch"],
    python_requires=">=3.9",
    options=options,
    zip_safe=False,
)
