"""Chapter 10, the error gallery: classic failures reproduced where they cannot hurt.

    from workbook.chapters import troubleshooting
    result = troubleshooting.run_python("import torch; ...", env=...)   # a child process, sanitised output
    print(result.error)                                         # its last error line(s)
    folder = troubleshooting.sandbox_copy("wb_setup_check")             # a throwaway copy of a finished build

Everything a failure needs (a lock file, a PATH without ninja, a second copy of a library) is made
under build/ch10/, never in the learner's environment or in the build folders the chapters share,
and everything that can crash or hang runs in a child process with a timeout.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from workbook import BUILD_DIR, REPO_ROOT
from workbook.build import EXTENSIONS_DIR, errors, fresh_namespace

SANDBOX = BUILD_DIR / "ch10"

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,16}")


@dataclass(frozen=True)
class ChildResult:
    returncode: int | None  # None: killed after the timeout
    stdout: str
    stderr: str

    @property
    def error(self) -> str:
        """What the child died of, in a line or two: the exception that ended it, or what a C++
        abort printed before its backtrace, or that it hung."""
        if self.returncode is None:
            return "(no output: still waiting when the timeout killed it)"
        return errors.last_exception(self.stderr) or errors.error_summary(self.stderr, 2)


def sanitise(text: str) -> str:
    """Text without this machine's paths and memory addresses."""
    replacements = [
        (str(Path(sysconfig.get_paths()["purelib"])) + os.sep, "site-packages/"),
        (str(REPO_ROOT) + os.sep, ""),
        (str(Path(sys.executable).parent) + os.sep, ""),
    ]
    for absolute, relative in replacements:
        text = text.replace(absolute, relative)
    return _ADDRESS.sub("0x...", text)


def run_python(
    code: str, *, env: dict | None = None, timeout: float = 120, interrupt_after: float | None = None
) -> ChildResult:
    """Run `code` in a new Python process (this venv's interpreter) from the repository root.

    With `interrupt_after`, the child gets SIGINT (what Ctrl-C sends) that many seconds after it first prints a
    line; its KeyboardInterrupt traceback then says where it was. (SIGINT raises KeyboardInterrupt in the child
    even where the parent ignores it.)"""
    if interrupt_after is None:
        try:
            done = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO_ROOT
            )
        except subprocess.TimeoutExpired:
            return ChildResult(None, "", "")
        return ChildResult(done.returncode, sanitise(done.stdout), sanitise(done.stderr))
    prologue = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    child = subprocess.Popen(
        [sys.executable, "-c", prologue + code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
    )
    with selectors.DefaultSelector() as selector:
        selector.register(child.stdout, selectors.EVENT_READ)
        first_line = child.stdout.readline() if selector.select(timeout) else ""
    if first_line:
        time.sleep(interrupt_after)
        child.send_signal(signal.SIGINT)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return ChildResult(None, "", "")
    return ChildResult(child.returncode, sanitise(first_line + stdout), sanitise(stderr))


def sandbox_copy(extension: str) -> Path:
    """A fresh copy of a finished build folder (build/torch_extensions/<extension>) under build/ch10/."""
    target = SANDBOX / f"{extension}_copy"
    shutil.rmtree(target, ignore_errors=True)
    # Copied with their times, so ninja in the copy sees nothing out of date.
    shutil.copytree(EXTENSIONS_DIR / extension, target, ignore=shutil.ignore_patterns("lock"))
    return target


def path_without_ninja() -> str:
    """A PATH value with every program of this PATH except ninja: one folder of links under build/ch10/."""
    folder = SANDBOX / "path_without_ninja"
    folder.mkdir(parents=True, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or Path(directory).resolve() == Path(sys.executable).parent.resolve():
            continue  # the venv's bin/, where pip's ninja lives
        for program in sorted(Path(directory).glob("*")) if Path(directory).is_dir() else []:
            link = folder / program.name
            if program.name != "ninja" and not link.is_symlink() and os.access(program, os.X_OK):
                link.symlink_to(program)
    return str(folder)


# ---- fresh custom ops for the exercises: one new namespace per call, so a cell can be rerun ----------

_libraries: list = []  # a torch.library.Library unregisters its ops when it is garbage-collected


def new_scale_rows():
    """`wb_ch10_<n>::scale_rows(Tensor x, Tensor weight) -> Tensor`: row i of x times weight[i].

    Its CPU kernel computes in NumPy, as opaque to autograd as a C++ kernel, and it has no autograd
    registration: on inputs that require grad it warns and leaves their gradients None.
    """
    import torch

    namespace = fresh_namespace.numbered("wb_ch10")
    library = torch.library.Library(namespace, "DEF")
    library.define("scale_rows(Tensor x, Tensor weight) -> Tensor")

    def kernel(x, weight):
        if x.dim() != 2 or weight.shape != (x.shape[0],):
            raise ValueError(
                f"scale_rows: weight must have one entry per row of x ({x.shape[0]}), got shape {tuple(weight.shape)}"
            )
        return torch.from_numpy(x.detach().numpy() * weight.detach().numpy()[:, None])

    library.impl("scale_rows", kernel, "CPU")
    _libraries.append(library)
    return getattr(torch.ops, namespace).scale_rows.default


def new_pairwise_distance():
    """`wb_ch10_<n>::pairwise_distance(Tensor a, Tensor b) -> Tensor`: the (n, m) Euclidean distances
    between the rows of a (n, d) and b (m, d) (of one dtype, which the result has), computed in NumPy
    into a new contiguous tensor; no fake kernel yet."""
    import numpy as np
    import torch

    name = f"{fresh_namespace.numbered('wb_ch10')}::pairwise_distance"

    @torch.library.custom_op(name, mutates_args=(), schema="(Tensor a, Tensor b) -> Tensor")
    def pairwise_distance(a, b):
        if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
            raise ValueError(
                f"pairwise_distance: a and b must be 2-D with the same number of columns, got "
                f"{tuple(a.shape)} and {tuple(b.shape)}"
            )
        if a.dtype != b.dtype:
            raise ValueError(f"pairwise_distance: a and b must have the same dtype, got {a.dtype} and {b.dtype}")
        a_np, b_np = a.detach().numpy(), b.detach().numpy()
        return torch.from_numpy(np.sqrt(((a_np[:, None, :] - b_np[None, :, :]) ** 2).sum(-1)))

    return pairwise_distance
