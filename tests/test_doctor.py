"""The toolchain doctor names what is missing and the command that fixes it."""
import pytest

from workbook import doctor


def test_this_machine_has_everything_the_workbook_requires():
    findings = doctor.diagnose()
    missing = [f.tool for f in findings if f.required and not f.ok]
    assert missing == [], doctor.report(findings)
    assert doctor.summary(findings).startswith("Everything the workbook needs is here")


@pytest.fixture
def nothing_installed(monkeypatch):
    monkeypatch.setattr(doctor, "_run", lambda *command: None)
    monkeypatch.setattr(doctor, "_opencv_header_dirs", lambda: [])


@pytest.mark.parametrize("check, fix", [
    (doctor.check_compiler, "sudo apt-get install g++"),
    (doctor.check_ninja, "pip install ninja"),
    (doctor.check_cmake, "sudo apt-get install cmake"),
    (doctor.check_opencv_cpp, "sudo apt-get install libopencv-dev"),
    (doctor.check_ccache, "sudo apt-get install ccache"),
    (doctor.check_nvcc, "CUDA toolkit"),
])
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
    monkeypatch.setattr(doctor, "_pinned", lambda package: "9.9.9")
    finding = doctor.check_torch()
    assert not finding.ok and "tested with 9.9.9" in finding.fix


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
