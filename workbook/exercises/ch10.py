"""Checks for chapter 10 (the error gallery)."""

from __future__ import annotations

import re

from workbook.course.checking import Mistake, exercise, expect_close, inplace_change_is_caught, raise_if_not_attempted

# What the learner's `diagnose` may answer: a cause of the gallery, each with its fix.
CAUSES = {
    "no ninja": "pip install ninja, or put the venv's bin/ on PATH",
    "stale lock": "a killed build left its lock file: with nothing building that extension, delete the file",
    "import torch first": "import torch before the extension, so that torch's libraries are loaded",
    "abi mismatch": "rebuild the extension against the torch you run (pip install --no-build-isolation ...)",
    "wrong library path": "pass torch.ops.load_library an existing path (absolute, or relative to the working folder)",
    "op library not loaded": "load the op library before its ops are used (load_library; in C++ --no-as-needed or dlopen)",
    "namespace registered twice": "load one build per TORCH_LIBRARY namespace and process; restart",
    "no fake kernel": "register a fake kernel (register_fake)",
    "data-dependent size": "ask for the size with torch.library.get_ctx().new_dynamic_size() in the fake kernel",
    "no autograd": "register a backward (torch.library.register_autograd)",
    "cpu-only torch": "install a CUDA build of torch (and a CUDA toolkit of its version): a CPU-only torch ignores CUDA_HOME",
    "cuda toolkit": "a CUDA torch: point CUDA_HOME at the toolkit (the folder holding bin/nvcc) of torch's CUDA major version",
}


