"""What every test process needs before any test file is imported.

Chapter 11 runs Triton kernels in Triton's interpreter where there is no GPU (TRITON_INTERPRET=1; see
workbook/ops/triton_kernels.py). Triton reads that switch when `triton.language` is imported, whose own helpers
(tl.sigmoid, tl.sum, ...) are @triton.jit functions, and torch.compile imports it. pytest runs many test files
in one process, so the switch is made here, before any of them runs.

workbook.bench.timing.quick() is made true here: the timing helpers that notebooks call (bench.best_of_rounds,
chapters.performance.side_by_side) and chapter 02's timing cell then run one short round, since nbval checks
that those cells run, not what they print. Notebook kernels inherit this process's environment. (pytest reads
this file when tests/ is among its paths, as in `make test`.)
"""

import os

import torch

from workbook.bench.timing import QUICK_ENV

os.environ.setdefault(QUICK_ENV, "1")

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
