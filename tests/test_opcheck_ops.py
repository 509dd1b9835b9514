"""The workbook's compiled ops under torch.library's checks: opcheck, gradients, torch.compile, torch.export.

opcheck runs all its default sub-tests on each sample (add_one: on its float32 samples) (test_schema, test_autograd_registration,
test_faketensor, test_aot_dispatch_dynamic): the schema tells the truth about mutation and aliasing,
autograd is registered, the fake kernel gives the real kernel's shapes, strides and dtypes, and
AOTAutograd with symbolic sizes computes what eager mode computes, gradients included.
Ops covered: wb_lltm::lltm_forward / lltm_backward (chapter 02), wb_setup_check::add_one (chapter 00),
workbook_cv::warp_perspective and its backward (chapter 06); and the TensorStack class (chapter 07).
Then torch 2.13's custom-op features on the workbook's ops (chapter 08): an out= op tagged torch.Tag.out,
an accumulating op wrongly tagged so, the maybe-out schema, vmap rules for the scatter ops, the LLTM's
autocast rule and its library's set_python_module.
"""

import math
import subprocess
import sys

import pytest
import torch
from torch.library import opcheck

from workbook import build
from workbook.chapters import torch_library_compile_export
from workbook.ops import lltm, scatter, warp_perspective

# torch.export of a module holding a TorchScript class calls a deprecated torch.jit function.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.\w+` is deprecated"
)  # any category: 2.14 says FutureWarning

ALL_PASSED = {
    "test_schema": "SUCCESS",
    "test_autograd_registration": "SUCCESS",
    "test_faketensor": "SUCCESS",
    "test_aot_dispatch_dynamic": "SUCCESS",
}
LLTM_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module", autouse=True)
def libraries():
    lltm.load_extension()
    warp_perspective.load_ops()
    build.load("wb_setup_check", ["csrc/setup_check/add_one.cpp"], is_python_module=False)


def strided(tensor):
    """The same values in a non-contiguous layout (a transposed copy, transposed back)."""
    if tensor.dim() < 2:
        return tensor.repeat_interleave(2)[::2]
    return tensor.transpose(0, 1).contiguous().transpose(0, 1)


# ---- LLTM ------------------------------------------------------------------------------------


@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
@pytest.mark.parametrize("sizes", [(3, 4, 5), (1, 1, 1)], ids=str)
@pytest.mark.parametrize("dtype", LLTM_DTYPES, ids=str)
def test_opcheck_lltm_forward(dtype, sizes, contiguous):
    args = lltm.make_inputs(*sizes, dtype=dtype, seed=1)
    if not contiguous:
        args = [strided(a) for a in args]
        assert not args[0].is_contiguous() or sizes == (1, 1, 1)
    args = [a.requires_grad_() for a in args]
    assert opcheck(torch.ops.wb_lltm.lltm_forward, args) == ALL_PASSED


@pytest.mark.parametrize("dtype", LLTM_DTYPES, ids=str)
def test_opcheck_lltm_backward(dtype):
    args = lltm.make_inputs(3, 4, 5, dtype=dtype, seed=2)
    _, new_cell, gates, X = torch.ops.wb_lltm.lltm_forward(*args)
    grad_h = torch.ones(1, 5, dtype=dtype).expand(3, 5)  # what .sum() sends back: stride 0
    grad_cell = strided(torch.randn(3, 5, generator=torch.Generator().manual_seed(0)).to(dtype))
    assert opcheck(torch.ops.wb_lltm.lltm_backward, (grad_h, grad_cell, new_cell, gates, X, args[1])) == ALL_PASSED


def test_lltm_op_gradients_match_the_python_reference():
    args = lltm.make_inputs(4, 3, 5, dtype=torch.float64, requires_grad=True, seed=3)
    assert torch.autograd.gradcheck(lltm.lltm_op, args)
    incoming = (torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64))
    expected = torch.autograd.grad(lltm.lltm_python(*args), args, incoming)
    actual = torch.autograd.grad(lltm.lltm_op(*args), args, incoming)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("used", ["new_h", "new_cell"])
