"""Checks for chapter 07 (TorchScript custom classes).

* 7.1 ``check_recent_strings(RecentStrings)``: the learner's class (from a library loaded with
  `workbook.build.fresh_namespace`, so that a corrected version loads without a restart) keeps its newest strings
  and its capacity through torch.jit.save and torch.jit.load, full or not, at capacities drawn when the
  check runs.
* 7.2 ``check_reverse(function)``: a scripted function reversing lists of several lengths by pushing onto a
  TensorStack and popping off it, its result built from what it pops.
* 7.3 ``check_accumulator(Accumulator)``: a module keeping its inputs on a TensorStack, right for inputs of
  drawn shapes, float64 and strided ones; saved after two calls, the chapter's C++ program continues from
  that state.

Every input is drawn from a seeded generator inside the check: nothing here is data to read back.
"""

from __future__ import annotations

import io

from workbook.build import errors
from workbook.course.checking import Mistake, exercise, expect_close, raise_if_not_attempted


def _randint(generator, low: int, high: int) -> int:
    """An int in [low, high], from `generator`."""
    import torch

    return int(torch.randint(low, high + 1, (), generator=generator))


def _keeper(recent):
    """A scripted module holding a RecentStrings object: forward(word) pushes and returns the items."""
    from typing import List

    import torch

    class Keeper(torch.nn.Module):
        def __init__(self, recent):
            super().__init__()
            self.recent = recent

        def forward(self, word: str) -> List[str]:
            self.recent.push(word)
            return self.recent.items()

    return torch.jit.script(Keeper(recent))


def _saved_and_loaded(recent):
    """(the scripted module holding `recent`, its copy after torch.jit.save and torch.jit.load)."""
    import torch

    module = _keeper(recent)
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    return module, torch.jit.load(buffer)


@exercise("7.1 RecentStrings keeps its capacity through save and load")
def check_recent_strings(cls):
    """`cls` (your library's RecentStrings): keeps the newest `capacity` strings, oldest first; its capacity and
    strings survive save and load whether it is full or not, and saving leaves the original as it was."""
    import torch

    generator = torch.Generator().manual_seed(71)
    characters = "abcdefghijklmnopqrstuvwxyz ,;:'\"éß→"

    def words(count: int) -> list[str]:
        return [
            "".join(characters[_randint(generator, 0, len(characters) - 1)] for _ in range(_randint(generator, 0, 12)))
            for _ in range(count)
        ]

    for capacity in (1, _randint(generator, 2, 4), _randint(generator, 5, 8), _randint(generator, 9, 40)):
        recent = cls(capacity)
        if recent.capacity() != capacity:
            raise Mistake(f"RecentStrings({capacity}).capacity() returned {recent.capacity()}, expected {capacity}")
        pushed = words(capacity + _randint(generator, 1, 4))
        for count, word in enumerate(pushed, start=1):
            recent.push(word)
            if recent.items() != pushed[:count][-capacity:]:
                raise Mistake(
                    f"after pushing {pushed[:count]} into RecentStrings({capacity}), items() is {recent.items()}, "
                    f"expected {pushed[:count][-capacity:]} (the newest {capacity}, oldest first)"
                )
        if recent.size() != capacity:
            raise Mistake(f"size() is {recent.size()} after overflowing a capacity of {capacity}, expected {capacity}")

        module, loaded = _saved_and_loaded(recent)
        restored = loaded.recent
        if restored.capacity() != capacity or restored.items() != pushed[-capacity:]:
            raise Mistake(
                f"after torch.jit.save and torch.jit.load, a full RecentStrings({capacity}) has capacity() "
                f"{restored.capacity()} and items() {restored.items()}, expected {capacity} and "
                f"{pushed[-capacity:]}: __getstate__ must save both and __setstate__ restore both"
            )
        if module.recent.items() != pushed[-capacity:]:
            raise Mistake(
                f"saving changed the original object: its items() became {module.recent.items()}, expected "
                f"{pushed[-capacity:]} (__getstate__ must read the state, not take it away)"
            )
        (extra,) = words(1)
        if loaded(extra) != (pushed + [extra])[-capacity:]:
            raise Mistake(
                f"after save and load, pushing {extra!r} through the loaded module should give "
                f"{(pushed + [extra])[-capacity:]}, got {restored.items()}"
            )

    # Not full when saved: the capacity must come from the saved state, not from the number of strings. Among the
    # strings: an empty one, one with a comma and a space, one beyond ASCII.
    capacity = _randint(generator, 6, 12)
    recent, pushed = cls(capacity), ["", "one, two", "naïve"] + words(_randint(generator, 1, capacity - 4))
    for word in pushed:
        recent.push(word)
    _, loaded = _saved_and_loaded(recent)
    restored = loaded.recent
    if restored.capacity() != capacity or restored.items() != pushed:
        raise Mistake(
            f"a RecentStrings({capacity}) holding {len(pushed)} string(s) has capacity() {restored.capacity()} and "
            f"items() {restored.items()} after save and load, expected {capacity} and {pushed}: save the capacity "
            "itself in the state, and build the restored object with it"
        )
    more = words(capacity)
    for word in more:
        loaded(word)
    if restored.items() != (pushed + more)[-capacity:]:
        raise Mistake(
            f"the loaded RecentStrings({capacity}) holds {restored.items()} after {capacity} more pushes, expected "
            f"{(pushed + more)[-capacity:]}"
        )

    try:
        cls(0)
    except RuntimeError as error:
        if "capacity" not in str(error):
            raise Mistake(f"RecentStrings(0) raised, but its message does not name 'capacity': {error}") from None
    else:
        raise Mistake("RecentStrings(0) should raise an error that names 'capacity' (it must be at least 1)")


