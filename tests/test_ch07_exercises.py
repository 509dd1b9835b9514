"""Exercise checks of chapter 07: 7.1 RecentStrings (a C++ class that survives torch.jit.save), 7.2 reverse
(a scripted function on a TensorStack) and 7.3 Accumulator (a module keeping its inputs on a TensorStack).

For each: the solution passes, the stub is not attempted, other right answers pass, and every wrong or cheating
answer of WRONG_ANSWERS is rejected by a message that names the mistake. A corrected RecentStrings loads after
the stub without a restart. 7.1's C++ answers are compiled with 6.1's, once, by tests/torchscript_answers.py.
"""

from typing import List

import pytest
import torch
import wrong_answers
from torchscript_answers import load_libraries, mistake, notebook_string
from torchscript_warning import IGNORE_JIT_DEPRECATION
from wrong_answers import WrongAnswer

from workbook.build import fresh_namespace
from workbook.course import checking
from workbook.exercises import ch07

pytestmark = IGNORE_JIT_DEPRECATION


@pytest.fixture(scope="module", autouse=True)
def libraries():
    load_libraries()


# ---- 7.1 RecentStrings ------------------------------------------------------------------------------------


def test_recent_strings_check_passes_on_the_solution():
    assert ch07.check_recent_strings(torch.classes.wb_test_ch07.RecentStrings).passed


# ---- 7.2 reverse ------------------------------------------------------------------------------------------


