"""A failed or killed build is not a stale lock: the next load builds again, or says what really happened.

Each test breaks a build of a tiny library (no torch headers: it compiles in a fraction of a second),
then loads it again. torch up to 2.13 marks a JIT build in progress with a `lock` file that a killed
build leaves behind; torch 2.14 holds an OS-level lock on a file that always stays. `make test-torch`
runs these tests on the other torch.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from workbook import build, relative_to_repo

GOOD = "int workbook_answer() { return 42; }\n"


def source(name: str, text: str):
    return build.write_if_changed(f"tests/failed_builds/{name}.cpp", text)


def test_after_a_compile_error_the_next_load_compiles_again():
    broken = source("compile_error", "int workbook_answer() { return forty_two; }\n")
    # torch records the sources before it builds them: left alone, the second load would skip the build
    # and fail with "Could not load this library", naming no error at all.
    for _ in range(2):
        with pytest.raises(build.BuildError, match="'forty_two' was not declared"):
            build.load("wb_test_compile_error", [broken], is_python_module=False)
    assert not lock_blocks_a_build("wb_test_compile_error")


def test_after_a_link_error_the_next_load_links_again():
    good = source("link_error", GOOD)
    missing = ["-lworkbook_no_such_library"]
    for _ in range(2):
        with pytest.raises(build.BuildError, match="cannot find -lworkbook_no_such_library"):
            build.load("wb_test_link_error", [good], is_python_module=False, extra_ldflags=missing)
    assert not lock_blocks_a_build("wb_test_link_error")


def test_a_build_killed_midway_does_not_block_the_next_one(capsys):
    name = "wb_test_killed_build"
    header = build.SOURCES_DIR / "tests" / "failed_builds" / "killed.h"
    header.unlink(missing_ok=True)
    os.mkfifo(header)  # the compiler blocks reading it: the build is caught in the middle
    killed = source("killed", '#include "killed.h"\n' + GOOD)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from workbook import build; build.load({name!r}, [{str(killed)!r}], is_python_module=False)",
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        writer = wait_for_reader(header, child)
        os.killpg(child.pid, signal.SIGKILL)  # Python, ninja and the compiler, as when a kernel dies
        child.wait()
        os.close(writer)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    header.unlink()
    header.write_text("")
    lock = build.build_directory(name) / "lock"
    assert lock.exists() and not build.lock_is_held(lock)
    capsys.readouterr()

    assert build.load(name, [killed], is_python_module=False).endswith(".so")
    said = capsys.readouterr().out
    if build.torch_lock_file_stays():  # torch >= 2.14: the OS released the killed build's lock
        assert said == ""
    else:  # torch <= 2.13: the file was the lock, and nothing holds it now
        assert said == (
            f"{name}: removed {relative_to_repo(lock)}, left behind by a build that was killed before it finished "
            f"(nothing is building {name} now; torch would have waited for the file forever).\n"
        )
        assert not lock.exists()


def wait_for_reader(fifo, child, timeout=300) -> int:
    """Open `fifo` for writing once the compiler has opened it for reading (the child is then building)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert child.poll() is None, "the child's build ended before it read the header"
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: no reader yet
            time.sleep(0.1)
    raise AssertionError(f"the compiler did not open {fifo} within {timeout} s")


def lock_blocks_a_build(name: str) -> bool:
    """Whether the extension's `lock` file would make torch wait: a file that is the lock (torch <= 2.13),
    or one an OS-level lock is held on (torch >= 2.14)."""
    lock = build.build_directory(name) / "lock"
    if not lock.exists():
        return False
    return build.lock_is_held(lock) or not build.torch_lock_file_stays()
