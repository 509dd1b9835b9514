"""Chapter 10's exercise checks pass on the solutions, say "not attempted" on the stubs, and reject a
catalogue of plausible wrong and cheating answers, each with a message that says what is wrong."""

import pytest
import torch
import wrong_answers
from wrong_answers import WrongAnswer

from workbook.chapters import troubleshooting
from workbook.course import checking
from workbook.exercises import ch10


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


# ---- 10.1 read the message, name the cause ------------------------------------------------------------


def diagnose_solution(message):
    clues = [
        ("Ninja is required", "no ninja"),
        ("could not find ninja", "no ninja"),
        ('corresponding to "Ninja"', "no ninja"),
        ("file_baton.py", "stale lock"),
        ("undefined symbol", "abi mismatch"),
        ("Could not load this library", "wrong library path"),
        ("cannot open shared object file", "import torch first"),
        ("Unknown builtin op", "op library not loaded"),
        ("Could not find schema", "op library not loaded"),
        ("'_OpNamespace'", "op library not loaded"),
        ("Only a single TORCH_LIBRARY", "namespace registered twice"),
        ("data-dependent", "data-dependent size"),
        ("unbacked", "data-dependent size"),
        ("fake impl", "no fake kernel"),
        ("fake tensors", "no fake kernel"),
        ("UnsupportedOperatorException", "no fake kernel"),
        ("autograd kernel was not registered", "no autograd"),
        ("no autograd formula", "no autograd"),
        ("not compiled with CUDA", "cpu-only torch"),
        ("CUDA_HOME environment variable is not set", "cpu-only torch"),
        ("CUDA was not found", "cpu-only torch"),
        ("nvcc", "cuda toolkit"),
        ("detected CUDA version", "cuda toolkit"),
    ]
    return next(cause for clue, cause in clues if clue in message)


def diagnose_gallery_lines(message):  # the clues of the lines the gallery prints, nothing more
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
        ("CUDA", "cuda toolkit"),
        ("timeout", "stale lock"),
    ]
    return next((cause for clue, cause in clues if clue in message), "no ninja")


GALLERY_OUTPUTS = {  # the gallery's printed lines, verbatim
    "RuntimeError: Ninja is required to load C++ extensions (pip install ninja to get it)": "no ninja",
    "ImportError: libc10.so: cannot open shared object file: No such file or directory": "import torch first",
    "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.": "cpu-only torch",
    "error: Unknown builtin op: workbook_cv::warp_perspective.": "op library not loaded",
}


def diagnose_by_lookup(message):
    return GALLERY_OUTPUTS[message]


def diagnose_with_the_checks_old_list(message):  # the list the old check kept as a module constant
    return dict(ch10._MESSAGES)[message]


def diagnose_every_cuda_error_as_cuda_home(message):  # misses "nvcc not found at" and the version mismatch
    return "cpu-only torch" if "CUDA" in message else diagnose_solution(message)


def diagnose_every_cuda_error_as_toolkit(message):  # a CPU-only torch is not fixed by any CUDA_HOME
    return "cuda toolkit" if "CUDA" in message else diagnose_solution(message)


def diagnose_shared_object_first(message):  # "cannot open shared object file" is in two different failures
    if "cannot open shared object file" in message:
        return "import torch first"
    return diagnose_solution(message)


def diagnose_first_line(message):  # a traceback's first line is "Traceback (most recent call last):"
    try:
        return diagnose_solution(message.splitlines()[0])
    except StopIteration:
        return "no ninja"


def diagnose_free_text(message):
    return "install ninja"


def test_diagnose_passes_on_the_solution():
    assert ch10.check_diagnose(diagnose_solution).passed