def reverse(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack([])
    for tensor in tensors:
        stack.push(tensor)
    out: List[torch.Tensor] = []
    while not stack.empty():
        out.append(stack.pop())
    return out


def test_reverse_check_passes_on_the_solution():
    assert ch07.check_reverse(torch.jit.script(reverse)).passed


def reverse_in_the_same_order(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack(tensors)
    return stack.items()


def reverse_without_the_class(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    return tensors[::-1]


def reverse_beside_an_unused_stack(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack([])
    for tensor in tensors:
        stack.push(tensor)
    return tensors[::-1]


def reverse_dropping_the_bottom(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack([])
    for tensor in tensors:
        stack.push(tensor)
    out: List[torch.Tensor] = []
    while stack.size() > 1:
        out.append(stack.pop())
    return out


def reverse_by_slicing_beside_a_pop_that_never_runs(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    stack = torch.classes.workbook_classes.TensorStack(tensors)
    if stack.size() > 1000000:
        stack.pop()
    return tensors[::-1]


def reverse_by_slicing_beside_one_pop(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    out = tensors[::-1]
    stack = torch.classes.workbook_classes.TensorStack(out)
    if not stack.empty():
        stack.pop()
    return out


def reverse_with_a_comprehension(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """Right, written differently."""
    stack = torch.classes.workbook_classes.TensorStack(tensors)
    return [stack.pop() for _ in range(len(tensors))]


def reverse_by_concatenation(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
    """Right, written differently: a new list on every pop."""
    stack = torch.classes.workbook_classes.TensorStack([])
    for tensor in tensors:
        stack.push(tensor)
    out: List[torch.Tensor] = []
    while not stack.empty():
        out = out + [stack.pop()]
    return out


@pytest.mark.parametrize("right", [reverse_with_a_comprehension, reverse_by_concatenation], ids=lambda f: f.__name__)
def test_reverse_check_passes_on_other_right_answers(right):
    outcome = ch07.check_reverse(torch.jit.script(right))
    assert outcome.passed, outcome


# ---- 7.1 in the notebook: the stub, then a corrected class, in one process --------------------------------


def test_a_corrected_recent_strings_loads_after_the_stub_without_a_restart():
    sources = [
        notebook_string("07_torchscript_custom_classes", "ch07-recent-strings", stub=stub) for stub in (True, False)
    ]
    stub_classes, solved_classes = (fresh_namespace.classes("wb_ch07_recent", source) for source in sources)
    assert ch07.check_recent_strings(stub_classes.RecentStrings).status == checking.NOT_ATTEMPTED
    assert ch07.check_recent_strings(solved_classes.RecentStrings).passed


# ---- 7.3 Accumulator --------------------------------------------------------------------------------------


class Accumulator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.history = torch.classes.workbook_classes.TensorStack([])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        return torch.stack(self.history.items()).sum(dim=0)

    @torch.jit.export
    def reset(self) -> int:
        held = self.history.size()
        while not self.history.empty():
            self.history.pop()
        return held


class AccumulatorStub(Accumulator):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("not attempted yet")


class AccumulatorReturnsTheInput(Accumulator):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        return x


class AccumulatorResetKeepsItems(Accumulator):
    @torch.jit.export
    def reset(self) -> int:
        return self.history.size()


class AccumulatorWithAList(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.history: List[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.append(x)
        return torch.stack(self.history).sum(dim=0)


class AccumulatorOfTheShownShape(Accumulator):
    """Sums into zeros of the shape the notebook's check used to show, 3 x 4."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        total = torch.zeros(3, 4)
        for item in self.history.items():
            total = total + item
        return total


class AccumulatorInFloat32(Accumulator):
    """Sums into a float32 buffer, whatever the inputs' dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        total = torch.zeros(x.shape)
        for item in self.history.items():
            total += item
        return total


class AccumulatorResetCountsAfterPopping(Accumulator):
    @torch.jit.export
    def reset(self) -> int:
        while not self.history.empty():
            self.history.pop()
        return self.history.size()


class AccumulatorWithARunningTotal(Accumulator):
    """Pushes onto the stack, but sums into a tensor attribute of its own: the stack's contents unused."""

    def __init__(self):
        super().__init__()
        self.total = torch.zeros(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        self.total = x.clone() if self.history.size() == 1 else self.total + x
        return self.total


class AccumulatorSummingInPlace(Accumulator):
    """Adds into the first tensor on the stack (an input of the caller's) with +=."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history.push(x)
        items = self.history.items()
        total = items[0]
        for i in range(1, len(items)):
            total += items[i]
        return total


class AccumulatorResettingWithANewStack(Accumulator):
    """Right, written differently: reset() replaces the stack."""

    @torch.jit.export
    def reset(self) -> int:
        held = self.history.size()
        self.history = torch.classes.workbook_classes.TensorStack([])
        return held


def test_accumulator_check_passes_on_the_solution():
    assert ch07.check_accumulator(Accumulator).passed


def test_accumulator_stub_is_not_attempted():
    assert ch07.check_accumulator(AccumulatorStub).status == checking.NOT_ATTEMPTED


def test_accumulator_check_passes_when_reset_replaces_the_stack():
    outcome = ch07.check_accumulator(AccumulatorResettingWithANewStack)
    assert outcome.passed, outcome


# ---- the catalogue ----------------------------------------------------------------------------------------


def reversal(function):
    return lambda: ch07.check_reverse(torch.jit.script(function))


WRONG_ANSWERS = [
    # 7.1 RecentStrings
    WrongAnswer(
        "7.1",
        "wrong math",
        "__setstate__ forgets the capacity",
        lambda: ch07.check_recent_strings(mistake("ForgetsCapacity")),
        ("after torch.jit.save and torch.jit.load", "capacity() 10"),
    ),
    WrongAnswer(
        "7.1",
        "wrong math",
        "capacity rebuilt from the number of saved strings",
        lambda: ch07.check_recent_strings(mistake("CapacityFromCount")),
        ("save the capacity itself in the state",),
    ),
    WrongAnswer(
        "7.1",
        "shown sizes only",
        "push keeps the three the notebook shows",
        lambda: ch07.check_recent_strings(mistake("KeepsThree")),
        ("into RecentStrings(1)", "the newest 1"),
    ),
    WrongAnswer(
        "7.1",
        "wrong math",
        "off by one: keeps capacity - 1",
        lambda: ch07.check_recent_strings(mistake("OffByOne")),
        ("items() is []",),
    ),
    WrongAnswer(
        "7.1",
        "hard-coded",
        "__setstate__ rebuilds the notebook's ['c', 'd', 'e']",
        lambda: ch07.check_recent_strings(mistake("HardCodedState")),
        ("after torch.jit.save and torch.jit.load",),
    ),
    WrongAnswer(
        "7.1",
        "shown sizes only",
        "a ring of 8 slots: right up to capacity 8",
        lambda: ch07.check_recent_strings(mistake("RingOfEight")),
        ("items() is", "the newest"),
    ),
    WrongAnswer(
        "7.1",
        "wrong math",
        "the strings saved joined with commas",
        lambda: ch07.check_recent_strings(mistake("CommaJoinedState")),
        ("after torch.jit.save and torch.jit.load", "items()"),
    ),
    WrongAnswer(
        "7.1",
        "shown sizes only",
        "keeps the first 6 characters (the longest word the old check pushed)",
        lambda: ch07.check_recent_strings(mistake("SixCharacters")),
        ("items() is",),
    ),
    # 7.2 reverse
    WrongAnswer("7.2", "wrong math", "same order", reversal(reverse_in_the_same_order), ("pops",)),
    WrongAnswer("7.2", "concept skipped", "slicing, no stack", reversal(reverse_without_the_class), ("never uses",)),
    WrongAnswer(
        "7.2",
        "concept skipped",
        "a stack filled, then a slice returned",
        reversal(reverse_beside_an_unused_stack),
        ("never pops",),
    ),
    WrongAnswer(
        "7.2",
        "wrong math",
        "off by one: the bottom tensor is dropped",
        reversal(reverse_dropping_the_bottom),
        ("should return a list of",),
    ),
    WrongAnswer(
        "7.2",
        "concept skipped",
        "slicing, beside a pop that never runs",
        reversal(reverse_by_slicing_beside_a_pop_that_never_runs),
        ("nothing reverse pops", "reaches the list it returns"),
    ),
    WrongAnswer(
        "7.2",
        "concept skipped",
        "slicing, beside one pop whose tensor is dropped",
        reversal(reverse_by_slicing_beside_one_pop),
        ("nothing reverse pops",),
    ),
    # 7.3 Accumulator
    WrongAnswer(
        "7.3",
        "wrong math",
        "returns the input",
        lambda: ch07.check_accumulator(AccumulatorReturnsTheInput),
        ("the result of call 2",),
    ),
    WrongAnswer(
        "7.3",
        "wrong math",
        "reset() leaves the items",
        lambda: ch07.check_accumulator(AccumulatorResetKeepsItems),
        ("reset() returned", "it should empty the stack"),
    ),
    WrongAnswer(
        "7.3",
        "wrong math",
        "reset() counts after popping",
        lambda: ch07.check_accumulator(AccumulatorResetCountsAfterPopping),
        ("reset() returned 0",),
    ),
    WrongAnswer(
        "7.3",
        "concept skipped",
        "a Python list instead of the stack",
        lambda: ch07.check_accumulator(AccumulatorWithAList),
        ("a torch.classes.workbook_classes.TensorStack; got list",),
    ),
    WrongAnswer(
        "7.3",
        "shown sizes only",
        "sums into zeros(3, 4)",
        lambda: ch07.check_accumulator(AccumulatorOfTheShownShape),
        ("call 1 of the scripted Accumulator",),
    ),
    WrongAnswer(
        "7.3",
        "wrong math",
        "a float32 sum of float64 inputs",
        lambda: ch07.check_accumulator(AccumulatorInFloat32),
        ("float64 inputs", "has dtype torch.float32"),
    ),
    WrongAnswer(
        "7.3",
        "concept skipped",
        "a running total kept beside the stack",
        lambda: ch07.check_accumulator(AccumulatorWithARunningTotal),
        ("pushed onto self.history from Python", "is wrong at index"),
    ),
    WrongAnswer(
        "7.3",
        "wrong math",
        "+= into the first tensor on the stack",
        lambda: ch07.check_accumulator(AccumulatorSummingInPlace),
        ("changed the tensor given to call 1",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)
