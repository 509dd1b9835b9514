"""Checks for chapter 05, CUDA extensions.

* 5.1 ``check_divide_by_count(source)``: a kernel inside a `.cu` source held in a Python string.
  With nvcc, the source is compile-checked first (`workbook.cuda_check`), so nvcc's own first error
  is reported on any machine. An untouched stub is reported as not attempted. With a CUDA GPU and a
  CUDA build of torch the kernel is built and run; everywhere else it runs in the CPU emulation
  (`workbook.cuda_emulation`: one thread after another), which checks its results but cannot see races.
* 5.2 ``check_launch_2d(grid_for, thread_element)``: the grid of a 2-D launch and the (row, column)
  each thread handles: every element exactly once, no block more than needed, neighbouring
  `threadIdx.x` on neighbouring columns.
* 5.3 ``check_scatter_max_passes(max_pass, arg_pass)``: the two passes of scatter_max written as
  threads of `workbook.interleaving`, run under many interleavings: values and argindex must
  come out right under every one of them.
"""

from __future__ import annotations

import hashlib

import torch

from .. import build, cuda_check, cuda_emulation
from ..checking import NOT_ATTEMPTED, Mistake, exercise, expect_close

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
        return (
            f"shape {tuple(shape)}, dim={dim}, {str(dtype).replace('torch.', '')}",
            total.to(device),
            count.to(device),
            dim,
        )

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
    compiled = compile_exercise(source)  # skipped where there is no nvcc
    if compiled.status == cuda_check.FAILED:
        raise Mistake(f"the source does not compile. nvcc's first error:\n{compiled.first_error}")
    if _STUB_MARK in source:
        raise NotImplementedError(NOT_ATTEMPTED)
    device = "cuda" if torch.cuda.is_available() and build.cuda_build_status()[0] else "cpu"
    ops = load_exercise(source) if device == "cuda" else load_emulated_exercise(source)
    for description, total, count, dim in _cases(device):
        got = ops.divide_by_count(total, count, dim)
        if device == "cuda":
            torch.cuda.synchronize()  # a kernel fault surfaces here, named after this case
        expect_close(got, reference_divide_by_count(total, count, dim), f"the result for {description}")


EMULATION_STEM = "wb_ch05_emu"


def load_emulated_exercise(source: str):
    """The source built for the CPU emulation (every launch runs its threads one after another)."""
    try:
        return cuda_emulation.load_source(EMULATION_STEM, source)
    except build.BuildError as error:
        raise Mistake(f"the source does not compile as C++ for the CPU emulation. {error}") from None


# ---- 5.2: a 2-D launch ----------------------------------------------------------------------------

BLOCK_2D = (32, 8)  # (x, y): 32 threads along a row, 8 rows
_SHAPES_2D = [(1, 1), (8, 32), (9, 33), (100, 70), (3, 500), (257, 5)]


