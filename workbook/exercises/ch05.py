"""Checks for chapter 05, CUDA extensions.

Exercise 5.1 is a kernel written inside a `.cu` source held in a Python string. The check works
on any machine, as far as that machine allows:

* with nvcc, it compiles the source (compile only, `workbook.cuda_check`): a kernel that does not
  compile fails the check with nvcc's first error, on a GPU machine or not;
* an untouched stub (it compiles: the generator puts a host-side TORCH_CHECK where the solution
  goes) is reported as not attempted;
* with a CUDA GPU and a CUDA build of torch, it builds the source into an op library, runs the
  kernel on several shapes and compares with a PyTorch reference;
* without one it is *skipped*, saying that it compiled and what running it needs.
"""
from __future__ import annotations

import hashlib

import torch

from .. import build, cuda_check
from ..checking import NOT_ATTEMPTED, Mistake, Skip, exercise, expect_close

# Flags the exercise's source needs on top of torch's usual ones: a __device__ lambda passed to a
# __global__ function template is an nvcc "extended lambda".
EXERCISE_FLAGS = ["--extended-lambda"]
_STUB_MARK = f'TORCH_CHECK(false, "{NOT_ATTEMPTED}");'


def exercise_namespace(source: str) -> str:
    """The op namespace for this exact source: `wb_ch05_<hash>` (one TORCH_LIBRARY per namespace per process)."""
    return "wb_ch05_" + hashlib.sha256(source.encode()).hexdigest()[:10]


def write_exercise_source(source: str):
    """Write the source, with NAMESPACE replaced, under build/src/ch05/<namespace>/; returns its path."""
    namespace = exercise_namespace(source)
    return build.write_if_changed(f"ch05/{namespace}/divide_by_count.cu", source.replace("NAMESPACE", namespace))


def compile_exercise(source: str) -> cuda_check.CompileResult:
    """Compile-check the exercise's source with nvcc (cached: an unchanged source costs nothing)."""
    return cuda_check.compile_check(write_exercise_source(source), extra_flags=EXERCISE_FLAGS)


_loaded: dict[str, object] = {}


def load_exercise(source: str):
    """Build the source into an op library (needs a CUDA build of torch and nvcc); returns torch.ops.<namespace>."""
    namespace = exercise_namespace(source)
    if namespace not in _loaded:
        path = write_exercise_source(source)
        build.load(namespace, [path], is_python_module=False, extra_cuda_cflags=["-O2", *EXERCISE_FLAGS])
        _loaded[namespace] = getattr(torch.ops, namespace)
    return _loaded[namespace]


def reference_divide_by_count(total: torch.Tensor, count: torch.Tensor, dim: int) -> torch.Tensor:
    """total / count[group] along `dim` where the group's count is above 1; total itself elsewhere."""
    shape = [1] * total.dim()
    shape[dim] = -1
    per_group = count.view(shape)
    return torch.where(per_group > 1, total / per_group.to(total.dtype), total)


def _cases(device):
    """(description, total, count, dim) triples; counts include 0 and 1, which must leave the sum alone."""
    generator = torch.Generator().manual_seed(5)

    def case(shape, dim, dtype=torch.float32):
        total = (torch.randn(shape, generator=generator, dtype=torch.float64) * 10).to(dtype)
        count = torch.randint(0, 5, (shape[dim],), generator=generator)
        return (f"shape {tuple(shape)}, dim={dim}, {str(dtype).replace('torch.', '')}",
                total.to(device), count.to(device), dim)

    return [
        case((7,), 0),
        case((4, 6), 0),
        case((4, 6), 1),
        case((2, 5, 3), 1),
        case((2, 5, 3), 1, torch.float64),
        case((3, 301, 257), 1),  # 232 071 elements: many blocks, and not a multiple of the block size
        case((0, 5), 1),  # empty
    ]


@exercise("5.1 divide_by_count kernel")
def check_divide_by_count(source) -> None:
    """The learner's .cu source (a string) defining NAMESPACE::divide_by_count(total, count, dim)."""
    if not isinstance(source, str) or "NAMESPACE" not in source:
        raise Mistake("pass the exercise's CUDA source: the string whose TORCH_LIBRARY is named NAMESPACE")
    compiled = compile_exercise(source)
    if compiled.status == cuda_check.FAILED:
        raise Mistake(f"the source does not compile. nvcc's first error:\n{compiled.first_error}")
    if _STUB_MARK in source:
        raise NotImplementedError(NOT_ATTEMPTED)
    if compiled.skipped:
        raise Skip(f"{compiled.first_error}; running it also needs a CUDA GPU")
    if not torch.cuda.is_available():
        raise Skip("it compiles with nvcc; running and comparing it needs a CUDA GPU")
    buildable, why = build.cuda_build_status()
    if not buildable:
        raise Skip(f"it compiles, but this machine cannot build CUDA extensions ({why})")
    ops = load_exercise(source)
    for description, total, count, dim in _cases("cuda"):
        got = ops.divide_by_count(total, count, dim)
        torch.cuda.synchronize()  # a kernel fault surfaces here, named after this case
        expect_close(got, reference_divide_by_count(total, count, dim), f"the result for {description}")