def test_lltm_op_gradients_when_one_output_is_unused(used):
    """The unused output's incoming gradient is undefined; the backward must treat it as zeros."""
    args = lltm.make_inputs(4, 3, 5, dtype=torch.float64, requires_grad=True, seed=8)
    pick = ["new_h", "new_cell"].index(used)
    expected = torch.autograd.grad(lltm.lltm_python(*args)[pick].sum(), args)
    actual = torch.autograd.grad(lltm.lltm_op(*args)[pick].sum(), args)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e)


def test_lltm_saved_outputs_are_not_differentiable():
    args = lltm.make_inputs(2, 3, 4, requires_grad=True, seed=4)
    new_h, new_cell, gates, X = torch.ops.wb_lltm.lltm_forward(*args)
    assert new_h.requires_grad and new_cell.requires_grad
    assert not gates.requires_grad and not X.requires_grad


def test_lltm_second_derivative_raises_naming_the_op():
    args = lltm.make_inputs(2, 3, 4, dtype=torch.float64, requires_grad=True, seed=5)
    new_h, _ = lltm.lltm_op(*args)
    (d_input,) = torch.autograd.grad(new_h.sum(), args[0], create_graph=True)
    with pytest.raises(RuntimeError, match=r"wb_lltm::lltm_backward is not differentiable"):
        d_input.sum().backward()


def test_compiled_lltm_op_equals_eager_forward_and_backward():
    compiled = torch.compile(lltm.lltm_op, fullgraph=True, dynamic=True)
    for sizes in [(3, 4, 5), (6, 2, 7)]:  # a second shape: the dynamic graph is reused, not retraced
        args = lltm.make_inputs(*sizes, requires_grad=True, seed=6)
        eager = lltm.lltm_op(*args)
        eager_grads = torch.autograd.grad(eager[0].sum() + 2 * eager[1].sum(), args)
        got = compiled(*args)
        got_grads = torch.autograd.grad(got[0].sum() + 2 * got[1].sum(), args)
        for a, e in zip(got + got_grads, eager + eager_grads):
            torch.testing.assert_close(a, e)


# ---- add_one ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16], ids=str)
def test_opcheck_add_one(dtype):
    """Every sub-test on float32; the schema and fake-kernel checks (the ones a dtype can change) on the others."""
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0)).to(dtype)
    for sample in (x, strided(x), x[:, 1], torch.zeros(0, dtype=dtype)):
        for arg in (sample.clone().requires_grad_(), sample):
            if dtype == torch.float32:
                assert opcheck(torch.ops.wb_setup_check.add_one, (arg,)) == ALL_PASSED
            else:
                results = opcheck(
                    torch.ops.wb_setup_check.add_one, (arg,), test_utils=("test_schema", "test_faketensor")
                )
                assert set(results.values()) == {"SUCCESS"}, results


def test_add_one_passes_the_gradient_through():
    x = torch.randn(5, requires_grad=True)
    torch.ops.wb_setup_check.add_one(x).mul(3).sum().backward()
    assert torch.equal(x.grad, torch.full((5,), 3.0))


# ---- warp_perspective ------------------------------------------------------------------------


def homography(angle=0.3, scale=(1.1, 0.8), shear=0.2, shift=(1.5, -2.0), perspective=(0.01, -0.008)):
    c, s = math.cos(angle), math.sin(angle)
    rotation = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    affine = rotation @ torch.tensor([[scale[0], shear], [0.0, scale[1]]], dtype=torch.float64)
    return torch.tensor(
        [[*affine[0].tolist(), shift[0]], [*affine[1].tolist(), shift[1]], [*perspective, 1.0]], dtype=torch.float64
    )


WARPS = {
    "identity": torch.eye(3, dtype=torch.float64),
    "half-pixel shift": torch.tensor([[1, 0, 0.5], [0, 1, -1.5], [0, 0, 1]], dtype=torch.float64),
    # source positions exactly halfway between two 1/32 steps: OpenCV rounds them half to even
    "1/64-pixel shift": torch.tensor([[1, 0, 1 / 64], [0, 1, 3 / 64], [0, 0, 1]], dtype=torch.float64),
    "shrink": torch.tensor([[0.5, 0, 0], [0, 0.5, 0], [0, 0, 1]], dtype=torch.float64),
    "homography": homography(),
    "steep homography": homography(
        angle=-2.0, scale=(2.5, 0.4), shear=-0.4, shift=(6.0, 3.0), perspective=(-0.02, 0.015)
    ),
}


