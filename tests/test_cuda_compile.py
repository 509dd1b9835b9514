"""Compile-only check of every CUDA kernel in csrc/ (no GPU needed), and of the checker itself.

Each .cu under csrc/ is compiled with nvcc against torch's headers (workbook.diagnostics.cuda_check): a syntax or
type error in any kernel fails its test here, on a machine without a GPU. Results are cached under
build/cuda_check/, so a rerun with unchanged sources costs seconds, not minutes. Skipped only where
nvcc is absent.
"""

import os
import subprocess
import sys

import nbformat
import pytest

from workbook import REPO_ROOT, relative_to_repo
from workbook.build import errors
from workbook.course import generate
from workbook.course.checking import FAILED, NOT_ATTEMPTED, PASSED
from workbook.diagnostics import cuda_check
from workbook.exercises import ch05

needs_nvcc = pytest.mark.skipif(cuda_check.find_nvcc() is None, reason=cuda_check.nvcc_missing_reason())

KERNELS = cuda_check.cuda_sources_in_repo()


def test_the_kernels_of_the_workbook_are_all_found():
    found = {relative_to_repo(path) for path in KERNELS}
    assert {"csrc/lltm/cuda/lltm_cuda.cu", "csrc/scatter/cuda/scatter_cuda.cu"} <= found


@needs_nvcc
@pytest.mark.parametrize("source", KERNELS, ids=[relative_to_repo(p) for p in KERNELS])
def test_kernel_compiles(source):
    result = cuda_check.compile_check(source)
    assert result.ok, str(result)


# --- the checker: failures are caught and explained, results are cached and invalidated ----------

SMALL_KERNEL = """
#include <cuda_runtime.h>
#include <cstdint>
#include "scale.h"
__global__ void scale(float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= kFactor;
}
"""


def _write(folder, name, text):
    path = folder / name
    path.write_text(text)
    return path


@needs_nvcc
def test_a_syntax_error_fails_with_the_file_and_line(tmp_path):
    source = _write(tmp_path, "broken.cu", "__global__ void k(float* x) {\n  x[0] = 1.0f\n}\n")
    result = cuda_check.compile_check(source, cache_dir=tmp_path / "cache")
    assert result.status == cuda_check.FAILED
    assert "broken.cu(3): error" in result.first_error  # the missing ';' is noticed at the '}'
    with pytest.raises(cuda_check.CudaCompileError, match="broken.cu"):
        result.require()


@needs_nvcc
def test_a_host_function_called_from_a_kernel_fails(tmp_path):
    source = _write(
        tmp_path,
        "host_call.cu",
        (
            "float twice(float v) { return 2 * v; }\n"
            "__global__ void k(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }\n"
        ),
    )
    result = cuda_check.compile_check(source, cache_dir=tmp_path / "cache")
    assert result.status == cuda_check.FAILED
    assert "calling a __host__ function" in result.first_error and "host_call.cu(2)" in result.first_error


@needs_nvcc
def test_results_are_cached_until_the_source_or_a_header_changes(tmp_path):
    cache = tmp_path / "cache"
    header = _write(tmp_path, "scale.h", "#pragma once\nconstexpr float kFactor = 2.0f;\n")
    source = _write(tmp_path, "scale.cu", SMALL_KERNEL)

    first = cuda_check.compile_check(source, cache_dir=cache)
    again = cuda_check.compile_check(source, cache_dir=cache)
    assert first.ok and not first.cached and first.seconds > 0
    assert again.ok and again.cached and again.seconds == 0

    os.utime(source)  # touched, same content: still cached
    assert cuda_check.compile_check(source, cache_dir=cache).cached

    header.write_text("#pragma once\nconstexpr float kFactor = two;\n")  # an included header broke
    broken = cuda_check.compile_check(source, cache_dir=cache)
    assert broken.status == cuda_check.FAILED and not broken.cached and "scale.h" in broken.first_error
    assert cuda_check.compile_check(source, cache_dir=cache).cached  # the failure is cached too

    header.write_text("#pragma once\nconstexpr float kFactor = 3.0f;\n")  # fixed
    fixed = cuda_check.compile_check(source, cache_dir=cache)
    assert fixed.ok and not fixed.cached

    source.write_text(SMALL_KERNEL + "// a comment\n")  # the source itself changed
    assert not cuda_check.compile_check(source, cache_dir=cache).cached


