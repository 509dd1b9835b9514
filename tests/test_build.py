"""The build helper every chapter uses: quiet builds under build/, first errors, stale locks."""

import os
import threading
import time

import pytest
import torch
import torch.utils.cpp_extension

from workbook import build, relative_to_repo
from workbook.build import errors

ADD_ONE = "csrc/setup_check/add_one.cpp"


def test_builds_and_loads_an_operator_library():
    path = build.load("wb_setup_check", [ADD_ONE], is_python_module=False)
    assert os.path.dirname(path) == str(build.build_directory("wb_setup_check"))
    assert torch.equal(torch.ops.wb_setup_check.add_one(torch.zeros(2)), torch.ones(2))


def test_operator_rejects_integer_input_by_name():
    build.load("wb_setup_check", [ADD_ONE], is_python_module=False)
    with pytest.raises(RuntimeError, match=r"add_one: x must be a floating-point tensor, got Long"):
        torch.ops.wb_setup_check.add_one(torch.arange(3))


def test_second_load_does_not_rebuild():
    build.load("wb_setup_check", [ADD_ONE], is_python_module=False)
    library = build.build_directory("wb_setup_check") / "wb_setup_check.so"
    stamp = library.stat().st_mtime_ns
    build.load("wb_setup_check", [ADD_ONE], is_python_module=False)
    assert library.stat().st_mtime_ns == stamp


def test_write_if_changed_keeps_the_timestamp_of_an_unchanged_file(tmp_path):
    path = build.write_if_changed(tmp_path / "a.cpp", "int a;\n")
    stamp = path.stat().st_mtime_ns
    time.sleep(0.01)
    build.write_if_changed(path, "int a;\n")
    assert path.stat().st_mtime_ns == stamp
    build.write_if_changed(path, "int b;\n")
    assert path.read_text() == "int b;\n"


def test_relative_sources_are_written_under_build_src():
    path = build.write_if_changed("tests/relative.cpp", "int c;\n")
    assert path == build.SOURCES_DIR / "tests" / "relative.cpp"


def test_failed_build_shows_the_first_compiler_error_with_a_relative_path():
    source = build.write_if_changed(
        "tests/two_errors.cpp", "int f() { return missing_one; }\nint g() { return missing_two; }\n"
    )
    with pytest.raises(build.BuildError) as caught:
        build.load("wb_test_two_errors", [source], is_python_module=False)
    message = str(caught.value)
    assert f"{relative_to_repo(source)}:1:" in message  # build/src/... (or the WORKBOOK_BUILD_DIR of another torch)
    assert "'missing_one' was not declared" in message
    assert "missing_two" not in message
    assert str(build.REPO_ROOT) not in message
    log = build.build_directory("wb_test_two_errors") / "build_error.log"
    assert "missing_two" in log.read_text()


def test_a_lock_file_nobody_holds_never_makes_a_build_wait(capsys):
    lock = build.build_directory("wb_setup_check") / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    failures = []

    def fake_a_leftover_and_load():
        try:
            with build.exclusive("wb_setup_check"):  # as chapter 00 does: no other process builds it meanwhile
                lock.touch()
                build.load("wb_setup_check", [ADD_ONE], is_python_module=False)
        except Exception as error:  # reported below, in the test's thread
            failures.append(error)

    loading = threading.Thread(target=fake_a_leftover_and_load, daemon=True)  # torch would wait forever
    loading.start()
    loading.join(timeout=120)
    assert not loading.is_alive(), "the load waited for a lock file that nothing holds"
    assert not failures, failures
    said = capsys.readouterr().out
    if build.torch_lock_file_stays():  # torch >= 2.14: the file is not the lock, a flock on it is
        assert said == "" and lock.exists()
    else:  # torch <= 2.13: the file is the lock, and a killed build left it
        assert said.startswith(
            f"wb_setup_check: removed {relative_to_repo(lock)}, left behind by a build that was killed"
        )
        assert not lock.exists()


def test_a_lock_held_by_a_process_is_held_and_a_released_one_is_not(tmp_path):
    lock = tmp_path / "lock"
    with build.exclusive(lock):
        assert build.lock_is_held(lock)
    assert not build.lock_is_held(lock)
    assert not build.lock_is_held(tmp_path / "missing")


def test_a_block_inside_one_that_holds_the_same_lock_goes_on_and_leaves_it_held(tmp_path):
    lock = tmp_path / "lock"
    inner_held, outer_held_after = [], []

    def nested():
        with build.exclusive(lock):
            with build.exclusive(lock):  # a second flock of its own would wait for the first forever
                inner_held.append(build.lock_is_held(lock))
            outer_held_after.append(build.lock_is_held(lock))

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the inner block waited for the lock its own thread holds"
    assert inner_held == [True] and outer_held_after == [True]
    assert not build.lock_is_held(lock)


