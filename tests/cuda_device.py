"""What the GPU tests of the CUDA kernels share (tests/test_lltm_cuda.py, tests/test_scatter_cuda.py,
tests/test_scatter_stable_cuda.py; the scatter ones also share tests/scatter_device.py).

The tests compare every op on DEVICE with its CPU kernel. They skip without a CUDA GPU (and where the
CUDA kernels cannot be built); `python -m workbook.diagnostics.gpu_report` runs them on a GPU machine together with
everything else chapter 05 needs checked there.

Dry run: WORKBOOK_CUDA_TESTS_DEVICE=cpu runs the same tests with the CPU as the device under test. The
CPU kernels are then compared with themselves, which says nothing about CUDA; it only checks the tests'
own logic on a machine without a GPU (which is how they were written). Tests that need two devices or
the CUDA runtime skip in a dry run.
"""

import contextlib
import os

import nbformat
import pytest
import torch

from workbook import build
from workbook.course import generate

DRY_RUN = os.environ.get("WORKBOOK_CUDA_TESTS_DEVICE") == "cpu"
DEVICE = "cpu" if DRY_RUN else "cuda"


def _why_not_runnable():
    if DRY_RUN:
        return None
    if not torch.cuda.is_available():
        return "needs a CUDA GPU"
    buildable, why = build.cuda_build_status()
    return None if buildable else f"needs a CUDA GPU and a CUDA build of the extensions ({why})"


_REASON = _why_not_runnable()
MARKS = [pytest.mark.gpu, pytest.mark.skipif(_REASON is not None, reason=_REASON or "")]  # a test module's pytestmark
needs_real_gpu = pytest.mark.skipif(DRY_RUN, reason="dry run on the CPU: this test needs the CUDA runtime")
needs_two_gpus = pytest.mark.skipif(DRY_RUN or torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


def on_device(tensors, device=DEVICE):
    return [t.to(device) for t in tensors]


def side_stream():
    """A context in which a fresh, non-default CUDA stream is the current one (nothing in a dry run)."""
    if DRY_RUN:
        return contextlib.nullcontext()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    return torch.cuda.stream(stream)


def back_on_current_stream(stream_context):
    if not DRY_RUN:
        torch.cuda.current_stream().wait_stream(stream_context.stream)


def divide_by_count_solution() -> str:
    """Exercise 5.1's solution: the CUDA source string its cell in solutions/05_cuda_extensions.ipynb assigns."""
    notebook = nbformat.read(generate.SOLUTIONS / "05_cuda_extensions.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "ex5-divide-by-count"]
    namespace = {}
    exec(cell.source, namespace)
    return namespace["DIVIDE_BY_COUNT_CU"]