def warp_samples():
    generator = torch.Generator().manual_seed(0)
    for channels in (None, 1, 3, 4):
        shape = (6, 7) if channels is None else (6, 7, channels)
        image = torch.rand(shape, generator=generator)
        warp = WARPS["homography"]
        yield image, warp, 5, 8
        yield strided(image), strided(warp.float()), 9, 4  # non-contiguous image and warp, float32 warp


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck_warp_perspective(requires_grad):
    for image, warp, height, width in warp_samples():
        image = image.clone().requires_grad_(requires_grad)
        result = opcheck(torch.ops.workbook_cv.warp_perspective, (image, warp, height, width))
        assert result == ALL_PASSED, (tuple(image.shape), result)


def test_opcheck_warp_perspective_backward():
    for image, warp, height, width in warp_samples():
        grad = torch.ones(height, width, *image.shape[2:])
        result = opcheck(torch.ops.workbook_cv.warp_perspective_backward, (strided(grad), warp, *image.shape[:2]))
        assert result == ALL_PASSED


def jacobian_of_forward(image_shape, warp, height, width):
    """Column j: the op applied to the j-th unit image (exact: a single weight times 1)."""
    columns = []
    for j in range(math.prod(image_shape)):
        unit = torch.zeros(math.prod(image_shape))
        unit[j] = 1
        columns.append(torch.ops.workbook_cv.warp_perspective(unit.reshape(image_shape), warp, height, width).flatten())
    return torch.stack(columns, dim=1)


def jacobian_of_backward(image_shape, warp, height, width):
    """Row i: the backward applied to the i-th unit output gradient."""
    rows = []
    for i in range(height * width):
        unit = torch.zeros(height * width)
        unit[i] = 1
        rows.append(
            torch.ops.workbook_cv.warp_perspective_backward(unit.reshape(height, width), warp, *image_shape).flatten()
        )
    return torch.stack(rows, dim=0)


@pytest.mark.parametrize("name", list(WARPS))
def test_warp_backward_is_the_exact_transpose_of_opencv_s_forward(name):
    # 70 output columns: more than one of OpenCV's column blocks (64 wide for 16-row blocks).
    for image_shape, height, width in [((7, 9), 6, 8), ((5, 11), 16, 70), ((1, 1), 3, 2)]:
        forward = jacobian_of_forward(image_shape, WARPS[name], height, width)
        backward = jacobian_of_backward(image_shape, WARPS[name], height, width)
        assert torch.equal(forward, backward), f"{name}, image {image_shape}, output {height} x {width}"


@pytest.mark.filterwarnings("ignore:Input #0 requires gradient and is not a double")
@pytest.mark.parametrize("channels", [None, 3])
def test_warp_gradcheck(channels):
    generator = torch.Generator().manual_seed(1)
    image = torch.rand((6, 7) if channels is None else (6, 7, channels), generator=generator, requires_grad=True)
    warp = WARPS["steep homography"]
    # float32 (the only dtype the op takes): central differences of a linear function are exact up
    # to float32 rounding, which eps = 1e-2 keeps below 1e-4.
    assert torch.autograd.gradcheck(
        lambda im: torch.ops.workbook_cv.warp_perspective(im, warp, 5, 6), (image,), eps=1e-2, atol=1e-3, rtol=1e-3
    )


def test_warp_gradient_for_warp_raises_naming_the_op_and_argument():
    image = torch.rand(6, 7, requires_grad=True)
    warp = WARPS["homography"].clone().requires_grad_()
    output = torch.ops.workbook_cv.warp_perspective(image, warp, 5, 5)
    with pytest.raises(RuntimeError, match=r"workbook_cv::warp_perspective: no gradient with respect to warp"):
        output.sum().backward()