# Graph nodes that change their first input (a list, or a custom object's state) with their other inputs.
_MUTATING = {"aten::append", "aten::insert", "aten::extend", "aten::_set_item", "aten::add_", "prim::CallMethod"}


def _reach_the_outputs(graph, values) -> bool:
    """Whether any of `values` (graph values) can reach what the graph returns: through the nodes' inputs, the
    blocks of loops and ifs, and the nodes in _MUTATING (an append puts its value into the list)."""
    depends: dict[int, set[int]] = {}

    def collect(block):
        for node in block.nodes():
            inputs = [value.unique() for value in node.inputs()]
            for output in node.outputs():
                depends.setdefault(output.unique(), set()).update(inputs)
            for inner in node.blocks():
                collect(inner)
                returned = [value.unique() for value in inner.outputs()]
                for output in node.outputs():
                    depends[output.unique()].update(returned)
                for parameter in inner.inputs():
                    depends.setdefault(parameter.unique(), set()).update(inputs + returned)
            if node.kind() in _MUTATING and inputs:
                depends.setdefault(inputs[0], set()).update(inputs[1:])

    collect(graph.block())
    seen, todo = set(), [value.unique() for value in graph.outputs()]
    while todo:
        value = todo.pop()
        if value not in seen:
            seen.add(value)
            todo.extend(depends.get(value, ()))
    return any(value.unique() in seen for value in values)


@exercise("7.2 reverse a list with TensorStack in TorchScript")
def check_reverse(function):
    """`function(tensors)` is scripted, pushes onto a workbook_classes::TensorStack and pops off it, and reverses
    lists of several lengths (tensors of different shapes); what it pops must reach the list it returns."""
    import torch

    if not isinstance(function, torch.jit.ScriptFunction):
        raise Mistake(f"reverse should be compiled with @torch.jit.script, got a {type(function).__name__}")
    generator = torch.Generator().manual_seed(72)
    for length in (_randint(generator, 5, 9), 1, 0, _randint(generator, 2, 4)):
        tensors = [
            torch.randn(_randint(generator, 1, 4), _randint(generator, 1, 3), generator=generator)
            for _ in range(length)
        ]
        got = function(tensors)
        graph = function.inlined_graph
        if "TensorStack" not in str(graph):
            raise Mistake("the scripted graph never uses torch.classes.workbook_classes.TensorStack")
        pops = [node.output() for node in graph.findAllNodes("prim::CallMethod") if node.s("name") == "pop"]
        if not pops:
            raise Mistake(
                "reverse never pops from its TensorStack: push every tensor onto the stack, then pop them off "
                "(the stack is what reverses them)"
            )
        if not _reach_the_outputs(graph, pops):
            raise Mistake(
                "nothing reverse pops from its TensorStack reaches the list it returns: build the result from "
                "what pop() returns (the stack is what reverses the tensors)"
            )
        if not isinstance(got, list) or len(got) != length:
            what = f"a list of {len(got)}" if isinstance(got, list) else f"a {type(got).__name__}"
            raise Mistake(f"reverse of a list of {length} tensors should return a list of {length}, got {what}")
        for position, (actual, expected) in enumerate(zip(got, reversed(tensors))):
            expect_close(actual, expected, f"element {position} of reverse of a list of {length} tensors")


