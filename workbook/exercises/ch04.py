"""Checks for chapter 04 (building and packaging).

* 4.1 ``check_gxx_command(gxx_command)``: ``gxx_command(source, output)`` returns the argument list
  of one plain ``g++`` call that compiles and links a small C++ program against libtorch's c10
  library — with torch's include folders, the C++ standard and the ``_GLIBCXX_USE_CXX11_ABI`` value
  torch was built with stated explicitly, the library folder, and a run path so that the program
  finds ``libc10.so`` when it runs. The check builds the program with the command and runs it.
"""
from __future__ import annotations

import os
import re
import subprocess

from ..checking import Mistake, exercise

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
    from .. import build

    return build.write_if_changed("ch04/device_name.cpp", PROGRAM)


def torch_abi() -> int:
    import torch

    return int(torch._C._GLIBCXX_USE_CXX11_ABI)


def first_error(text: str) -> str:
    """The first error line of a g++ log, with the repository's path left out."""
    from .. import REPO_ROOT

    text = text.replace(str(REPO_ROOT) + os.sep, "")
    for line in text.splitlines():
        if "error" in line or "undefined reference" in line or "cannot find" in line:
            return line.strip()[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else ""


@exercise("4.1 a plain g++ build against libtorch")
def check_gxx_command(gxx_command):
    from .. import BUILD_DIR

    source = program_source()
    output = BUILD_DIR / "ch04" / "device_name"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.unlink(missing_ok=True)
    command = gxx_command(str(source), str(output))
    if not isinstance(command, (list, tuple)) or not all(isinstance(word, str) for word in command):
        raise Mistake(f"gxx_command should return a list of strings (the words of the command), got {type(command).__name__}")
    command = list(command)
    if not command or os.path.basename(command[0]) not in ("g++", "c++", "g++-12"):
        raise Mistake(f"the command should start with the compiler, g++; it starts with {command[:1]}")
    abi = torch_abi()
    abi_flags = [w for w in command if w.startswith("-D_GLIBCXX_USE_CXX11_ABI")]
    if abi_flags != [f"-D_GLIBCXX_USE_CXX11_ABI={abi}"]:
        raise Mistake(f"state the ABI explicitly, as torch was built: -D_GLIBCXX_USE_CXX11_ABI={abi} "
                      f"(torch._C._GLIBCXX_USE_CXX11_ABI is {bool(abi)}); your command has {abi_flags or 'none'}")
    standards = [w for w in command if w.startswith("-std=")]
    if not standards or not re.fullmatch(r"-std=(c|gnu)\+\+(17|20|2a|23|2b)", standards[-1]):
        raise Mistake(f"state the C++ standard: torch's headers need C++17 or newer (-std=c++17); "
                      f"your command has {standards or 'none'}")
    if str(source) not in command or str(output) not in command:
        raise Mistake("the command must compile `source` and write the program to `output` (-o output)")

    env = dict(os.environ, LC_ALL="C")
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
    run = subprocess.run([str(output)], capture_output=True, text=True, env=env)
    if run.returncode != 0:
        if "error while loading shared libraries" in run.stderr:
            raise Mistake("the program builds but cannot find libc10.so when it runs: add a run path, "
                          "-Wl,-rpath,<torch's lib folder>, so that the loader looks there")
        raise Mistake(f"the program failed (exit {run.returncode}): {run.stderr.strip()[:300]}")
    if run.stdout.strip() != EXPECTED_OUTPUT:
        raise Mistake(f"the program printed {run.stdout.strip()!r}, expected {EXPECTED_OUTPUT!r}")
