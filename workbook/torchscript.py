"""Chapters 06 and 07: the TorchScript library (CMake), the C++ example program, and their helpers.

    from workbook import torchscript
    library = torchscript.load_ops()             # build csrc/warp_perspective with CMake, load it, and
                                                 # register its Python parts (fake kernels, autograd,
                                                 # the fake TensorStack class) for compile/export
    app = torchscript.example_app()              # build csrc/example_app with CMake
    result = torchscript.run_app(app, "model.pt", (image, warp))

The CMake projects are built by `workbook.build.cmake_build` (also importable from here): configured
once into `build/cmake/<project>`, then rebuilt incrementally by ninja, with ccache. A failed configure
or build raises `workbook.build.BuildError` with the first error and keeps the full log.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from . import BUILD_DIR, CSRC_DIR, REPO_ROOT

# BuildError and cmake_build are imported here for chapters 06-07 and their tests (torchscript.BuildError).
from .build import BuildError, cmake_build, exclusive, run_build_step, strip_repo  # noqa: F401

OPS_SOURCE_DIR = CSRC_DIR / "warp_perspective"
APP_SOURCE_DIR = CSRC_DIR / "example_app"
OPS_SOURCES = ["csrc/warp_perspective/ops.cpp", "csrc/warp_perspective/cpu/warp_perspective_cpu.cpp"]

# The example program's link variants (targets of csrc/example_app/CMakeLists.txt).
APP_VARIANTS = {
    "no_as_needed": "example_app",  # the fix everybody uses: -Wl,--no-as-needed around the library
    "as_needed": "example_app_as_needed",  # the failure: the linker drops the op library
    "call_function": "example_app_call_function",  # the fix: call a function from the library
    "dlopen": "example_app_dlopen",  # the fix: not linked at all, dlopen()ed at run time
}


def ops_library() -> Path:
    """Build the chapter's library (op + custom class) with CMake; return the .so's path."""
    return cmake_build("warp_perspective", OPS_SOURCE_DIR) / "libwarp_perspective.so"


def load_ops() -> Path:
    """Build the library and load it into this process (torch.ops.load_library); return its path.

    Also registers the library's Python parts (`register_python_parts`). Safe to call repeatedly.
    """
    import torch

    library = ops_library()
    torch.ops.load_library(str(library))  # loads a given path once per process
    register_python_parts()
    return library


# ---- Python parts of the library: fake kernels, autograd, a fake TensorStack -------------------
# torch.compile and torch.export trace with fake tensors (shapes, no data), and need each op's fake
# kernel; here in Python, where symbolic sizes (SymInt) take part in arithmetic like ints.

_python_parts_registered = False


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


def register_python_parts() -> None:
    """Register the fake kernels and autograd of workbook_cv::warp_perspective (and its backward) and
    the fake class of workbook_classes::TensorStack; once per process, after the library is loaded."""
    global _python_parts_registered
    if _python_parts_registered:
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
    _python_parts_registered = True


def example_app(variant: str = "no_as_needed") -> Path:
    """Build one link variant of the C++ example program (and the library it links); return its path."""
    if variant not in APP_VARIANTS:
        raise ValueError(f"variant must be one of {sorted(APP_VARIANTS)}, got {variant!r}")
    library = ops_library()
    target = APP_VARIANTS[variant]
    build_dir = cmake_build(
        "example_app",
        APP_SOURCE_DIR,
        options={"WORKBOOK_OPS_LIBRARY": str(library), "WORKBOOK_OPS_INCLUDE_DIR": str(OPS_SOURCE_DIR)},
        targets=[target],
    )
    return build_dir / target


def run_app(app, model, inputs, *, output=None, library=None, check=True) -> subprocess.CompletedProcess:
    """Run the example program on a saved model.

    `inputs` (a tuple of the model's arguments) is written with torch.save; the program reads it with
    torch::jit::pickle_load, runs the model and writes the result with torch::jit::pickle_save to `output`
    (default: next to the model, with suffix .out.pt), which `read_app_output` loads.
    Paths in the program's output are printed relative to the repository.
    """
    import torch

    model = Path(model)
    inputs_path = model.with_suffix(".in.pt")
    output = Path(output) if output else model.with_suffix(".out.pt")
    torch.save(tuple(inputs), inputs_path)
    output.unlink(missing_ok=True)
    command = [str(app), str(model), str(inputs_path), str(output)]
    if library is not None:
        command.append(str(library))
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT)
    result.stdout = strip_repo(result.stdout)
    result.stderr = strip_repo(result.stderr)
    if check and result.returncode != 0:
        raise RuntimeError(f"{Path(app).name} failed (exit code {result.returncode}):\n{result.stderr.strip()}")
    return result


def read_app_output(model, output=None):
    """The result the example program wrote for `model` (see `run_app`)."""
    import torch

    output = Path(output) if output else Path(model).with_suffix(".out.pt")
    # torch::jit::pickle_save writes typed lists (a List[Tensor] as build_tensorlist, ...): allow those
    # builders, which only rebuild lists, in torch.load's safe (weights_only) unpickler.
    from torch.jit import _pickle

    builders = [getattr(_pickle, name) for name in dir(_pickle) if name.startswith(("build_", "restore_type_tag"))]
    with torch.serialization.safe_globals(builders):
        return torch.load(output)


def run_scripted_in_app(module, inputs):
    """Save a scripted module into a fresh folder under build/ (removed afterwards), run it in the example
    program (the usual link variant) on `inputs`; return the program's CompletedProcess and its result, or
    None for the result when the program failed."""
    import tempfile

    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="saved-model-", dir=BUILD_DIR) as folder:
        path = Path(folder) / "model.pt"
        module.save(str(path))
        run = run_app(example_app(), path, inputs, check=False)
        return run, read_app_output(path) if run.returncode == 0 else None


def show_source(path, start: str | None = None, stop: str | None = None) -> None:
    """Print a repository file (path relative to the repository), or its lines from the first one
    containing `start` up to (not including) the next one containing `stop`."""
    lines = (REPO_ROOT / path).read_text().splitlines()
    if start is not None:
        first = next(i for i, line in enumerate(lines) if start in line)
        last = len(lines)
        if stop is not None:
            last = next((i for i, line in enumerate(lines) if i > first and stop in line), len(lines))
        lines = lines[first:last]
    print(f"// {path}" if str(path).endswith((".cpp", ".h")) else f"# {path}")
    print("\n".join(lines).rstrip())


def first_error_line(text: str) -> str:
    """The first line of an error message that says what went wrong (skips blank lines)."""
    return error_summary(text, 1)


def error_summary(text: str, lines: int = 2) -> str:
    """The first `lines` non-blank lines of an error message, stopping before any source excerpt
    or C++ backtrace (which name files and addresses that differ between machines)."""
    kept = []
    for line in str(text).splitlines():
        if line.startswith(("  File ", "Exception raised from", "frame #")) or line.strip() in (":", ""):
            if kept and line.strip() != "":
                break
            continue
        kept.append(line.strip())
        if len(kept) == lines:
            break
    return "\n".join(kept)


def static_assertions(log_path) -> list[str]:
    """The distinct `static assertion failed` messages in a compiler log, in order."""
    import re

    found = []
    for message in re.findall(r"static assertion failed: (.*)", Path(log_path).read_text()):
        if message not in found:
            found.append(message)
    return found


def opencv_compile_flags() -> tuple[list[str], list[str]]:
    """Include folders and libraries for OpenCV's core and imgproc modules (pkg-config, else Debian's paths)."""
    include_dirs = ["/usr/include/opencv4"]
    if shutil.which("pkg-config"):
        found = subprocess.run(["pkg-config", "--cflags-only-I", "opencv4"], capture_output=True, text=True)
        if found.returncode == 0 and found.stdout.strip():
            include_dirs = [flag[2:] for flag in found.stdout.split()]
    return include_dirs, ["opencv_core", "opencv_imgproc"]


def jit_build_ops(name: str = "warp_perspective_jit") -> Path:
    """Build the op (not the class) with torch.utils.cpp_extension.load(is_python_module=False).

    This also loads the library into the calling process, so call it in a process that has not
    loaded another build of the same op (one TORCH_LIBRARY per namespace and process).
    """
    from . import build

    include_dirs, libraries = opencv_compile_flags()
    return Path(
        build.load(
            name,
            OPS_SOURCES,
            is_python_module=False,
            extra_include_paths=include_dirs,
            extra_ldflags=[f"-l{library}" for library in libraries],
        )
    )


_loaded_sources: dict[str, str] = {}


def load_library_source(name: str, source: str, *, opencv: bool = False) -> Path:
    """Write `source` to build/src/<name>.cpp (only if changed), build it as a plain library and load it.

    For the exercises: a library holding TORCH_LIBRARY / TORCH_LIBRARY_FRAGMENT registrations.
    Those run while the library is being loaded, and registering an operator or class a second time
    in one process does not raise an exception Python could catch: the process aborts. So once a
    library is loaded, running this again with the same source does nothing, and with a changed
    source it refuses (restart the kernel) instead of taking the kernel down.
    """
    from . import build

    if name in _loaded_sources:
        if _loaded_sources[name] == source:
            return build_directory_library(name)
        raise RuntimeError(
            f"This Python process already loaded a build of '{name}' with different source code. Its "
            "operators and classes are registered, and registering them again would abort the process. "
            "Restart the kernel (or the Python process), then run the cells again."
        )
    library = Path(load_library(name, build.write_if_changed(f"{name}.cpp", source), opencv=opencv))
    _loaded_sources[name] = source
    return library


def load_library(name: str, path, *, opencv: bool = False) -> str:
    """Build the source `path` as a plain shared library `name` (linked with OpenCV if asked), load it."""
    from . import build

    include_dirs, libraries = opencv_compile_flags() if opencv else ([], [])
    return build.load(
        name,
        [path],
        is_python_module=False,
        extra_include_paths=include_dirs,
        extra_ldflags=[f"-l{library}" for library in libraries],
    )


def build_directory_library(name: str) -> Path:
    from . import build

    return build.build_directory(name) / f"{name}.so"


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
        raise RuntimeError(result.stderr.strip().splitlines()[-1])
    return result.stdout.strip()
