"""The workbook's compiled ops under torch.library's checks: opcheck, gradients, torch.compile, torch.export.

opcheck runs all its default sub-tests on each sample (add_one: on its float32 samples) (test_schema, test_autograd_registration,
test_faketensor, test_aot_dispatch_dynamic): the schema tells the truth about mutation and aliasing,
autograd is registered, the fake kernel gives the real kernel's shapes, strides and dtypes, and
AOTAutograd with symbolic sizes computes what eager mode computes, gradients included.
Ops covered: wb_lltm::lltm_forward / lltm_backward (chapter 02), wb_setup_check::add_one (chapter 00),
workbook_cv::warp_perspective and its backward (chapter 06); and the TensorStack class (chapter 07).
wb_scatter's four ops (chapter 03) meet many samples each, so there opcheck's costly sub-tests run on each sample
for one op in turn, and torch.compile runs them with dynamic shapes and through their accumulate overloads.
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
from torchscript_warning import IGNORE_JIT_DEPRECATION

from workbook import build
from workbook.chapters import torch_library_compile_export
from workbook.ops import lltm, scatter, warp_perspective

# torch.export of a module holding a TorchScript class calls a deprecated torch.jit function.
pytestmark = IGNORE_JIT_DEPRECATION

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


# ---- wb_scatter (chapter 03): opcheck on many samples, torch.compile --------------------------
# opcheck's cheap sub-tests (test_schema, test_faketensor) run on every sample for every op; the costly
# ones (test_autograd_registration, test_aot_dispatch_dynamic) on each sample for one op, in turn, so that
# every op meets several samples. tests/test_scatter_packages.py runs them all on one sample per op and
# overload, in both scatter packages.

SCATTER_OPS = ["scatter_sum", "scatter_mean", "scatter_min", "scatter_max"]


@pytest.fixture(scope="module")
def scatter_ops():
    return scatter.load()


def _random(shape, dtype, seed, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype).requires_grad_(requires_grad)
    return torch.randint(-8, 9, shape, generator=g).to(dtype)


def _index(shape, groups, seed):
    return torch.randint(0, groups, shape, generator=torch.Generator().manual_seed(seed))


# (src, index, dim, dim_size) for the functional overloads.
SCATTER_FUNCTIONAL = {
    "1-D index broadcast, dim_size=None": lambda: (
        _random((6, 3), torch.float32, 1, True),
        _index((6,), 4, 2),
        0,
        None,
    ),
    "1-D index broadcast, dim_size given": lambda: (_random((6, 3), torch.float32, 1, True), _index((6,), 4, 2), 0, 5),
    "non-contiguous src, 2-D index": lambda: (_random((3, 6), torch.float64, 3, True).t(), _index((6, 3), 4, 4), 0, 4),
    "leading-dims index, dim=-2": lambda: (_random((2, 5, 3), torch.float64, 5, True), _index((2, 5), 3, 6), -2, None),
    "empty src, dim_size given": lambda: (_random((0, 3), torch.float32, 7, True), _index((0,), 1, 8), 0, 4),
    "empty src, dim_size=None": lambda: (_random((0, 3), torch.float32, 7, True), _index((0,), 1, 8), 0, None),
    "int32": lambda: (_random((6, 3), torch.int32, 9), _index((6,), 4, 10), 0, None),
    "int64, dim=1": lambda: (_random((3, 6), torch.int64, 9), _index((3, 6), 4, 10), 1, 4),
    "float16": lambda: (_random((6, 3), torch.float16, 11, True), _index((6,), 4, 12), 0, None),
    "bfloat16": lambda: (_random((6, 3), torch.bfloat16, 11, True), _index((6,), 4, 12), 0, 4),
}

# (src, index, dim, out) for the accumulate overloads. An out that requires grad must not be a
# leaf (it is written in place), so it is the result of an op on a leaf.
SCATTER_ACCUMULATE = {
    "float32, src requires grad": lambda: (
        _random((6, 3), torch.float32, 1, True),
        _index((6,), 4, 2),
        0,
        _random((4, 3), torch.float32, 13),
    ),
    "out requires grad": lambda: (
        _random((6, 3), torch.float64, 1),
        _index((6,), 4, 2),
        0,
        _random((4, 3), torch.float64, 13, True) * 1,
    ),
    "both require grad, non-contiguous out": lambda: (
        _random((6, 3), torch.float64, 1, True),
        _index((6, 3), 4, 2),
        0,
        _random((3, 5), torch.float64, 14, True).t() * 1,
    ),
    "empty src": lambda: (
        _random((0, 3), torch.float32, 7, True),
        _index((0,), 1, 8),
        0,
        _random((2, 3), torch.float32, 15),
    ),
    "int64, dim=-1": lambda: (
        _random((3, 6), torch.int64, 9),
        _index((3, 6), 4, 10),
        -1,
        _random((3, 4), torch.int64, 16),
    ),
    "float16": lambda: (
        _random((6, 3), torch.float16, 11, True),
        _index((6,), 4, 12),
        0,
        _random((4, 3), torch.float16, 17),
    ),
    "bfloat16": lambda: (
        _random((6, 3), torch.bfloat16, 11, True),
        _index((6,), 4, 12),
        0,
        _random((4, 3), torch.bfloat16, 17),
    ),
}


CHEAP = ("test_schema", "test_faketensor")


def _opcheck_every_scatter_op(ops, overload, samples, sample):
    """opcheck of each op's overload on one sample; the full set of sub-tests for one op (in turn per sample)."""
    full_for = SCATTER_OPS[list(samples).index(sample) % len(SCATTER_OPS)]
    for name in SCATTER_OPS:
        operator = getattr(getattr(ops, name), overload)
        if name == full_for:  # opcheck's default: every sub-test
            results = torch.library.opcheck(operator, samples[sample]())
        else:
            results = torch.library.opcheck(operator, samples[sample](), test_utils=CHEAP)
        failed = {test: result for test, result in results.items() if result != "SUCCESS"}
        assert not failed, (name, failed)