@needs_nvcc
def test_the_command_line_reports_and_fails_on_a_broken_kernel(tmp_path):
    good = _write(tmp_path, "good.cu", "__global__ void k(float* x) { x[threadIdx.x] = 0; }\n")
    bad = _write(tmp_path, "bad.cu", "__global__ void k(float* x) { x[threadIdx.x] = y; }\n")
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))

    def run(*files):
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "workbook.diagnostics.cuda_check",
                "--cache-dir",
                str(tmp_path / "cache"),
                *map(str, files),
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=environment,
        )

    ok = run(good)
    assert ok.returncode == 0 and "good.cu: compiles" in ok.stdout
    failed = run(good, bad)
    assert failed.returncode == 1
    assert 'identifier "y" is undefined' in failed.stdout and "bad.cu: does not compile" in failed.stdout


def test_without_nvcc_the_check_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(cuda_check, "find_nvcc", lambda: None)
    result = cuda_check.compile_check("csrc/lltm/cuda/lltm_cuda.cu")
    assert result.skipped and "nvcc not found" in str(result)
    assert result.require() is result  # skipping is not failing


def test_first_error_keeps_the_source_excerpt():
    log = (
        'a.cu(5): error: identifier "y" is undefined\n'
        "    if (i < n) x[i] = a * y[i];\n"
        "                          ^\n"
        "\n"
        "a.cu(9): error: something else\n"
    )
    assert errors.first_compiler_error(log).splitlines() == [
        '    a.cu(5): error: identifier "y" is undefined',
        "        if (i < n) x[i] = a * y[i];",
        "                              ^",
    ]


# --- exercise 5.1: compile-checked here, and run (on a GPU, or else in the CPU emulation) --------


def exercise_source():
    """The solution's CUDA source string from chapter 05's exercise cell."""
    notebook = nbformat.read(generate.SOLUTIONS / "05_cuda_extensions.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex5-divide-by-count"]
    namespace = {}
    exec(cell.source, namespace)
    return namespace["DIVIDE_BY_COUNT_CU"], cell.source


@pytest.fixture(autouse=True)
def lenient(monkeypatch):
    monkeypatch.delenv("WORKBOOK_STRICT", raising=False)


@needs_nvcc
def test_exercise_solution_compiles_and_passes_on_a_gpu_or_in_the_emulation():
    source, _ = exercise_source()
    outcome = ch05.check_divide_by_count(source)
    assert outcome.status == PASSED, str(outcome)


def test_exercise_stub_is_not_attempted_before_anything_is_compiled(monkeypatch):
    _, cell_source = exercise_source()
    namespace = {}
    exec(generate.stub_source(cell_source), namespace)
    stub = namespace["DIVIDE_BY_COUNT_CU"]
    # The check answers a stub before nvcc or the emulation sees it, so a learner never compiles the stub itself.
    for builder in ("compile_exercise", "load_exercise", "load_emulated_exercise"):
        monkeypatch.setattr(ch05, builder, lambda source, builder=builder: pytest.fail(f"the stub went to {builder}"))
    assert ch05.check_divide_by_count(stub).status == NOT_ATTEMPTED


@needs_nvcc
def test_exercise_that_does_not_compile_fails_with_nvccs_error():
    source, _ = exercise_source()
    # A misspelt header: nvcc stops at once (a mistake deeper in the kernel costs it the whole compile, about
    # 20 s; tests above show that such mistakes, a host function called from a kernel say, are caught).
    broken = source.replace("#include <ATen/Dispatch.h>", "#include <ATen/Dispatc.h>")
    assert broken != source
    outcome = ch05.check_divide_by_count(broken)
    assert outcome.status == FAILED
    assert "does not compile" in outcome.explanation and "ATen/Dispatc.h" in outcome.explanation
    assert "nvcc's first error" in outcome.explanation  # nvcc's verdict, not the CPU emulation's


def test_exercise_check_wants_the_source_string():
    outcome = ch05.check_divide_by_count(None)
    assert outcome.status == FAILED and "NAMESPACE" in outcome.explanation
