"""csrc/example_app: the C++ program that loads a saved TorchScript model and runs it (chapters 06, 07, 10).

from workbook.ops import example_app
app = example_app.build()                               # build csrc/example_app (and the op library it links)
result = example_app.run(app, "model.pt", (image, warp))
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from workbook import BUILD_DIR, CSRC_DIR, REPO_ROOT
from workbook.build import cmake_build
from workbook.build.errors import strip_repo
from workbook.ops import warp_perspective

APP_SOURCE_DIR = CSRC_DIR / "example_app"


# The example program's link variants (targets of csrc/example_app/CMakeLists.txt).
APP_VARIANTS = {
    "no_as_needed": "example_app",  # the fix everybody uses: -Wl,--no-as-needed around the library
    "as_needed": "example_app_as_needed",  # the failure: the linker drops the op library
    "call_function": "example_app_call_function",  # the fix: call a function from the library
    "dlopen": "example_app_dlopen",  # the fix: not linked at all, dlopen()ed at run time
}


def build(variant: str = "no_as_needed") -> Path:
    """Build one link variant of the C++ example program (and the library it links); return its path."""
    if variant not in APP_VARIANTS:
        raise ValueError(f"variant must be one of {sorted(APP_VARIANTS)}, got {variant!r}")
    library = warp_perspective.ops_library()
    target = APP_VARIANTS[variant]
    build_dir = cmake_build(
        "example_app",
        APP_SOURCE_DIR,
        options={
            "WORKBOOK_OPS_LIBRARY": str(library),
            "WORKBOOK_OPS_INCLUDE_DIR": str(warp_perspective.OPS_SOURCE_DIR),
        },
        targets=[target],
    )
    return build_dir / target


def run(app, model, inputs, *, output=None, library=None, check=True) -> subprocess.CompletedProcess:
    """Run the example program on a saved model.

    `inputs` (a tuple of the model's arguments) is written with torch.save; the program reads it with
    torch::jit::pickle_load, runs the model and writes the result with torch::jit::pickle_save to `output`
    (default: next to the model, with suffix .out.pt), which `read_output` loads.
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


def read_output(model, output=None):
    """The result the example program wrote for `model` (see `run`)."""
    import torch

    output = Path(output) if output else Path(model).with_suffix(".out.pt")
    # torch::jit::pickle_save writes typed lists (a List[Tensor] as build_tensorlist, ...): allow those
    # builders, which only rebuild lists, in torch.load's safe (weights_only) unpickler.
    from torch.jit import _pickle

    builders = [getattr(_pickle, name) for name in dir(_pickle) if name.startswith(("build_", "restore_type_tag"))]
    with torch.serialization.safe_globals(builders):
        return torch.load(output)


def run_scripted(module, inputs):
    """Save a scripted module into a fresh folder under build/ (removed afterwards), run it in the example
    program (the usual link variant) on `inputs`; return the program's CompletedProcess and its result, or
    None for the result when the program failed."""
    import tempfile

    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="saved-model-", dir=BUILD_DIR) as folder:
        path = Path(folder) / "model.pt"
        module.save(str(path))
        completed = run(build(), path, inputs, check=False)
        return completed, read_output(path) if completed.returncode == 0 else None
