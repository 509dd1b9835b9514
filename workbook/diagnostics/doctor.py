"""A toolchain doctor: is everything the chapters build with present, and if not, what fixes it?

    python -m workbook.diagnostics.doctor

Each finding names the tool, what was found, whether the workbook needs it (and for which
chapters), and the command that installs it. Nothing here needs torch to be importable.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from workbook import BUILD_DIR, REPO_ROOT

SETUP = "make setup  (or: pip install -r requirements.txt)"


@dataclass(frozen=True)
class Finding:
    tool: str
    found: str | None  # a version or short description; None when missing
    needed_for: str
    fix: str  # the command or step that provides it; "" when there is nothing to fix
    required: bool = True
    note: str = ""  # what its absence means, when there is nothing to fix
    problem: bool = False  # not a missing tool but something in the way (a stale lock, a wrong setting)
    # A problem that is required (a stale lock, a broken installed package) appears in the summary; an optional
    # one (CUDA_HOME: chapter 05 then builds its CPU kernels only) only in the report.

    @property
    def ok(self) -> bool:
        return self.found is not None


def _run(*command: str) -> str | None:
    """stdout+stderr of a command, or None if it cannot be run."""
    try:
        # Generous: a child that imports torch (the triton probe) took over 60 s on a busy 2-core machine.
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout + done.stderr) if done.returncode == 0 else None


def _version(text: str | None, pattern: str = r"(\d+\.\d+(?:\.\d+)?)") -> str | None:
    if text is None:
        return None
    match = re.search(pattern, text)
    return match.group(1) if match else text.strip().splitlines()[0]


def _pinned(package: str) -> str | None:
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().lower() == package:
            return version.strip()
    return None


def check_python() -> Finding:
    version = ".".join(map(str, sys.version_info[:3]))
    found = version if sys.version_info >= (3, 10) else None
    return Finding("Python ≥ 3.10", found, "every chapter", "install Python 3.11 and rerun: make setup")


# Releases besides the pinned one that the whole suite is run against (`make test-torch VERSION=...`), with
# what a learner sees differ from the stored outputs, which are the pinned torch's (README: "Which torch").
CHECKED_TORCH = {
    "2.14": "its build lock is an OS-level lock whose file stays in the build folder (a killed build leaves "
    "nothing to remove); TorchScript's deprecation notice is a FutureWarning, which Python's default filters "
    "show (2.13's DeprecationWarning they hide); pip's Linux CUDA wheel requires triton~=3.8.0"
}


def check_torch() -> Finding:
    if importlib.util.find_spec("torch") is None:
        return Finding("PyTorch", None, "every chapter", SETUP)
    import torch

    pinned = _pinned("torch")
    version = torch.__version__
    if pinned and not version.startswith(pinned):
        differences = CHECKED_TORCH.get(".".join(version.split(".")[:2]))
        if differences:
            return Finding(
                "PyTorch",
                f"{version} (checked; outputs shown are {pinned}'s. Differs: {differences})",
                "every chapter",
                SETUP,
            )
        return Finding(
            "PyTorch", None, "every chapter", f"found {version}, the workbook is tested with {pinned}: {SETUP}"
        )
    return Finding("PyTorch", version, "every chapter", SETUP)


def check_compiler() -> Finding:
    compiler = os.environ.get("CXX") or "c++"
    if len(compiler.split()) > 1:
        # torch runs $CXX as one program name; `CXX="ccache g++"` fails every build.
        return Finding(
            "C++20 compiler",
            None,
            "chapters 02–10",
            f"CXX={compiler!r} is a command line, not a compiler: unset CXX or set it to one program "
            "(torch puts ccache in front by itself; CMake: -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)",
            problem=True,
        )
    version = _version(_run(compiler, "-dumpfullversion", "-dumpversion"))
    # torch 2.13 compiles extensions with -std=c++20 (and its CMake config asks for C++20): g++ 10 or newer.
    if version and int(version.split(".")[0]) < 10:
        return Finding(
            "C++20 compiler",
            None,
            "chapters 02–10",
            f"{compiler} {version} is too old for C++20: sudo apt-get install g++",
        )
    found = f"{Path(shutil.which(compiler) or compiler).name} {version}" if version else None
    return Finding("C++20 compiler", found, "chapters 02–10", "sudo apt-get install g++")


def check_ninja() -> Finding:
    found = _version(_run("ninja", "--version"))
    if found is None:
        venv_ninja = Path(sys.executable).parent / "ninja"
        found = _version(_run(str(venv_ninja), "--version"))
        if found is not None:
            # The workbook's builds add the venv's bin/ to PATH themselves; torch's own load() does not.
            found += " (in the venv's bin/, not on PATH: activate the venv for builds outside the workbook)"
    return Finding(
        "ninja",
        found,
        "chapters 02–10 (torch builds extensions with it)",
        "pip install ninja  (or: sudo apt-get install ninja-build)",
    )


def check_ccache() -> Finding:
    return Finding(
        "ccache",
        _version(_run("ccache", "--version")),
        "faster rebuilds (optional)",
        "sudo apt-get install ccache",
        required=False,
    )


def check_cmake() -> Finding:
    return Finding("CMake", _version(_run("cmake", "--version")), "chapters 04, 06–08", "sudo apt-get install cmake")


def check_opencv_cpp() -> Finding:
    from workbook.build import opencv

    header = opencv.version_header()
    version = None
    if header is not None:
        parts = dict(re.findall(r"#define CV_VERSION_(MAJOR|MINOR|REVISION)\s+(\d+)", header.read_text()))
        version = ".".join(parts.get(key, "?") for key in ("MAJOR", "MINOR", "REVISION"))
    return Finding("OpenCV C++ library", version, "chapters 06–08", "sudo apt-get install libopencv-dev")


def check_cv2() -> Finding:
    if importlib.util.find_spec("cv2") is None:
        return Finding("OpenCV for Python (cv2)", None, "chapters 06–08", SETUP)
    import cv2

    return Finding("OpenCV for Python (cv2)", cv2.__version__, "chapters 06–08", SETUP)


def check_nvcc() -> Finding:
    found = _version(_run("nvcc", "--version"), r"release (\d+\.\d+)")
    return Finding(
        "nvcc (CUDA compiler)",
        found,
        "chapter 05 (compile checks; kernels need a GPU)",
        "install the CUDA toolkit from NVIDIA's Linux installers",
        required=False,
    )


def _nvcc_release(nvcc) -> str | None:
    return _version(_run(str(nvcc), "--version"), r"release (\d+\.\d+)")


def check_cuda_home() -> Finding:
    """Where torch's cpp_extension will look for the CUDA toolkit, whether that fits this torch, and so
    which of the four cases this machine is: a CPU-only torch; a CUDA torch that sees no GPU (CPU
    kernels only, unless WORKBOOK_BUILD_CUDA=1 asks for a compile check); a GPU but no fitting toolkit;
    a GPU and a toolkit (the CUDA kernels are built and run)."""
    needed = "building chapter 05's CUDA kernels"
    if importlib.util.find_spec("torch") is None:
        return Finding("CUDA toolkit for torch", None, needed, SETUP, required=False)
    import torch

    from workbook import build

    if torch.version.cuda is None:
        return Finding(
            "CUDA toolkit for torch", "not used (this torch is a CPU-only build)", needed, "", required=False
        )
    toolkit = _cuda_toolkit(torch.version.cuda, needed)
    if torch.cuda.is_available():
        return toolkit if not toolkit.ok else replace(toolkit, found=f"{toolkit.found}: the CUDA kernels are built")
    switch = build.BUILD_CUDA_SWITCH
    no_gpu = "this torch sees no GPU, so extensions get their CPU kernels only"
    if not build.cuda_build_requested():
        if toolkit.ok:
            return replace(
                toolkit, found=f"{toolkit.found}; {no_gpu} ({switch}=1 builds the CUDA kernels too, to check them)"
            )
        return replace(
            toolkit, fix="", problem=False, note=f"{no_gpu}; to check the CUDA kernels ({switch}=1): {toolkit.fix}"
        )
    if not toolkit.ok:
        return toolkit
    return replace(
        toolkit,
        found=f"{toolkit.found}; {switch}=1 and no GPU: the CUDA kernels are compiled for "
        f"architecture {build.compile_check_arch()} to check them, not run",
    )


def _cuda_toolkit(wanted: str, needed: str) -> Finding:
    """The CUDA toolkit torch's cpp_extension finds (CUDA_HOME, CUDA_PATH, nvcc on PATH, /usr/local/cuda),
    and whether its major version is torch's (`wanted`)."""
    install = f"install the CUDA {wanted.split('.')[0]} toolkit and export CUDA_HOME=<its folder>"
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home is None:
        nvcc = shutil.which("nvcc")
        home = (
            str(Path(nvcc).parent.parent) if nvcc else ("/usr/local/cuda" if Path("/usr/local/cuda").exists() else None)
        )
    if home is None:
        return Finding(
            "CUDA toolkit for torch", None, needed, f"no CUDA toolkit found: {install}", required=False, problem=True
        )
    release = _nvcc_release(Path(home) / "bin" / "nvcc")
    if release is None:
        return Finding(
            "CUDA toolkit for torch",
            None,
            needed,
            f"CUDA_HOME={home} has no working bin/nvcc: point CUDA_HOME at the toolkit's root "
            "(the folder holding bin/nvcc)",
            required=False,
            problem=True,
        )
    if release.split(".")[0] != wanted.split(".")[0]:
        return Finding(
            "CUDA toolkit for torch",
            None,
            needed,
            f"the toolkit in {home} is CUDA {release}, torch was built with CUDA {wanted}: {install}",
            required=False,
            problem=True,
        )
    return Finding("CUDA toolkit for torch", f"CUDA {release} in {home}", needed, "", required=False)


