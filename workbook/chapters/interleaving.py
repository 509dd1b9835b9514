"""A model of GPU threads sharing memory, for chapter 05: who wins when threads interleave.

A thread is a Python generator. Each `yield` hands one memory operation on a shared list to the
scheduler, which performs it when the thread's turn comes and sends back what a load (or an
atomic, the old value) returned:

    def add_one(e, out):
        old = yield load(out, 0)        # another thread may run between these two lines
        yield store(out, 0, old + 1)

    run([add_one(e, out) for e in range(4)], "round robin")   # out[0] ends at 1, not 4

An atomic (`atomic_add`, `atomic_max`, `atomic_min`) is one operation: nothing comes between its
read and its write. Reading a list that no thread writes needs no operation: index it directly.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

_ATOMIC = {
    "atomic_add": lambda old, value: old + value,
    "atomic_max": lambda old, value: max(old, value),
    "atomic_min": lambda old, value: min(old, value),
}


@dataclass(frozen=True)
class Operation:
    kind: str  # load, store, atomic_add, atomic_max, atomic_min
    memory: list
    index: int
    value: Any = None

    def perform(self):
        old = self.memory[self.index]
        if self.kind == "store":
            self.memory[self.index] = self.value
        elif self.kind != "load":
            self.memory[self.index] = _ATOMIC[self.kind](old, self.value)
        return old


def load(memory: list, index: int) -> Operation:
    return Operation("load", memory, index)


def store(memory: list, index: int, value) -> Operation:
    return Operation("store", memory, index, value)


def atomic_add(memory: list, index: int, value) -> Operation:
    return Operation("atomic_add", memory, index, value)


def atomic_max(memory: list, index: int, value) -> Operation:
    return Operation("atomic_max", memory, index, value)


def atomic_min(memory: list, index: int, value) -> Operation:
    return Operation("atomic_min", memory, index, value)


SCHEDULES = ("in order", "round robin", "reverse round robin") + tuple(f"random {seed}" for seed in range(6))


def run(threads: list, schedule: str = "in order") -> list[tuple[int, Operation]]:
    """Run the threads (generators) to completion under `schedule`; return the trace (thread, operation).

    "in order": each thread runs to its end before the next starts (what the C++ emulation does);
    "round robin": one operation per thread in turn, so every thread loads before any stores;
    "reverse round robin": the same, starting from the last thread; "random <seed>": a random thread
    goes next at every step.
    """
    pending = {}
    for number, thread in enumerate(threads):
        _advance(pending, number, thread, None)
    picker = random.Random(int(schedule.split()[1])) if schedule.startswith("random") else None
    order = list(range(len(threads)))
    if schedule == "reverse round robin":
        order.reverse()
    elif picker is None and schedule not in ("in order", "round robin"):
        raise ValueError(f"schedule must be one of {SCHEDULES} (any seed), got {schedule!r}")
    trace = []
    while pending:
        if schedule == "in order":
            turn = [min(pending)]
        elif picker is not None:
            turn = [picker.choice(sorted(pending))]
        else:
            turn = [number for number in order if number in pending]
        for number in turn:
            operation = pending.pop(number)
            trace.append((number, operation))
            _advance(pending, number, threads[number], operation.perform())
    return trace


def _advance(pending: dict, number: int, thread, sent) -> None:
    """Run `thread` up to its next operation (recorded in `pending`) or its end."""
    try:
        operation = thread.send(sent)
    except StopIteration:
        return
    if not isinstance(operation, Operation):
        raise TypeError(f"a thread must yield memory operations (load, store, atomic_...), got {operation!r}")
    pending[number] = operation
