"""`make setup` installs only what is missing, and says exactly what to install when it cannot."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from workbook import REPO_ROOT

MISSING = "libworkbook-test-dev:/nonexistent/workbook-test.h"


# What the make running this suite passes down: its command-line variables, in MAKEFLAGS and in the environment
# (under `make test-torch VERSION=2.14.1`, a `make test-torch` here would start the whole suite again).
MAKE_STATE = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "VERSION", "PYTEST_ARGS")


def make(*arguments, path=None):
    env = {key: value for key, value in os.environ.items() if key not in MAKE_STATE}
    env["PATH"] = path or os.environ["PATH"]
    return subprocess.run(
        ["make", "--no-print-directory", "-s", *arguments],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def fake_bin(tmp_path, *, fakes):
    """A PATH with the real tools set-up needs plus fake `id`, `sudo`, `apt-get` scripts."""
    directory = tmp_path / "bin"
    directory.mkdir()
    for tool in ("bash", "sh", "make", "python3", "cp", "test"):
        real = shutil.which(tool)
        if real:
            (directory / tool).symlink_to(real)
    for name, body in fakes.items():
        script = directory / name
        script.write_text(f"#!/bin/sh\n{body}\n")
        script.chmod(0o755)
    return str(directory)


def test_set_up_is_already_complete_and_does_nothing_the_second_time():
    venv = Path(sys.prefix).relative_to(REPO_ROOT)  # .venv, or .venv-torch-<version> under `make test-torch`
    assert make("setup").returncode == 0
    assert make("-q", f"{venv}/.installed").returncode == 0, "a second set-up would reinstall packages"


def test_without_apt_it_names_what_to_install(tmp_path):
    path = fake_bin(tmp_path, fakes={"id": "echo 0"})
    done = make("system-packages", f"SYSTEM_NEEDS={MISSING}", path=path)
    assert done.returncode != 0
    assert "Missing system tools (Debian names): libworkbook-test-dev." in done.stdout
    assert "conda env create -f environment.yml" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_without_root_or_sudo_it_prints_the_apt_command(tmp_path):
    path = fake_bin(tmp_path, fakes={"id": "echo 1000", "sudo": "exit 1", "apt-get": "exit 99"})
    done = make("system-packages", f"SYSTEM_NEEDS={MISSING}", path=path)
    assert done.returncode != 0
    assert "Run:  sudo apt-get install -y libworkbook-test-dev  and then this command again." in done.stdout


def test_as_root_it_installs_with_apt(tmp_path):
    log = tmp_path / "apt.log"
    path = fake_bin(tmp_path, fakes={"id": "echo 0", "apt-get": f'echo "$@" >> {log}'})
    done = make("system-packages", f"SYSTEM_NEEDS={MISSING}", path=path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "install -y -qq --no-install-recommends libworkbook-test-dev" in log.read_text()


def test_another_torch_gets_its_own_venv_and_build_folder():
    assert "make test-torch VERSION=2.14.1" in make("test-torch").stdout  # no VERSION: says how
    planned = make("-n", "test-torch", "VERSION=9.9.9").stdout
    assert f"TORCH_VERSION=9.9.9 WORKBOOK_BUILD_DIR={REPO_ROOT}/build-torch-9.9.9 make" in planned
    installs = make("-n", ".venv-torch-9.9.9/.installed", "TORCH_VERSION=9.9.9").stdout
    # torch's own triton requirement wins over the pinned one (torch 2.14.1 needs triton~=3.8).
    assert "torch==9.9.9 -r <(grep -vE '^(torch|triton)==' requirements.txt)" in installs
    assert ".venv-torch-9.9.9/bin/python -m pip install" in installs
