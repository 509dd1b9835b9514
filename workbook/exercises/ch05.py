"""Checks for chapter 05, CUDA extensions.

* 5.1 ``check_divide_by_count(source)``: a kernel inside a `.cu` source held in a Python string.
  Its launch is read first (on the current stream, followed by C10_CUDA_KERNEL_LAUNCH_CHECK()); with
  nvcc, the source is compile-checked (`workbook.diagnostics.cuda_check`), so nvcc's own first error is reported on
  any machine. An untouched stub is reported as not attempted. With a CUDA GPU and a CUDA build of torch
  the kernel is built and run; everywhere else it runs in the CPU emulation (`workbook.ops.cuda_emulation`: one
  thread after another), which checks its results and its launches (blocks of a warp multiple, enough of
  them, none idle) but cannot see races. Inputs: drawn shapes of one to four dimensions, up to 300 000
  elements, float32 and float64 (compared to the last bits), not contiguous.
* 5.2 ``check_launch_2d(grid_for, thread_element)``: the grid of a 2-D launch and the (row, column)
  each thread handles, for drawn matrices and several block shapes: every element exactly once, no
  block more than needed, neighbouring `threadIdx.x` on neighbouring columns.
* 5.3 ``check_scatter_max_passes(max_pass, arg_pass)``: the two passes of scatter_max written as
  threads of `workbook.chapters.interleaving`, run under many interleavings: values and argindex must
  come out right under every one of them, and each thread may read only its own element.
"""

from __future__ import annotations

import torch

from workbook import build
from workbook.build import fresh_namespace
from workbook.course.checking import NOT_ATTEMPTED, Mistake, exercise, expect_close
from workbook.diagnostics import cuda_check
from workbook.ops import cuda_emulation

# Flags the exercise's source needs on top of torch's usual ones: a __device__ lambda passed to a
# __global__ function template is an nvcc "extended lambda".
EXERCISE_FLAGS = ["--extended-lambda"]
_STUB_MARK = f'TORCH_CHECK(false, "{NOT_ATTEMPTED}");'


STEM = "wb_ch05_divide"


def write_exercise_source(source: str):
    """Write the source, with NAMESPACE replaced, under build/src/wb_ch05_divide/; returns its path."""
    return fresh_namespace.write(STEM, source, suffix=".cu")[1]


def compile_exercise(source: str) -> cuda_check.CompileResult:
    """Compile-check the exercise's source with nvcc (cached: an unchanged source costs nothing)."""
    return cuda_check.compile_check(write_exercise_source(source), extra_flags=EXERCISE_FLAGS)


def load_exercise(source: str):
    """Build the source into an op library (needs a CUDA build of torch and nvcc); returns torch.ops.<namespace>."""
    return fresh_namespace.ops(STEM, source, suffix=".cu", extra_cuda_cflags=["-O2", *EXERCISE_FLAGS])


def reference_divide_by_count(total: torch.Tensor, count: torch.Tensor, dim: int) -> torch.Tensor:
    """total / count[group] along `dim` where the group's count is above 1; total itself elsewhere."""
    shape = [1] * total.dim()
    shape[dim] = -1
    per_group = count.view(shape)
    return torch.where(per_group > 1, total / per_group.to(total.dtype), total)


