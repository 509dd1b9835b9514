"""The C++ LLTM (csrc/lltm, workbook/ops/lltm.py) against the pure-PyTorch reference, and chapter 02's checks."""

import re

import nbformat
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workbook import REPO_ROOT, build
from workbook.build import fresh_namespace
from workbook.course.checking import FAILED, NOT_ATTEMPTED, PASSED
from workbook.exercises import ch02
from workbook.ops import lltm


@pytest.fixture(scope="module")
def ext():
    return lltm.load_extension()


def _forward_and_gradients(cell, args, incoming):
    outputs = cell(*args)
    return outputs, torch.autograd.grad(outputs, args, incoming)


TOLERANCES = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.float64: dict(rtol=1e-9, atol=1e-10)}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch_size=st.integers(0, 6),  # empty tensors too
    input_features=st.integers(0, 7),
    state_size=st.integers(0, 9),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_values_and_gradients_match_the_python_reference(ext, batch_size, input_features, state_size, dtype, seed):
    args = lltm.make_inputs(batch_size, input_features, state_size, dtype=dtype, requires_grad=True, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    incoming = tuple(torch.randn(batch_size, state_size, generator=generator, dtype=dtype) for _ in range(2))
    expected, expected_grads = _forward_and_gradients(lltm.lltm_python, args, incoming)
    actual, actual_grads = _forward_and_gradients(lltm.lltm_cpp, args, incoming)
    for name, a, e in zip(["new_h", "new_cell"], actual, expected):
        torch.testing.assert_close(a, e, **TOLERANCES[dtype], msg=lambda m: f"{name}: {m}")
    for name, a, e in zip(["input", "weights", "bias", "old_h", "old_cell"], actual_grads, expected_grads):
        torch.testing.assert_close(a, e, **TOLERANCES[dtype], msg=lambda m: f"d_{name}: {m}")


def test_large_pre_activations_take_both_branches_of_elu(ext):
    # Scaled-up inputs push gate pre-activations far past 0 on both sides.
    args = [t * 20 for t in lltm.make_inputs(4, 3, 5, dtype=torch.float64, seed=3)]
    args = [t.requires_grad_() for t in args]
    incoming = (torch.ones(4, 5, dtype=torch.float64), torch.ones(4, 5, dtype=torch.float64))
    expected = _forward_and_gradients(lltm.lltm_python, args, incoming)
    actual = _forward_and_gradients(lltm.lltm_cpp, args, incoming)
    candidate = ext.forward(*[t.detach() for t in args])[2][:, 10:]  # gates: [input | output | candidate]
    assert (candidate > 0).any() and (candidate < 0).any()  # elu(x) has the sign of x
    for a, e in zip(actual[0] + actual[1], expected[0] + expected[1]):
        torch.testing.assert_close(a, e)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_reduced_precision_is_close_to_float32(ext, dtype):
    args32 = lltm.make_inputs(8, 6, 10, seed=4)
    expected = lltm.lltm_python(*args32)
    actual = lltm.lltm_cpp(*[t.to(dtype) for t in args32])
    assert all(a.dtype == dtype for a in actual)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a.float(), e, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 4, 5), (2, 7, 3)])
def test_gradcheck_float64(ext, shape):
    args = lltm.make_inputs(*shape, dtype=torch.float64, requires_grad=True, seed=sum(shape))
    assert torch.autograd.gradcheck(lltm.lltm_cpp, args)


def test_gradcheck_with_non_contiguous_inputs(ext):
    x, weights, bias, old_h, old_cell = lltm.make_inputs(3, 4, 5, dtype=torch.float64, seed=5)
    args = (
        x.t().contiguous().t().requires_grad_(),  # same values, column-major memory
        weights.t().contiguous().t().requires_grad_(),
        bias.requires_grad_(),
        torch.cat([old_h, old_h], dim=1)[:, ::2].detach().requires_grad_(),  # a strided view
        old_cell.t().contiguous().t().requires_grad_(),
    )
    assert not args[0].is_contiguous() and not args[3].is_contiguous()
    assert torch.autograd.gradcheck(lltm.lltm_cpp, args)


def test_expanded_incoming_gradient(ext):
    # The gradient of .sum() arrives as an expanded tensor (stride 0); the kernel must not read it raw.
    args = lltm.make_inputs(4, 3, 5, dtype=torch.float64, requires_grad=True, seed=6)
    new_h, new_cell = lltm.lltm_cpp(*args)
    (new_h.sum() + 2 * new_cell.sum()).backward()
    actual = [a.grad.clone() for a in args]
    for a in args:
        a.grad = None
    new_h, new_cell = lltm.lltm_python(*args)
    (new_h.sum() + 2 * new_cell.sum()).backward()
    for a, e in zip(actual, [a.grad for a in args]):
        torch.testing.assert_close(a, e)