@exercise("10.1 read the message, name the cause")
def check_diagnose(diagnose):
    """`diagnose(message)` returns the key of CAUSES that explains each message.

    The messages are drawn when the check runs: each cause the chapter teaches in several of the shapes
    torch, the loader, CMake and Python print it in, with names, paths and versions varied, often inside
    the traceback around it.
    """
    import torch

    generator = torch.Generator().manual_seed(1010)

    def number(low, high):
        return int(torch.randint(low, high + 1, (), generator=generator))

    def pick(options):
        return options[number(0, len(options) - 1)]

    def name():
        return pick(["my_ops", "geo", "fastseg", "pointops", "lab_kernels", "mesh_ext", "voxel", "sparse_tools"])

    def op():
        return pick(["blend", "voxelize", "knn", "nms", "roi_align", "segment_max", "fused_gelu", "ball_query"])

    def folder():
        user = pick(["ana", "kim", "jdoe", "mwu", "priya"])
        project = pick(["thesis/code", "proj", "work/seg", "src/model", "experiments"])
        return pick([f"/home/{user}/{project}", f"/scratch/{user}/{project}", f"/data/{user}/{project}"])

    def site_packages():
        python = pick(["3.10", "3.11", "3.12"])
        venv = pick([".venv", "venv", "miniconda3/envs/torch", "env"])
        return f"/home/{pick(['ana', 'kim', 'jdoe', 'mwu'])}/{venv}/lib/python{python}/site-packages"

    def traceback(*frames):
        """A Python traceback header and frames in front of the error line, as a learner copies it."""
        if number(0, 2) == 0:
            return ""  # the error line alone
        script = f"{folder()}/{pick(['train.py', 'main.py', 'run.py', 'test_ops.py'])}"
        lines = ["Traceback (most recent call last):", f'  File "{script}", line {number(3, 90)}, in <module>']
        lines.append(f"    {pick(frames)}" if frames else "    model = build()")
        return "\n".join(lines) + "\n"

    def lock_wait():
        torch_dir = f"{site_packages()}/torch"
        call = f'{pick(["ext", "module", "_C"])} = load(name="{name()}", sources=["{op()}.cpp"])'
        return (
            "Traceback (most recent call last):\n"
            f'  File "{folder()}/{pick(["setup_ops.py", "train.py", "build_ext.py"])}", line {number(3, 40)}, in <module>\n'
            f"    {call}\n"
            f'  File "{torch_dir}/utils/cpp_extension.py", line {number(1700, 1990)}, in load\n'
            "    return _jit_compile(\n"
            f'  File "{torch_dir}/utils/cpp_extension.py", line {number(2300, 2450)}, in _jit_compile\n'
            "    baton.wait()\n"
            f'  File "{torch_dir}/utils/file_baton.py", line {number(45, 55)}, in wait\n'
            "    time.sleep(self.wait_seconds)\n"
            "KeyboardInterrupt"
        )

    def mangled():
        return pick(
            [
                "_ZN5torch3jit17parseSchemaOrNameERKSsb",
                "_ZN3c106detail14torchCheckFailEPKcS2_jRKSs",
                "_ZN2at4_ops10add_Tensor4callERKNS_6TensorES4_RKN3c106ScalarE",
                "_ZN3c1017RegisterOperatorsD1Ev",
                "_ZNK3c1010TensorImpl15incref_pyobjectEv",
                "_ZN3c104cuda20getCurrentCUDAStreamEa",
            ]
        )

    def load_library_failure(path, reason):
        return (
            f"{traceback()}OSError: {reason}\n\nThe above exception was the direct cause of the following exception:\n\n"
            f'Traceback (most recent call last):\n  File "{folder()}/run.py", line {number(3, 60)}, in <module>\n'
            f"    torch.ops.load_library({path!r})\nOSError: Could not load this library: {path}"
        )

    def so_path():
        return pick(
            [
                f"{folder()}/build/lib{name()}.so",
                f"/home/{pick(['ana', 'kim'])}/.cache/torch_extensions/py311_cpu/{name()}/{name()}.so",
                f"{folder()}/{name()}/_C.cpython-311-x86_64-linux-gnu.so",
            ]
        )

    def relative_so():
        return pick([f"build/lib{name()}.so", f"../build/{name()}.so", f"lib{name()}.so", f"csrc/build/lib{op()}.so"])

    def cuda_home():
        return pick(["/usr/local/cuda-12.4", "/opt/cuda", "/usr/lib/cuda", f"/home/{pick(['ana', 'kim'])}/cuda-12.8"])

    qualified = lambda: f"{name()}::{op()}"  # noqa: E731
    not_set = "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root."
    ambiguous_cuda = ("cpu-only torch", "cuda toolkit")  # the same words from a CPU-only torch and a CUDA one

    makers = {
        ("no ninja",): [
            lambda: (
                f"{traceback('ext = load(name=NAME, sources=SOURCES)')}RuntimeError: Ninja is required to load C++ "
                "extensions (pip install ninja to get it)"
            ),
            lambda: (
                f"W{number(1, 12):02d}{number(1, 28):02d} 10:{number(10, 59)}:{number(10, 59)}.{number(1, 999999):06d} "
                f"{number(1000, 99999)} torch/utils/cpp_extension.py:{number(760, 800)}] Attempted to use ninja as the "
                "BuildExtension backend but we could not find ninja.. Falling back to using the slow distutils backend."
            ),
            lambda: (
                'CMake Error: CMake was unable to find a build program corresponding to "Ninja".  '
                "CMAKE_MAKE_PROGRAM is not set.  You probably need to select a different build tool.\n"
                "-- Configuring incomplete, errors occurred!"
            ),
        ],
        ("stale lock",): [lock_wait],
        ("import torch first",): [
            lambda: (
                f"{traceback(f'import {name()}_cpp', f'from {name()} import _C')}ImportError: "
                f"{pick(['libc10.so', 'libtorch_cpu.so', 'libtorch.so', 'libtorch_python.so', 'libc10_cuda.so'])}: "
                "cannot open shared object file: No such file or directory"
            ),
            lambda: (
                f"{traceback(f'ctypes.CDLL({relative_so()!r})')}OSError: {pick(['libc10.so', 'libtorch_cpu.so'])}: "
                "cannot open shared object file: No such file or directory"
            ),
        ],
        ("abi mismatch",): [
            lambda: f"{traceback(f'import {name()}_cpp')}ImportError: {so_path()}: undefined symbol: {mangled()}",
            lambda: load_library_failure(path := so_path(), f"{path}: undefined symbol: {mangled()}"),
        ],
        ("wrong library path",): [
            lambda: load_library_failure(
                path := relative_so(), f"{path}: cannot open shared object file: No such file or directory"
            )
        ],
        ("op library not loaded",): [
            lambda: (
                f"RuntimeError: \nUnknown builtin op: {(qualified_op := qualified())}.\nCould not find any similar "
                f"ops to {qualified_op}. This op may not exist or may not be currently supported in TorchScript.\n:\n"
                f'  File "code/__torch__.py", line {number(8, 30)}\n    return ops.{qualified_op.replace("::", ".")}(x)'
            ),
            lambda: (
                f"terminate called after throwing an instance of 'c10::Error'\n  what():  Could not find schema for "
                f"{qualified()}.\nException raised from findSchemaOrThrow at ../aten/src/ATen/core/dispatch/Dispatcher.cpp:"
                f"{number(100, 200)}"
            ),
            lambda: (
                f"{traceback('y = torch.ops.NS.OP(x)')}AttributeError: '_OpNamespace' '{name()}' object has no "
                f"attribute '{op()}'"
            ),
        ],
        ("namespace registered twice",): [
            lambda: (
                "terminate called after throwing an instance of 'c10::Error'\n  what():  Only a single "
                f"TORCH_LIBRARY can be used to register the namespace {(namespace := name())}; please put all of your "
                "definitions in a single TORCH_LIBRARY block.  If you were trying to specify implementations, consider "
                "using TORCH_LIBRARY_IMPL (which can be duplicated).  If you really intended to define operators for a "
                "single namespace in a distributed way, you can use TORCH_LIBRARY_FRAGMENT to explicitly indicate this.  "
                f"Previous registration of TORCH_LIBRARY was registered at {folder()}/{namespace}.cpp:{number(20, 90)}; "
                f"latest registration was registered at {folder()}/{namespace}.cpp:{number(20, 90)}"
            ),
            lambda: (
                traceback("lib = torch.library.Library(NS, 'DEF')")
                + f"RuntimeError: Only a single TORCH_LIBRARY can be used to register the namespace {name()}; please put all of your definitions in a single "
                "TORCH_LIBRARY block."
            ),
        ],
        ("no fake kernel",): [
            lambda: (
                f"torch._dynamo.exc.TorchRuntimeError: Dynamo failed to run FX node with fake tensors: call_function "
                f"{(ns := name())}.{(o := op())}.default(*(FakeTensor(..., size=({number(2, 64)},)),), **{{}}): got "
                f"RuntimeError('There was no fake impl registered for <CustomOpDef({ns}::{o})>. This is necessary for "
                "torch.compile/export/fx tracing to work.')"
            ),
            lambda: (
                "torch._dynamo.exc.Unsupported: Operator does not support running with fake tensors\n  "
                f"Explanation: \n  Developer debug context: unsupported operator: {name()}.{op()}.default"
            ),
            lambda: f"torch._subclasses.fake_tensor.UnsupportedOperatorException: {name()}.{op()}.default",
            lambda: (
                f"NotImplementedError: {qualified()}: attempted to run this operator with Meta tensors, but there "
                "was no fake impl or Meta kernel registered."
            ),
        ],
        ("data-dependent size",): [
            lambda: (
                "torch._dynamo.exc.UserError: Could not extract specialized integer from data-dependent expression "
                f"u{(k := number(0, 9))} (unhinted: u{k}).  (Size-like symbols: none)"
            ),
            lambda: (
                "torch._dynamo.exc.UserError: Could not guard on data-dependent expression "
                f"{pick(['zuf0 > 0.0', f'Eq(u{number(0, 9)}, 0)', f'u{number(0, 9)} < 1'])} (unhinted: ...).  "
                "(Size-like symbols: none)"
            ),
            lambda: (
                "torch.fx.experimental.symbolic_shapes.PendingUnbackedSymbolNotFound: Pending unbacked symbols "
                f"{{u{number(0, 4)}}} not in returned outputs FakeTensor(..., size=(u{number(5, 9)},)).\nDid you "
                "accidentally call new_dynamic_size() or item() more times than you needed to in your fake implementation?"
            ),
        ],
        ("no autograd",): [
            lambda: (
                f"UserWarning: {qualified()}: an autograd kernel was not registered to the Autograd key(s) but we "
                "are trying to backprop through it. This may lead to silently incorrect behavior."
            ),
            lambda: (
                f"{traceback('loss.backward()')}RuntimeError: Trying to backward through {name()}.{op()}.default but "
                "no autograd formula was registered. Please use register_autograd to add one."
            ),
        ],
        ("cpu-only torch",): [
            lambda: (
                traceback("x = x.cuda()", "model.to('cuda')", "y = torch.zeros(8, device='cuda')")
                + "AssertionError: Torch not compiled with CUDA enabled"
            )
        ],
        ("cuda toolkit",): [
            lambda: (
                f"FileNotFoundError: nvcc not found at '{(home := cuda_home())}/bin/nvcc'. Ensure CUDA path "
                f"'{home}' is correct."
            ),
            lambda: (
                f"{traceback('setup(ext_modules=[CUDAExtension(...)], ...)')}RuntimeError: ('The detected CUDA "
                "version (%s) mismatches the version that was used to compilePyTorch (%s). Please make sure to use the same "
                f"CUDA versions.', '{pick(['11.8', '12.4', '12.6'])}', '{pick(['13.0', '13.1'])}')"
            ),
            lambda: (
                f"RuntimeError: Error building extension '{name()}': [1/2] {(home := cuda_home())}/bin/nvcc -c "
                f"{(kernel := op())}.cu -o {kernel}.cuda.o\nFAILED: {kernel}.cuda.o\n"
                + pick(
                    [
                        f"/bin/sh: 1: {home}/bin/nvcc: not found",
                        f"ccache: error: execute_noreturn of {home}/bin/nvcc failed",
                    ]
                )
            ),
        ],
        ambiguous_cuda: [
            lambda: traceback("ext = load(name=NAME, sources=['kernel.cu'])") + not_set,
            lambda: (
                "RuntimeError: CUDA was not found on the system, please set the CUDA_HOME or the CUDA_PATHenvironment "
                "variable or add NVCC to your system PATH. The extension compilation will fail."
            ),
        ],
    }
    drawn = [
        (make(), accepted)
        for accepted, templates in makers.items()
        for make in templates
        for _ in range(max(2, -(-4 // len(templates))))  # at least four messages of each cause
    ]
    order = torch.randperm(len(drawn), generator=generator).tolist()
    drawn = [drawn[i] for i in order]

    wrong = []
    for message, accepted in drawn:
        try:
            answer = diagnose(message)
        except NotImplementedError:
            raise
        except Exception as error:
            raise_if_not_attempted(error)
            reason = (str(error).strip().splitlines() or [""])[0][:100]
            raise Mistake(
                f"diagnose raised {type(error).__name__} ({reason}) on the message {_headline(message)!r}: it must "
                "name a cause for every message, also for wordings, names and paths it has not seen before"
            ) from None
        if answer not in CAUSES:
            raise Mistake(
                f"diagnose returned {answer!r}; it should return one of the keys of CAUSES: "
                f"{', '.join(map(repr, CAUSES))}"
            )
        if answer not in accepted:
            wrong.append((message, answer))
    if wrong:
        message, answer = wrong[0]
        raise Mistake(
            f"{len(wrong)} of {len(drawn)} messages diagnosed wrongly, the first: {_headline(message)[:300]!r} is not "
            f"caused by {answer!r} (read the whole message: the traceback and every line of it)"
        )


def _headline(message: str) -> str:
    """The lines of a message that name its errors (and the last traceback frame), for a failure report."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    named = []
    for i, line in enumerate(lines):
        if _ERROR_LINE.match(line):
            bare = line.endswith(":") and i + 1 < len(lines)  # `RuntimeError: ` with the message on the next line
            named.append(f"{line} {lines[i + 1]}" if bare else line)
    frames = [line for line in lines if line.startswith("File ")]
    return " … ".join(frames[-1:] + named) if named else lines[0]


_ERROR_LINE = re.compile(r"([\w.]+(Error|Exception|Warning|Interrupt|NotFound)\b|what\(\):|CMake Error)")


@exercise("10.2 the missing fake kernel")
def check_fake_kernel(fake):
    """`fake(a, b)` describes pairwise_distance's output, so that torch.compile(fullgraph=True) works."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from workbook.chapters import troubleshooting

    op = troubleshooting.new_pairwise_distance()
    op.register_fake(fake)
    cases = _distance_cases()
    for a, b, layout in cases:
        described = f"a of shape {tuple(a.shape)} ({layout}, {a.dtype}) and b of shape {tuple(b.shape)}"
        try:
            with FakeTensorMode() as mode:
                output = op(mode.from_tensor(a), mode.from_tensor(b))
        except NotImplementedError:
            raise
        except Exception as error:
            raise_if_not_attempted(error)
            reason = str(error).strip().splitlines()[0][:160] if str(error).strip() else type(error).__name__
            raise Mistake(
                f"for {described}, the fake kernel failed on fake tensors ({type(error).__name__}: {reason}). A fake "
                "tensor has a shape, dtype and device but no values: build the output from a.shape, b.shape and "
                "a.dtype only (no .item(), int(), bool() or .numpy() of a tensor)"
            ) from None
        if not isinstance(output, torch.Tensor):
            raise Mistake(f"the fake kernel should return a tensor, got {type(output).__name__}")
        results = torch.library.opcheck(op, (a, b), test_utils=("test_faketensor",), raise_exception=False)
        if results["test_faketensor"] != "SUCCESS":
            error = str(results["test_faketensor"])
            detail = next((line for line in error.splitlines() if "mismatch" in line), error.splitlines()[0])
            raise Mistake(
                f"for {described}, the fake kernel's output does not match the real one: {detail.strip()[:250]}"
            )
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: op(a, b).clamp(max=2.0), fullgraph=True, backend="aot_eager", dynamic=True)
    for a, b, _layout in cases[:2]:
        expect_close(
            compiled(a, b),
            op(a, b).clamp(max=2.0),
            f"the compiled result for shapes {tuple(a.shape)} and {tuple(b.shape)}",
        )


def _distance_cases():
    """(a, b, layout) triples at sizes drawn now: float32 and float64, a non-contiguous a, an empty a."""
    import torch

    generator = torch.Generator().manual_seed(1020)

    def size(low, high):
        return int(torch.randint(low, high + 1, (), generator=generator))

    cases = []
    for dtype, layout in [
        (torch.float64, "contiguous"),
        (torch.float32, "contiguous"),
        (torch.float64, "non-contiguous"),
        (torch.float32, "empty"),
    ]:
        rows, others = size(2, 12), size(2, 12)
        while others == rows:
            others = size(2, 12)
        columns = size(1, 6)
        while columns in (rows, others):
            columns = size(1, 6)
        if layout == "non-contiguous":  # a's rows spaced out in memory: every other column of a wider tensor
            a = torch.randn(rows, 2 * columns, dtype=dtype, generator=generator)[:, ::2]
        else:
            a = torch.randn(0 if layout == "empty" else rows, columns, dtype=dtype, generator=generator)
        cases.append((a, torch.randn(others, columns, dtype=dtype, generator=generator), layout))
    return cases


@exercise("10.3 a gradient that was None")
def check_scale_rows_autograd(setup_context, backward):
    """setup_context(ctx, inputs, output) and backward(ctx, grad) give scale_rows the gradients of
    both x and weight."""
    import torch

    from workbook.chapters import troubleshooting

    returned = []

    def counted_backward(ctx, grad):
        result = backward(ctx, grad)
        returned.append(result)
        if not isinstance(result, tuple | list) or len(result) != 2:
            got = f"{len(result)} values" if isinstance(result, tuple | list) else f"one {type(result).__name__}"
            raise Mistake(
                f"backward returned {got}; it must return a tuple of two gradients, one per input of "
                "scale_rows(x, weight), in that order (None for an input that needs none)"
            )
        return tuple(result)

    op = troubleshooting.new_scale_rows()
    torch.library.register_autograd(op, counted_backward, setup_context=setup_context)
    for x, weight, grad_output, described in _scale_rows_cases():
        incoming = grad_output.clone()
        wanted = [t for t in (x, weight) if t.requires_grad]
        try:
            got = torch.autograd.grad(op(x, weight), wanted, grad_output, allow_unused=True)
        except (NotImplementedError, Mistake):
            raise
        except Exception as error:
            raise_if_not_attempted(error)
            reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
            raise Mistake(f"for {described}, your backward raised {type(error).__name__}: {reason}") from None
        if not torch.equal(grad_output, incoming):
            raise Mistake(
                f"for {described}, backward changed the incoming gradient in place; autograd may use it elsewhere: "
                "compute new tensors instead (grad * w, not grad.mul_(w))"
            )
        x_ref, weight_ref = x.detach().requires_grad_(), weight.detach().requires_grad_()
        expected = torch.autograd.grad(x_ref * weight_ref.unsqueeze(1), (x_ref, weight_ref), grad_output)
        expected = [e for e, t in zip(expected, (x, weight)) if t.requires_grad]
        names = [n for n, t in zip(("x", "weight"), (x, weight)) if t.requires_grad]
        for name, got_grad, expected_grad in zip(names, got, expected):
            if got_grad is None:
                raise Mistake(
                    f"for {described}, the gradient of {name} is None: backward must return one gradient per input, "
                    "in the order of the schema (x, weight)"
                )
            expect_close(got_grad, expected_grad, f"for {described}, the gradient of {name}")
        for name, value, tensor in zip(("x", "weight"), returned[-1], (x, weight)):
            if isinstance(value, torch.Tensor) and value.dtype != tensor.dtype:
                raise Mistake(
                    f"for {described}, backward returned the gradient of {name} as {value.dtype} for a {tensor.dtype} "
                    f"{name}: autograd casts it back, but the rounding stays; compute it in {name}'s dtype"
                )
    _expect_saved_for_backward(op)


def _expect_saved_for_backward(op):
    """x or weight changed in place between forward and backward: autograd must refuse, or the gradients stay
    right."""
    import torch

    generator = torch.Generator().manual_seed(1031)
    leaves = (
        torch.randn(4, 3, dtype=torch.float64, generator=generator, requires_grad=True),
        torch.randn(4, dtype=torch.float64, generator=generator, requires_grad=True),
    )
    for changed, name in enumerate(("x", "weight")):
        if not inplace_change_is_caught(op, lambda x, weight: x * weight.unsqueeze(1), leaves, changed=changed):
            raise Mistake(
                f"after {name} was changed in place between forward and backward, backward silently used its new "
                "values and returned a wrong gradient: save x and weight with ctx.save_for_backward(x, weight) in "
                "setup_context, which notices such changes (tensors kept as ctx attributes are not checked)"
            )


def _scale_rows_cases():
    """(x, weight, incoming gradient, description) at sizes drawn now, with non-contiguous and expanded
    tensors, a zero weight, and inputs of which only one needs a gradient."""
    import torch

    generator = torch.Generator().manual_seed(1030)

    def size(low, high):
        return int(torch.randint(low, high + 1, (), generator=generator))

    def randn(*shape, dtype=torch.float64):
        return torch.randn(*shape, dtype=dtype, generator=generator)

    cases = []
    plans = [
        ("contiguous", "contiguous", "both"),
        ("contiguous", "contiguous", "both"),
        ("non-contiguous", "non-contiguous", "both"),
        ("contiguous", "expanded", "both"),
        ("transposed", "contiguous", "x only"),
        ("contiguous", "non-contiguous", "weight only"),
    ]
    for x_layout, grad_layout, needs in plans:
        rows, columns = size(2, 9), size(1, 7)
        while columns == rows:
            columns = size(1, 7)
        if x_layout == "transposed":
            x = randn(columns, rows).t()
        elif x_layout == "non-contiguous":
            x = randn(rows, 2 * columns)[:, 1::2]
        else:
            x = randn(rows, columns)
        weight = randn(rows)
        weight[size(0, rows - 1)] = 0.0  # a zero scale: x cannot be recovered from the output
        if grad_layout == "expanded":  # what .sum() and broadcasting hand backward: one stored value per row
            grad_output = randn(rows, 1).expand(rows, columns)
        elif grad_layout == "non-contiguous":
            grad_output = randn(columns, rows).t()
        else:
            grad_output = randn(rows, columns)
        x.requires_grad_(needs in ("both", "x only"))
        weight.requires_grad_(needs in ("both", "weight only"))
        described = f"x of shape {(rows, columns)} ({x_layout}), an incoming gradient that is {grad_layout}" + (
            "" if needs == "both" else f", gradient wanted for {needs.replace(' only', '')} only"
        )
        cases.append((x, weight, grad_output, described))
    return cases