def _cases(device):
    """(description, total, count, dim) cases drawn from a seeded generator: shapes of one to four
    dimensions (one of more than 262 144 elements, one empty), float32 and float64, counts including 0
    and 1 (which leave the sum alone), and inputs that are not contiguous (the host code must cope)."""
    generator = torch.Generator().manual_seed(5)

    def draw(low, high):
        return int(torch.randint(low, high, (1,), generator=generator))

    def case(shape, dim, dtype=torch.float32, transposed=False):
        values = torch.randn(shape[::-1] if transposed else shape, generator=generator, dtype=torch.float64) * 10
        total = (values.permute(*reversed(range(len(shape)))) if transposed else values).to(dtype)
        count = torch.randint(0, 5, (2 * shape[dim],), generator=generator)[::2]  # a strided view
        layout = ", total transposed (not contiguous)" if transposed and total.dim() > 1 else ""
        description = f"shape {tuple(shape)}, dim={dim}, {str(dtype).replace('torch.', '')}{layout}"
        return description, total.to(device), count.to(device), dim

    return [
        case((draw(1, 200),), 0),
        case((draw(2, 9), draw(300, 700)), 0),
        case((draw(2, 9), draw(300, 700)), 1, transposed=True),
        case((draw(2, 6), draw(20, 60), draw(3, 9)), 1, torch.float64),
        case((draw(2, 4), draw(2, 5), draw(10, 30), draw(3, 7)), 2, torch.float64, transposed=True),
        case((3, draw(230, 260), 400), 1),  # over 262 144 elements: more blocks than the grid needs to cover
        case((0, draw(3, 9)), 1),  # empty: no launch at all
    ]


def _tolerances(dtype):
    # A division is exact to the last bit in float64; a kernel that computes in float32 is off by ~1e-8.
    return {"rtol": 1e-12, "atol": 0.0} if dtype == torch.float64 else {}


# ---- what the learner's launch looks like in the source, and what it did when it ran -------------


def _without_comments(text: str) -> str:
    import re

    return re.sub(
        r'"(?:\\.|[^"\\])*"|//[^\n]*|/\*.*?\*/', lambda m: m.group(0) if m.group(0)[0] == '"' else " ", text, flags=re.S
    )


def _launch_statements(text: str):
    """(launch text, its configuration arguments, the code after its `;`) for each `k<<<...>>>(...);`."""
    launches, position = [], 0
    while (start := text.find("<<<", position)) >= 0:
        config_end = text.find(">>>", start)
        if config_end < 0:
            return launches
        config, depth, parts = text[start + 3 : config_end], 0, [""]
        for character in config:
            depth += {"(": 1, "<": 1, "[": 1, "{": 1, ")": -1, ">": -1, "]": -1, "}": -1}.get(character, 0)
            if character == "," and depth == 0:
                parts.append("")
            else:
                parts[-1] += character
        cursor = text.find("(", config_end)
        depth = 1
        cursor += 1
        while depth and cursor < len(text):
            depth += {"(": 1, ")": -1}.get(text[cursor], 0)
            cursor += 1
        semicolon = text.find(";", cursor)
        line_start = text.rfind("\n", 0, start) + 1
        launches.append((text[line_start:cursor].strip(), [p.strip() for p in parts], text[semicolon + 1 :]))
        position = max(cursor, config_end + 3)
    return launches


def _check_launch_statements(source: str) -> None:
    """Every launch names the current stream and is followed by C10_CUDA_KERNEL_LAUNCH_CHECK()."""
    launches = _launch_statements(_without_comments(source))
    if not launches:
        raise Mistake(
            "your code launches no kernel: launch the given for_each_element with "
            "for_each_element<<<blocks, threads, 0, stream>>>(n, your_lambda);"
        )
    for text, config, after in launches:
        shown = " ".join(text.split())[:120]
        if len(config) < 4:
            raise Mistake(
                f"`{shown}` runs on the default stream, not on the current one: a caller's work queued on "
                "another stream (torch.cuda.stream(...)) is then not finished when your kernel reads it. "
                "Pass the stream as the 4th launch argument: <<<blocks, threads, 0, stream>>>"
            )
        if not after.lstrip().startswith("C10_CUDA_KERNEL_LAUNCH_CHECK"):
            raise Mistake(
                f"`{shown}` is not followed by `C10_CUDA_KERNEL_LAUNCH_CHECK();`: a launch that fails (no "
                "blocks, too many threads, no code for this GPU) would go unnoticed until some later CUDA call"
            )


MIN_BLOCKS = 1024  # a grid this large (262 144 threads of 256) fills any GPU; fewer leaves it part idle