def test_diagnose_stub_is_not_attempted():
    assert ch10.check_diagnose(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize("cause", sorted(ch10.CAUSES))
def test_every_cause_is_asked_about(cause):
    """A classifier that never answers `cause` fails: the check draws messages of every cause."""

    def never(message):
        answer = diagnose_solution(message)
        return "no ninja" if answer == cause and cause != "no ninja" else ("stale lock" if answer == cause else answer)

    assert ch10.check_diagnose(never).status == checking.FAILED


def test_diagnose_messages_are_not_the_gallerys_own():
    seen = []
    ch10.check_diagnose(lambda message: seen.append(message) or diagnose_solution(message))
    assert len(seen) >= 40 and len(set(seen)) > len(seen) * 0.9
    assert sum(message in GALLERY_OUTPUTS for message in seen) < len(seen) / 5


# ---- 10.2 the missing fake kernel ---------------------------------------------------------------------


def fake_solution(a, b):
    return a.new_empty((a.shape[0], b.shape[0]))


def fake_like_a(a, b):
    return torch.empty_like(a)


def fake_transposed(a, b):
    return a.new_empty((b.shape[0], a.shape[0]))


def fake_always_float32(a, b):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.float32)


def fake_default_dtype(a, b):
    return torch.empty(len(a), len(b))


def fake_reads_values(a, b):
    return a.new_empty((int(a.abs().sum() > 0) * a.shape[0], b.shape[0]))


def fake_runs_the_numpy_code(a, b):
    a_np, b_np = a.numpy(), b.numpy()
    return torch.from_numpy(((a_np[:, None, :] - b_np[None, :, :]) ** 2).sum(-1) ** 0.5)


def fake_fixed_size(a, b):
    return a.new_empty((4, 6))


def fake_column_major(a, b):
    return a.new_empty((b.shape[0], a.shape[0])).t()


def fake_on_meta(a, b):
    return torch.empty((a.shape[0], b.shape[0]), dtype=a.dtype, device="meta")


def test_fake_kernel_passes_on_the_solution():
    assert ch10.check_fake_kernel(fake_solution).passed


def test_fake_kernel_stub_is_not_attempted():
    assert ch10.check_fake_kernel(stub).status == checking.NOT_ATTEMPTED


def test_pairwise_distance_op_names_bad_shapes_and_dtypes():
    op = troubleshooting.new_pairwise_distance()
    with pytest.raises(ValueError, match="same number of columns"):
        op(torch.ones(2, 3), torch.ones(2, 4))
    with pytest.raises(ValueError, match="same dtype"):
        op(torch.ones(2, 3), torch.ones(2, 3, dtype=torch.float64))


# ---- 10.3 a gradient that was None -------------------------------------------------------------------


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


def backward_swapped(ctx, grad):  # gradients in the wrong order
    x, weight = ctx.saved_tensors
    return (grad * x).sum(dim=1), grad * weight.unsqueeze(1)


def backward_ignores_grad(ctx, grad):  # right for loss = out.sum(), where every incoming gradient is 1
    x, weight = ctx.saved_tensors
    return weight.unsqueeze(1).expand_as(x), x.sum(dim=1)


def backward_views_grad(ctx, grad):  # .view needs a contiguous gradient; .sum() hands backward an expanded one
    x, weight = ctx.saved_tensors
    flat = grad.view(-1)
    return (flat * weight.repeat_interleave(x.shape[1])).view(x.shape), (grad * x).sum(dim=1)


def backward_scales_grad_in_place(ctx, grad):  # the weight's gradient first, then grad reused as the x gradient
    x, weight = ctx.saved_tensors
    grad_weight = (grad * x).sum(dim=1)
    return grad.mul_(weight.unsqueeze(1)), grad_weight


def backward_x_gradient_alone(ctx, grad):  # one gradient returned for two inputs
    x, weight = ctx.saved_tensors
    return grad * weight.unsqueeze(1)


def save_output(ctx, inputs, output):  # x is not saved: recovered as output / weight in backward
    ctx.save_for_backward(output, inputs[1])


def backward_from_output(ctx, grad):
    output, weight = ctx.saved_tensors
    return grad * weight.unsqueeze(1), (grad * output / weight.unsqueeze(1)).sum(dim=1)


def save_as_attributes(ctx, inputs, output):  # no save_for_backward: an in-place change goes unnoticed
    ctx.x, ctx.weight = inputs


def backward_from_attributes(ctx, grad):
    return grad * ctx.weight.unsqueeze(1), (grad * ctx.x).sum(dim=1)


def save_x_only(ctx, inputs, output):  # weight kept as an attribute: its in-place change goes unnoticed
    x, ctx.weight = inputs
    ctx.save_for_backward(x)