def test_warp_second_derivative_raises_naming_the_op():
    image = torch.rand(6, 7, requires_grad=True)
    output = torch.ops.workbook_cv.warp_perspective(image, WARPS["homography"], 5, 5)
    (grad_image,) = torch.autograd.grad(output.square().sum(), image, create_graph=True)
    with pytest.raises(RuntimeError, match=r"workbook_cv::warp_perspective_backward is not differentiable"):
        grad_image.sum().backward()


def test_compiled_warp_perspective_equals_eager_forward_and_backward():
    warp = WARPS["homography"]

    def rectify(image):
        return torch.ops.workbook_cv.warp_perspective(image * 2, warp, 5, 8).sin()

    compiled = torch.compile(rectify, fullgraph=True, dynamic=True)
    for shape in [(6, 7, 3), (9, 5, 3)]:
        image = torch.rand(shape, generator=torch.Generator().manual_seed(2), requires_grad=True)
        eager = rectify(image)
        (eager_grad,) = torch.autograd.grad(eager.sum(), image)
        got = compiled(image)
        (got_grad,) = torch.autograd.grad(got.sum(), image)
        torch.testing.assert_close(got, eager)
        torch.testing.assert_close(got_grad, eager_grad)


# ---- TensorStack -----------------------------------------------------------------------------


class StackUser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stack = torch.classes.workbook_classes.TensorStack([torch.ones(2, 3)])

    def forward(self, x):
        self.stack.push(x * 2)
        top = self.stack.pop()
        return top + self.stack.top()


def test_tensor_stack_flattens_to_named_items():
    stack = torch.classes.workbook_classes.TensorStack([torch.zeros(1), torch.ones(2)])
    ((name, items),) = stack.__obj_flatten__()
    assert name == "items" and [t.tolist() for t in items] == [[0.0], [1.0, 1.0]]


def test_module_with_a_tensor_stack_exports():
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(3))
    exported = torch.export.export(StackUser(), (x,), strict=False)
    calls = [node.args[1] for node in exported.graph.nodes if node.target is torch.ops.higher_order.call_torchbind]
    assert calls == ["push", "pop", "top"]
    assert torch.equal(exported.module()(x), StackUser()(x))


# ---- torch 2.13's custom-op features with the workbook's ops (chapter 08) ---------------------------


def scatter_sample(seed=0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randn(12, 3, generator=generator, dtype=torch.float64)
    index = torch.randint(0, 5, (12,), generator=generator)
    index[0] = 4
    return src, index, torch.full((5, 3), 100.0, dtype=torch.float64)


def test_an_out_op_tagged_out_passes_opcheck_and_compiles():
    out_ops = torch_library_compile_export.mutating_ops()
    assert torch.Tag.out in out_ops.scatter_sum_out.default.tags
    src, index, start = scatter_sample()
    assert opcheck(out_ops.scatter_sum_out.default, (src, index, 0), {"out": start.clone()}) == ALL_PASSED

    def doubled(src, index):
        out = torch.full((5, 3), 100.0, dtype=src.dtype)
        out_ops.scatter_sum_out(src, index, 0, out=out)  # out's 100s are dropped: it is write-only
        return out * 2

    expected = 2 * scatter.scatter_sum(src, index, 0, dim_size=5)
    assert torch.equal(doubled(src, index), expected)
    assert torch.equal(torch.compile(doubled, fullgraph=True, backend="aot_eager")(src, index), expected)


def test_an_accumulating_op_tagged_out_is_caught():
    """scatter_sum_into reads out (it adds to it): tagged out, compiled code hands it uninitialised memory."""
    out_ops = torch_library_compile_export.mutating_ops()
    src, index, start = scatter_sample(1)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)  # uninitialised memory is filled with NaN: a stable result
    try:
        results = opcheck(out_ops.scatter_sum_into.default, (src, index, 0), {"out": start}, raise_exception=False)
        compiled = torch.compile(lambda s, i, o: out_ops.scatter_sum_into(s, i, 0, out=o), backend="aot_eager")
        got = compiled(src, index, start.clone())
    finally:
        torch.use_deterministic_algorithms(previous)
    assert "different in eager-mode PyTorch vs AOTDispatcher" in str(results["test_aot_dispatch_dynamic"])
    assert got.isnan().all()