def _judge_launches(n: int, launches, description: str) -> None:
    """The emulated launch(es) of one call on n elements: blocks of a warp multiple, enough of them, none idle."""
    if n == 0:
        return
    if not launches:
        raise Mistake(f"for {description} ({n} elements) your code launched no kernel")
    for grid, block, checked in launches:
        if block % 32 or not 32 <= block <= 1024:
            raise Mistake(
                f"for {description} your launch used blocks of {block} threads: use 256 (a multiple of the "
                "32 threads of a warp, and at most 1024)"
            )
        needed = -(-n // block)
        if grid > needed:
            raise Mistake(
                f"for {description} ({n} elements) your launch started {grid} blocks of {block} threads, where "
                f"ceil(n / {block}) = {needed} blocks give every element its thread: the extra blocks only "
                "start threads with nothing to do"
            )
        if grid < min(needed, MIN_BLOCKS):
            per_thread = -(-n // (grid * block))
            raise Mistake(
                f"for {description} ({n} elements) your launch started only {grid} block(s) of {block} threads, "
                f"so each thread works through up to {per_thread} elements one after another while a GPU could "
                f"run them all at once: launch ceil(n / {block}) = {needed} blocks (a cap of at least "
                f"{MIN_BLOCKS} blocks, with the grid-stride loop doing the rest, is fine)"
            )
        if not checked:
            raise Mistake(f"for {description} your launch was not followed by C10_CUDA_KERNEL_LAUNCH_CHECK()")


@exercise("5.1 divide_by_count kernel")
def check_divide_by_count(source) -> None:
    """The learner's .cu source (a string) defining NAMESPACE::divide_by_count(total, count, dim)."""
    if not isinstance(source, str) or "NAMESPACE" not in source:
        raise Mistake("pass the exercise's CUDA source: the string whose TORCH_LIBRARY is named NAMESPACE")
    if _STUB_MARK in source:
        raise NotImplementedError(NOT_ATTEMPTED)
    _check_launch_statements(source)
    compiled = compile_exercise(source)  # skipped where there is no nvcc
    if compiled.status == cuda_check.FAILED:
        raise Mistake(f"the source does not compile. nvcc's first error:\n{compiled.first_error}")
    device = "cuda" if torch.cuda.is_available() and build.cuda_build_status()[0] else "cpu"
    ops = load_exercise(source) if device == "cuda" else load_emulated_exercise(source)
    if device == "cpu":
        cuda_emulation.launches(ops)  # forget launches an earlier call left
    for description, total, count, dim in _cases(device):
        try:
            got = ops.divide_by_count(total, count, dim)
            if device == "cuda":
                torch.cuda.synchronize()  # a kernel fault surfaces here, named after this case
        except RuntimeError as error:
            raise Mistake(f"for {description} your kernel raised: {str(error).strip().splitlines()[0]}") from None
        if device == "cpu":  # the emulation records each launch; a GPU does not tell
            _judge_launches(total.numel(), cuda_emulation.launches(ops), description)
        expected = reference_divide_by_count(total, count, dim)
        try:
            expect_close(got, expected, f"the result for {description}", **_tolerances(total.dtype))
        except Mistake as mistake:
            if total.dtype != torch.float64 or got.dtype != torch.float64:
                raise
            raise Mistake(
                f"{mistake}. float64 results are compared to 1e-12: values that agree in the digits shown but "
                "not beyond come from arithmetic done in float32; compute in scalar_t"
            ) from None


EMULATION_STEM = "wb_ch05_emu"


def load_emulated_exercise(source: str):
    """The source built for the CPU emulation (every launch runs its threads one after another)."""
    try:
        return cuda_emulation.load_source(EMULATION_STEM, source)
    except build.BuildError as error:
        raise Mistake(f"the source does not compile as C++ for the CPU emulation. {error}") from None


# ---- 5.2: a 2-D launch ----------------------------------------------------------------------------

BLOCK_2D = (32, 8)  # (x, y): 32 threads along a row, 8 rows: the block the exercise's kernel uses
# The check launches other block shapes too (square, wider, taller), so that only arithmetic that reads
# `block` covers them all.
BLOCKS_2D = [(32, 8), (16, 16), (64, 4), (8, 32), (128, 2), (32, 1)]


def _shapes_2d():
    """(rows, cols) drawn from a seeded generator, beyond the matrices the notebook shows, plus edge cases."""
    generator = torch.Generator().manual_seed(52)
    drawn = torch.randint(1, 300, (6, 2), generator=generator).tolist()
    return [(1, 1), (8, 32), *[tuple(shape) for shape in drawn], (256, 3)]


@exercise("5.2 a 2-D launch over a matrix")
def check_launch_2d(grid_for, thread_element) -> None:
    """`grid_for(rows, cols, block)` -> (grid_x, grid_y); `thread_element(block_idx, thread_idx, block)`
    -> (row, col); blocks and indices are (x, y) pairs, x along the columns."""
    for number, (rows, cols) in enumerate(_shapes_2d()):
        block = BLOCKS_2D[number % len(BLOCKS_2D)]
        block_x, block_y = block
        shape = f"a {rows} x {cols} matrix with blocks of {block_x} x {block_y} threads"
        grid = grid_for(rows, cols, block)
        if not (isinstance(grid, tuple) and len(grid) == 2 and all(isinstance(g, int) for g in grid)):
            raise Mistake(f"grid_for should return a pair of ints (grid_x, grid_y), got {grid!r}")
        covered = {}
        for bx in range(grid[0]):
            for by in range(grid[1]):
                for tx in range(block_x):
                    for ty in range(block_y):
                        row, col = thread_element((bx, by), (tx, ty), block)
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
        first, neighbour = thread_element((0, 0), (0, 0), block), thread_element((0, 0), (1, 0), block)
        if (neighbour[0], neighbour[1] - first[1]) != (first[0], 1):
            raise Mistake(
                f"with blocks of {block_x} x {block_y}, threads (0, 0) and (1, 0) of a block handle {first} and "
                f"{neighbour}: threads next to each other in x (one warp) should read neighbouring columns of "
                "one row, so that their loads coalesce"
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
    for size, groups in [(12, 4), (20, 3), (31, 6)]:
        values = torch.randint(-4, 5, (size,), generator=generator).float().tolist()  # many ties
        yield values, torch.randint(0, groups, (size,), generator=generator).tolist(), groups + 1


def _reference_max(src, index, groups):
    out, arg = [float("-inf")] * groups, [len(src)] * groups
    for e, (value, k) in enumerate(zip(src, index)):
        if value > out[k]:
            out[k], arg[k] = value, e
    return out, arg


class _Watched:
    """A list that threads read directly (src, index, and out in the second pass), recording which thread
    read which position: a kernel's thread handles its own element and meets the others only through
    memory operations."""

    running: list = [None]  # the thread whose code runs now (None: the scheduler)

    def __init__(self, name, values):
        self.name, self._values, self.reads = name, values, {}

    @property
    def values(self):
        """The whole list: a thread that takes it has read every position."""
        self[:]
        return self._values

    def __len__(self):
        return len(self._values)

    def __getitem__(self, position):
        thread = self.running[0]
        if thread is not None:
            taken = range(len(self._values))[position] if isinstance(position, slice) else [position]
            self.reads.setdefault(thread, set()).update(taken)
        return self._values[position]

    def __setitem__(self, position, value):
        self._values[position] = value

    def __iter__(self):
        return (self[i] for i in range(len(self._values)))


class _ThroughOperationsOnly(_Watched):
    """Memory a pass updates: its threads may reach it only through the operations they yield (load, store,
    atomic_max, ...), which the scheduler performs. A thread that reads or writes it directly would do so
    between two of its operations, where no other thread can come in: a read-modify-write that looks
    atomic here and is a race on a GPU."""

    def _refuse(self, what, position):
        thread = self.running[0]
        self.running[0] = None  # the check's own reads below are not the thread's
        raise Mistake(
            f"thread {thread} {what} {self.name}[{position}] directly: in this pass, {self.name} is memory that "
            "every thread updates, and a thread reaches it only through the operations it yields (load, store, "
            "atomic_max, atomic_min), which the scheduler interleaves with the other threads'. Code between two "
            "yields runs uninterrupted here, but on a GPU other threads run in between: a plain "
            "read-modify-write there is a race"
        )

    def __getitem__(self, position):
        if self.running[0] is not None:
            self._refuse("read", position)
        return self._values[position]

    def __setitem__(self, position, value):
        if self.running[0] is not None:
            self._refuse("wrote", position)
        self._values[position] = value


def _watched_thread(number, thread):
    """`thread` (a generator) with _Watched.running set to `number` while its own code runs."""
    sent = None
    while True:
        _Watched.running[0] = number
        try:
            operation = thread.send(sent)
        except StopIteration:
            return
        finally:
            _Watched.running[0] = None
        sent = yield operation


def _check_own_reads(watched, allowed, case):
    """Each thread e read `watched` only at the positions allowed(e)."""
    for thread, positions in sorted(watched.reads.items()):
        extra = sorted(positions - allowed(thread))
        if extra:
            shown = ", ".join(f"{watched.name}[{p}]" for p in extra[:4]) + (", ..." if len(extra) > 4 else "")
            raise Mistake(
                f"thread {thread} read {shown} for {case}: thread e handles its own element (src[e], "
                "index[e]) and meets the other threads only through memory operations on shared memory. A "
                "thread that scans the input does the work of all n threads (n times the work of the kernel), "
                "and the atomics are what the exercise is about"
            )


@exercise("5.3 scatter_max's two passes, race-free")
def check_scatter_max_passes(max_pass, arg_pass) -> None:
    """`max_pass(e, src, index, out)` and `arg_pass(e, src, index, out, arg)`: generator functions
    (threads of workbook.chapters.interleaving), run for every element e under many schedules."""
    import inspect

    from workbook.chapters import interleaving

    for function, arguments in [(max_pass, (0, [1.0], [0], [0.0])), (arg_pass, (0, [1.0], [0], [1.0], [1]))]:
        if not inspect.isgeneratorfunction(function):
            function(*arguments)  # an untouched stub raises NotImplementedError here
            raise Mistake(
                f"{function.__name__} should be a thread of workbook.chapters.interleaving: a function that "
                "`yield`s each operation on shared memory (load, store, atomic_max, ...)"
            )
    for src_values, index_values, groups in _scatter_max_cases():
        expected_out, expected_arg = _reference_max(src_values, index_values, groups)
        for schedule in interleaving.SCHEDULES:
            case = f"src={src_values}, index={index_values} under the schedule '{schedule}'"
            src, index = _Watched("src", list(src_values)), _Watched("index", list(index_values))
            out, arg = [float("-inf")] * groups, [len(src_values)] * groups
            updated_out = _ThroughOperationsOnly("out", out)
            threads = [_watched_thread(e, max_pass(e, src, index, updated_out)) for e in range(len(src_values))]
            interleaving.run(threads, schedule)
            # A kernel boundary: every thread of the first pass has finished before the second starts.
            read_out, updated_arg = _Watched("out", out), _ThroughOperationsOnly("arg", arg)
            threads = [
                _watched_thread(e, arg_pass(e, src, index, read_out, updated_arg)) for e in range(len(src_values))
            ]
            interleaving.run(threads, schedule)
            _check_own_reads(src, lambda e: {e}, case)
            _check_own_reads(index, lambda e: {e}, case)
            _check_own_reads(read_out, lambda e: {index_values[e]}, case)
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
