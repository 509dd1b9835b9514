"""Chapter 05's exercise checks pass on the solutions, say "not attempted" on the stubs, and reject a catalogue
of plausible wrong and cheating answers (WRONG_ANSWERS), each with a message that says what is wrong; the
interleaving model itself behaves as documented.

5.1's wrong answers are variants of the solution's CUDA source, run through the real check in the CPU
emulation; the ones the check builds are built together, as one library (build_variants_together). nvcc's
compile check is left out for them (they all compile; each would cost nvcc about a minute, and
tests/test_cuda_emulated.py runs the check with nvcc on the solution).
"""

import contextlib
import functools
from unittest import mock

import pytest
import torch
import wrong_answers
from cuda_device import divide_by_count_solution
from wrong_answers import WrongAnswer

from workbook import build
from workbook.chapters import interleaving
from workbook.chapters.interleaving import atomic_add, atomic_max, atomic_min, load, store
from workbook.course import checking
from workbook.diagnostics import cuda_check
from workbook.exercises import ch05
from workbook.ops import cuda_emulation


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


def status(outcome):
    return outcome.status, outcome.explanation


# ---- 5.1 divide_by_count: variants of the solution's source, in the CPU emulation -------------------


@contextlib.contextmanager
def no_nvcc():
    skipped = cuda_check.CompileResult("exercise", cuda_check.SKIPPED, "left out by the test")
    with mock.patch.object(ch05, "compile_exercise", lambda source: skipped):
        yield


_VARIANTS = []  # (old, new) of every variant below


def divide_by_count_variant(old, new):
    """check_divide_by_count on the solution with `old` replaced by `new` (nvcc left out)."""
    _VARIANTS.append((old, new))

    def run():
        source = divide_by_count_solution()
        assert old in source, old
        build_variants_together()
        with no_nvcc():
            return ch05.check_divide_by_count(source.replace(old, new))

    return run


@functools.cache
def build_variants_together():
    """Build the variants the check builds (those whose launch it accepts on reading) as one library for the
    CPU emulation, one compile instead of one each; the check then finds its source loaded."""
    if torch.cuda.is_available() and build.cuda_build_status()[0]:
        return  # with a GPU the check builds each variant with nvcc and runs it there
    solution, built = divide_by_count_solution(), []
    for old, new in _VARIANTS:
        try:
            ch05._check_launch_statements(solution.replace(old, new))
        except checking.Mistake:
            continue
        built.append(solution.replace(old, new))
    cuda_emulation.load_sources(ch05.EMULATION_STEM, built)


LAUNCH = "for_each_element<<<blocks, threads, 0, stream>>>(n, divide);"
CHECK = "    C10_CUDA_KERNEL_LAUNCH_CHECK();\n"


# ---- 5.2 a 2-D launch -------------------------------------------------------------------------------