def test_pybind_and_torch_ops_agree(ext):
    args = lltm.make_inputs(5, 3, 4, seed=7)
    via_pybind = ext.forward(*args)
    via_ops = torch.ops.wb_lltm.lltm_forward(*args)
    assert len(via_pybind) == 4
    for a, b in zip(via_pybind, via_ops):
        assert torch.equal(a, b)
    # keyword arguments carry the schema's names
    via_keywords = ext.forward(input=args[0], weights=args[1], bias=args[2], old_h=args[3], old_cell=args[4])
    assert torch.equal(via_keywords[0], via_pybind[0])


def test_forward_returns_the_activated_gates_and_X(ext):
    x, weights, bias, old_h, old_cell = lltm.make_inputs(5, 3, 4, dtype=torch.float64, seed=6)
    new_h, new_cell, gates, X = ext.forward(x, weights, bias, old_h, old_cell)
    torch.testing.assert_close(X, torch.cat([old_h, x], dim=1))
    pre_input, pre_output, pre_candidate = torch.nn.functional.linear(X, weights, bias).chunk(3, dim=1)
    expected = torch.cat([pre_input.sigmoid(), pre_output.sigmoid(), torch.nn.functional.elu(pre_candidate)], dim=1)
    torch.testing.assert_close(gates, expected)


def test_modules_agree_over_a_sequence(ext):
    torch.manual_seed(0)
    cell_py = lltm.LLTMPython(6, 8)
    cell_cpp = lltm.LLTMCpp(6, 8)
    cell_cpp.load_state_dict(cell_py.state_dict())
    state_py = state_cpp = (torch.zeros(3, 8), torch.zeros(3, 8))
    for step in torch.randn(4, 3, 6):
        state_py = cell_py(step, state_py)
        state_cpp = cell_cpp(step, state_cpp)
    (state_py[0].sum() + state_py[1].sum()).backward()
    (state_cpp[0].sum() + state_cpp[1].sum()).backward()
    torch.testing.assert_close(state_cpp[0], state_py[0])
    torch.testing.assert_close(cell_cpp.weights.grad, cell_py.weights.grad)
    torch.testing.assert_close(cell_cpp.bias.grad, cell_py.bias.grad)


_RUN_OPS_LIBRARY = r"""
import sys, torch
from workbook.ops import lltm
torch.ops.load_library(sys.argv[1])
args = lltm.make_inputs(3, 4, 5, dtype=torch.float64, requires_grad=True, seed=11)
new_h, new_cell, gates, X = torch.ops.wb_lltm.lltm_forward(*args)
expected = lltm.lltm_python(*args)
gradients = torch.autograd.grad(new_h.sum() + new_cell.sum(), args)
expected_gradients = torch.autograd.grad(expected[0].sum() + expected[1].sum(), args)
print(all(map(torch.allclose, (new_h, new_cell, *gradients), (*expected, *expected_gradients))))
"""


