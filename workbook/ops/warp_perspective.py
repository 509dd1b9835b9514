"""csrc/warp_perspective: chapter 06's op library (workbook_cv::warp_perspective, built with CMake or
setuptools or torch's JIT) and chapter 07's class (workbook_classes::TensorStack), with their Python parts.

    from workbook.ops import warp_perspective
    library = warp_perspective.load_ops()   # build with CMake, load it, and register its Python kernels
                                            # (fake kernels, autograd, the fake TensorStack class)

The CMake project is built by `workbook.build.cmake_build`: configured once into `build/cmake/<project>`,
then rebuilt incrementally by ninja, with ccache. A failed configure or build raises
`workbook.build.BuildError` with the first error and keeps the full log.
"""

from __future__ import annotations

import sys
from pathlib import Path

from workbook import BUILD_DIR, CSRC_DIR
from workbook.build import cmake_build, exclusive, opencv, run_build_step
from workbook.build import load as build_load

OPS_SOURCE_DIR = CSRC_DIR / "warp_perspective"
OPS_SOURCES = ["csrc/warp_perspective/ops.cpp", "csrc/warp_perspective/cpu/warp_perspective_cpu.cpp"]


def ops_library() -> Path:
    """Build the chapter's library (op + custom class) with CMake; return the .so's path."""
    return cmake_build("warp_perspective", OPS_SOURCE_DIR) / "libwarp_perspective.so"


def load_ops() -> Path:
    """Build the library and load it into this process (torch.ops.load_library); return its path.

    Also registers the library's Python kernels (`register_python_kernels`). Safe to call repeatedly.
    """
    import torch

    library = ops_library()
    torch.ops.load_library(str(library))  # loads a given path once per process
    register_python_kernels()
    return library


# ---- Python kernels of the library: fake kernels, autograd, a fake TensorStack -------------------
# torch.compile and torch.export trace with fake tensors (shapes, no data), and need each op's fake
# kernel; here in Python, where symbolic sizes (SymInt) take part in arithmetic like ints.

_python_kernels_registered = False


def _fake_warp_perspective(image, warp, height, width):
    import torch

    torch._check(image.dim() in (2, 3), lambda: f"warp_perspective: image must be 2-D or 3-D, got {image.dim()}-D")
    torch._check(warp.dim() == 2, lambda: f"warp_perspective: warp must be a 3 x 3 matrix, got {tuple(warp.shape)}")
    # A CPU warp may go with a meta image (shapes only); a meta warp with a real image would give a
    # result of uninitialised memory.
    torch._check(
        warp.device == image.device or warp.device.type == "cpu",
        lambda: f"warp_perspective: warp is on {warp.device} but image is on {image.device}",
    )
    return image.new_empty((height, width, *image.shape[2:]))


def _fake_warp_perspective_backward(grad, warp, image_height, image_width):
    return grad.new_empty((image_height, image_width, *grad.shape[2:]))


def _warp_setup_context(ctx, inputs, output):
    image, warp, _, _ = inputs
    ctx.image_size = (image.shape[0], image.shape[1])
    ctx.save_for_backward(warp)


def _warp_backward(ctx, grad):
    import torch

    if ctx.needs_input_grad[1]:
        raise RuntimeError(
            "workbook_cv::warp_perspective: no gradient with respect to warp (only image is differentiable); "
            "pass warp.detach() if you need the image's gradient only"
        )
    (warp,) = ctx.saved_tensors
    grad_image = None
    if ctx.needs_input_grad[0]:
        grad_image = torch.ops.workbook_cv.warp_perspective_backward(grad, warp, *ctx.image_size)
    return grad_image, None, None, None


def _warp_backward_backward(ctx, grad):
    raise RuntimeError(
        "workbook_cv::warp_perspective_backward is not differentiable (no second derivative of warp_perspective)"
    )


def _no_context(ctx, inputs, output):
    pass


class FakeTensorStack:
    """What torch.export traces in place of a workbook_classes::TensorStack: the same methods, on a
    Python list of (fake) tensors. Built from the real stack's __obj_flatten__ pairs: ("items", [...])."""

    def __init__(self, items):
        self._items = list(items)

    @classmethod
    def __obj_unflatten__(cls, flattened):
        return cls(**dict(flattened))

    def push(self, item):
        self._items.append(item)

    def pop(self):
        return self._items.pop()

    def top(self):
        return self._items[-1]

    def size(self):
        return len(self._items)

    def empty(self):
        return not self._items

    def clone(self):
        return FakeTensorStack(self._items)

    def items(self):
        return list(self._items)


def register_python_kernels() -> None:
    """Register the fake kernels and autograd of workbook_cv::warp_perspective (and its backward) and
    the fake class of workbook_classes::TensorStack; once per process, after the library is loaded."""
    global _python_kernels_registered
    if _python_kernels_registered:
        return
    import torch

    torch.library.register_fake("workbook_cv::warp_perspective", _fake_warp_perspective)
    torch.library.register_fake("workbook_cv::warp_perspective_backward", _fake_warp_perspective_backward)
    torch.library.register_autograd("workbook_cv::warp_perspective", _warp_backward, setup_context=_warp_setup_context)
    # Registered so that asking for a second derivative raises instead of silently giving None.
    torch.library.register_autograd(
        "workbook_cv::warp_perspective_backward", _warp_backward_backward, setup_context=_no_context
    )
    torch._library.register_fake_class("workbook_classes::TensorStack")(FakeTensorStack)
    _python_kernels_registered = True


def jit_build_ops(name: str = "warp_perspective_jit") -> Path:
    """Build the op (not the class) with torch.utils.cpp_extension.load(is_python_module=False).

    This also loads the library into the calling process, so call it in a process that has not
    loaded another build of the same op (one TORCH_LIBRARY per namespace and process).
    """
    return Path(build_load(name, OPS_SOURCES, is_python_module=False, **opencv.build_options()))


SETUPTOOLS_BUILD_DIR = BUILD_DIR / "setuptools" / "warp_perspective"


def setuptools_build_ops() -> Path:
    """Build the op with csrc/warp_perspective/setup.py into build/setuptools/ (nothing installed)."""
    command = [
        sys.executable,
        "setup.py",
        "--quiet",
        "build_ext",
        "--build-lib",
        str(SETUPTOOLS_BUILD_DIR / "lib"),
        "--build-temp",
        str(SETUPTOOLS_BUILD_DIR / "temp"),
    ]
    with exclusive("setuptools_warp_perspective"):
        run_build_step(
            "setuptools_warp_perspective", "build", command, cwd=OPS_SOURCE_DIR, log_dir=SETUPTOOLS_BUILD_DIR
        )
    (library,) = (SETUPTOOLS_BUILD_DIR / "lib").glob("workbook_warp_perspective*.so")
    return library