def test_a_maybe_out_op_runs_eagerly_and_is_refused_by_torch_compile():
    out_ops = torch_library_compile_export.mutating_ops()
    src, index, start = scatter_sample(2)
    assert torch.equal(out_ops.scatter_sum_maybe(src, index, 0), scatter.scatter_sum(src, index, 0))
    out = start.clone()
    assert out_ops.scatter_sum_maybe(src, index, 0, out=out) is out
    assert torch.equal(out, scatter.scatter_sum(src, index, 0, out=start.clone()))
    compiled = torch.compile(lambda s, i: out_ops.scatter_sum_maybe(s, i, 0) + 1, fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="output has alias annotations"):
        compiled(src, index)


@pytest.mark.parametrize("name", ["sum", "mean", "min", "max"])
def test_vmap_over_a_batch_of_graphs_equals_a_loop(name):
    op = getattr(scatter.load(), f"scatter_{name}")
    generator = torch.Generator().manual_seed(3)
    src, index = torch.randn(4, 10, 3, generator=generator), torch.randint(0, 6, (4, 10), generator=generator)
    cases = {  # (batched function, its inputs, the same for sample b)
        "both batched, dim 0": (lambda s, i: op(s, i, 0, 6), (src, index), lambda b: op(src[b], index[b], 0, 6)),
        "index along dim -1": (
            lambda s, i: op(s, i, -1, 6),
            (src.transpose(1, 2), index),
            lambda b: op(src[b].t(), index[b], -1, 6),
        ),
        "index shared": (lambda s: op(s, index[0], 0, 6), (src,), lambda b: op(src[b], index[0], 0, 6)),
        "src shared": (lambda i: op(src[0], i, 0, 6), (index,), lambda b: op(src[0], index[b], 0, 6)),
    }
    for what, (function, inputs, sample) in cases.items():
        got = torch.vmap(function)(*inputs)
        loop = [sample(b) for b in range(4)]
        expected = torch.stack(loop) if isinstance(loop[0], torch.Tensor) else tuple(map(torch.stack, zip(*loop)))
        for a, e in zip(
            got if isinstance(got, tuple) else (got,), expected if isinstance(expected, tuple) else (expected,)
        ):
            assert torch.equal(a, e), what


def test_lltm_under_autocast_computes_in_bfloat16():
    input, weights, bias, old_h, old_cell = lltm.make_inputs(4, 8, 16, requires_grad=True, seed=7)
    linear = torch.nn.Linear(8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        features = linear(input)  # bfloat16 under autocast, while the cell's weights stay float32
        new_h, new_cell = lltm.lltm_op(features, weights, bias, old_h, old_cell)
    assert features.dtype == new_h.dtype == new_cell.dtype == torch.bfloat16
    cast = [t.to(torch.bfloat16) for t in (features, weights, bias, old_h, old_cell)]
    assert all(torch.equal(a, b) for a, b in zip((new_h, new_cell), lltm.lltm_op(*cast)))
    (new_h.float().sum() + new_cell.float().sum()).backward()
    assert weights.grad.dtype == torch.float32 and linear.weight.grad is not None


def test_set_python_module_names_the_module_with_the_fake_kernels():
    """A process that loads the LLTM op library without workbook.ops.lltm is told which module to import."""
    code = (
        "import sys, torch\n"
        "torch.ops.load_library(sys.argv[1])\n"
        "meta = [torch.empty(s, device='meta') for s in [(2, 3), (12, 7), (12,), (2, 4), (2, 4)]]\n"
        "try:\n"
        "    torch.ops.wb_lltm.lltm_forward(*meta)\n"
        "except NotImplementedError as error:\n"
        "    print(error)\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(lltm.ops_library())], capture_output=True, text=True)
    assert "could not find the fake impl" in run.stdout and "import the 'workbook.ops.lltm'" in run.stdout, run
