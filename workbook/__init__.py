"""The Python behind the workbook's notebooks and tests, in parts by role: workbook/README.md is the map.

This module holds only the repository's paths; it imports no torch, so the generator, `make progress` and
the doctor's first checks work even before PyTorch is installed.
"""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# Everything the workbook builds goes here. `make test-torch` points WORKBOOK_BUILD_DIR elsewhere, so that
# another torch's builds never mix with the pinned torch's.
BUILD_DIR = REPO_ROOT / (os.environ.get("WORKBOOK_BUILD_DIR") or "build")
CSRC_DIR = REPO_ROOT / "csrc"


def relative_to_repo(path) -> str:
    """A path as learners should see it: relative to the repository when it lies inside it."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(REPO_ROOT))
    except ValueError:
        return str(path)