def test_a_lock_is_held_until_the_last_block_using_it_ends_whatever_the_order_or_spelling(tmp_path):
    lock = tmp_path / "lock"
    (tmp_path / "sub").mkdir()
    held_between = []

    def out_of_order():
        first, second = build.exclusive(lock), build.exclusive(tmp_path / "sub" / ".." / "lock")
        first.__enter__()
        second.__enter__()  # the same file spelled another way: goes straight on
        first.__exit__(None, None, None)  # as a generator or an ExitStack may end them
        held_between.append(build.lock_is_held(lock))
        second.__exit__(None, None, None)

    worker = threading.Thread(target=out_of_order, daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "the second spelling of the lock file waited for the first"
    assert held_between == [True], "the lock was released while a block using it still ran"
    assert not build.lock_is_held(lock)


def test_compiler_paths_relative_to_the_build_folder_are_made_relative_to_the_repository():
    source = build.write_if_changed("tests/relative_paths.cpp", "int d;\n")
    folder = build.build_directory("wb_test_paths")
    folder.mkdir(parents=True, exist_ok=True)
    as_ccache_says = os.path.relpath(source, folder)  # ccache's base_dir makes paths relative to where gcc runs
    text = f"In file included from {as_ccache_says}:1:\n{as_ccache_says}:3:5: error: oops\nother.cpp:1: note"
    assert errors.repo_relative_paths(text, folder) == (
        f"In file included from {relative_to_repo(source)}:1:\n{relative_to_repo(source)}:3:5: error: oops\n"
        "other.cpp:1: note"
    )


def test_first_compiler_error_skips_ninja_banner_lines():
    log = "\n".join(
        [
            "[1/2] c++ -c x.cpp",
            "FAILED: x.o",
            f"{build.REPO_ROOT}/csrc/x.cpp:7:3: error: expected ';' before '}}' token",
            "    7 |   return 1",
            "      |           ^",
            "ninja: build stopped: subcommand failed.",
        ]
    )
    first = errors.first_compiler_error(log)
    assert first.splitlines()[0].strip() == "csrc/x.cpp:7:3: error: expected ';' before '}' token"
    assert len(first.splitlines()) == 3


def test_cuda_sources_are_dropped_with_one_line_on_a_cpu_build(capsys):
    buildable, reason = build.cuda_build_status()
    sources = build.cuda_sources("wb_test_cuda_fallback", ["kernel.cu"])
    if buildable:
        assert sources == ["kernel.cu"]
    else:
        assert sources == []
        assert capsys.readouterr().out == f"wb_test_cuda_fallback: building the CPU kernels only ({reason}).\n"
        build.cuda_sources("wb_test_cuda_fallback", ["kernel.cu"])
        assert capsys.readouterr().out == ""


@pytest.fixture
def cuda_torch_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(build.BUILD_CUDA_SWITCH, raising=False)


def test_a_cuda_torch_that_sees_no_gpu_builds_cpu_kernels_and_names_the_switch(cuda_torch_without_a_gpu, capsys):
    assert build.cuda_sources("wb_test_no_gpu", ["kernel.cu"]) == []
    assert capsys.readouterr().out == (
        "wb_test_no_gpu: building the CPU kernels only (this torch sees no GPU; WORKBOOK_BUILD_CUDA=1 builds the "
        "CUDA kernels anyway, to check them).\n"
    )


def test_the_scatter_packages_follow_the_same_rule(cuda_torch_without_a_gpu, monkeypatch):
    # csrc/scatter*/setup.py build their .cu files with a CUDA torch, a toolkit, and a GPU or TORCH_CUDA_ARCH_LIST.
    assert build.package_cuda_environment() == {"WB_SCATTER_CPU_ONLY": "1"}
    monkeypatch.setenv(build.BUILD_CUDA_SWITCH, "1")
    monkeypatch.setattr(build, "compile_check_arch", lambda: "9.0")
    monkeypatch.setattr(torch.utils.cpp_extension, "CUDA_HOME", "/usr/local/cuda")
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    assert build.package_cuda_environment() == {"TORCH_CUDA_ARCH_LIST": "9.0"}


CUDA_KERNEL = """__global__ void add_one_kernel(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
int launch_add_one(float* x, int n) {
  add_one_kernel<<<(n + 255) / 256, 256>>>(x, n);
  return static_cast<int>(cudaGetLastError());
}
"""


@pytest.mark.skipif(torch.version.cuda is None, reason="a CPU-only torch builds no CUDA sources")
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the CUDA kernels are built without asking")
def test_the_switch_compiles_and_links_cuda_kernels_without_a_gpu(monkeypatch):
    monkeypatch.setenv(build.BUILD_CUDA_SWITCH, "1")
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    buildable, why = build.cuda_build_status()
    assert buildable, why
    kernel = build.write_if_changed("tests/add_one_kernel.cu", CUDA_KERNEL)
    library = build.load("wb_test_cuda_switch", [kernel], is_python_module=False)
    arch = build.compile_check_arch().replace(".", "")
    assert f"code=sm_{arch}" in (build.build_directory("wb_test_cuda_switch") / "build.ninja").read_text()
    assert library.endswith(".so")


def test_precompiled_headers_are_refused():
    with pytest.raises(ValueError, match="use_pch"):
        build.load_inline("wb_test_pch", "int x;", use_pch=True)


@pytest.mark.parametrize(
    "log, expected",
    [
        ("a.cpp:3:1: error: 'x' was not declared\n    3 | x;\n", "a.cpp:3:1: error: 'x' was not declared"),
        ("cc1plus: warning: /nowhere: No such file or directory\nb.cpp:1:1: error: bad\n", "b.cpp:1:1: error: bad"),
        (
            "/usr/bin/ld: cannot find -lmissing: No such file\ncollect2: error: ld returned 1\n",
            "/usr/bin/ld: cannot find -lmissing: No such file",
        ),
        (
            "-- Configuring\nCMake Error at CMakeLists.txt:3 (find_package):\n  not found\n",
            "CMake Error at CMakeLists.txt:3 (find_package):",
        ),
        ("nothing\nrecognisable\nhere at all\n", "here at all"),
        ("", ""),
    ],
)
def test_first_compiler_error_line_is_the_first_error_or_the_last_line(log, expected):
    assert errors.first_compiler_error_line(log) == expected
