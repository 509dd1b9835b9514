"""Checks for chapter 04 (building and packaging).

* 4.1 ``check_gxx_command(gxx_command)``: ``gxx_command(source, output)`` returns the argument list
  of one plain ``g++`` call that compiles and links a small C++ program against libtorch's c10
  library — with torch's include folders, the C++ standard and the ``_GLIBCXX_USE_CXX11_ABI`` value
  torch was built with stated explicitly, the library folder, and a run path so that the program
  finds ``libc10.so`` when it runs. The check builds the program with the command and runs it.
* 4.2 ``check_lltm_extension(lltm_extension)``: ``lltm_extension()`` returns the setuptools
  ``Extension`` that a ``csrc/lltm/setup.py`` would declare for the LLTM extension. Checked by
  inspecting the object (building it would take minutes).
* 4.3 ``check_app_cmake(app_cmake)``: ``app_cmake()`` returns the CMake commands that build a
  program ``scatter_app`` from ``app.cpp`` against libtorch and the ``wb_scatter`` library target.
  Checked by reading the commands (configuring libtorch with CMake takes long).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from workbook.course.checking import Mistake, exercise

PROGRAM = r"""// Built by check_gxx_command (chapter 04).
#include <c10/core/Device.h>

#include <iostream>
#include <string>

int main() {
  std::string spec = "cpu";
  c10::Device device(spec);  // defined in libc10.so and takes a std::string: sensitive to the ABI
  std::cout << "device " << device << " is a " << c10::DeviceTypeName(device.type(), true) << " device\n";
  return 0;
}
"""
EXPECTED_OUTPUT = "device cpu is a cpu device"


def program_source():
    """Write the check's program under build/src/ch04/ (only when changed) and return its path."""
    from workbook import build

    return build.write_if_changed("ch04/device_name.cpp", PROGRAM)


def torch_abi() -> int:
    import torch

    return int(torch._C._GLIBCXX_USE_CXX11_ABI)


def first_error(text: str) -> str:
    """The first error line of a g++ log, with the repository's path left out."""
    from workbook.build import errors

    return errors.first_compiler_error_line(text)[:300]


# Variables through which a learner's shell could hand g++ or the loader torch's folders: the check
# removes them, so the command must say everything itself (another user's shell has none of them).
_SEARCH_PATH_VARIABLES = ("LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH")


def _clean_environment() -> dict:
    env = {key: value for key, value in os.environ.items() if key not in _SEARCH_PATH_VARIABLES}
    env["LC_ALL"] = "C"
    return env


