"""The toolchain doctor names what is missing and the command that fixes it."""

import pytest

from workbook.build import opencv
from workbook.diagnostics import doctor


def test_this_machine_has_everything_the_workbook_requires():
    findings = doctor.diagnose()
    missing = [f.tool for f in findings if f.required and not f.ok]
    assert missing == [], doctor.report(findings)
    assert doctor.summary(findings).startswith("Everything the workbook needs is here")


@pytest.fixture
def nothing_installed(monkeypatch):
    monkeypatch.setattr(doctor, "_run", lambda *command: None)
    monkeypatch.setattr(opencv, "include_dirs", lambda: [])


@pytest.mark.parametrize(
    "check, fix",
    [
        (doctor.check_compiler, "sudo apt-get install g++"),
        (doctor.check_ninja, "pip install ninja"),
        (doctor.check_cmake, "sudo apt-get install cmake"),
        (doctor.check_opencv_cpp, "sudo apt-get install libopencv-dev"),
        (doctor.check_ccache, "sudo apt-get install ccache"),
        (doctor.check_nvcc, "CUDA toolkit"),
    ],
)
def test_a_missing_tool_is_reported_with_its_fix(nothing_installed, check, fix):
    finding = check()
    assert not finding.ok
    assert fix in finding.fix
    assert fix in doctor.report([finding])


def test_summary_lists_only_required_missing_tools(nothing_installed):
    findings = [doctor.check_cmake(), doctor.check_ccache()]
    summary = doctor.summary(findings)
    assert "CMake (fix: sudo apt-get install cmake)" in summary
    assert "ccache" not in summary


def test_an_old_compiler_is_refused(monkeypatch):
    monkeypatch.setattr(doctor, "_run", lambda *command: "9.4.0\n")  # C++17 only: torch 2.13 needs C++20
    finding = doctor.check_compiler()
    assert not finding.ok and "too old for C++20" in finding.fix


def test_torch_version_other_than_the_pinned_one_is_flagged(monkeypatch):
    import torch

    monkeypatch.setattr(doctor, "_pinned", lambda package: "9.9.9")
    monkeypatch.setattr(torch, "__version__", "9.8.0")  # neither pinned nor checked (2.14.1 is checked)
    finding = doctor.check_torch()
    assert not finding.ok and "tested with 9.9.9" in finding.fix


def test_a_checked_torch_version_is_accepted_with_what_differs(monkeypatch):
    import torch

    monkeypatch.setattr(doctor, "_pinned", lambda package: "2.13.0")
    monkeypatch.setattr(torch, "__version__", "2.14.1+cu130")
    finding = doctor.check_torch()
    assert finding.ok and finding.found.startswith("2.14.1+cu130 (checked; outputs shown are 2.13.0's. Differs: ")


