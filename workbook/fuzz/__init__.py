"""Fuzzing the workbook's compiled ops in a child process, where a crash is a result, not the end.

A case is plain data (JSON): which call to make, its arguments as recipes (`tensor` specs, or plain
Python values), and what must happen: `"expect": "result"` (the call must return what a reference
computes, gradients included when an input requires grad) or `"expect": "error"` (the call must
raise an exception whose message names one of `"names"`, the arguments the case broke).

    results = fuzz.run_cases(cases)      # [{"case": ..., "ok": bool, "detail": str}, ...]

`run_cases` starts `python -m workbook.fuzz`, which loads every op library once and runs the cases
one after the other, writing each case's number to a journal file before it starts. If the child
dies (a signal, an abort, a hang past the timeout), the journal names the case that killed it; that
case is reported as a crash and a new child carries on with the next one.

A tensor spec: {"shape": [2, 3], "dtype": "float32", "layout": "contiguous", "device": "cpu",
"grad": False, "special": None, "values": None, "seed": 0}. `layout` is contiguous, transposed,
sliced (every other element), expanded (stride 0 along dim 0) or overlap (windows of one buffer);
`special` puts a nan, inf or -inf first; `values` gives the elements (row-major) instead of random
ones.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from workbook import REPO_ROOT

CHILD_TIMEOUT_S = 300

# ---- building the arguments ------------------------------------------------------------------------


def make_tensor(spec: dict):
    import torch

    dtype = getattr(torch, spec.get("dtype", "float32"))
    shape = list(spec["shape"])
    generator = torch.Generator().manual_seed(spec.get("seed", 0))
    if spec.get("values") is not None:
        x = torch.tensor(spec["values"], dtype=dtype).reshape(shape)
    elif dtype.is_complex:
        x = torch.randn(shape, generator=generator, dtype=torch.complex64).to(dtype)
    elif dtype.is_floating_point:
        x = torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
    elif dtype == torch.bool:
        x = torch.randint(0, 2, shape, generator=generator).bool()
    else:
        low = 0 if dtype == torch.uint8 else -4
        x = torch.randint(low, 5, shape, generator=generator).to(dtype)
    if spec.get("special") and x.numel() and x.is_floating_point():
        x.view(-1)[0] = float(spec["special"])
    leaf = x
    if spec.get("grad"):
        leaf.requires_grad_()
        if not spec.get("leaf", True):  # e.g. an out= tensor, which the op writes in place
            x = x * 1
    x = _with_layout(x, spec.get("layout", "contiguous"))
    x.fuzz_leaf = leaf  # what gradients are taken with respect to
    if spec.get("device", "cpu") != "cpu":
        x = x.to(spec["device"])
    return x


def _with_layout(x, layout: str):
    """The values of x (a contiguous tensor) in another memory layout; differentiable."""
    import torch

    if layout == "contiguous" or x.dim() == 0:
        return x
    if layout == "transposed":
        return x.transpose(0, -1).contiguous().transpose(0, -1)
    if layout == "sliced":
        doubled = torch.stack([x, torch.zeros_like(x)], dim=-1)
        return doubled.flatten(-2)[..., ::2]
    if layout == "expanded":
        return x.narrow(0, 0, min(1, x.shape[0])).expand(x.shape)
    if layout == "overlap":  # each row starts one element after the previous one
        flat = x.flatten()
        if flat.numel() < sum(size - 1 for size in x.shape) + 1:
            return x
        return flat.as_strided(x.shape, [1] * x.dim())
    raise ValueError(f"unknown layout {layout!r}")


def make_value(recipe):
    """A tensor from a {"tensor": spec} recipe, a list of recipes as a list, anything else as it is."""
    if isinstance(recipe, dict) and "tensor" in recipe:
        return make_tensor(recipe["tensor"])
    if isinstance(recipe, list):
        return [make_value(item) for item in recipe]
    return recipe


# ---- comparing -------------------------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


def tolerance(dtype) -> dict:
    import torch

    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 2e-2, "atol": 2e-2}
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-5}
    if dtype == torch.float64:
        return {"rtol": 1e-9, "atol": 1e-12}
    return {"rtol": 0, "atol": 0}


def assert_same(got, expected, what="result"):
    import torch

    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            raise Mismatch(f"{what}: expected {len(expected)} values, got {type(got).__name__} {got!r:.80}")
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_same(g, e, f"{what}[{i}]")
        return
    if not isinstance(expected, torch.Tensor):
        if got != expected:
            raise Mismatch(f"{what}: expected {expected!r}, got {got!r}")
        return
    if not isinstance(got, torch.Tensor):
        raise Mismatch(f"{what}: expected a tensor, got {type(got).__name__}")
    for attribute in ("shape", "dtype", "device"):
        if getattr(got, attribute) != getattr(expected, attribute):
            raise Mismatch(f"{what}: {attribute} {getattr(got, attribute)}, expected {getattr(expected, attribute)}")
    if got.device.type == "meta":
        return
    try:
        torch.testing.assert_close(got.detach(), expected.detach(), equal_nan=True, **tolerance(got.dtype))
    except AssertionError as error:
        raise Mismatch(f"{what}: {str(error).strip().splitlines()[-3:]}") from None


def assert_same_gradients(got_outputs, expected_outputs, got_inputs, expected_inputs, names):
    """Gradients of sum(output * weight) with respect to each input, for the op and the reference."""
    import torch

    got_outputs, expected_outputs = _float_outputs(got_outputs), _float_outputs(expected_outputs)
    generator = torch.Generator().manual_seed(0)
    weights = [torch.randn(o.shape, generator=generator, dtype=torch.float64).to(o.dtype) for o in expected_outputs]

    def grads(outputs, inputs):
        terms = [(o * w.to(o.device)).sum() for o, w in zip(outputs, weights) if o.requires_grad]
        if not terms:
            return [None] * len(inputs)
        return torch.autograd.grad(sum(terms), inputs, allow_unused=True)

    for name, tensor, g, e in zip(
        names, got_inputs, grads(got_outputs, got_inputs), grads(expected_outputs, expected_inputs)
    ):
        if e is None:
            e = torch.zeros_like(expected_inputs[names.index(name)])
        if g is None and tensor.numel() == 0:
            continue  # an empty input: None is its (empty) gradient
        if g is None:
            raise Mismatch(f"gradient of {name}: None (no gradient reached it)")
        assert_same(g, e.to(g.dtype), f"gradient of {name}")


def _float_outputs(outputs):
    outputs = outputs if isinstance(outputs, (tuple, list)) else [outputs]
    return [o for o in outputs if o.is_floating_point()]


def names_argument(message: str, names) -> bool:
    return any(re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message) for name in names)


# ---- the ops and their references ------------------------------------------------------------------


def _scatter_call(case, args):
    """scatter_* through torch.ops (functional or accumulate overload) or the torch_scatter-style wrappers."""
    import torch

    from workbook.ops import scatter

    reduce, entry = case["reduce"], case["entry"]
    src, index, dim, out, dim_size = (args.get(k) for k in ("src", "index", "dim", "out", "dim_size"))
    op = getattr(torch.ops.wb_scatter, f"scatter_{reduce}")
    if entry == "functional":
        return op(src, index, dim, dim_size)
    if entry == "accumulate":
        arg = op.accumulate(src, index, dim, out)
        return (out, arg) if reduce in ("min", "max") else out
    if entry in ("wrapper", "wrapper_out"):
        kwargs = {k: args[k] for k in ("dim", "out", "dim_size") if k in args}
        return getattr(scatter, f"scatter_{reduce}")(src, index, **kwargs)
    if entry == "reduce":
        kwargs = {k: args[k] for k in ("dim", "out", "dim_size", "reduce") if k in args}
        return scatter.scatter(src, index, **kwargs)
    raise ValueError(entry)


def _scatter_reference(case, args):
    """What the call must return, from workbook.ops.scatter_reference (min/max values as a gather of src
    at the reference's argindex, which routes gradients to the chosen element as the op does)."""
    import torch

    from workbook.ops import scatter_reference as reference

    reduce, entry = case["reduce"], case["entry"]
    if entry == "reduce":
        reduce = {"add": "sum"}.get(args.get("reduce", "sum"), args.get("reduce", "sum"))
    src, index = args["src"], args["index"]
    dim, out, dim_size = args.get("dim", -1), args.get("out"), args.get("dim_size")
    compute = {"sum": reference.reference_sum, "mean": reference.reference_mean}
    if reduce in compute:
        if src.is_floating_point() and src.dtype != torch.float64:
            wide = compute[reduce](src.double(), index, dim, None if out is None else out.double(), dim_size)
            return wide.to(src.dtype)
        return compute[reduce](src, index, dim, out, dim_size)
    arg_reduce = reference.reference_min if reduce == "min" else reference.reference_max
    values, arg = arg_reduce(src.detach(), index, dim, None if out is None else out.detach(), dim_size)
    wrapped = dim % src.dim()
    n = src.shape[wrapped]
    start = out if out is not None else torch.zeros_like(values)
    if n > 0:
        values = torch.where(arg < n, src.gather(wrapped, arg.clamp(max=n - 1)), start)
    else:
        values = start
    if entry == "reduce":
        return values
    return values, arg


def _differentiable_inputs(case, names):
    """The arguments the case made require grad (the op's write into out makes out require grad too)."""
    recipes = case["args"]
    return [n for n in names if isinstance(recipes.get(n), dict) and recipes[n]["tensor"].get("grad")]


def _requires_grad(value) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.requires_grad


def _lltm_forward_reference(args):
    import torch

    from workbook.ops import lltm

    names = ["input", "weights", "bias", "old_h", "old_cell"]
    wide = [args[n].double() for n in names]
    new_h, new_cell = lltm.lltm_python(*wide)
    dtype = args["input"].dtype
    X = torch.cat([wide[3], wide[0]], dim=1)
    return new_h.to(dtype), new_cell.to(dtype), X.to(dtype)


def _lltm_backward_inputs(args):
    """grad_h, grad_cell and the saved tensors of a forward of the op, with one argument replaced."""
    import torch

    forward_args = [args[n] for n in ("input", "weights", "bias", "old_h", "old_cell")]
    with torch.no_grad():
        _, new_cell, gates, X = torch.ops.wb_lltm.lltm_forward(*forward_args)
    call = {
        "grad_h": args["grad_h"],
        "grad_cell": args["grad_cell"],
        "new_cell": new_cell,
        "gates": gates,
        "X": X,
        "weights": args["weights"],
    }
    replaced = args.get("replace")
    if replaced:
        call[replaced["name"]] = _replace(call[replaced["name"]], replaced["how"], args.get("replacement"))
    return call


def _replace(tensor, how, replacement):
    import torch

    if how == "value":
        return replacement
    if how == "dtype":
        return tensor.to(torch.float64 if tensor.dtype != torch.float64 else torch.float32)
    if how == "int":
        return tensor.long()
    if how == "rank":
        return tensor.unsqueeze(0)
    if how == "shape":
        return torch.cat([tensor, tensor[:1]], dim=0) if tensor.shape[0] else tensor.new_zeros((1, *tensor.shape[1:]))
    if how == "meta":
        return tensor.to("meta")
    if how in ("transposed", "expanded", "sliced"):
        return _with_layout(tensor.contiguous(), how)
    raise ValueError(how)


def _lltm_backward_reference(args):
    import torch

    from workbook.ops import lltm

    names = ["input", "weights", "bias", "old_h", "old_cell"]
    wide = [args[n].detach().double().requires_grad_() for n in names]
    new_h, new_cell = lltm.lltm_python(*wide)
    loss = (new_h * args["grad_h"].double()).sum() + (new_cell * args["grad_cell"].double()).sum()
    d_input, d_weights, d_bias, d_old_h, d_old_cell = torch.autograd.grad(loss, wide)
    dtype = args["grad_h"].dtype
    return tuple(g.to(dtype) for g in (d_old_h, d_input, d_weights, d_bias, d_old_cell))


def _warp_reference(image, warp, height, width):
    import cv2
    import numpy as np
    import torch

    pixels = np.ascontiguousarray(image.detach().numpy())
    matrix = warp.detach().double().numpy()
    result = cv2.warpPerspective(pixels, matrix, (width, height))
    return torch.from_numpy(result.reshape((height, width, *image.shape[2:])))


def _box_blur_reference(image, size):
    import torch
    from torch.nn import functional as F

    kernel = torch.full((1, 1, size, size), 1.0 / size**2, dtype=torch.float64)
    blurred = F.conv2d(image.detach().double()[None, None], kernel, padding=size // 2)[0, 0]
    return blurred.to(image.dtype)


_box_blur = None


def box_blur_op():
    """Chapter 08's Python custom op wb_ch08_py::box_blur, with its fake and autograd, defined by the
    chapter's own code: its top-level definitions, taken from the solution notebook and run here."""
    global _box_blur
    if _box_blur is None:
        import cv2
        import numpy as np
        import torch

        notebook = json.loads((REPO_ROOT / "solutions" / "08_torch_library_compile_export.ipynb").read_text())
        namespace = {"torch": torch, "np": np, "cv2": cv2}
        for cell in notebook["cells"]:
            if cell["cell_type"] != "code" or "box_blur" not in "".join(cell["source"]):
                continue
            for node in ast.parse("".join(cell["source"])).body:
                if _defines_box_blur(node):
                    exec(compile(ast.Module([node], []), "08_torch_library_compile_export", "exec"), namespace)
        _box_blur = namespace["box_blur"]
    return _box_blur


def _defines_box_blur(node) -> bool:
    if isinstance(node, ast.FunctionDef):
        decorators = [ast.unparse(d) for d in node.decorator_list]
        return node.name.startswith("box_blur") or any("box_blur" in d for d in decorators)
    return isinstance(node, ast.Expr) and ast.unparse(node).startswith("box_blur.register_")


def run_case(case: dict):
    """Run one case; raises Mismatch when the result or the error is not what the case expects."""
    import torch

    family = case["family"]
    args = _arguments(case)
    try:
        if family == "scatter":
            result = _scatter_call(case, args)
        elif family == "lltm_forward":
            result = torch.ops.wb_lltm.lltm_forward(
                *(args[n] for n in ("input", "weights", "bias", "old_h", "old_cell"))
            )
        elif family == "lltm_backward":
            call = args["call"] = _lltm_backward_inputs(args)
            result = torch.ops.wb_lltm.lltm_backward(
                *(call[n] for n in ("grad_h", "grad_cell", "new_cell", "gates", "X", "weights"))
            )
        elif family == "warp_perspective":
            result = torch.ops.workbook_cv.warp_perspective(args["image"], args["warp"], args["height"], args["width"])
            if (_requires_grad(args["warp"]) or _requires_grad(args["image"])) and result.device.type != "meta":
                result.backward(torch.ones_like(result))  # the error for a warp that requires grad comes here
        elif family == "add_one":
            result = torch.ops.wb_setup_check.add_one(args["x"])
        elif family == "box_blur":
            result = box_blur_op()(args["image"], args["size"])
        elif family == "tensor_stack":
            result = _run_stack(args)
        elif family == "abort":  # the runner's self-check: a case that kills the process
            os.abort()
        else:
            raise ValueError(f"unknown family {family!r}")
    except Exception as error:  # noqa: BLE001 - any exception is an answer; its message is what we judge
        message = f"{type(error).__name__}: {error}"
        if case["expect"] == "error" and names_argument(message, case["names"]):
            return "raised, naming " + "/".join(case["names"])
        raise Mismatch(
            f"raised {message.splitlines()[0][:400]}"
            + (f" (expected it to name {case['names']})" if case["expect"] == "error" else " (expected a result)")
        ) from None
    if case["expect"] == "error":
        raise Mismatch(f"returned a result, expected an error naming one of {case['names']}")
    on_cpu = _arguments(case, on_cpu=True)
    _check_result(family, case, args, on_cpu, result)
    return "matches the reference"


def _arguments(case, on_cpu=False):
    """The case's arguments, built; "alias:<name>" stands for the very tensor passed as <name>."""
    args = {name: make_value(_on_cpu(recipe) if on_cpu else recipe) for name, recipe in case["args"].items()}
    for name, value in args.items():
        if isinstance(value, str) and value.startswith("alias:"):
            args[name] = args[value[len("alias:") :]]
    return args


def _check_result(family, case, args, on_cpu, result):
    """on_cpu: the same arguments with every tensor on the CPU, for the references."""
    import torch

    if family == "scatter":
        expected = _meta_like(_scatter_reference(case, on_cpu), result)
        assert_same(result, expected)
        names = _differentiable_inputs(case, ("src", "out"))
        if names and args["src"].device.type != "meta":
            # The reference's gradients are taken from fresh copies where the op wrote into out.
            assert_same_gradients(
                result, expected, [args[n].fuzz_leaf for n in names], [on_cpu[n].fuzz_leaf for n in names], names
            )
    elif family == "lltm_forward":
        new_h, new_cell, _, X = result
        assert_same((new_h, new_cell, X), _meta_like(_lltm_forward_reference(on_cpu), result))
        names = [n for n in ("input", "weights", "bias", "old_h", "old_cell") if _requires_grad(args[n])]
        if names and new_h.device.type != "meta":
            import workbook.ops.lltm as lltm

            wide = {n: args[n].detach().double().requires_grad_(args[n].requires_grad) for n in args}
            expected = lltm.lltm_python(*(wide[n] for n in ("input", "weights", "bias", "old_h", "old_cell")))
            got = (new_h.double(), new_cell.double())
            assert_same_gradients(got, expected, [args[n] for n in names], [wide[n] for n in names], names)
    elif family == "lltm_backward":
        # The gradients flowing in as the op got them (a layout change keeps their values).
        incoming = {name: args["call"][name] for name in ("grad_h", "grad_cell")}
        assert_same(result, _meta_like(_lltm_backward_reference({**on_cpu, **incoming}), result))
    elif family == "warp_perspective":
        image, warp = args["image"], args["warp"]
        expected = _warp_reference(on_cpu["image"], on_cpu["warp"], args["height"], args["width"])
        assert_same(result, _meta_like(expected, result))
        if image.requires_grad and image.device.type != "meta" and torch.isfinite(image).all():
            _check_warp_gradient(image, warp, args["height"], args["width"])
    elif family == "add_one":
        x = args["x"]
        assert_same(result, _meta_like(on_cpu["x"] + 1, result))
        if x.requires_grad:
            assert_same_gradients(result, x + 1, [x], [x], ["x"])
    elif family == "box_blur":
        image, size = args["image"], args["size"]
        assert_same(result, _meta_like(_box_blur_reference(on_cpu["image"], size), result))
        if image.requires_grad:
            wide = image.detach().double().requires_grad_()
            expected = _box_blur_reference_differentiable(wide, size)
            assert_same_gradients(result, expected, [image], [wide], ["image"])
    elif family == "tensor_stack":
        assert_same(result, _run_stack(args, reference=True))


def _check_warp_gradient(image, warp, height, width):
    """warp_perspective is linear in the image, so its gradient is the adjoint: for any g,
    sum(warp(x) * g) == sum(x * grad_x(sum(warp(x) * g)))."""
    import torch

    g = torch.randn((height, width, *image.shape[2:]), generator=torch.Generator().manual_seed(1))
    out = torch.ops.workbook_cv.warp_perspective(image, warp.detach(), height, width)
    (grad,) = torch.autograd.grad((out * g).sum(), image)
    if grad is None:
        raise Mismatch("gradient of image: None")
    left, right = (out.detach().double() * g).sum(), (image.detach().double() * grad.double()).sum()
    if not torch.isclose(left, right, rtol=1e-4, atol=1e-4):
        raise Mismatch(
            f"gradient of image is not warp_perspective's adjoint: <warp(x), g> = {left.item():.6g}, "
            f"<x, grad> = {right.item():.6g}"
        )


def _box_blur_reference_differentiable(image, size):
    import torch
    from torch.nn import functional as F

    kernel = torch.full((1, 1, size, size), 1.0 / size**2, dtype=image.dtype)
    return F.conv2d(image[None, None], kernel, padding=size // 2)[0, 0]


def _on_cpu(recipe):
    """The same recipe with every tensor on the CPU: the reference of a call on meta tensors."""
    if isinstance(recipe, dict) and "tensor" in recipe:
        return {"tensor": {**recipe["tensor"], "device": "cpu"}}
    if isinstance(recipe, list):
        return [_on_cpu(item) for item in recipe]
    return recipe


def _meta_like(expected, got):
    """The reference moved to meta when the op ran on meta tensors (only shapes, dtypes and devices count)."""
    import torch

    first = got[0] if isinstance(got, (tuple, list)) and got else got
    if not isinstance(first, torch.Tensor) or first.device.type != "meta":
        return expected
    if isinstance(expected, (tuple, list)):
        return tuple(e.to("meta") for e in expected)
    return expected.to("meta")


def _run_stack(args, reference=False):
    """Apply args["calls"] ([[method, argument], ...]) to a TensorStack built from args["items"]; collect
    what each call returns. The reference runs the same calls on workbook.ops.warp_perspective.FakeTensorStack."""
    import torch

    from workbook.ops.warp_perspective import FakeTensorStack

    stack = FakeTensorStack(args["items"]) if reference else torch.classes.workbook_classes.TensorStack(args["items"])
    returned = []
    for method, argument in args["calls"]:
        call = getattr(stack, method)
        value = call() if argument is None else call(argument)
        if method == "clone":
            stack, value = value, "cloned"
        returned.append(value)
    returned.append(stack.items())
    return returned


# ---- the child process -----------------------------------------------------------------------------


def load_libraries():
    """Build (or reuse) and load every compiled library the cases call. The test calls it before
    starting a child, so that the child's time limit is spent on cases, not on a cold build."""
    from workbook import build
    from workbook.ops import lltm, scatter, warp_perspective

    scatter.load()
    lltm.load_extension()
    warp_perspective.load_ops()
    build.load("wb_setup_check", ["csrc/setup_check/add_one.cpp"], is_python_module=False)


def child_main(journal: str) -> int:
    import warnings

    warnings.simplefilter("ignore")  # TorchScript deprecations, autograd fallback notes: not results
    load_libraries()
    box_blur_op()
    cases = json.load(sys.stdin)
    with open(journal, "a") as log:
        for number, case in enumerate(cases):
            log.write(f"{number}\n")
            log.flush()
            try:
                detail, ok = run_case(case), True
            except Mismatch as mismatch:
                detail, ok = str(mismatch), False
            except Exception as error:  # noqa: BLE001 - a bug in the case's checking code
                detail, ok = f"checking the case failed: {type(error).__name__}: {error}", False
            print(json.dumps({"ok": ok, "detail": detail}), flush=True)
    return 0


# ---- the parent side -------------------------------------------------------------------------------


def run_cases(cases: list[dict], *, timeout: float = CHILD_TIMEOUT_S) -> list[dict]:
    """Run `cases` in child processes; one result per case, in order (see the module's docstring)."""
    results: list[dict] = []
    while len(results) < len(cases):
        remaining = cases[len(results) :]
        with tempfile.TemporaryDirectory() as folder:
            journal = Path(folder) / "journal"
            journal.touch()
            try:
                child = subprocess.run(
                    [sys.executable, "-m", "workbook.fuzz", str(journal)],
                    input=json.dumps(remaining),
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                    cwd=REPO_ROOT,
                    env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
                )
                returncode, stderr = child.returncode, child.stderr
                stdout = child.stdout
            except subprocess.TimeoutExpired as expired:
                returncode, stderr = "timeout", ""
                stdout = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
            started = [int(line) for line in journal.read_text().split()]
        finished = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
        results += [{"case": case, **outcome} for case, outcome in zip(remaining, finished)]
        if len(finished) == len(remaining):
            break
        if not started:
            raise RuntimeError(f"the fuzz child failed before running any case (exit {returncode}):\n{stderr[-3000:]}")
        killer = started[-1]
        results.append(
            {
                "case": remaining[killer],
                "ok": False,
                "detail": f"killed the process (exit {returncode}): {stderr.strip()[-600:]}",
            }
        )
    return results


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1]))
