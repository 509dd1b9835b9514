"""Where OpenCV's C++ headers and libraries are: the doctor and every build that links OpenCV ask here."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

LIBRARIES = ["opencv_core", "opencv_imgproc"]


def include_dirs() -> list[str]:
    """The include folders of OpenCV 4 (pkg-config's answer, else the conda environment's, /usr/local's or
    Debian's folder, the first that holds OpenCV's headers)."""
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--cflags-only-I", "opencv4"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            return [flag[2:] for flag in found.stdout.split()]
    prefixes = [Path(p) for p in (os.environ.get("CONDA_PREFIX"), "/usr/local", "/usr") if p]
    folders = [prefix / "include" / "opencv4" for prefix in prefixes]
    return [str(next((folder for folder in folders if (folder / "opencv2").is_dir()), folders[-1]))]


def version_header() -> Path | None:
    """opencv2/core/version.hpp of the OpenCV that builds would use, if it is installed."""
    for folder in include_dirs():
        header = Path(folder) / "opencv2" / "core" / "version.hpp"
        if header.exists():
            return header
    return None


def build_options() -> dict:
    """`extra_include_paths` and `extra_ldflags` for `workbook.build.load`, linking OpenCV's core and imgproc."""
    return {"extra_include_paths": include_dirs(), "extra_ldflags": [f"-l{library}" for library in LIBRARIES]}