def backward_from_saved_x(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * ctx.weight.unsqueeze(1), (grad * x).sum(dim=1)


def backward_in_float32(ctx, grad):  # float64 gradients rounded to float32 (autograd casts them back)
    x, weight = ctx.saved_tensors
    grad = grad.float()
    return grad * weight.float().unsqueeze(1), (grad * x.float()).sum(dim=1)


def test_autograd_passes_on_the_solution():
    assert ch10.check_scale_rows_autograd(save_both, backward_solution).passed


def test_autograd_stub_is_not_attempted():
    assert ch10.check_scale_rows_autograd(stub, stub).status == checking.NOT_ATTEMPTED
    assert ch10.check_scale_rows_autograd(save_both, stub).status == checking.NOT_ATTEMPTED


def test_scale_rows_without_autograd_leaves_the_gradient_none():
    op = troubleshooting.new_scale_rows()
    x = torch.ones(2, 3, requires_grad=True)
    with pytest.warns(UserWarning, match="autograd kernel was not registered"):
        op(x, torch.ones(2)).sum().backward()
    assert x.grad is None


# ---- the catalogue: every wrong answer is rejected, with a message that says why -----------------------

WRONG_ANSWERS = [
    WrongAnswer(
        "10.1",
        "hard-coded",
        "clues from the gallery's printed lines only",
        lambda: ch10.check_diagnose(diagnose_gallery_lines),
        ("is not caused by",),
    ),
    WrongAnswer(
        "10.1",
        "hard-coded",
        "a table of the gallery's messages, verbatim",
        lambda: ch10.check_diagnose(diagnose_by_lookup),
        ("raised KeyError", "has not seen before"),
    ),
    WrongAnswer(
        "10.1",
        "private data",
        "the check's message list read back",
        lambda: ch10.check_diagnose(diagnose_with_the_checks_old_list),
        ("raised AttributeError",),
    ),
    WrongAnswer(
        "10.1",
        "wrong math",
        "every CUDA message read as CUDA_HOME unset (misses nvcc not found at)",
        lambda: ch10.check_diagnose(diagnose_every_cuda_error_as_cuda_home),
        ("is not caused by 'cpu-only torch'",),
    ),
    WrongAnswer(
        "10.1",
        "wrong math",
        "every CUDA message read as a toolkit problem (misses the CPU-only torch)",
        lambda: ch10.check_diagnose(diagnose_every_cuda_error_as_toolkit),
        ("is not caused by 'cuda toolkit'",),
    ),
    WrongAnswer(
        "10.1",
        "wrong math",
        "cannot open shared object file always read as import order",
        lambda: ch10.check_diagnose(diagnose_shared_object_first),
        ("Could not load this library", "is not caused by 'import torch first'"),
    ),
    WrongAnswer(
        "10.1",
        "shown sizes only",
        "only the message's first line read",
        lambda: ch10.check_diagnose(diagnose_first_line),
        ("read the whole message",),
    ),
    WrongAnswer(
        "10.1",
        "wrong math",
        "free text instead of a key of CAUSES",
        lambda: ch10.check_diagnose(diagnose_free_text),
        ("one of the keys of CAUSES",),
    ),
    WrongAnswer("10.2", "wrong math", "empty_like(a)", lambda: ch10.check_fake_kernel(fake_like_a), ("Shape",)),
    WrongAnswer(
        "10.2", "wrong math", "(m, n) instead of (n, m)", lambda: ch10.check_fake_kernel(fake_transposed), ("Shape",)
    ),
    WrongAnswer(
        "10.2",
        "wrong math",
        "always float32",
        lambda: ch10.check_fake_kernel(fake_always_float32),
        ("float64", "Dtype"),
    ),
    WrongAnswer(
        "10.2",
        "wrong math",
        "torch.empty's default dtype",
        lambda: ch10.check_fake_kernel(fake_default_dtype),
        ("Dtype",),
    ),
    WrongAnswer(
        "10.2",
        "wrong math",
        "strides of an (m, n) tensor transposed",
        lambda: ch10.check_fake_kernel(fake_column_major),
        ("Stride",),
    ),
    WrongAnswer("10.2", "wrong math", "on the meta device", lambda: ch10.check_fake_kernel(fake_on_meta), ("Devices",)),
    WrongAnswer(
        "10.2",
        "wrong math",
        "the size read from the values",
        lambda: ch10.check_fake_kernel(fake_reads_values),
        ("failed on fake tensors", "no values"),
    ),
    WrongAnswer(
        "10.2",
        "concept skipped",
        "the real NumPy computation run on fake tensors",
        lambda: ch10.check_fake_kernel(fake_runs_the_numpy_code),
        ("failed on fake tensors", "no values"),
    ),
    WrongAnswer(
        "10.2", "shown sizes only", "one fixed output size", lambda: ch10.check_fake_kernel(fake_fixed_size), ("Shape",)
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "the weight's gradient forgotten",
        lambda: ch10.check_scale_rows_autograd(save_both, backward_x_only),
        ("gradient of weight is None",),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "the weight's gradient summed over rows",
        lambda: ch10.check_scale_rows_autograd(save_both, backward_summed_over_rows),
        ("your backward raised",),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "the two gradients in the wrong order",
        lambda: ch10.check_scale_rows_autograd(save_both, backward_swapped),
        ("your backward raised",),
    ),
    WrongAnswer(
        "10.3",
        "shown sizes only",
        "the incoming gradient ignored (right for loss = out.sum())",
        lambda: ch10.check_scale_rows_autograd(save_both, backward_ignores_grad),
        ("the gradient of x", "is wrong at index"),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "grad.view on a non-contiguous incoming gradient",
        lambda: ch10.check_scale_rows_autograd(save_both, backward_views_grad),
        ("non-contiguous", "your backward raised"),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "the incoming gradient scaled in place",
        lambda: ch10.check_scale_rows_autograd(save_both, backward_scales_grad_in_place),
        ("in place",),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "one gradient for two inputs",
        lambda: ch10.check_scale_rows_autograd(save_both, backward_x_gradient_alone),
        ("tuple of two gradients",),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "x recovered as output / weight (a zero weight)",
        lambda: ch10.check_scale_rows_autograd(save_output, backward_from_output),
        ("the gradient of weight", "is wrong at index"),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "x and weight kept as ctx attributes, unchecked for in-place changes",
        lambda: ch10.check_scale_rows_autograd(save_as_attributes, backward_from_attributes),
        ("changed in place between forward and backward", "ctx.save_for_backward(x, weight)"),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "x saved, weight kept as a ctx attribute (an in-place change of weight goes unnoticed)",
        lambda: ch10.check_scale_rows_autograd(save_x_only, backward_from_saved_x),
        ("after weight was changed in place", "ctx.save_for_backward(x, weight)"),
    ),
    WrongAnswer(
        "10.3",
        "wrong math",
        "gradients computed in float32 for float64 inputs",
        lambda: ch10.check_scale_rows_autograd(save_both, backward_in_float32),
        ("torch.float32 for a torch.float64 x",),
    ),
]


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)


