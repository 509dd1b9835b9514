"""What every test process needs before any test file is imported.

Chapter 11 runs Triton kernels in Triton's interpreter where there is no GPU (TRITON_INTERPRET=1; see
workbook/ops/triton_kernels.py). Triton reads that switch when `triton.language` is imported, whose own helpers
(tl.sigmoid, tl.sum, ...) are @triton.jit functions, and torch.compile imports it. pytest runs many test files
in one process, so the switch is made here, before any of them runs.

The notebooks' timing cells run one short round here (workbook.bench.timing.quick): nbval checks that they run,
not what they print. Notebook kernels inherit this process's environment.
"""

import os

import torch

from workbook.bench.timing import QUICK_ENV

os.environ.setdefault(QUICK_ENV, "1")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
