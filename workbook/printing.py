"""Commands and file names as notebooks print them: the same text on every machine.

The repository's location, the Python executable, torch's CMake folder and Python's
extension-module suffix differ between machines; the notebooks print them short.
"""

from __future__ import annotations

import sys
import sysconfig

from . import REPO_ROOT

CMAKE_PREFIX_AS_TEXT = "$(python -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"


def command_as_text(command) -> str:
    """A command's words joined, with the Python executable, torch's CMake folder and the repository written short."""
    import torch.utils

    def short(word: str) -> str:
        word = word.replace(sys.executable, "python").replace(torch.utils.cmake_prefix_path, CMAKE_PREFIX_AS_TEXT)
        return word.replace(str(REPO_ROOT) + "/", "")

    return " ".join(short(str(word)) for word in command)


def module_file_name(path) -> str:
    """A built module's name without the Python-version part: _C.cpython-311-x86_64-linux-gnu.so -> _C.<EXT_SUFFIX>."""
    return path.name.replace(sysconfig.get_config_var("EXT_SUFFIX"), ".<EXT_SUFFIX>")
