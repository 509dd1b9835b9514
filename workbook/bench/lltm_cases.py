"""The LLTM cell: Python (torch functions), torch.compile of that Python cell, and the C++ versions.

C++: workbook.ops.lltm.lltm_cpp (pybind11 functions behind a Python autograd.Function) and lltm_op (the
torch.ops operator with its autograd registered). Three tasks: forward alone (no autograd); forward
+ backward (the outputs and the five input gradients, torch.autograd.grad with given incoming
gradients); a training step (through loss = h.sum() + c.sum() and loss.backward() into .grad).
The forward row also gets a breakdown of the C++ forward: the extension's function without the
autograd.Function around it, and the matrix product inside (which the Python cell makes too).
"""

from __future__ import annotations

import torch

from workbook.bench.timing import Settings, side_by_side, us

VERSIONS = {"Python": "python", "torch.compile": "compiled", "C++": "lltm.lltm_cpp", "C++ op": "lltm.lltm_op"}
TASKS = {
    "forward": "with torch.no_grad(): {f}(*plain)",
    "forward+backward": "torch.autograd.grad({f}(*grad), grad, incoming)",
    "training step": "h, c = {f}(*grad); (h.sum() + c.sum()).backward()\nfor t in grad: t.grad = None",
}
RATIOS = (("C++", "Python"), ("C++", "torch.compile"), ("C++ op", "Python"), ("torch.compile", "Python"))


def run(settings: Settings, batch: int = 16, inputs: int = 32, state: int = 128) -> list[dict]:
    from workbook.ops import lltm

    lltm.load_extension()
    generator = torch.Generator().manual_seed(1)
    env = {
        "lltm": lltm,
        "torch": torch,
        "python": lltm.lltm_python,
        "compiled": torch.compile(lltm.lltm_python),
        "plain": lltm.make_inputs(batch, inputs, state),
        "grad": lltm.make_inputs(batch, inputs, state, requires_grad=True),
        "incoming": (torch.randn(batch, state, generator=generator), torch.randn(batch, state, generator=generator)),
    }
    print(
        f"LLTM cell: batch {batch}, {inputs} inputs, state {state}, float32 (ratio = other / first, > 1: first faster)"
    )
    print(
        "  "
        + f"{'':17}"
        + "".join(f"{name:>14}" for name in VERSIONS)
        + "".join(f"  {a + ' vs ' + b:>24}" for a, b in RATIOS)
    )
    rows = []
    for task, template in TASKS.items():
        times = side_by_side({name: (template.format(f=f), env) for name, f in VERSIONS.items()}, settings)
        medians = {name: times[name]["median_s"] for name in VERSIONS}
        ratios = {f"{a} vs {b}": medians[b] / medians[a] for a, b in RATIOS}
        rows.append(
            {"task": task, "batch": batch, "inputs": inputs, "state": state, "times_s": medians, "ratios": ratios}
        )
        print(
            f"  {task:17}"
            + "".join(us(medians[name]).rjust(14) for name in VERSIONS)
            + "".join(f"  {ratio:23.2f}x" for ratio in ratios.values())
        )
    rows[0]["breakdown_s"] = forward_breakdown(env, settings)
    return rows


def forward_breakdown(env: dict, settings: Settings) -> dict[str, float]:
    """Where the C++ forward's time goes: the extension's function without the autograd.Function
    around it, and the one matrix product in it (the same addmm the Python cell makes)."""
    input, weights, bias, old_h, _ = env["plain"]
    parts = {
        "C++ forward": ("with torch.no_grad(): lltm.lltm_cpp(*plain)", env),
        "extension function alone": ("extension.forward(*plain)", {**env, "extension": env["lltm"].load_extension()}),
        "its addmm": (
            "torch.addmm(bias, X, weights_t)",
            {"torch": torch, "bias": bias, "X": torch.cat([old_h, input], 1), "weights_t": weights.t()},
        ),
    }
    medians = {name: times["median_s"] for name, times in side_by_side(parts, settings).items()}
    print(
        f"  the C++ forward's {us(medians['C++ forward']).strip()}: the extension's function alone "
        f"{us(medians['extension function alone']).strip()}, of which its addmm {us(medians['its addmm']).strip()}"
    )
    return medians