@exercise("4.1 a plain g++ build against libtorch")
def check_gxx_command(gxx_command):
    import shutil
    import tempfile

    from workbook import BUILD_DIR

    # A fresh folder each time, not the path the notebook shows: the command must use its arguments.
    (BUILD_DIR / "ch04").mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="check_", dir=BUILD_DIR / "ch04"))
    try:
        source = folder / "device_name.cpp"
        source.write_text(program_source().read_text())
        _check_gxx_command(gxx_command, source, folder / "device_name")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _check_gxx_command(gxx_command, source, output):
    command = gxx_command(str(source), str(output))
    if not isinstance(command, (list, tuple)) or not all(isinstance(word, str) for word in command):
        raise Mistake(
            f"gxx_command should return a list of strings (the words of the command), got {type(command).__name__}"
        )
    command = list(command)
    if not command or os.path.basename(command[0]) not in ("g++", "c++", "g++-12"):
        raise Mistake(f"the command should start with the compiler, g++; it starts with {command[:1]}")
    abi = torch_abi()
    abi_flags = [w for w in command if w.startswith("-D_GLIBCXX_USE_CXX11_ABI")]
    if abi_flags != [f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]:
        raise Mistake(
            f"state the ABI explicitly, as torch was built: -D_GLIBCXX_USE_CXX11_ABI={abi} "
            f"(torch._C._GLIBCXX_USE_CXX11_ABI is {bool(abi)}); your command has {abi_flags or 'none'}"
        )
    standards = [w for w in command if w.startswith("-std=")]
    if not standards or not re.fullmatch(r"-std=(c|gnu)\+\+(20|2a|23|2b|26|2c)", standards[-1]):
        raise Mistake(
            f"state the C++ standard torch is built for: torch 2.13 compiles extensions as C++20 "
            f"(-std=c++20); your command has {standards or 'none'}"
        )
    if str(source) not in command or str(output) not in command:
        raise Mistake("the command must compile `source` and write the program to `output` (-o output)")

    env = _clean_environment()
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    log = result.stdout + result.stderr
    if result.returncode != 0:
        error = first_error(log)
        if "No such file or directory" in log and ".h" in log:
            hint = "the compiler cannot find torch's headers: add -I for every folder in torch.utils.cpp_extension.include_paths()"
        elif "cannot find -l" in log:
            hint = "the linker cannot find the library: add -L with torch's lib folder (torch.utils.cpp_extension.library_paths())"
        elif "undefined reference" in log:
            hint = "the program uses functions from libc10.so: link it with -lc10 (after the source file)"
        else:
            hint = "g++ failed"
        raise Mistake(f"{hint}. g++ said: {error}")
    if not output.exists():
        raise Mistake(f"the command ran but wrote no program at `output`; g++ said: {first_error(log) or 'nothing'}")
    run = subprocess.run([str(output)], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        if "error while loading shared libraries" in run.stderr:
            raise Mistake(
                "the program builds but cannot find libc10.so when it runs (the check runs it with "
                "LD_LIBRARY_PATH unset, as another user's shell would): add a run path, "
                "-Wl,-rpath,<torch's lib folder>, so that the loader looks there"
            )
        raise Mistake(f"the program failed (exit {run.returncode}): {run.stderr.strip()[:300]}")
    if run.stdout.strip() != EXPECTED_OUTPUT:
        raise Mistake(f"the program printed {run.stdout.strip()!r}, expected {EXPECTED_OUTPUT!r}")


# ---- 4.2 the LLTM as a setuptools extension ------------------------------------------------------

LLTM_FOLDER = "csrc/lltm"
LLTM_SOURCES = {
    "lltm.cpp": "the schema (TORCH_LIBRARY) and the autograd kernels",
    "lltm_python.cpp": "the pybind11 module (PYBIND11_MODULE, so Python finds PyInit__C)",
    "cpu/lltm_cpu.cpp": "the CPU kernels",
}


def _compile_args(extension) -> list:
    args = extension.extra_compile_args
    return list(args.get("cxx", [])) if isinstance(args, dict) else list(args or [])


@exercise("4.2 the LLTM as a setuptools extension")
def check_lltm_extension(lltm_extension):
    from setuptools import Extension
    from torch.utils.cpp_extension import include_paths

    from workbook import CSRC_DIR
    from workbook.ops import lltm

    extension = lltm_extension()
    if not isinstance(extension, Extension):
        raise Mistake(
            f"lltm_extension() should return a setuptools Extension (from CppExtension), got {type(extension).__name__}"
        )
    if not set(include_paths()) <= set(extension.include_dirs):
        raise Mistake(
            "the extension lacks torch's include folders: declare it with "
            "torch.utils.cpp_extension.CppExtension, which adds them (and torch's libraries)"
        )
    if extension.name != "wb_lltm._C":
        raise Mistake(
            f"the extension's name decides where the module goes and what it is called: it should be "
            f"'wb_lltm._C' (imported as wb_lltm._C), got {extension.name!r}"
        )
    sources = list(extension.sources)
    for source in sources:
        if source.startswith("/") or source.startswith(LLTM_FOLDER):
            raise Mistake(
                f"setuptools wants source paths relative to setup.py, which lives in {LLTM_FOLDER}/; got {source!r}"
            )
        if not (CSRC_DIR / "lltm" / source).is_file():
            raise Mistake(f"there is no {LLTM_FOLDER}/{source}")
    for source, holds in LLTM_SOURCES.items():
        if source not in sources:
            raise Mistake(f"the sources lack {source}, {holds}")
    if len(sources) != len(LLTM_SOURCES):
        extra = [s for s in sources if s not in LLTM_SOURCES]
        raise Mistake(f"only the three C++ files belong in a CPU build; remove {extra}")
    compile_args = _compile_args(extension)
    wanted = [flag for flag in lltm.cpu_flags() if not flag.startswith("-O")]
    missing = [flag for flag in wanted if flag not in compile_args]
    if missing:
        raise Mistake(
            f"the compile arguments lack {' '.join(missing)}: without lltm.cpu_flags()'s SIMD flags the "
            "at::vec::Vectorized loops compile to scalar code"
        )
    if "-fopenmp" not in compile_args:
        raise Mistake(
            "the compile arguments lack -fopenmp: cpu/lltm_cpu.cpp splits its rows with at::parallel_for, "
            "which runs everything on one thread unless the file is compiled with OpenMP (chapter 03); "
            "lltm.EXTRA_CFLAGS is what the JIT build passes"
        )
    if "-fopenmp" not in list(extension.extra_link_args or []):
        raise Mistake(
            "the link arguments lack -fopenmp (extra_link_args=['-fopenmp']): OpenMP code needs its "
            "runtime library, libgomp, linked in, as the JIT build does with extra_ldflags"
        )
    names = [w.split("=", 1)[1] for w in compile_args if w.startswith("-DTORCH_EXTENSION_NAME=")]
    names += [str(value) for key, value in (extension.define_macros or []) if key == "TORCH_EXTENSION_NAME"]
    if any(name != "_C" for name in names):
        raise Mistake(
            f"TORCH_EXTENSION_NAME is set to {names[0]!r}: BuildExtension sets it to '_C' from the extension's "
            "name, and PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) must define PyInit__C for `import wb_lltm._C`; "
            "leave it to BuildExtension"
        )


# ---- 4.3 a CMake project for a program that calls the scatter ops ------------------------------

_COMMAND = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(([^()]*)\)")
_WORD = re.compile(r'"[^"]*"|[^\s"]+')


def cmake_commands(text: str) -> list[tuple[str, list[str]]]:
    """The commands of a CMake file as (lower-case name, arguments), comments removed."""
    lines = [line.split("#", 1)[0] for line in text.splitlines()]
    return [
        (name.lower(), [w.strip('"') for w in _WORD.findall(arguments)])
        for name, arguments in _COMMAND.findall("\n".join(lines))
    ]


def _cxx_standard(commands) -> int | None:
    for name, args in commands:
        if name == "set" and args[:1] == ["CMAKE_CXX_STANDARD"] and len(args) > 1 and args[1].isdigit():
            return int(args[1])
        if name == "target_compile_features":
            for word in args:
                if word.startswith("cxx_std_") and word[8:].isdigit():
                    return int(word[8:])
    return None


@exercise("4.3 CMake for a program that calls the scatter ops")
def check_app_cmake(app_cmake):
    text = app_cmake()
    if not isinstance(text, str):
        raise Mistake(f"app_cmake() should return the CMake commands as one string, got {type(text).__name__}")
    commands = cmake_commands(text)
    finds = [
        i
        for i, (name, args) in enumerate(commands)
        if name == "find_package" and args[:1] == ["Torch"] and "REQUIRED" in args
    ]
    if not finds:
        raise Mistake(
            "find libtorch first: find_package(Torch REQUIRED) defines TORCH_LIBRARIES, whose torch target brings "
            "torch's headers and libraries"
        )
    standard = _cxx_standard(commands)
    if standard is None or standard < 20:
        raise Mistake(
            "ask for C++20, as torch 2.13 is built: set(CMAKE_CXX_STANDARD 20) (or "
            f"target_compile_features(scatter_app PRIVATE cxx_std_20)); your file asks for "
            f"{'C++' + str(standard) if standard else 'no standard'}"
        )
    executables = [args for name, args in commands if name == "add_executable"]
    if not any(args[:1] == ["scatter_app"] and "app.cpp" in args[1:] for args in executables):
        raise Mistake(
            f"build the program with add_executable(scatter_app app.cpp); your add_executable calls: "
            f"{executables or 'none'}"
        )
    defined = next(
        i for i, (name, args) in enumerate(commands) if name == "add_executable" and args[:1] == ["scatter_app"]
    )
    early = [name for name, args in commands[:defined] if name.startswith("target_") and args[:1] == ["scatter_app"]]
    if early:
        raise Mistake(
            f"{early[0]}(scatter_app ...) comes before add_executable(scatter_app ...), which defines the "
            'target: CMake stops with \'Cannot specify ... for target "scatter_app" which is not built by '
            "this project'"
        )
    links = [args[1:] for name, args in commands if name == "target_link_libraries" and args[:1] == ["scatter_app"]]
    if not links:
        raise Mistake("link the program: target_link_libraries(scatter_app PRIVATE ...) is missing")
    words = [word for args in links for word in args]
    if "${TORCH_LIBRARIES}" not in words:
        raise Mistake("link libtorch: ${TORCH_LIBRARIES} is missing from target_link_libraries(scatter_app ...)")
    if "wb_scatter" not in words:
        raise Mistake("link the op library: wb_scatter is missing from target_link_libraries(scatter_app ...)")
    first_link = next(i for i, (name, args) in enumerate(commands) if name == "target_link_libraries")
    if finds[0] > first_link:
        raise Mistake("find_package(Torch REQUIRED) must come before the commands that use TORCH_LIBRARIES")
    _check_generated_build(_configure_app(text))


# What the check configures: the learner's CMakeLists.txt in a folder `app` next to a `scatter` that is
# csrc/scatter, and this program (never compiled: the check reads the commands CMake generates for it).
APP_SOURCE = r"""// scatter_app: calls an op of libwb_scatter.so, found by name in the dispatcher.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <iostream>

int main() {
  auto scatter_sum = c10::Dispatcher::singleton()
                         .findSchemaOrThrow("wb_scatter::scatter_sum", "")
                         .typed<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t, std::optional<int64_t>)>();
  std::cout << scatter_sum.call(at::ones({4}), at::tensor({0, 1, 0, 1}, at::kLong), 0, std::nullopt) << "\n";
}
"""


def _configure_app(text: str):
    """Configure the learner's CMake project with CMake (a few seconds; reused while nothing changed) and
    return the build folder holding CMake's build.ninja."""
    import hashlib
    import shutil

    import torch.utils

    from workbook import BUILD_DIR, CSRC_DIR, build
    from workbook.course.checking import Skip

    if shutil.which("cmake") is None or build.ensure_ninja_on_path() is None:
        raise Skip(
            "this check configures your project with CMake and Ninja; install them (python -m workbook.diagnostics.doctor)"
        )
    key = hashlib.sha256(
        "\0".join([text, (CSRC_DIR / "scatter" / "CMakeLists.txt").read_text(), torch.utils.cmake_prefix_path]).encode()
    ).hexdigest()[:16]
    folder = BUILD_DIR / "ch04" / "app_check" / key
    app, build_dir = folder / "app", folder / "app" / "build"
    if (build_dir / "build.ninja").exists():
        return build_dir
    app.mkdir(parents=True, exist_ok=True)
    if not (folder / "scatter").exists():
        (folder / "scatter").symlink_to(CSRC_DIR / "scatter", target_is_directory=True)
    (app / "CMakeLists.txt").write_text(text)
    (app / "app.cpp").write_text(APP_SOURCE)
    command = build.cmake_configure_command(app, build_dir)
    result = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, LC_ALL="C"))
    if result.returncode != 0:
        shutil.rmtree(build_dir, ignore_errors=True)  # a failed configure leaves a half-made folder
        lines = (result.stdout + result.stderr).replace(str(folder) + os.sep, "").splitlines()
        start = next((i for i, line in enumerate(lines) if "CMake Error" in line), max(len(lines) - 6, 0))
        message = " ".join(line.strip() for line in lines[start : start + 6] if line.strip())
        raise Mistake(f"CMake could not configure your project: {message[:500]}")
    return build_dir


