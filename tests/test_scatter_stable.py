"""The stable-ABI package itself (csrc/scatter_stable): the wheel, its ABI, its build, its CUDA source.

What the ops compute, their gradients, opcheck, torch.compile and their errors are tested for both scatter
packages at once, in tests/test_scatter_packages.py; the CUDA kernel on a GPU in tests/test_scatter_stable_cuda.py.
The stable wheel is built once into build/stable/ and reused while csrc/scatter_stable is unchanged.
"""

import re
from pathlib import Path

import pytest
import torch
from scatter_common import with_threads

from workbook.diagnostics import cuda_check
from workbook.ops import scatter as S
from workbook.ops import scatter_stable

CUDA_SOURCE = scatter_stable.SOURCE / "cuda" / "scatter_stable_cuda.cu"


@pytest.fixture(scope="module", autouse=True)
def ops():
    S.load()  # the ATen build, for contrast in test_the_library_imports_only_the_c_shim_from_torch
    return scatter_stable.load()


def test_out_of_range_error_names_the_first_bad_value_whatever_the_threads():
    index = torch.full((200_000,), 7)
    index[:3] = 0
    for threads in (1, 2):
        with pytest.raises(RuntimeError) as error:
            with_threads(threads, lambda: torch.ops.wb_scatter_stable.scatter_sum(torch.ones(200_000), index, 0, 3))
        # error_text drops STD_TORCH_CHECK's "function, /path/file.cpp:LINE, " prefix
        assert scatter_stable.error_text(error.value) == (
            "index value 7 at position 3 along dim is out of range: index values must lie in [0, dim_size) = [0, 3)"
        )


# ---- the package -----------------------------------------------------------------------------


def test_an_unchanged_source_tree_is_neither_rebuilt_nor_reinstalled():
    wheel, library = scatter_stable.wheel_path(), next((scatter_stable.SITE / "wb_scatter_stable").glob("_C*.so"))
    before = wheel.stat().st_mtime_ns, library.stat().st_mtime_ns
    scatter_stable.install()
    assert (wheel.stat().st_mtime_ns, library.stat().st_mtime_ns) == before


def test_the_wheel_is_tagged_abi3():
    assert re.fullmatch(r"cp3\d+-abi3-[a-z0-9_]+", scatter_stable.wheel_tag()), scatter_stable.wheel_tag()


def test_the_library_needs_neither_libpython_nor_libtorch_python():
    needed = scatter_stable.library_dependencies()
    assert any(name.startswith("libtorch_cpu") for name in needed), needed
    assert not any(name.startswith(("libpython", "libtorch_python")) for name in needed), needed


def test_the_library_imports_only_the_c_shim_from_torch():
    stable_imports, aten_imports = scatter_stable.torch_imports("stable"), scatter_stable.torch_imports("aten")
    assert "torch_parallel_for" in stable_imports["c"] and stable_imports["c++"] == []
    # the ATen build of the same ops, for contrast: C++ symbols of one torch build
    assert any(name.startswith("c10::") for name in aten_imports["c++"]), aten_imports


def test_a_second_copy_of_the_library_is_refused_not_loaded(tmp_path):
    """Loading another copy of the library would kill the process; the package raises ImportError instead."""
    other_copy = tmp_path / "other_copy.so"
    other_copy.write_bytes(next((scatter_stable.SITE / "wb_scatter_stable").glob("_C*.so")).read_bytes())
    code = (
        "import torch\n"
        f"torch.ops.load_library({str(other_copy)!r})\n"
        "try:\n"
        "    import wb_scatter_stable\n"
        "except ImportError as error:\n"
        "    print(str(error).split(';')[0])\n"
    )
    printed = S.run_python(code, path=scatter_stable.SITE)
    assert printed.strip() == (
        "the wb_scatter_stable ops are already registered in this process by another copy of the library"
    )


def test_ninja_log_times_reads_the_last_entry_of_each_output(tmp_path):
    (tmp_path / ".ninja_log").write_text(
        "# ninja log v5\n"
        "0\t12000\t1\ta/scatter.o\tf00\n"
        "5\t9005\t1\ta/scatter_cpu.o\tf01\n"
        "0\t500\t2\ta/scatter.o\tf02\n"  # rebuilt later (a ccache hit, say)
    )
    assert scatter_stable.ninja_log_times(tmp_path) == {"scatter.o": 0.5, "scatter_cpu.o": 9.0}


def test_the_stable_build_targets_torch_2_10_and_python_3_10():
    commands = scatter_stable.compile_commands("stable")
    expected = ["scatter_stable.cpp"] + [
        f"scatter_stable_cpu{part}.cpp" for part in ("", "_max", "_mean", "_min", "_sum")
    ]
    assert sorted(Path(entry["file"]).name for entry in commands) == expected
    for entry in commands:
        assert "-DTORCH_TARGET_VERSION=0x020a000000000000" in entry["command"]
        assert "-DPy_LIMITED_API=0x030A0000" in entry["command"]  # added by torch's BuildExtension


def test_compile_times_lists_every_stable_translation_unit():
    units = {"scatter_stable.o"} | {f"scatter_stable_cpu{part}.o" for part in ("", "_sum", "_mean", "_min", "_max")}
    assert set(scatter_stable.compile_times()["stable"]) >= units


def test_the_cuda_source_targets_the_same_stable_abi_as_the_build():
    """workbook.diagnostics.cuda_check compiles the .cu without the build's flags, so the file states the target itself."""
    target = re.search(
        r'TORCH_TARGET_VERSION = "(0x[0-9a-f]+)"', (scatter_stable.SOURCE / "setup.py").read_text()
    ).group(1)
    assert re.search(rf"#define TORCH_TARGET_VERSION {target}ULL\b", CUDA_SOURCE.read_text())


@pytest.mark.skipif(cuda_check.find_nvcc() is None, reason=cuda_check.nvcc_missing_reason())
def test_the_cuda_kernel_compiles_against_the_stable_headers_only():
    """nvcc, compile only (tests/test_cuda_compile.py checks every .cu the same way; the result is cached)."""
    result = cuda_check.compile_check(CUDA_SOURCE)
    assert result.ok, str(result)
