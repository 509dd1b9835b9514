"""What every test process needs before any test file is imported.

Chapter 11 runs Triton kernels in Triton's interpreter where there is no GPU (TRITON_INTERPRET=1; see
workbook/ops/triton_kernels.py). Triton reads that switch when `triton.language` is imported, whose own helpers
(tl.sigmoid, tl.sum, ...) are @triton.jit functions, and torch.compile imports it. pytest runs many test files
in one process, so the switch is made here, before any of them runs.
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
