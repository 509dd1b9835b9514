"""warp_perspective (chapter 06's operator on the system's OpenCV) against pip's cv2.warpPerspective.

Both warp a float32 image with the same matrix into an output of the image's size, bilinear with a
zero border. They are different builds of OpenCV (the system library the operator links and pip's
wheel), so the ratio mixes our operator's overhead with the two libraries' differences.
"""
from __future__ import annotations

import torch

from .timing import Settings, side_by_side, us


def warp_matrix(side: int) -> torch.Tensor:
    """A mild perspective: a small rotation and shear, and a vanishing point far to the right."""
    return torch.tensor([[0.95, 0.08, 0.04 * side], [-0.06, 0.97, 0.03 * side], [1e-4 * 256 / side, 0.0, 1.0]],
                        dtype=torch.float64)


def run(settings: Settings, sides=(256, 512, 1024), channels=(1, 3)) -> list[dict]:
    import cv2

    from .. import torchscript

    torchscript.load_ops()
    print(f"warp_perspective against pip's cv2.warpPerspective (OpenCV {cv2.__version__}); ratio = cv2 / ours")
    print(f"  {'image':>14} {'ours':>13} {'cv2':>13}  ratio")
    rows = []
    for side in sides:
        for channel_count in channels:
            shape = (side, side) if channel_count == 1 else (side, side, channel_count)
            image = torch.rand(shape, generator=torch.Generator().manual_seed(side))
            warp = warp_matrix(side)
            env = {"torch": torch, "cv2": cv2, "image": image, "warp": warp, "side": side,
                   "array": image.numpy(), "matrix": warp.numpy()}
            times = side_by_side({
                "ours": ("torch.ops.workbook_cv.warp_perspective(image, warp, side, side)", env),
                "cv2": ("cv2.warpPerspective(array, matrix, (side, side))", env),
            }, settings)
            ours, theirs = times["ours"]["median_s"], times["cv2"]["median_s"]
            rows.append({"side": side, "channels": channel_count, "ours_s": ours, "cv2_s": theirs,
                         "ratio": theirs / ours})
            label = f"{side}x{side}x{channel_count}"
            print(f"  {label:>14} {us(ours)} {us(theirs)}  {theirs / ours:5.2f}x")
    return rows