def _run_scripted(call, what: str):
    try:
        return call()
    except Exception as error:  # torch.jit.Error, or the RuntimeError of an op that failed in the interpreter
        raise_if_not_attempted(error)
        raise Mistake(f"{what} raised: {str(error).strip().splitlines()[-1]}") from None


def _check_calls(scripted, inputs, what: str) -> None:
    """Call `scripted` with each input in turn; each result must be the sum of the inputs so far."""
    import torch

    originals = [x.clone() for x in inputs]
    for step, x in enumerate(inputs, start=1):
        expected = torch.stack(originals[:step]).sum(dim=0)
        got = _run_scripted(lambda x=x: scripted(x), f"call {step} of the scripted Accumulator ({what})")
        for earlier, (given, original) in enumerate(zip(inputs[:step], originals), start=1):
            if not torch.equal(given, original):
                raise Mistake(
                    f"call {step} of the scripted Accumulator ({what}) changed the tensor given to call {earlier}, "
                    "which the stack holds: sum into a new tensor (no in-place += on the stack's items)"
                )
        expect_close(got, expected, f"the result of call {step} ({what}: the sum of the {step} input(s) so far)")


@exercise("7.3 a TensorStack's state reaches the C++ program")
def check_accumulator(accumulator_class):
    """`accumulator_class()` keeps its inputs on self.history (a TensorStack); forward(x) returns the sum of all
    inputs so far (the sum of what the stack holds, leaving those tensors unchanged), for inputs of any shape and
    floating dtype; reset() empties the stack and returns how many it
    held; a saved one continues in C++."""
    import torch

    from workbook.ops import example_app

    module = accumulator_class()
    history = getattr(module, "history", None)
    if not isinstance(history, torch.ScriptObject) or not history._type().qualified_name().endswith(
        "workbook_classes.TensorStack"
    ):
        raise Mistake(
            "Accumulator() should keep its inputs in self.history, a "
            f"torch.classes.workbook_classes.TensorStack; got {type(history).__name__}"
        )
    scripted = torch.jit.script(module)
    generator = torch.Generator().manual_seed(73)
    shape = (_randint(generator, 2, 6), _randint(generator, 2, 6))
    calls = _randint(generator, 3, 5)
    inputs = [torch.randn(shape, generator=generator) for _ in range(calls - 1)]
    inputs.append(torch.randn(shape[::-1], generator=generator).t())  # strided: not contiguous
    _check_calls(scripted, inputs, f"float32 inputs of shape {shape}")
    held = _run_scripted(lambda: scripted.reset(), "reset()")
    if held != calls or scripted.history.size() != 0:
        raise Mistake(
            f"after {calls} calls, reset() returned {held} and left {scripted.history.size()} tensor(s) on the "
            f"stack: it should empty the stack and return {calls}"
        )
    fresh_start = torch.randn(shape, generator=generator)
    expect_close(
        _run_scripted(lambda: scripted(fresh_start), "the call after reset()"),
        fresh_start,
        "the result of the first call after reset()",
    )
    # The sum must be that of what the stack holds, whoever pushed it: not a running total kept elsewhere.
    pushed_from_outside, x = torch.randn(shape, generator=generator), torch.randn(shape, generator=generator)
    scripted.history.push(pushed_from_outside)
    expect_close(
        _run_scripted(lambda: scripted(x), "the call after a push onto self.history from Python"),
        fresh_start + pushed_from_outside + x,
        "after another tensor was pushed onto self.history from Python, the result of forward (it should be the "
        "sum of everything the stack holds, computed from its items(), not a total kept beside it)",
    )

    length = _randint(generator, 1, 5)
    doubles = [torch.randn(length, dtype=torch.float64, generator=generator) for _ in range(2)]
    _check_calls(torch.jit.script(accumulator_class()), doubles, f"float64 inputs of shape ({length},)")

    shape = (_randint(generator, 2, 5), _randint(generator, 2, 5), _randint(generator, 1, 3))
    a, b, c = (torch.randn(shape, generator=generator) for _ in range(3))
    expected = a + b + c
    fresh = torch.jit.script(accumulator_class())
    fresh(a)
    fresh(b)
    run, result = example_app.run_scripted(fresh, (c,))
    if result is None:
        raise Mistake(f"the C++ program could not run the saved Accumulator: {errors.error_summary(run.stderr, 2)}")
    expect_close(result, expected, "the C++ program's call on an Accumulator saved after two calls (a + b, then c)")
