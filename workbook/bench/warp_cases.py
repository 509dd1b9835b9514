"""warp_perspective (chapter 06's operator on the system's OpenCV) against the same OpenCV call made
directly from C++, and against pip's cv2.warpPerspective.

All three warp a float32 image with the same matrix into an output of the image's size, bilinear with
a zero border:

    ours    torch.ops.workbook_cv.warp_perspective: checks, reads the matrix, allocates the output
    direct  torch.ops.wb_bench_cv.warp_perspective_into (csrc/bench/warp_direct.cpp): cv::warpPerspective
            of the same system OpenCV into an output allocated once; what ours costs beyond it is the
            operator's own overhead
    cv2     pip's OpenCV, another build of the library: its ratio mixes our overhead with the two
            builds' differences

Both C++ calls run in the system OpenCV's thread pool, pip's cv2 in its own; neither follows torch's
thread count, so `--threads` sets all three. On a shared machine the difference of two long calls is
noisy; the operator's own cost per call is also measured on a tiny image, where OpenCV does almost
nothing, and printed as a share of each size's direct call.
"""

from __future__ import annotations

import torch

from workbook.bench.timing import Settings, side_by_side, us

DIRECT_LIBRARY = "wb_bench_warp_direct"
OURS = "torch.ops.workbook_cv.warp_perspective(image, warp, side, side)"
DIRECT = "torch.ops.wb_bench_cv.warp_perspective_into(image, warp, out)"
CV2 = "cv2.warpPerspective(array, matrix, (side, side))"
FIXED_COST_SIDE = 8


def warp_matrix(side: int) -> torch.Tensor:
    """A mild perspective: a small rotation and shear, and a vanishing point far to the right."""
    return torch.tensor(
        [[0.95, 0.08, 0.04 * side], [-0.06, 0.97, 0.03 * side], [1e-4 * 256 / side, 0.0, 1.0]], dtype=torch.float64
    )


def load_direct() -> None:
    """Build csrc/bench/warp_direct.cpp (once, a few seconds) and load its ops into this process."""
    from workbook import build
    from workbook.build import opencv

    build.load(DIRECT_LIBRARY, ["csrc/bench/warp_direct.cpp"], is_python_module=False, **opencv.build_options())


def run(settings: Settings, sides=(256, 512, 1024), channels=(1, 3)) -> list[dict]:
    """With settings.threads given, both OpenCV builds use that many threads too (restored afterwards)."""
    import cv2

    from workbook.ops import warp_perspective

    warp_perspective.load_ops()
    load_direct()
    before = torch.ops.wb_bench_cv.opencv_threads(), cv2.getNumThreads()
    if settings.threads:
        torch.ops.wb_bench_cv.set_opencv_threads(settings.threads)
        cv2.setNumThreads(settings.threads)
    try:
        return _compare(settings, sides, channels, cv2)
    finally:
        torch.ops.wb_bench_cv.set_opencv_threads(before[0])
        cv2.setNumThreads(before[1])


def _compare(settings: Settings, sides, channels, cv2) -> list[dict]:
    threads = {"opencv_threads": torch.ops.wb_bench_cv.opencv_threads(), "cv2_threads": cv2.getNumThreads()}
    print(
        "warp_perspective (ours) against the same cv::warpPerspective called directly from C++ (system OpenCV, "
        f"threads: {threads['opencv_threads']})"
    )
    print(
        f"and pip's cv2.warpPerspective (OpenCV {cv2.__version__}, threads: {threads['cv2_threads']}); "
        "ratio = other / ours, > 1: ours faster"
    )
    # On a tiny image OpenCV's work is negligible: what ours costs beyond the direct call there is the
    # operator's own cost per call, a steadier estimate than the difference of two long calls.
    tiny = _time(FIXED_COST_SIDE, 1, {"ours": OURS, "direct": DIRECT}, settings, cv2)
    fixed = max(0.0, tiny["ours"] - tiny["direct"])
    print(
        f"  the operator's own cost per call (ours - direct on an {FIXED_COST_SIDE}x{FIXED_COST_SIDE} image): {us(fixed).strip()}"
    )
    print(
        f"  {'image':>14} {'ours':>13} {'direct':>13} {'cv2':>13}  {'direct/ours':>11}  {'cv2/ours':>8}"
        f"  {'own cost / direct':>17}"
    )
    rows = []
    for side in sides:
        for channel_count in channels:
            times = _time(side, channel_count, {"ours": OURS, "direct": DIRECT, "cv2": CV2}, settings, cv2)
            ours, direct, theirs = times["ours"], times["direct"], times["cv2"]
            row = {
                "side": side,
                "channels": channel_count,
                "ours_s": ours,
                "direct_s": direct,
                "cv2_s": theirs,
                "direct_ratio": direct / ours,
                "cv2_ratio": theirs / ours,
                "fixed_cost_s": fixed,
                "fixed_cost_share": fixed / direct,
                **threads,
            }
            rows.append(row)
            label = f"{side}x{side}x{channel_count}"
            print(
                f"  {label:>14} {us(ours)} {us(direct)} {us(theirs)}  {row['direct_ratio']:10.2f}x"
                f"  {row['cv2_ratio']:7.2f}x  {100 * row['fixed_cost_share']:16.1f}%"
            )
    return rows


def _time(side: int, channel_count: int, statements: dict[str, str], settings: Settings, cv2) -> dict[str, float]:
    """Median seconds per call of each statement on a side x side image of channel_count channels."""
    shape = (side, side) if channel_count == 1 else (side, side, channel_count)
    image = torch.rand(shape, generator=torch.Generator().manual_seed(side))
    warp = warp_matrix(side)
    env = {
        "torch": torch,
        "cv2": cv2,
        "image": image,
        "warp": warp,
        "side": side,
        "out": torch.empty_like(image),
        "array": image.numpy(),
        "matrix": warp.numpy(),
    }
    times = side_by_side({name: (statement, env) for name, statement in statements.items()}, settings)
    return {name: times[name]["median_s"] for name in statements}
