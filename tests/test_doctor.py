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
