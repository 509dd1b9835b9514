"""Chapter 10's exercise checks pass on the solutions, say "not attempted" on the stubs, and explain
plausible wrong answers."""

import pytest
import torch

from workbook import checking, troubleshooting
from workbook.exercises import ch10


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


def status(outcome):
    return outcome.status, outcome.explanation


# ---- 10.1 read the message, name the cause ------------------------------------------------------------


def diagnose_solution(message):
    clues = [
        ("Ninja is required", "no ninja"),
        ("libc10.so", "import torch first"),
        ("undefined symbol", "abi mismatch"),
        ("Could not load this library", "wrong library path"),
        ("Unknown builtin op", "op library not loaded"),
        ("Could not find schema", "op library not loaded"),
        ("Only a single TORCH_LIBRARY", "namespace registered twice"),
        ("no fake impl", "no fake kernel"),
        ("data-dependent", "data-dependent size"),
        ("autograd kernel was not registered", "no autograd"),
        ("CUDA", "cuda home"),
        ("timeout", "stale lock"),
    ]
    return next(cause for clue, cause in clues if clue in message)


def diagnose_by_shared_words(message):  # "cannot open shared object file" is in two different failures
    if "cannot open shared object file" in message:
        return "wrong library path"
    return diagnose_solution(message)


def diagnose_every_import_error_as_order(message):  # an undefined symbol is not fixed by importing torch first
    if message.startswith("ImportError"):
        return "import torch first"
    return diagnose_solution(message)


def diagnose_schema_as_fake(message):  # "Could not find schema" is a missing library, not a missing fake kernel
    if "schema" in message:
        return "no fake kernel"
    return diagnose_solution(message)


def diagnose_free_text(message):
    return "install ninja"


def test_diagnose_passes_on_the_solution():
    assert ch10.check_diagnose(diagnose_solution).passed


def test_diagnose_stub_is_not_attempted():
    assert ch10.check_diagnose(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (diagnose_by_shared_words, "is not caused by 'wrong library path'"),
        (diagnose_every_import_error_as_order, "undefined symbol"),
        (diagnose_schema_as_fake, "Could not find schema"),
        (diagnose_free_text, "one of the keys of CAUSES"),
    ],
)
def test_diagnose_explains_wrong_answers(wrong, says):
    outcome = ch10.check_diagnose(wrong)
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


def test_every_cause_is_asked_about():
    assert {cause for _, cause in ch10._MESSAGES} == set(ch10.CAUSES)


# ---- 10.2 the missing fake kernel ---------------------------------------------------------------------


def fake_solution(a, b):
    return a.new_empty((a.shape[0], b.shape[0]))


def fake_like_a(a, b):
    return torch.empty_like(a)


def fake_transposed(a, b):
    return a.new_empty((b.shape[0], a.shape[0]))


def fake_always_float32(a, b):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.float32)


def fake_reads_values(a, b):
    return a.new_empty((int(a.abs().sum() > 0) * a.shape[0], b.shape[0]))


def test_fake_kernel_passes_on_the_solution():
    assert ch10.check_fake_kernel(fake_solution).passed


def test_fake_kernel_stub_is_not_attempted():
    assert ch10.check_fake_kernel(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (fake_like_a, "Shapes"),
        (fake_transposed, "Shapes"),
        (fake_always_float32, "Dtypes"),
        (fake_reads_values, "your code raised"),
    ],
)
def test_fake_kernel_explains_wrong_answers(wrong, says):
    outcome = ch10.check_fake_kernel(wrong)
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


def test_pairwise_distance_op_names_bad_shapes():
    op = troubleshooting.new_pairwise_distance()
    with pytest.raises(ValueError, match="same number of columns"):
        op(torch.ones(2, 3), torch.ones(2, 4))


# ---- 10.3 a gradient that was silently None ----------------------------------------------------------


def save_both(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def backward_solution(ctx, grad):
    x, weight = ctx.saved_tensors
    return grad * weight.unsqueeze(1), (grad * x).sum(dim=1)


def backward_x_only(ctx, grad):  # the weight's gradient forgotten: None again
    x, weight = ctx.saved_tensors
    return grad * weight.unsqueeze(1), None


def backward_summed_over_rows(ctx, grad):  # the weight's gradient summed over the wrong dimension
    x, weight = ctx.saved_tensors
    return grad * weight.unsqueeze(1), (grad * x).sum(dim=0)


def backward_swapped(ctx, grad):  # gradients in the wrong order (shapes fit when x has one column)
    x, weight = ctx.saved_tensors
    return (grad * x).sum(dim=1), grad * weight.unsqueeze(1)


def backward_broadcast_along_columns(ctx, grad):  # weight applied per column: right only for square x
    x, weight = ctx.saved_tensors
    return grad * weight, (grad * x).sum(dim=1)


def test_autograd_passes_on_the_solution():
    assert ch10.check_scale_rows_autograd(save_both, backward_solution).passed


def test_autograd_stub_is_not_attempted():
    assert ch10.check_scale_rows_autograd(stub, stub).status == checking.NOT_ATTEMPTED
    assert ch10.check_scale_rows_autograd(save_both, stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (backward_x_only, "gradient of weight is None"),
        (backward_summed_over_rows, "your code raised"),
        (backward_swapped, "your code raised"),
        (backward_broadcast_along_columns, "your code raised"),
    ],
)
def test_autograd_explains_wrong_answers(wrong, says):
    outcome = ch10.check_scale_rows_autograd(save_both, wrong)
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


def test_scale_rows_without_autograd_leaves_the_gradient_none():
    op = troubleshooting.new_scale_rows()
    x = torch.ones(2, 3, requires_grad=True)
    with pytest.warns(UserWarning, match="autograd kernel was not registered"):
        op(x, torch.ones(2)).sum().backward()
    assert x.grad is None


# ---- the gallery's helpers ----------------------------------------------------------------------------


def test_child_errors_are_sanitised_and_summarised():
    result = troubleshooting.run_python("import torch; torch.ops.load_library('no/such/library.so')")
    assert result.returncode == 1
    assert result.error.startswith("OSError: Could not load this library: no/such/library.so")
    assert "/work" not in result.error and str(troubleshooting.REPO_ROOT) not in result.stderr


def test_a_hanging_child_is_reported_as_such():
    assert "timeout killed it" in troubleshooting.run_python("import time; time.sleep(5)", timeout=0.5).error


def test_path_without_ninja_keeps_the_compiler():
    import shutil

    path = troubleshooting.path_without_ninja()
    assert shutil.which("ninja", path=path) is None
    assert shutil.which("c++", path=path) is not None