def grid_for(rows, cols, block):
    return -(-cols // block[0]), -(-rows // block[1])


def thread_element(block_idx, thread_idx, block):
    return block_idx[1] * block[1] + thread_idx[1], block_idx[0] * block[0] + thread_idx[0]


def test_launch_2d_passes_on_the_solution():
    assert ch05.check_launch_2d(grid_for, thread_element).passed


def test_launch_2d_stub_is_not_attempted():
    assert ch05.check_launch_2d(stub, stub).status == checking.NOT_ATTEMPTED


def grid_for_32_by_8(rows, cols, block):
    return -(-cols // 32), -(-rows // 8)


def thread_element_32_by_8(block_idx, thread_idx, block):
    return block_idx[1] * 8 + thread_idx[1], block_idx[0] * 32 + thread_idx[0]


# ---- 5.3 scatter_max's passes under interleavings -------------------------------------------------


def max_pass(e, src, index, out):
    yield atomic_max(out, index[e], src[e])


def arg_pass(e, src, index, out, arg):
    k = index[e]
    if src[e] == out[k]:
        yield atomic_min(arg, k, e)


def max_by_load_and_store(e, src, index, out):
    old = yield load(out, index[e])
    if src[e] > old:
        yield store(out, index[e], src[e])


def arg_by_store(e, src, index, out, arg):
    if src[e] == out[index[e]]:
        yield store(arg, index[e], e)


def arg_by_load_and_store(e, src, index, out, arg):
    if src[e] == out[index[e]]:
        old = yield load(arg, index[e])
        if e < old:
            yield store(arg, index[e], e)


def arg_of_every_element(e, src, index, out, arg):
    yield atomic_min(arg, index[e], e)


def plain_max(e, src, index, out):
    out[index[e]] = max(out[index[e]], src[e])


def max_by_scanning(e, src, index, out):
    """Every thread works out its group's maximum from the whole input: no atomics, no race, n times the work."""
    k = index[e]
    yield store(out, k, max(src[j] for j in range(len(src)) if index[j] == k))


def arg_by_scanning(e, src, index, out, arg):
    k = index[e]
    yield store(arg, k, min(j for j in range(len(src)) if index[j] == k and src[j] == out[k]))


def max_by_plain_update(e, src, index, out):
    """A plain read-modify-write of out between two yields: a race on a GPU, uninterrupted in the emulation."""
    k = index[e]
    out[k] = max(out[k], src[e])
    yield from ()


def arg_by_plain_update(e, src, index, out, arg):
    k = index[e]
    if src[e] == out[k] and e < arg[k]:
        arg[k] = e
    yield from ()


def max_from_the_whole_list(e, src, index, out):
    """The watched inputs' lists, taken whole (src.values): a scan the per-element reads would not see."""
    k = index[e]
    yield store(out, k, max(v for v, g in zip(src.values, index.values) if g == k))


def arg_from_the_checks_reference(e, src, index, out, arg):
    """The check's own reference computes the answer; the thread only stores it."""
    k = index[e]
    yield store(arg, k, ch05._reference_max(list(src), list(index), len(arg))[1][k])


def test_scatter_max_passes_pass_on_the_solution():
    assert ch05.check_scatter_max_passes(max_pass, arg_pass).passed


def test_scatter_max_passes_stub_is_not_attempted():
    assert ch05.check_scatter_max_passes(stub, stub).status == checking.NOT_ATTEMPTED


def test_a_non_generator_thread_is_refused():
    outcome = ch05.check_scatter_max_passes(plain_max, arg_pass)
    assert outcome.status == checking.FAILED and "should be a thread" in outcome.explanation, status(outcome)


WRONG_ANSWERS = [
    # 5.1 divide_by_count
    WrongAnswer(
        "5.1",
        "wrong math",
        "group from e % groups: right only when nothing follows dim",
        divide_by_count_variant("counts[(e / inner) % groups]", "counts[e % groups]"),
        ("is wrong at index",),
    ),
    WrongAnswer(
        "5.1",
        "shown sizes only",
        "n / threads blocks: none for fewer than 256 elements",
        divide_by_count_variant("(n + threads - 1) / threads", "n / threads"),
        ("invalid configuration argument",),
    ),
    WrongAnswer(
        "5.1",
        "wrong math",
        "float64 divided in float32",
        divide_by_count_variant(
            "sums[e] / static_cast<scalar_t>(c)", "static_cast<float>(sums[e]) / static_cast<float>(c)"
        ),
        ("float64", "is wrong at index"),
    ),
    WrongAnswer(
        "5.1",
        "too slow",
        "one block: every thread loops over thousands of elements",
        divide_by_count_variant("for_each_element<<<blocks,", "for_each_element<<<1,"),
        ("only 1 block(s)", "one after another"),
    ),
    WrongAnswer(
        "5.1",
        "concept skipped",
        "launched on the default stream",
        divide_by_count_variant(LAUNCH, "for_each_element<<<blocks, threads>>>(n, divide);"),
        ("default stream", "<<<blocks, threads, 0, stream>>>"),
    ),
    WrongAnswer(
        "5.1", "wrong math", "no launch check", divide_by_count_variant(CHECK, ""), ("C10_CUDA_KERNEL_LAUNCH_CHECK",)
    ),
    # 5.2 a 2-D launch
    WrongAnswer(
        "5.2",
        "hard-coded",
        "the 32 x 8 block written into both functions",
        lambda: ch05.check_launch_2d(grid_for_32_by_8, thread_element_32_by_8),
        ("blocks of 16 x 16",),
    ),
    WrongAnswer(
        "5.2",
        "wrong math",
        "floor division: the last partial blocks are missing",
        lambda: ch05.check_launch_2d(lambda rows, cols, block: (cols // block[0], rows // block[1]), thread_element),
        ("no thread handles element",),
    ),
    WrongAnswer(
        "5.2",
        "wrong math",
        "one block too many in each direction",
        lambda: ch05.check_launch_2d(
            lambda rows, cols, block: (cols // block[0] + 1, rows // block[1] + 1), thread_element
        ),
        ("blocks would do",),
    ),
    WrongAnswer(
        "5.2",
        "wrong math",
        "rows along x: a warp strides down a column",
        lambda: ch05.check_launch_2d(
            lambda rows, cols, block: (-(-rows // block[0]), -(-cols // block[1])),
            lambda b, t, block: (b[0] * block[0] + t[0], b[1] * block[1] + t[1]),
        ),
        ("neighbouring columns",),
    ),
    WrongAnswer(
        "5.2",
        "wrong math",
        "block_y's stride taken from block_x",
        lambda: ch05.check_launch_2d(grid_for, lambda b, t, block: (b[1] * block[1] + t[1], b[0] * block[1] + t[0])),
        ("no thread handles element",),
    ),
    WrongAnswer(
        "5.2",
        "wrong math",
        "a list instead of a pair",
        lambda: ch05.check_launch_2d(
            lambda rows, cols, block: [-(-cols // block[0]), -(-rows // block[1])], thread_element
        ),
        ("a pair of ints",),
    ),
    # 5.3 scatter_max's two passes
    WrongAnswer(
        "5.3",
        "wrong math",
        "the maximum by a load and a store",
        lambda: ch05.check_scatter_max_passes(max_by_load_and_store, arg_pass),
        ("the values are", "atomic_max"),
    ),
    WrongAnswer(
        "5.3",
        "wrong math",
        "the argindex by a plain store",
        lambda: ch05.check_scatter_max_passes(max_pass, arg_by_store),
        ("the argindex is",),
    ),
    WrongAnswer(
        "5.3",
        "wrong math",
        "the argindex by a load and a store",
        lambda: ch05.check_scatter_max_passes(max_pass, arg_by_load_and_store),
        ("the argindex is",),
    ),
    WrongAnswer(
        "5.3",
        "wrong math",
        "every element bids, winner or not",
        lambda: ch05.check_scatter_max_passes(max_pass, arg_of_every_element),
        ("the argindex is",),
    ),
    WrongAnswer(
        "5.3",
        "concept skipped",
        "each thread scans the input for its group's maximum",
        lambda: ch05.check_scatter_max_passes(max_by_scanning, arg_pass),
        ("read src[", "all n threads"),
    ),
    WrongAnswer(
        "5.3",
        "concept skipped",
        "each thread scans for the first winner",
        lambda: ch05.check_scatter_max_passes(max_pass, arg_by_scanning),
        ("read src[",),
    ),
    WrongAnswer(
        "5.3",
        "private data",
        "the check's own reference computes the argindex",
        lambda: ch05.check_scatter_max_passes(max_pass, arg_from_the_checks_reference),
        ("read src[",),
    ),
    WrongAnswer(
        "5.3",
        "concept skipped",
        "the maximum by a plain update of out, no operation yielded",
        lambda: ch05.check_scatter_max_passes(max_by_plain_update, arg_pass),
        ("read out[", "directly", "race"),
    ),
    WrongAnswer(
        "5.3",
        "concept skipped",
        "the argindex by a plain update of arg, no operation yielded",
        lambda: ch05.check_scatter_max_passes(max_pass, arg_by_plain_update),
        ("arg[", "directly", "race"),
    ),
    WrongAnswer(
        "5.3",
        "private data",
        "the watched input's whole list (src.values) scanned",
        lambda: ch05.check_scatter_max_passes(max_from_the_whole_list, arg_pass),
        ("read src[",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)


def add_one(e, memory):
    old = yield load(memory, 0)
    yield store(memory, 0, old + 1)


def add_one_atomically(e, memory):
    yield atomic_add(memory, 0, 1)


@pytest.mark.parametrize("schedule, expected", [("in order", 4), ("round robin", 1), ("reverse round robin", 1)])
def test_a_load_and_a_store_lose_updates_when_threads_interleave(schedule, expected):
    memory = [0]
    trace = interleaving.run([add_one(e, memory) for e in range(4)], schedule)
    assert memory == [expected] and len(trace) == 8


@pytest.mark.parametrize("schedule", interleaving.SCHEDULES)
def test_an_atomic_add_loses_nothing_under_any_schedule(schedule):
    memory = [0]
    interleaving.run([add_one_atomically(e, memory) for e in range(5)], schedule)
    assert memory == [5]


def test_a_thread_must_yield_operations():
    def yields_a_number(e):
        yield 3

    with pytest.raises(TypeError, match="must yield memory operations"):
        interleaving.run([yields_a_number(0)])
    with pytest.raises(ValueError, match="schedule must be one of"):
        interleaving.run([add_one(0, [0])], "sideways")