def test_ops_library_has_no_python_and_computes_the_cell():
    """The CMake-built op library (for C++ programs): no Python symbol in it, and, loaded alone in a
    fresh process (this one holds the extension, and wb_lltm may be registered once), the same op,
    gradients included (its autograd is C++ too)."""
    import subprocess
    import sys

    library = lltm.ops_library()
    undefined = subprocess.run(
        ["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [symbol for symbol in undefined if symbol.startswith(("Py", "_Py"))]
    assert "libpython" not in subprocess.run(["ldd", str(library)], capture_output=True, text=True).stdout
    result = subprocess.run(
        [sys.executable, "-c", _RUN_OPS_LIBRARY, str(library)], capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"


# --- bad input: a RuntimeError naming the argument, never a crash --------------------------------


def _forward_args(**replace):
    names = ["input", "weights", "bias", "old_h", "old_cell"]
    values = dict(zip(names, lltm.make_inputs(4, 3, 5, seed=8)))
    values.update(replace)
    return [values[name] for name in names]


_GOOD = dict(zip(["input", "weights", "bias", "old_h", "old_cell"], lltm.make_inputs(4, 3, 5, seed=8)))

FORWARD_MISTAKES = [
    ("transposed weights", dict(weights=_GOOD["weights"].t()), r"weights must have shape .*got \[8, 15\]"),
    ("weights for another state size", dict(weights=torch.zeros(18, 9)), r"weights must have shape"),
    ("bias too short", dict(bias=torch.zeros(14)), r"bias must have shape"),
    ("bias 2-D", dict(bias=torch.zeros(1, 15)), r"bias must be 1-D"),
    ("old_h with fewer rows", dict(old_h=_GOOD["old_h"][:3]), r"old_h must have one row per row of input"),
    ("old_cell of another shape", dict(old_cell=torch.zeros(4, 6)), r"old_cell must have shape"),
    ("old_cell float64", dict(old_cell=_GOOD["old_cell"].double()), r"old_cell has dtype Double but input"),
    ("weights float64", dict(weights=_GOOD["weights"].double()), r"weights has dtype Double"),
    ("integer input", dict(input=torch.zeros(4, 3, dtype=torch.int64)), r"input must be a floating-point"),
    ("1-D input", dict(input=torch.zeros(3)), r"lltm_forward: input must be 2-D"),
    ("3-D old_h", dict(old_h=torch.zeros(1, 4, 5)), r"old_h must be 2-D"),
]


@pytest.mark.parametrize("label,replace,message", FORWARD_MISTAKES, ids=[m[0] for m in FORWARD_MISTAKES])
def test_forward_rejects_bad_input(ext, label, replace, message):
    with pytest.raises(RuntimeError, match=message):
        ext.forward(*_forward_args(**replace))
    with pytest.raises(RuntimeError, match=message):  # the same check on the torch.ops route
        torch.ops.wb_lltm.lltm_forward(*_forward_args(**replace))


def _backward_args(**replace):
    x, weights, bias, old_h, old_cell = lltm.make_inputs(4, 3, 5, seed=9)
    new_h, new_cell, gates, X = lltm.load_extension().forward(x, weights, bias, old_h, old_cell)
    values = dict(
        grad_h=torch.ones_like(new_h),
        grad_cell=torch.ones_like(new_cell),
        new_cell=new_cell,
        gates=gates,
        X=X,
        weights=weights,
    )
    values.update(replace)
    return list(values.values())


BACKWARD_MISTAKES = [
    ("grad_cell of another shape", dict(grad_cell=torch.ones(4, 6)), r"grad_cell must have shape"),
    ("new_cell float64", dict(new_cell=torch.zeros(4, 5, dtype=torch.float64)), r"new_cell has dtype Double"),
    ("X with another batch", dict(X=torch.zeros(3, 8)), r"\bX must have shape"),
    ("gates of another width", dict(gates=torch.zeros(4, 14)), r"gates must have shape"),
    ("gates 1-D", dict(gates=torch.zeros(60)), r"gates must be 2-D"),
    ("transposed weights", dict(weights=torch.zeros(8, 15)), r"\bweights must have shape"),
    ("integer grad_h", dict(grad_h=torch.ones(4, 5, dtype=torch.int32)), r"grad_h must be a floating-point"),
]


@pytest.mark.parametrize("label,replace,message", BACKWARD_MISTAKES, ids=[m[0] for m in BACKWARD_MISTAKES])
def test_backward_rejects_bad_input(ext, label, replace, message):
    with pytest.raises(RuntimeError, match=message):
        ext.backward(*_backward_args(**replace))


def test_backward_computes_with_good_input(ext):
    d_old_h, d_input, d_weights, d_bias, d_old_cell = ext.backward(*_backward_args())
    assert [tuple(t.shape) for t in (d_old_h, d_input, d_weights, d_bias, d_old_cell)] == [
        (4, 5),
        (4, 3),
        (15, 8),
        (15,),
        (4, 5),
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mixed_devices_are_rejected(ext):
    with pytest.raises(RuntimeError, match=r"old_cell is on cpu but input is on cuda"):
        args = _forward_args()
        ext.forward(*[a.cuda() for a in args[:4]], args[4])


# --- chapter 02 exercise checks ------------------------------------------------------------------


def _solution_extension():
    """Build the exercise extension from the solutions notebook's own cells (the real solution)."""
    notebook = nbformat.read(REPO_ROOT / "solutions" / "02_cpp_extensions.ipynb", as_version=4)
    sources = {}
    for cell in notebook.cells:
        match = re.match(r"(gated_\w+_source) = r\"\"\"", cell.source) if cell.cell_type == "code" else None
        if match:
            exec(cell.source, {}, sources)
    assert set(sources) == {"gated_forward_source", "gated_backward_source", "gated_validation_source"}
    gated_sources = [
        sources["gated_forward_source"],
        sources["gated_backward_source"],
        sources["gated_validation_source"],
    ]
    # The name the solutions notebook gives the same sources: the test reuses that build.
    return build.load_inline(
        fresh_namespace.for_source("wb_ch02_gated", "".join(gated_sources)),
        cpp_sources=gated_sources,
        functions=["gated_tanh_forward", "gated_tanh_backward", "check_gated_inputs"],
    )


@pytest.fixture(scope="module")
def gated():
    return _solution_extension()


def test_backward_check_passes_on_the_solution(gated):
    assert ch02.check_gated_tanh_backward(gated.gated_tanh_backward).status == PASSED


def test_validation_check_passes_on_the_solution(gated):
    assert ch02.check_gated_inputs(gated.check_gated_inputs).status == PASSED


def _right_backward(grad, a, b):
    t, s = torch.tanh(a), torch.sigmoid(b)
    return [grad * (1 - t * t) * s, grad * t * s * (1 - s)]


def test_backward_check_passes_on_a_python_equivalent():
    assert ch02.check_gated_tanh_backward(_right_backward).status == PASSED


@pytest.mark.parametrize(
    "wrong,explains",
    [
        (
            lambda g, a, b: [g * (1 - torch.tanh(a) ** 2), _right_backward(g, a, b)[1]],
            r"d_a for a and b of shape \(5,\).* is wrong at index \(\d+,\).*1 - tanh\(a\)\^2",
        ),
        (
            lambda g, a, b: [_right_backward(g, a, b)[0], g * torch.tanh(a) * torch.sigmoid(b)],
            r"d_b .* is wrong at index .*sigmoid\(b\) \* \(1 - sigmoid\(b\)\)",
        ),
        (
            lambda g, a, b: _right_backward(g, a, b)[0],
            r"should return a list of two tensors \[d_a, d_b\], got a Tensor",
        ),
        (
            lambda g, a, b: [x.float() for x in _right_backward(g, a, b)],
            r"d_a .* has dtype torch.float32, expected torch.float64",
        ),
        (lambda g, a, b: [1.0, 2.0], r"d_a should be a tensor, got float"),
    ],
)
def test_backward_check_explains_wrong_implementations(wrong, explains):
    outcome = ch02.check_gated_tanh_backward(wrong)
    assert outcome.status == FAILED
    assert re.search(explains, outcome.explanation), outcome.explanation


def test_backward_check_reports_a_python_stub_as_not_attempted():
    def stub(grad, a, b):
        raise NotImplementedError("not attempted yet")

    assert ch02.check_gated_tanh_backward(stub).status == NOT_ATTEMPTED


def _validator(*skip, message="gated_tanh: {name} has the wrong {what}"):
    """A validator in Python that checks everything except the properties in `skip`."""

    def validate(a, b):
        if "float" not in skip and not a.is_floating_point():
            raise RuntimeError(message.format(name="a", what="dtype (must be floating point)"))
        if "dtype" not in skip and a.dtype != b.dtype:
            raise RuntimeError(message.format(name="b", what="dtype"))
        if "device" not in skip and a.device != b.device:
            raise RuntimeError(message.format(name="b", what="device"))
        if "shape" not in skip and a.shape != b.shape:
            raise RuntimeError(message.format(name="b", what="shape"))

    return validate


def test_validation_check_passes_on_a_python_equivalent():
    assert ch02.check_gated_inputs(_validator()).status == PASSED


@pytest.mark.parametrize(
    "validate,explains",
    [
        (_validator("shape"), r"a of shape \(3, 4\) with b of shape \(4, 3\): validate\(a, b\) accepted it"),
        (_validator("dtype"), r"a float32 with b float64: validate\(a, b\) accepted it"),
        (_validator("float"), r"a and b both int64: validate\(a, b\) accepted it"),
        (_validator("device"), r"a on the CPU with b on the meta device: validate\(a, b\) accepted it"),
        (_validator(message="something is wrong"), r"does not name the argument a or b"),
        (_validator(message="{name} is bad"), r"does not say it is about the shape"),
        (lambda a, b: (_ for _ in ()).throw(RuntimeError("a must not be used")), r"rejected valid inputs"),
    ],
)
def test_validation_check_explains_wrong_implementations(validate, explains):
    outcome = ch02.check_gated_inputs(validate)
    assert outcome.status == FAILED
    assert re.search(explains, outcome.explanation), outcome.explanation


def test_validation_check_reports_a_cpp_stub_message_as_not_attempted():
    def stub(a, b):
        raise RuntimeError("not attempted yet")

    assert ch02.check_gated_inputs(stub).status == NOT_ATTEMPTED
