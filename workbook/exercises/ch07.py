"""Checks for chapter 07 (TorchScript custom classes)."""
from __future__ import annotations

import io

from ..checking import Mistake, exercise, expect_close


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
def check_recent_strings(cls=None):
    """torch.classes.workbook_ch07.RecentStrings (or `cls`): keeps the newest `capacity` strings; state survives."""
    import torch

    try:
        cls = cls if cls is not None else torch.classes.workbook_ch07.RecentStrings
    except RuntimeError:
        raise Mistake("torch.classes.workbook_ch07.RecentStrings is not registered: build and load the "
                      "exercise's library first") from None
    recent = cls(3)
    if recent.capacity() != 3:
        raise Mistake(f"RecentStrings(3).capacity() returned {recent.capacity()}, expected 3")
    for word in ["a", "b", "c", "d", "e"]:
        recent.push(word)
    if recent.items() != ["c", "d", "e"]:
        raise Mistake(f"after pushing a, b, c, d, e into RecentStrings(3), items() is {recent.items()}, "
                      "expected ['c', 'd', 'e'] (the newest three, oldest first)")
    if recent.size() != 3:
        raise Mistake(f"size() is {recent.size()} after overflowing a capacity of 3, expected 3")

    module = _Holder.module(recent)
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    restored = loaded.recent
    if restored.capacity() != 3:
        raise Mistake(f"after torch.jit.save and torch.jit.load, capacity() is {restored.capacity()}, expected 3: "
                      "__getstate__ must save it and __setstate__ restore it")
    if restored.items() != ["c", "d", "e"]:
        raise Mistake(f"after save and load, items() is {restored.items()}, expected ['c', 'd', 'e']")
    if loaded("f") != ["d", "e", "f"]:
        raise Mistake("after save and load, pushing 'f' through the loaded module should give "
                      f"['d', 'e', 'f'], got {loaded('f')}")


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
