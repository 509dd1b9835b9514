"""The op families a case can call (scatter, lltm_forward, lltm_backward, warp_perspective, add_one,
box_blur, tensor_stack): how each is called, and the reference its result and gradients must match."""

from __future__ import annotations

import ast
import json

from workbook import REPO_ROOT
from workbook.fuzz.compare import Mismatch, assert_same, assert_same_gradients, meta_like
from workbook.fuzz.recipes import with_layout


def call(case, args):
    """Call the op of the case's family with the built arguments; what it returns."""
    import torch

    family = case["family"]
    if family == "scatter":
        return _scatter_call(case, args)
    if family == "lltm_forward":
        return torch.ops.wb_lltm.lltm_forward(*(args[n] for n in ("input", "weights", "bias", "old_h", "old_cell")))
    if family == "lltm_backward":
        inputs = args["call"] = _lltm_backward_inputs(args)
        return torch.ops.wb_lltm.lltm_backward(
            *(inputs[n] for n in ("grad_h", "grad_cell", "new_cell", "gates", "X", "weights"))
        )
    if family == "warp_perspective":
        result = torch.ops.workbook_cv.warp_perspective(args["image"], args["warp"], args["height"], args["width"])
        if (_requires_grad(args["warp"]) or _requires_grad(args["image"])) and result.device.type != "meta":
            result.backward(torch.ones_like(result))  # the error for a warp that requires grad comes here
        return result
    if family == "add_one":
        return torch.ops.wb_setup_check.add_one(args["x"])
    if family == "box_blur":
        return box_blur_op()(args["image"], args["size"])
    if family == "tensor_stack":
        return _run_stack(args)
    raise ValueError(f"unknown family {family!r}")


def check_result(case, args, on_cpu, result):
    """Raise Mismatch where the result or a gradient differs from the reference's. on_cpu: the same
    arguments with every tensor on the CPU, for the references."""
    import torch

    family = case["family"]
    if family == "scatter":
        expected = meta_like(_scatter_reference(case, on_cpu), result)
        assert_same(result, expected)
        names = _differentiable_inputs(case, ("src", "out"))
        if names and args["src"].device.type != "meta":
            # The reference's gradients are taken from fresh copies where the op wrote into out.
            assert_same_gradients(
                result, expected, [args[n].fuzz_leaf for n in names], [on_cpu[n].fuzz_leaf for n in names], names
            )
    elif family == "lltm_forward":
        new_h, new_cell, _, X = result
        assert_same((new_h, new_cell, X), meta_like(_lltm_forward_reference(on_cpu), result))
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
        assert_same(result, meta_like(_lltm_backward_reference({**on_cpu, **incoming}), result))
    elif family == "warp_perspective":
        image, warp = args["image"], args["warp"]
        expected = _warp_reference(on_cpu["image"], on_cpu["warp"], args["height"], args["width"])
        assert_same(result, meta_like(expected, result))
        if image.requires_grad and image.device.type != "meta" and torch.isfinite(image).all():
            _check_warp_gradient(image, warp, args["height"], args["width"])
    elif family == "add_one":
        x = args["x"]
        assert_same(result, meta_like(on_cpu["x"] + 1, result))
        if x.requires_grad:
            assert_same_gradients(result, x + 1, [x], [x], ["x"])
    elif family == "box_blur":
        image, size = args["image"], args["size"]
        assert_same(result, meta_like(_box_blur_reference(on_cpu["image"], size), result))
        if image.requires_grad:
            wide = image.detach().double().requires_grad_()
            expected = _box_blur_reference_differentiable(wide, size)
            assert_same_gradients(result, expected, [image], [wide], ["image"])
    elif family == "tensor_stack":
        assert_same(result, _run_stack(args, reference=True))


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
        return with_layout(tensor.contiguous(), how)
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


def _box_blur_reference(image, size):
    import torch
    from torch.nn import functional as F

    kernel = torch.full((1, 1, size, size), 1.0 / size**2, dtype=torch.float64)
    blurred = F.conv2d(image.detach().double()[None, None], kernel, padding=size // 2)[0, 0]
    return blurred.to(image.dtype)


def _box_blur_reference_differentiable(image, size):
    import torch
    from torch.nn import functional as F

    kernel = torch.full((1, 1, size, size), 1.0 / size**2, dtype=image.dtype)
    return F.conv2d(image[None, None], kernel, padding=size // 2)[0, 0]


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