@pytest.mark.parametrize("sample", list(SCATTER_FUNCTIONAL))
def test_opcheck_scatter_functional(scatter_ops, sample):
    _opcheck_every_scatter_op(scatter_ops, "default", SCATTER_FUNCTIONAL, sample)


@pytest.mark.parametrize("sample", list(SCATTER_ACCUMULATE))
def test_opcheck_scatter_accumulate(scatter_ops, sample):
    _opcheck_every_scatter_op(scatter_ops, "accumulate", SCATTER_ACCUMULATE, sample)


def test_scatter_fake_kernel_size_is_data_dependent_only_without_dim_size(scatter_ops):
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_unbacked_symbols

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        src = mode.from_tensor(torch.randn(6, 3))
        index = mode.from_tensor(_index((6,), 4, 2))
        unknown = scatter_ops.scatter_sum(src, index, 0)
        known = scatter_ops.scatter_max(src, index, 0, 5)
    assert free_unbacked_symbols(unknown.shape[0]) and unknown.shape[1] == 3
    assert tuple(known[0].shape) == (5, 3) and known[1].dtype == torch.int64


def pooled(src, index, dim_size):
    total = scatter.scatter_sum(src, index, 0, dim_size=dim_size)
    mean = scatter.scatter_mean(src, index, 0, dim_size=dim_size)
    top, argindex = scatter.scatter_max(src, index, 0, dim_size=dim_size)
    # Without dim_size the three results have sizes the compiler only knows as three separate
    # symbols, so they are returned side by side rather than added.
    return total.sin(), mean * 2, top, argindex


def _forward_backward(function, src, index, dim_size):
    src = src.clone().requires_grad_()
    outputs = function(src, index, dim_size)
    sum(output.pow(2).sum() for output in outputs[:3]).backward()
    return outputs, src.grad


def test_compiled_scatter_ops_match_eager_with_dynamic_shapes(scatter_ops):
    """Inductor on results whose group counts are three unbacked symbols (dim_size=None). A given dim_size, and the
    accumulate overloads, are compiled (aot_eager) in tests/test_scatter_packages.py, for both packages."""
    dim_size = None
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(pooled, backend=counter, fullgraph=True, dynamic=True)
    for n in (10, 17):  # two sizes, one graph: dynamic=True keeps n symbolic
        src = _random((n, 3), torch.float64, n)
        index = _index((n,), 5, n + 1)
        expected = _forward_backward(pooled, src, index, dim_size)
        got = _forward_backward(compiled, src, index, dim_size)
        torch.testing.assert_close(got, expected)
    assert counter.frame_count == 1


def accumulate_into(src, index, out):
    total = scatter.scatter_sum(src, index, 0, out=out)
    top, argindex = scatter.scatter_max(src, index, 0, out=total.clone())
    return total, top, argindex


def test_compile_of_the_scatter_accumulate_overloads_writes_out(scatter_ops):
    compiled = torch.compile(accumulate_into, fullgraph=True)
    src, index = _random((6, 3), torch.float32, 20), _index((6,), 4, 21)
    start = _random((4, 3), torch.float32, 22)
    expected_out, got_out = start.clone(), start.clone()
    expected = accumulate_into(src, index, expected_out)
    got = compiled(src, index, got_out)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got_out, expected_out)
    assert not torch.equal(got_out, start)  # out was written


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