def check_triton() -> Finding:
    """Triton (chapter 11): its version, and whether its CPU interpreter runs a kernel here (in a child process,
    since TRITON_INTERPRET must be set before triton is imported)."""
    import importlib.metadata
    import tempfile

    needed = "chapter 11 (on the CPU through its interpreter)"
    if importlib.util.find_spec("triton") is None:
        return Finding("Triton", None, needed, SETUP)
    version, pinned = importlib.metadata.version("triton"), _pinned("triton")
    label = f"{version} (its CPU interpreter runs kernels)"
    if pinned and version != pinned:
        torch_needs = _checked_torch_requires("triton")
        if torch_needs is None or not torch_needs.contains(version):
            return Finding("Triton", None, needed, f"found {version}, the workbook is tested with {pinned}: {SETUP}")
        # A checked torch (make test-torch) pins its own triton; requirements.txt's goes with the pinned torch.
        label = (
            f"{version} (the triton this torch requires; {pinned} goes with the pinned torch; "
            "its CPU interpreter runs kernels)"
        )
    probe = (
        "import os\nos.environ['TRITON_INTERPRET'] = '1'\nimport torch, triton, triton.language as tl\n"
        "@triton.jit\ndef count(out, n, BLOCK: tl.constexpr):\n    i = tl.arange(0, BLOCK)\n"
        "    tl.store(out + i, i + 1, mask=i < n)\n"
        "out = torch.zeros(3, dtype=torch.int32)\ncount[(1,)](out, 3, BLOCK=4)\nprint(out.tolist())\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".py") as script:  # @triton.jit reads its kernel's source file
        script.write(probe)
        script.flush()
        output = _run(sys.executable, script.name) or ""
    if "[1, 2, 3]" not in output:
        return Finding(
            "Triton",
            None,
            needed,
            f"triton {version} is installed, but its interpreter (TRITON_INTERPRET=1) cannot run a kernel "
            f"here: reinstall it with {SETUP}",
            problem=True,
        )
    return Finding("Triton", label, needed, SETUP)


def _checked_torch_requires(package: str):
    """The version range of `package` that the installed torch requires (a packaging SpecifierSet), when that
    torch is a release in CHECKED_TORCH rather than the pinned one; None otherwise."""
    import importlib.metadata

    from packaging.requirements import Requirement

    torch_version = importlib.metadata.version("torch")
    pinned = _pinned("torch")
    if (pinned and torch_version.startswith(pinned)) or ".".join(torch_version.split(".")[:2]) not in CHECKED_TORCH:
        return None
    for line in importlib.metadata.requires("torch") or []:
        requirement = Requirement(line)
        if requirement.name == package and (requirement.marker is None or requirement.marker.evaluate()):
            return requirement.specifier
    return None


def check_build_locks(extensions_dir: Path | None = None) -> Finding:
    """Lock files that killed builds left in the workbook's extension build folders (`extensions_dir`:
    a folder of build folders; `workbook.build.stale_lock_files` finds them).

    Up to torch 2.13 a JIT build's `lock` file is the lock, and a build that was killed leaves it behind
    (an exception or Ctrl-C does not: torch deletes it in a `finally`); every later load then waits
    for it forever. From torch 2.14 the file always stays and is only held (an OS-level lock that dies
    with its holder) while a build runs: nothing can be stale then.
    """
    needed = "rebuilding an extension (torch waits forever on a stale lock)"
    if importlib.util.find_spec("torch") is None:
        return Finding("stale build locks", "none (no torch to build with)", needed, "", required=False)
    from workbook import build

    stale = build.stale_lock_files(extensions_dir)
    if not stale:
        return Finding("stale build locks", "none", needed, "", required=False)
    paths = " ".join(
        str(lock.relative_to(REPO_ROOT)) if lock.is_relative_to(REPO_ROOT) else str(lock) for lock in stale
    )
    return Finding(
        "stale build locks",
        None,
        needed,
        f"killed builds left {len(stale)} lock file(s) that nothing holds now (workbook.build removes such a "
        f"file itself when it builds that extension): rm {paths}",
        problem=True,
    )


_WORKBOOK_PACKAGES = {"wb_scatter": "csrc/scatter", "wb_scatter_stable": "csrc/scatter_stable"}


def _installed_into_python(name: str) -> bool:
    """Importable, and not from under build/: the workbook's own installs there (build/stable/site,
    build/scatter_pkg) are put on sys.path by the process that uses them, not installed into Python."""
    spec = importlib.util.find_spec(name)
    origin = getattr(spec, "origin", None)
    return spec is not None and not (origin and Path(origin).is_relative_to(BUILD_DIR))


def check_installed_extensions() -> Finding:
    """The workbook's packages installed into this Python (chapter 04's `pip install`) must load with this
    torch; one built against another torch (pip's build isolation, a torch upgrade) fails to load."""
    needed = "using the packages you installed in chapter 04"
    installed = [name for name in _WORKBOOK_PACKAGES if _installed_into_python(name)]
    if not installed:
        return Finding("installed extension packages", "none installed", needed, "", required=False)
    broken = [name for name in installed if _run(sys.executable, "-c", f"import torch, {name}") is None]
    if not broken:
        return Finding("installed extension packages", ", ".join(installed) + " load", needed, "", required=False)
    commands = "; ".join(
        f"pip install --no-build-isolation --force-reinstall {_WORKBOOK_PACKAGES[name]}" for name in broken
    )
    return Finding(
        "installed extension packages",
        None,
        needed,
        f"{', '.join(broken)} fail(s) to load with this torch (built against another one, e.g. by pip's "
        f"build isolation): {commands}",
        problem=True,
    )


def check_gpu() -> Finding:
    needed = "running chapter 05's kernels"
    if importlib.util.find_spec("torch") is None:
        return Finding("CUDA GPU", None, needed, SETUP, required=False)
    import torch

    if torch.cuda.is_available():
        return Finding("CUDA GPU", torch.cuda.get_device_name(0), needed, "", required=False)
    listed = _run("nvidia-smi", "-L") or ""
    if "GPU" not in listed:
        return Finding(
            "CUDA GPU",
            None,
            needed,
            "",
            required=False,
            note="no NVIDIA GPU on this machine: chapter 05 takes its CPU path (nothing to fix)",
        )
    if torch.version.cuda is None:
        return Finding(
            "CUDA GPU",
            None,
            needed,
            "this machine has a GPU, but this torch is a CPU-only build: "
            f"pip install torch=={_pinned('torch')} (pip's default Linux wheel is the CUDA build)",
            required=False,
        )
    return Finding(
        "CUDA GPU",
        None,
        needed,
        "torch is a CUDA build but sees no GPU: check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES",
        required=False,
    )


CHECKS = (
    check_python,
    check_torch,
    check_compiler,
    check_ninja,
    check_ccache,
    check_cmake,
    check_opencv_cpp,
    check_cv2,
    check_nvcc,
    check_cuda_home,
    check_gpu,
    check_triton,
    check_build_locks,
    check_installed_extensions,
)


def diagnose() -> list[Finding]:
    return [check() for check in CHECKS]


def report(findings: list[Finding]) -> str:
    width = max(len(finding.tool) for finding in findings)
    lines = []
    for finding in findings:
        mark = "ok " if finding.ok else ("PROBLEM" if finding.problem else "MISSING" if finding.required else "absent ")
        detail = finding.found if finding.ok else (f"fix: {finding.fix}" if finding.fix else finding.note)
        lines.append(f"{mark:8}{finding.tool:<{width}}  {detail}")
    return "\n".join(lines)


def summary(findings: list[Finding]) -> str:
    """One line on whether the workbook can run here; the same on every machine set up correctly."""
    missing = [finding for finding in findings if finding.required and not finding.ok]
    if not missing:
        return "Everything the workbook needs is here. Optional extras only change how fast or where things run."
    return "Missing: " + "; ".join(f"{finding.tool} (fix: {finding.fix})" for finding in missing)


def main() -> int:
    findings = diagnose()
    print(report(findings))
    print()
    print(summary(findings))
    return 0 if all(finding.ok for finding in findings if finding.required) else 1


if __name__ == "__main__":
    sys.exit(main())
