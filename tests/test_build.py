"""The build helper every chapter uses: quiet builds under build/, first errors, stale locks."""

import os
import time

import pytest
import torch

from workbook import build

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
    assert "build/src/tests/two_errors.cpp:1:" in message
    assert "'missing_one' was not declared" in message
    assert "missing_two" not in message
    assert str(build.REPO_ROOT) not in message
    log = build.build_directory("wb_test_two_errors") / "build_error.log"
    assert "missing_two" in log.read_text()


def test_stale_lock_is_explained_instead_of_waiting_forever():
    lock = build.build_directory("wb_setup_check") / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    try:
        started = time.monotonic()
        with pytest.raises(build.StaleBuildLock, match="clear_stale_lock\\('wb_setup_check'\\)"):
            build.load("wb_setup_check", [ADD_ONE], is_python_module=False)
        assert time.monotonic() - started < 5
    finally:
        build.clear_stale_lock("wb_setup_check")
    build.load("wb_setup_check", [ADD_ONE], is_python_module=False)


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
    first = build.first_compiler_error(log)
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


def test_precompiled_headers_are_refused():
    with pytest.raises(ValueError, match="use_pch"):
        build.load_inline("wb_test_pch", "int x;", use_pch=True)
