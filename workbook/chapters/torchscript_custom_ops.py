"""The code behind chapter 06's cells (06_torchscript_custom_ops.ipynb) that are not the op library itself
(that is `workbook.ops.warp_perspective`): the warp figure, and loading libraries in a fresh Python process.
"""

from __future__ import annotations

import subprocess
import sys

from matplotlib.figure import Figure

from workbook import REPO_ROOT
from workbook.build import errors
from workbook.chapters.drawing import as_image


def warp_figure(image, ours, theirs) -> Figure:
    """The source image, the operator's result, cv2's result and their difference (H x W or H x W x C)."""
    import numpy as np

    def picture(tensor):
        array = tensor.detach().cpu().numpy()
        return array if array.ndim == 2 else np.clip(array[..., :3], 0, 1)

    difference = (ours - theirs).abs()
    difference = difference if difference.dim() == 2 else difference.amax(dim=-1)
    panels = [
        ("image", picture(image)),
        ("workbook_cv::warp_perspective", picture(ours)),
        ("cv2.warpPerspective", picture(theirs)),
        (f"|difference|, largest {difference.max().item():.3g}", difference.numpy()),
    ]
    figure = Figure(figsize=(12, 3.2))
    for column, (title, array) in enumerate(panels):
        axes = figure.add_subplot(1, 4, column + 1)
        if array.ndim == 2:
            axes.imshow(
                array,
                cmap="gray",
                vmin=0,
                vmax=max(float(array.max()), 1e-12) if column == 3 else 1,
                interpolation="nearest",
            )
        else:
            axes.imshow(array, interpolation="nearest")
        axes.set_title(title, fontsize=10)
        axes.set_xticks([])
        axes.set_yticks([])
    figure.tight_layout()
    return figure


def show_warp(image, ours, theirs):
    return as_image(warp_figure(image, ours, theirs), tight=True)


_DOUBLE_REGISTRATION = r"""
import sys, torch
torch.ops.load_library(sys.argv[1])
torch.ops.load_library(sys.argv[2])
"""


def load_both_in_fresh_process(first, second) -> subprocess.CompletedProcess:
    """Load two libraries into a new Python process, one after the other (to show what a second
    TORCH_LIBRARY for the same namespace does to a process)."""
    return subprocess.run(
        [sys.executable, "-c", _DOUBLE_REGISTRATION, str(first), str(second)],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
    )


_FRESH_PROCESS_CHECK = r"""
import sys, numpy as np, torch, cv2
torch.ops.load_library(sys.argv[1])
torch.manual_seed(0)
image = torch.rand(48, 64, 3)
warp = torch.tensor([[0.9, 0.1, 3.0], [-0.1, 1.1, -2.0], [0.0005, 0.0002, 1.0]], dtype=torch.float64)
ours = torch.ops.workbook_cv.warp_perspective(image, warp, 40, 50)
theirs = torch.from_numpy(cv2.warpPerspective(image.numpy(), warp.numpy(), (50, 40)))
print(f"shape {tuple(ours.shape)}, equal to cv2.warpPerspective: {torch.equal(ours, theirs)}")
"""


def check_in_fresh_process(library) -> str:
    """Load `library` in a new Python process, run the op once and compare it with pip's cv2."""
    result = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS_CHECK, str(library)], capture_output=True, text=True, cwd=REPO_ROOT
    )
    if result.returncode != 0:
        raise RuntimeError(errors.last_exception(result.stderr) or errors.error_summary(result.stderr))
    return result.stdout.strip()