def _ninja_variables(text: str, header: str) -> dict:
    """The variables of the build statement of build.ninja that starts with `header`."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    variables = {}
    if start is None:
        return variables
    for line in lines[start + 1 :]:
        if not line.startswith("  ") or "=" not in line:
            break
        name, value = line.strip().split("=", 1)
        variables[name.strip()] = value.strip()
    return variables


def _check_generated_build(build_dir) -> None:
    """Read the commands CMake generated for scatter_app: the C++ standard it is compiled with, and
    whether libwb_scatter.so is on its link line with --as-needed switched off."""
    import shlex

    text = (build_dir / "build.ninja").read_text()
    # app.cpp's object, or the one CMake compiles it in with CMAKE_UNITY_BUILD (Unity/unity_0_cxx.cxx.o)
    app_object = re.search(r"^build (CMakeFiles/scatter_app\.dir/(?:app\.cpp|Unity/\S+)\.o):", text, re.MULTILINE)
    compile_step = _ninja_variables(text, f"build {app_object.group(1)}:") if app_object else {}
    flags = compile_step.get("FLAGS", "")
    standard = re.search(r"-std=(?:c|gnu)\+\+(\w+)", flags)
    if standard is None or standard.group(1) not in ("20", "2a", "23", "2b", "26", "2c"):
        raise Mistake(
            f"CMake compiles app.cpp with {standard.group(0) if standard else 'no -std flag (the compiler default, C++17 for g++ 12)'}, "
            "not C++20: a target takes the C++ standard that CMAKE_CXX_STANDARD holds when it is created, so "
            "set(CMAKE_CXX_STANDARD 20) must come before add_executable(scatter_app ...) (or use "
            "target_compile_features(scatter_app PRIVATE cxx_std_20)). find_package(Torch) does not pass it on"
        )
    link_step = _ninja_variables(text, "build scatter_app:")
    words = shlex.split(" ".join(link_step.get(v, "") for v in ("FLAGS", "LINK_FLAGS", "LINK_LIBRARIES")))
    as_needed, states, torch_linked = True, [], False  # Debian's and Ubuntu's gcc pass --as-needed first
    for word in words:
        parts = word[4:].split(",") if word.startswith("-Wl,") else [word]
        for part in parts:
            if part == "--no-as-needed":
                as_needed = False
            elif part == "--as-needed":
                as_needed = True
            elif part.endswith("libwb_scatter.so") or part == "-lwb_scatter":
                states.append(as_needed)
            torch_linked |= part.endswith(("libtorch.so", "libtorch_cpu.so"))
    if not torch_linked:
        raise Mistake("scatter_app's link line has no libtorch: link ${TORCH_LIBRARIES}")
    _check_library_sources(text)
    if not states:
        raise Mistake("scatter_app's link line has no libwb_scatter.so: link the target wb_scatter")
    if all(states):
        raise Mistake(
            "scatter_app links libwb_scatter.so while --as-needed is in force (gcc on Debian and Ubuntu passes it "
            "by default): the program names no function of wb_scatter (it finds the ops by name in the "
            "dispatcher), so the linker drops the library and the ops are never registered. Put "
            "-Wl,--no-as-needed right before wb_scatter (and -Wl,--as-needed after it)"
        )


def _check_library_sources(ninja_text: str) -> None:
    """When the project builds the library target wb_scatter itself, it must compile every .cpp file of
    csrc/scatter's library once (as csrc/scatter/CMakeLists.txt does: the six op-level files through
    scatter_unity.cpp, the four loop files apart; or all ten one by one), with OpenMP: a library without some
    of them fails to link or to run, one with a file twice fails to link (a function defined twice) or to
    load (a namespace registered twice), and one without -fopenmp runs its loops on one thread."""
    statements = re.findall(r"^build ((?:\S*/)?wb_scatter\.dir/\S+?\.o): \S+ (\S+)", ninja_text, re.MULTILINE)
    if not statements:
        return  # no wb_scatter target of its own (an imported library, say): the link line tells
    compiled = {source: _files_compiled_by(source) for source in _library_sources()}
    times = dict.fromkeys(sorted(set().union(*compiled.values())), 0)
    library_objects = []
    for statement, input_path in statements:
        for path in _paths_compiled_from(input_path):
            for source, files in compiled.items():
                if path == source or path.endswith("/" + source):
                    library_objects.append((statement, path))
                    for file in files:
                        times[file] += 1
    missing = [file for file, count in times.items() if count == 0]
    if missing:
        raise Mistake(
            f"the library target wb_scatter is not built from all of csrc/scatter's sources (missing: "
            f"{', '.join(missing)}), so the program would fail to link or to run; build it with csrc/scatter's "
            "own CMakeLists.txt: add_subdirectory(../scatter wb_scatter)"
        )
    twice = [file for file, count in times.items() if count > 1]
    if twice:
        raise Mistake(
            f"the library target wb_scatter compiles {', '.join(twice)} more than once (scatter_unity.cpp "
            "includes the six op-level files), so the library would fail to link (a function defined twice) or "
            "to load (a namespace registered twice); build it with csrc/scatter's own CMakeLists.txt: "
            "add_subdirectory(../scatter wb_scatter)"
        )
    for statement, path in library_objects:
        if not _openmp_on(_ninja_variables(ninja_text, f"build {statement}:").get("FLAGS", "")):
            raise Mistake(
                f"the library target wb_scatter compiles {path} without -fopenmp: at::parallel_for then runs "
                "its loops on one thread, silently; link wb_scatter with OpenMP::OpenMP_CXX (find_package(OpenMP)) "
                "as csrc/scatter's own CMakeLists.txt does: add_subdirectory(../scatter wb_scatter)"
            )


def _paths_compiled_from(input_path: str) -> list[str]:
    """The source a build statement compiles, or, for a source CMake generated for a unity build
    (CMAKE_UNITY_BUILD: Unity/unity_<n>_cxx.cxx), the sources it includes."""
    if not re.search(r"/Unity/unity_\w+\.cxx$", input_path):
        return [input_path]
    try:
        text = Path(input_path).read_text()
    except OSError:
        return [input_path]
    return re.findall(r'^#include "(.+)"', text, re.MULTILINE)


def _openmp_on(flags: str) -> bool:
    """Whether compiler flags leave OpenMP on: the last of -fopenmp (or -fopenmp=...) and -fno-openmp
    decides; -fopenmp-simd enables only the simd pragmas, no threads."""
    state = False
    for word in flags.split():
        if word == "-fopenmp" or word.startswith("-fopenmp="):
            state = True
        elif word == "-fno-openmp":
            state = False
    return state


def _library_sources() -> list[str]:
    """What the builds compile (relative to csrc/scatter), then the .cpp files scatter_unity.cpp includes."""
    from workbook.ops import scatter

    units = [str(Path(source).relative_to("csrc/scatter")) for source in scatter.CPP_SOURCES]
    return units + sorted({file for unit in units for file in _files_compiled_by(unit)} - set(units))


def _files_compiled_by(source: str) -> set[str]:
    """The .cpp files (relative to csrc/scatter) that compiling `source` compiles: a unity file's includes,
    or the file itself."""
    from workbook import CSRC_DIR

    text = (CSRC_DIR / "scatter" / source).read_text()
    included = re.findall(r'^#include "(\S+\.cpp)"', text, re.MULTILINE)
    return {os.path.normpath(Path(source).parent / name) for name in included} or {source}
