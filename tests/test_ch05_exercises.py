"""Chapter 05's exercise checks 5.2 and 5.3 (pure Python) pass on the solutions, say "not attempted" on the
stubs, and explain plausible wrong answers; the interleaving model itself behaves as documented.
(5.1 runs in the CPU emulation: tests/test_cuda_emulated.py.)"""

import pytest

from workbook import checking, interleaving
from workbook.exercises import ch05
from workbook.interleaving import atomic_add, atomic_max, atomic_min, load, store


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


def status(outcome):
    return outcome.status, outcome.explanation


# ---- 5.2 a 2-D launch -------------------------------------------------------------------------------


def grid_for(rows, cols, block):
    return -(-cols // block[0]), -(-rows // block[1])


def thread_element(block_idx, thread_idx, block):
    return block_idx[1] * block[1] + thread_idx[1], block_idx[0] * block[0] + thread_idx[0]


def test_launch_2d_passes_on_the_solution():
    assert ch05.check_launch_2d(grid_for, thread_element).passed


def test_launch_2d_stub_is_not_attempted():
    assert ch05.check_launch_2d(stub, stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "grid, element, says",
    [
        (lambda rows, cols, block: (cols // block[0], rows // block[1]), thread_element, "no thread handles element"),
        (lambda rows, cols, block: (cols // block[0] + 1, rows // block[1] + 1), thread_element, "blocks would do"),
        # rows along x: every element once, but a warp strides down a column
        (
            lambda rows, cols, block: (-(-rows // block[0]), -(-cols // block[1])),
            lambda b, t, block: (b[0] * block[0] + t[0], b[1] * block[1] + t[1]),
            "neighbouring columns",
        ),
        (grid_for, lambda b, t, block: (b[1] * block[1] + t[1], b[0] * block[1] + t[0]), "more than one thread"),
        (lambda rows, cols, block: [-(-cols // block[0]), -(-rows // block[1])], thread_element, "a pair of ints"),
    ],
)
def test_launch_2d_explains_wrong_answers(grid, element, says):
    outcome = ch05.check_launch_2d(grid, element)
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


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


def test_scatter_max_passes_pass_on_the_solution():
    assert ch05.check_scatter_max_passes(max_pass, arg_pass).passed


def test_scatter_max_passes_stub_is_not_attempted():
    assert ch05.check_scatter_max_passes(stub, stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "first, second, says",
    [
        (max_by_load_and_store, arg_pass, "the values are"),
        (max_pass, arg_by_store, "the argindex is"),
        (max_pass, arg_by_load_and_store, "the argindex is"),
        (max_pass, arg_of_every_element, "the argindex is"),
        (plain_max, arg_pass, "should be a thread"),
    ],
)
def test_scatter_max_passes_explain_wrong_answers(first, second, says):
    outcome = ch05.check_scatter_max_passes(first, second)
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


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
