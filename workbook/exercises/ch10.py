"""Checks for chapter 10 (the error gallery)."""

from __future__ import annotations

from ..checking import Mistake, exercise, expect_close

# What the learner's `diagnose` may answer: a cause of the gallery, each with its fix.
CAUSES = {
    "no ninja": "pip install ninja, or put the venv's bin/ on PATH",
    "stale lock": "delete the lock file the interrupted build left in its build folder",
    "import torch first": "import torch before the extension, so that torch's libraries are loaded",
    "abi mismatch": "rebuild the extension against the torch you run (pip install --no-build-isolation ...)",
    "wrong library path": "pass torch.ops.load_library an existing path (absolute, or relative to the working folder)",
    "op library not loaded": "load the op library before the model (--no-as-needed, dlopen, load_library)",
    "namespace registered twice": "load one build per TORCH_LIBRARY namespace and process; restart",
    "no fake kernel": "register a fake kernel (register_fake)",
    "data-dependent size": "ask for the size with torch.library.get_ctx().new_dynamic_size() in the fake kernel",
    "no autograd": "register a backward (torch.library.register_autograd)",
    "cuda home": "point CUDA_HOME at a CUDA toolkit of torch's CUDA version",
}

# Messages in the shapes the gallery showed them, with other names, paths and numbers.
_MESSAGES = [
    ("RuntimeError: Ninja is required to load C++ extensions (pip install ninja to get it)", "no ninja"),
    ("ImportError: libc10.so: cannot open shared object file: No such file or directory", "import torch first"),
    (
        "ImportError: build/torch_extensions/my_ext/my_ext.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev",
        "abi mismatch",
    ),
    ("OSError: Could not load this library: lib/libmy_ops.so", "wrong library path"),
    (
        "RuntimeError: Unknown builtin op: my_ops::blend.\nCould not find any similar ops to my_ops::blend. "
        "This op may not exist or may not be currently supported in TorchScript.",
        "op library not loaded",
    ),
    ("error: Could not find schema for my_ops::blend.", "op library not loaded"),
    (
        "terminate called after throwing an instance of 'c10::Error'\n  what():  Only a single TORCH_LIBRARY can "
        "be used to register the namespace my_ops; please put all of your definitions in a single TORCH_LIBRARY "
        "block.",
        "namespace registered twice",
    ),
    (
        "torch._dynamo.exc.TorchRuntimeError: RuntimeError when making fake tensor call ... got RuntimeError('There "
        "was no fake impl registered for <CustomOpDef(my_ops::blend)>. This is necessary for "
        "torch.compile/export/fx tracing to work.')",
        "no fake kernel",
    ),
    (
        "torch._dynamo.exc.UserError: Could not extract specialized integer from data-dependent expression u3 "
        "(unhinted: u3).  (Size-like symbols: none)",
        "data-dependent size",
    ),
    (
        "UserWarning: my_ops::blend: an autograd kernel was not registered to the Autograd key(s) but we are "
        "trying to backprop through it. This may lead to silently incorrect behavior.",
        "no autograd",
    ),
    ("OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.", "cuda home"),
    (
        "RuntimeError: The detected CUDA version (12.4) mismatches the version that was used to compilePyTorch "
        "(13.0). Please make sure to use the same CUDA versions.",
        "cuda home",
    ),
    ("(no output: still waiting when the timeout killed it)", "stale lock"),
]


@exercise("10.1 read the message, name the cause")
def check_diagnose(diagnose):
    """`diagnose(message)` returns the key of CAUSES that explains each message."""
    wrong = []
    for message, cause in _MESSAGES:
        answer = diagnose(message)
        if answer not in CAUSES:
            raise Mistake(
                f"diagnose returned {answer!r}; it should return one of the keys of CAUSES: "
                f"{', '.join(map(repr, CAUSES))}"
            )
        if answer != cause:
            wrong.append((message, answer))
    if wrong:
        message, answer = wrong[0]
        first_line = message.splitlines()[0]
        raise Mistake(
            f"{len(wrong)} of {len(_MESSAGES)} messages diagnosed wrongly, the first: "
            f"{first_line[:110]!r} is not caused by {answer!r}"
        )


def _distance_samples():
    import torch

    generator = torch.Generator().manual_seed(10)
    return [
        (
            torch.randn(4, 3, dtype=torch.float64, generator=generator),
            torch.randn(6, 3, dtype=torch.float64, generator=generator),
        ),
        (torch.randn(7, 2, generator=generator), torch.randn(5, 2, generator=generator)),
    ]


@exercise("10.2 the missing fake kernel")
def check_fake_kernel(fake):
    """`fake(a, b)` describes pairwise_distance's output, so that torch.compile(fullgraph=True) works."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .. import troubleshooting

    op = troubleshooting.new_pairwise_distance()
    op.register_fake(fake)
    a, b = _distance_samples()[0]
    with FakeTensorMode() as mode:
        output = op(mode.from_tensor(a), mode.from_tensor(b))
    if not isinstance(output, torch.Tensor):
        raise Mistake(f"the fake kernel should return a tensor, got {type(output).__name__}")
    for a, b in _distance_samples():
        results = torch.library.opcheck(op, (a, b), test_utils=("test_faketensor",), raise_exception=False)
        if results["test_faketensor"] != "SUCCESS":
            error = str(results["test_faketensor"])
            detail = next((line for line in error.splitlines() if "mismatch" in line), error.splitlines()[0])
            raise Mistake(
                f"for a of shape {tuple(a.shape)} ({a.dtype}) and b of shape {tuple(b.shape)}, the fake "
                f"kernel's output does not match the real one: {detail.strip()[:250]}"
            )
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: op(a, b).clamp(max=2.0), fullgraph=True, backend="aot_eager")
    for a, b in _distance_samples():
        expect_close(
            compiled(a, b),
            op(a, b).clamp(max=2.0),
            f"the compiled result for shapes {tuple(a.shape)} and {tuple(b.shape)}",
        )


@exercise("10.3 a gradient that was silently None")
def check_scale_rows_autograd(setup_context, backward):
    """setup_context(ctx, inputs, output) and backward(ctx, grad) give scale_rows the gradients of
    both x and weight."""
    import torch

    from .. import troubleshooting

    op = troubleshooting.new_scale_rows()
    torch.library.register_autograd(op, backward, setup_context=setup_context)
    generator = torch.Generator().manual_seed(3)
    for rows, columns in [(4, 3), (3, 3), (5, 1)]:
        x = torch.randn(rows, columns, dtype=torch.float64, generator=generator, requires_grad=True)
        weight = torch.randn(rows, dtype=torch.float64, generator=generator, requires_grad=True)
        grad_output = torch.randn(rows, columns, dtype=torch.float64, generator=generator)
        got = torch.autograd.grad(op(x, weight), (x, weight), grad_output, allow_unused=True)
        expected = torch.autograd.grad(x * weight.unsqueeze(1), (x, weight), grad_output)
        for name, got_grad, expected_grad in zip(("x", "weight"), got, expected):
            if got_grad is None:
                raise Mistake(
                    f"the gradient of {name} is None: backward must return one gradient per input, "
                    f"in the order of the schema (x, weight)"
                )
            expect_close(got_grad, expected_grad, f"the gradient of {name} (x of shape {(rows, columns)})")