@pytest.fixture
def cpu_only_torch(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", None)


def test_no_gpu_is_reported_without_a_pretend_fix(cpu_only_torch, monkeypatch):
    monkeypatch.setattr(doctor, "_run", lambda *command: None)  # no nvidia-smi, or it lists nothing
    finding = doctor.check_gpu()
    line = doctor.report([finding])
    assert not finding.ok and not finding.required and finding.fix == ""
    assert "fix:" not in line and "chapter 05 takes its CPU path" in line


def test_a_gpu_next_to_a_cpu_only_torch_is_fixed_by_the_cuda_build(cpu_only_torch, monkeypatch):
    monkeypatch.setattr(doctor, "_run", lambda *command: "GPU 0: NVIDIA H200 (UUID: GPU-0)\n")
    finding = doctor.check_gpu()
    assert not finding.ok and "CPU-only build: pip install torch==" in finding.fix
    assert "fix: this machine has a GPU" in doctor.report([finding])


def test_a_cuda_torch_that_sees_no_gpu_points_at_the_driver(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(doctor, "_run", lambda *command: "GPU 0: NVIDIA H200 (UUID: GPU-0)\n")
    assert "check the driver (nvidia-smi)" in doctor.check_gpu().fix


def test_a_compiler_command_line_in_cxx_is_a_problem(monkeypatch):
    monkeypatch.setenv("CXX", "ccache g++")
    finding = doctor.check_compiler()
    assert not finding.ok and finding.problem and "unset CXX" in finding.fix
    assert doctor.report([finding]).startswith("PROBLEM")
    assert "unset CXX" in doctor.summary([finding])


def test_cuda_home_is_not_asked_for_by_a_cpu_only_torch(cpu_only_torch):
    finding = doctor.check_cuda_home()
    assert finding.ok and "CPU-only" in finding.found


@pytest.fixture
def cuda_torch(monkeypatch):
    """A CUDA build of torch that sees a GPU."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.delenv("CUDA_PATH", raising=False)


def test_cuda_home_without_nvcc_is_named(cuda_torch, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(doctor, "_run", lambda *command: None)
    finding = doctor.check_cuda_home()
    assert not finding.ok and finding.problem and f"CUDA_HOME={tmp_path} has no working bin/nvcc" in finding.fix


def test_cuda_home_of_another_major_version_is_named(cuda_torch, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(doctor, "_run", lambda *command: "Cuda compilation tools, release 12.4, V12.4.131\n")
    finding = doctor.check_cuda_home()
    assert not finding.ok and "is CUDA 12.4, torch was built with CUDA 13.0" in finding.fix


def test_cuda_home_matching_torch_is_fine(cuda_torch, monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(doctor, "_run", lambda *command: "Cuda compilation tools, release 13.0, V13.0.48\n")
    assert doctor.check_cuda_home().found == f"CUDA 13.0 in {tmp_path}: the CUDA kernels are built"


def test_no_cuda_toolkit_at_all_is_named(cuda_torch, monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(doctor.shutil, "which", lambda program: None)
    monkeypatch.setattr(doctor, "Path", _PathWithoutUsrLocalCuda)
    finding = doctor.check_cuda_home()
    assert not finding.ok and "no CUDA toolkit found: install the CUDA 13 toolkit" in finding.fix


class _PathWithoutUsrLocalCuda(type(doctor.Path())):
    def exists(self):
        return str(self) != "/usr/local/cuda" and super().exists()


@pytest.fixture
def cuda_torch_without_a_gpu(cuda_torch, monkeypatch, tmp_path):
    import torch

    from workbook import build

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv(build.BUILD_CUDA_SWITCH, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))


def test_a_cuda_torch_without_a_gpu_builds_cpu_kernels_and_names_the_switch(cuda_torch_without_a_gpu, monkeypatch):
    monkeypatch.setattr(doctor, "_run", lambda *command: "Cuda compilation tools, release 13.0, V13.0.48\n")
    finding = doctor.check_cuda_home()
    assert finding.ok and finding.found.endswith(
        "; this torch sees no GPU, so extensions get their CPU kernels only "
        "(WORKBOOK_BUILD_CUDA=1 builds the CUDA kernels too, to check them)"
    )


def test_without_a_gpu_a_missing_toolkit_is_only_needed_for_the_compile_check(cuda_torch_without_a_gpu, monkeypatch):
    monkeypatch.setattr(doctor, "_run", lambda *command: None)
    finding = doctor.check_cuda_home()
    assert not finding.ok and not finding.problem and finding.fix == ""
    assert "to check the CUDA kernels (WORKBOOK_BUILD_CUDA=1): CUDA_HOME=" in doctor.report([finding])


def test_the_switch_without_a_gpu_says_which_architecture_is_checked(cuda_torch_without_a_gpu, monkeypatch):
    from workbook import build

    monkeypatch.setenv(build.BUILD_CUDA_SWITCH, "1")
    monkeypatch.setattr(doctor, "_run", lambda *command: "Cuda compilation tools, release 13.0, V13.0.48\n")
    monkeypatch.setattr(build, "compile_check_arch", lambda: "12.0")
    assert "compiled for architecture 12.0 to check them, not run" in doctor.check_cuda_home().found


@pytest.fixture
def lock_files(tmp_path, monkeypatch):
    """Build folders under tmp_path/build/torch_extensions with a `lock` file each."""
    monkeypatch.setattr(doctor, "REPO_ROOT", tmp_path)
    extensions = tmp_path / "build" / "torch_extensions"
    for name in ("killed", "busy", "torch_building"):
        (extensions / name).mkdir(parents=True)
        (extensions / name / "lock").touch()
    return extensions


def test_up_to_torch_2_13_a_lock_file_nobody_holds_is_stale(lock_files, monkeypatch):
    from workbook import build

    monkeypatch.setattr(build, "torch_lock_file_stays", lambda: False)
    with (
        build.exclusive(lock_files.parent / "locks" / "busy.flock"),
        build.exclusive(lock_files / "torch_building" / "lock"),
    ):
        finding = doctor.check_build_locks(lock_files)
    assert not finding.ok and finding.problem
    assert finding.fix.startswith("killed builds left 1 lock file(s) that nothing holds now")
    assert finding.fix.endswith(": rm build/torch_extensions/killed/lock")


def test_from_torch_2_14_a_lock_file_is_never_stale(lock_files, monkeypatch):
    from workbook import build

    monkeypatch.setattr(build, "torch_lock_file_stays", lambda: True)
    assert doctor.check_build_locks(lock_files).found == "none"


def test_no_lock_files_is_fine(tmp_path):
    assert doctor.check_build_locks(tmp_path).found == "none"


def test_an_installed_package_that_fails_to_load_asks_for_no_build_isolation(monkeypatch):
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda name: object() if name == "wb_scatter" else None)
    monkeypatch.setattr(doctor, "_run", lambda *command: None)  # the child's import failed
    finding = doctor.check_installed_extensions()
    assert not finding.ok and finding.problem
    assert "pip install --no-build-isolation --force-reinstall csrc/scatter" in finding.fix


def test_a_package_the_workbook_put_on_sys_path_from_build_is_not_counted_as_installed(monkeypatch):
    from importlib.machinery import ModuleSpec

    in_build = ModuleSpec(
        "wb_scatter_stable", None, origin=str(doctor.BUILD_DIR / "stable/site/wb_scatter_stable/x.py")
    )
    monkeypatch.setattr(
        doctor.importlib.util, "find_spec", lambda name: in_build if name == "wb_scatter_stable" else None
    )
    monkeypatch.setattr(doctor, "_run", lambda *command: None)  # a fresh Python would not find it
    assert doctor.check_installed_extensions().found == "none installed"


def test_no_installed_package_is_fine(monkeypatch):
    monkeypatch.setattr(doctor.importlib.util, "find_spec", lambda name: None)
    assert doctor.check_installed_extensions().found == "none installed"


def test_required_problems_reach_the_summary_and_optional_ones_do_not(cuda_torch, monkeypatch, tmp_path):
    from workbook import build

    monkeypatch.setattr(build, "torch_lock_file_stays", lambda: False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(doctor, "_run", lambda *command: None)
    (tmp_path / "build" / "torch_extensions" / "interrupted").mkdir(parents=True)
    (tmp_path / "build" / "torch_extensions" / "interrupted" / "lock").touch()
    cuda_home = doctor.check_cuda_home()
    locks = doctor.check_build_locks(tmp_path / "build" / "torch_extensions")
    summary = doctor.summary([cuda_home, locks])
    assert "stale build locks" in summary and "CUDA toolkit" not in summary
    assert doctor.report([cuda_home]).startswith("PROBLEM")


def test_ninja_only_in_the_venv_says_to_activate_it(monkeypatch):
    def only_the_venvs_ninja(*command):
        return "1.13.2\n" if command[0].endswith("/ninja") else None

    monkeypatch.setattr(doctor, "_run", only_the_venvs_ninja)
    finding = doctor.check_ninja()
    assert finding.ok and "not on PATH: activate the venv" in finding.found


def test_a_checked_torch_is_accepted_with_the_triton_it_requires():
    import importlib.metadata

    import torch

    needs = doctor._checked_torch_requires("triton")
    if torch.__version__.startswith(doctor._pinned("torch")):
        assert needs is None  # the pinned torch goes with requirements.txt's triton
    else:  # make test-torch installs the triton that torch requires, not requirements.txt's
        assert needs is not None and needs.contains(importlib.metadata.version("triton"))
        assert doctor.check_triton().ok
