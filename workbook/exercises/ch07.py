"""Checks for chapter 07 (TorchScript custom classes).

* 7.1 ``check_recent_strings(RecentStrings)``: the learner's class (from a library loaded with
  `workbook.fresh_library`, so that a corrected version loads without a restart) keeps its newest strings
  and its capacity through torch.jit.save and torch.jit.load.
* 7.2 ``check_reverse(function)``: a scripted function reversing a list through a TensorStack.
* 7.3 ``check_accumulator(Accumulator)``: a module keeping its inputs on a TensorStack; saved after two calls,
  the chapter's C++ program continues from that state.
"""

from __future__ import annotations

import io

from ..checking import Mistake, exercise, expect_close, raise_if_not_attempted


class _Holder:
    """Builds (lazily, torch imported) a scripted module holding a RecentStrings object."""

    @staticmethod
    def module(recent):
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


@exercise("7.1 RecentStrings keeps its capacity through save and load")
def check_recent_strings(cls):
    """`cls` (your library's RecentStrings): keeps the newest `capacity` strings; its state survives save and load."""
    import torch

    recent = cls(3)
    if recent.capacity() != 3:
        raise Mistake(f"RecentStrings(3).capacity() returned {recent.capacity()}, expected 3")
    for word in ["a", "b", "c", "d", "e"]:
        recent.push(word)
    if recent.items() != ["c", "d", "e"]:
        raise Mistake(
            f"after pushing a, b, c, d, e into RecentStrings(3), items() is {recent.items()}, "
            "expected ['c', 'd', 'e'] (the newest three, oldest first)"
        )
    if recent.size() != 3:
        raise Mistake(f"size() is {recent.size()} after overflowing a capacity of 3, expected 3")

    module = _Holder.module(recent)
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    restored = loaded.recent
    if restored.capacity() != 3:
        raise Mistake(
            f"after torch.jit.save and torch.jit.load, capacity() is {restored.capacity()}, expected 3: "
            "__getstate__ must save it and __setstate__ restore it"
        )
    if restored.items() != ["c", "d", "e"]:
        raise Mistake(f"after save and load, items() is {restored.items()}, expected ['c', 'd', 'e']")
    if loaded("f") != ["d", "e", "f"]:
        raise Mistake(
            f"after save and load, pushing 'f' through the loaded module should give ['d', 'e', 'f'], got {loaded('f')}"
        )


@exercise("7.2 reverse a list with TensorStack in TorchScript")
def check_reverse(function):
    """`function(tensors)` is scripted, uses workbook_classes::TensorStack and reverses the list."""
    import torch

    if not isinstance(function, torch.jit.ScriptFunction):
        raise Mistake(f"reverse should be compiled with @torch.jit.script, got a {type(function).__name__}")
    tensors = [torch.full((2,), float(i)) for i in range(4)]
    got = function(tensors)
    if "TensorStack" not in str(function.graph):
        raise Mistake("the scripted graph never uses torch.classes.workbook_classes.TensorStack")
    if not isinstance(got, list) or len(got) != 4:
        raise Mistake(f"reverse of a list of 4 tensors should return a list of 4, got {got!r}")
    for position, (actual, expected) in enumerate(zip(got, reversed(tensors))):
        expect_close(actual, expected, f"element {position} of the result")
    if function([]) != []:
        raise Mistake("reverse([]) should return an empty list")


def _run_scripted(call, what: str):
    import torch

    try:
        return call()
    except torch.jit.Error as error:
        raise_if_not_attempted(error)
        raise Mistake(f"{what} raised: {str(error).strip().splitlines()[-1]}") from None


@exercise("7.3 a TensorStack's state reaches the C++ program")
def check_accumulator(accumulator_class):
    """`accumulator_class()` keeps its inputs on self.history (a TensorStack); forward(x) returns the sum of all
    inputs so far, reset() empties the stack and returns how many it held; a saved one continues in C++."""
    import torch

    from .. import BUILD_DIR, torchscript

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
    a, b, c = (torch.randn(3, 4, generator=generator) for _ in range(3))
    for step, (x, expected) in enumerate([(a, a), (b, a + b)], start=1):
        got = _run_scripted(lambda: scripted(x), f"call {step} of the scripted Accumulator")
        expect_close(got, expected, f"the result of call {step} (the sum of the {step} input(s) so far)")
    held = _run_scripted(lambda: scripted.reset(), "reset()")
    if held != 2 or scripted.history.size() != 0:
        raise Mistake(
            f"after two calls, reset() returned {held} and left {scripted.history.size()} tensor(s) on the "
            "stack: it should empty the stack and return 2"
        )
    expect_close(
        _run_scripted(lambda: scripted(c), "the call after reset()"), c, "the result of the first call after reset()"
    )

    fresh = torch.jit.script(accumulator_class())
    fresh(a)
    fresh(b)
    folder = BUILD_DIR / "ch07"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "accumulator.pt"
    fresh.save(str(path))
    run = torchscript.run_app(torchscript.example_app(), path, (c,), check=False)
    if run.returncode != 0:
        raise Mistake(
            f"the C++ program could not run the saved Accumulator: {torchscript.error_summary(run.stderr, 2)}"
        )
    expect_close(
        torchscript.read_app_output(path),
        a + b + c,
        "the C++ program's call on an Accumulator saved after two calls (a + b, then c)",
    )