# ---- the gallery's helpers ----------------------------------------------------------------------------


def test_child_errors_are_sanitised_and_summarised():
    # A child without torch (whose import alone takes seconds): the message as torch.ops.load_library words it.
    library = troubleshooting.REPO_ROOT / "no/such/library.so"
    result = troubleshooting.run_python(f"raise OSError('Could not load this library: ' + {str(library)!r})")
    assert result.returncode == 1
    assert result.error == "OSError: Could not load this library: no/such/library.so"
    assert str(troubleshooting.REPO_ROOT) not in result.stderr


def test_a_hanging_child_is_reported_as_such():
    assert "timeout killed it" in troubleshooting.run_python("import time; time.sleep(5)", timeout=0.5).error


def test_an_interrupted_child_shows_where_it_waited():
    code = "import time\ndef wait_here():\n    time.sleep(60)\nprint('waiting', flush=True)\nwait_here()"
    result = troubleshooting.run_python(code, interrupt_after=0.5, timeout=30)
    assert result.stdout == "waiting\n"
    where, error = result.stderr.strip().splitlines()[-2:]
    assert where.endswith(", in wait_here") and error == "KeyboardInterrupt"


def test_path_without_ninja_keeps_the_compiler():
    import shutil

    path = troubleshooting.path_without_ninja()
    assert shutil.which("ninja", path=path) is None
    assert shutil.which("c++", path=path) is not None