@exercise("5.2 a 2-D launch over a matrix")
def check_launch_2d(grid_for, thread_element) -> None:
    """`grid_for(rows, cols, block)` -> (grid_x, grid_y); `thread_element(block_idx, thread_idx, block)`
    -> (row, col); blocks and indices are (x, y) pairs, x along the columns."""
    block_x, block_y = BLOCK_2D
    for rows, cols in _SHAPES_2D:
        shape = f"a {rows} x {cols} matrix with blocks of {block_x} x {block_y} threads"
        grid = grid_for(rows, cols, BLOCK_2D)
        if not (isinstance(grid, tuple) and len(grid) == 2 and all(isinstance(g, int) for g in grid)):
            raise Mistake(f"grid_for should return a pair of ints (grid_x, grid_y), got {grid!r}")
        covered = {}
        for bx in range(grid[0]):
            for by in range(grid[1]):
                for tx in range(block_x):
                    for ty in range(block_y):
                        row, col = thread_element((bx, by), (tx, ty), BLOCK_2D)
                        if 0 <= row < rows and 0 <= col < cols:
                            covered.setdefault((row, col), []).append(((bx, by), (tx, ty)))
        missing = [(r, c) for r in range(rows) for c in range(cols) if (r, c) not in covered]
        if missing:
            raise Mistake(
                f"for {shape}, grid {grid}: no thread handles element {missing[0]} "
                f"({len(missing)} of {rows * cols} elements are left out)"
            )
        twice = next(((element, threads) for element, threads in covered.items() if len(threads) > 1), None)
        if twice:
            raise Mistake(
                f"for {shape}: element {twice[0]} is handled by more than one thread (block, thread) = {twice[1][:2]}"
            )
        first, neighbour = thread_element((0, 0), (0, 0), BLOCK_2D), thread_element((0, 0), (1, 0), BLOCK_2D)
        if (neighbour[0], neighbour[1] - first[1]) != (first[0], 1):
            raise Mistake(
                f"threads (0, 0) and (1, 0) of a block handle {first} and {neighbour}: threads next to "
                "each other in x (one warp) should read neighbouring columns of one row, so that "
                "their loads coalesce"
            )
        needed = (-(-cols // block_x), -(-rows // block_y))
        if grid != needed:
            raise Mistake(
                f"for {shape}: grid {grid} covers every element, but {needed} blocks would do: "
                "the extra blocks only start threads that have nothing to do"
            )


# ---- 5.3: atomics, under every interleaving --------------------------------------------------------


def _scatter_max_cases():
    generator = torch.Generator().manual_seed(53)
    yield [3.0, 7.0, 7.0, 1.0, 5.0, 7.0], [0, 0, 0, 1, 1, 0], 3  # ties, and an empty group
    for size, groups in [(12, 4), (20, 3)]:
        values = torch.randint(-4, 5, (size,), generator=generator).float().tolist()  # many ties
        yield values, torch.randint(0, groups, (size,), generator=generator).tolist(), groups + 1


def _reference_max(src, index, groups):
    out, arg = [float("-inf")] * groups, [len(src)] * groups
    for e, (value, k) in enumerate(zip(src, index)):
        if value > out[k]:
            out[k], arg[k] = value, e
    return out, arg


@exercise("5.3 scatter_max's two passes, race-free")
def check_scatter_max_passes(max_pass, arg_pass) -> None:
    """`max_pass(e, src, index, out)` and `arg_pass(e, src, index, out, arg)`: generator functions
    (threads of workbook.interleaving), run for every element e under many schedules."""
    import inspect

    from .. import interleaving

    for function, arguments in [(max_pass, (0, [1.0], [0], [0.0])), (arg_pass, (0, [1.0], [0], [1.0], [1]))]:
        if not inspect.isgeneratorfunction(function):
            function(*arguments)  # an untouched stub raises NotImplementedError here
            raise Mistake(
                f"{function.__name__} should be a thread of workbook.interleaving: a function that "
                "`yield`s each operation on shared memory (load, store, atomic_max, ...)"
            )
    for src, index, groups in _scatter_max_cases():
        expected_out, expected_arg = _reference_max(src, index, groups)
        for schedule in interleaving.SCHEDULES:
            out, arg = [float("-inf")] * groups, [len(src)] * groups
            interleaving.run([max_pass(e, src, index, out) for e in range(len(src))], schedule)
            # A kernel boundary: every thread of the first pass has finished before the second starts.
            interleaving.run([arg_pass(e, src, index, out, arg) for e in range(len(src))], schedule)
            case = f"src={src}, index={index} under the schedule '{schedule}'"
            if out != expected_out:
                raise Mistake(
                    f"the values are {out}, expected {expected_out}, for {case}: a load followed by "
                    "a store lets another thread's write in between; atomic_max does both at once"
                )
            if arg != expected_arg:
                raise Mistake(
                    f"the argindex is {arg}, expected {expected_arg}, for {case}: the position of "
                    "the first element equal to its group's maximum, whatever order threads run in"
                )
