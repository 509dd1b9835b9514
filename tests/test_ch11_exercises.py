"""Chapter 11's exercise checks pass on the solutions, say "not attempted" on the stubs, and reject a catalogue
of wrong and cheating answers with messages that say what is wrong."""

import pytest
import torch
import triton
import triton.language as tl
import wrong_answers
from wrong_answers import WrongAnswer

from workbook.course import checking
from workbook.exercises import ch11
from workbook.ops import triton_kernels as tk

# Importing workbook.ops.triton_kernels turned on Triton's interpreter where there is no GPU; @triton.jit reads
# that switch when it wraps each kernel below, after every import.

# ---- 11.1 a masked elementwise kernel ---------------------------------------------------------------------


@triton.jit
def _gated_tanh_of(a_ptr, b_ptr, out_ptr, offsets, inside):
    a = tl.load(a_ptr + offsets, mask=inside)
    b = tl.load(b_ptr + offsets, mask=inside)
    tl.store(out_ptr + offsets, (2 * tl.sigmoid(2 * a) - 1) * tl.sigmoid(b), mask=inside)


@triton.jit
def gated_tanh_solution(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    _gated_tanh_of(a_ptr, b_ptr, out_ptr, offsets, offsets < n)


@triton.jit
def gated_tanh_stub(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    # YOUR CODE HERE
    raise NotImplementedError("not attempted yet")


@triton.jit
def gated_tanh_without_mask(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    _gated_tanh_of(a_ptr, b_ptr, out_ptr, offsets, None)


@triton.jit
def gated_tanh_size_of_the_example(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    _gated_tanh_of(a_ptr, b_ptr, out_ptr, offsets, offsets < 1000)  # the size the exercise mentions


@triton.jit
def gated_tanh_first_block_only(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.arange(0, BLOCK)  # every program works on the first block
    _gated_tanh_of(a_ptr, b_ptr, out_ptr, offsets, offsets < n)


@triton.jit
def gated_sigmoid(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    a = tl.load(a_ptr + offsets, mask=inside)
    b = tl.load(b_ptr + offsets, mask=inside)
    tl.store(out_ptr + offsets, tl.sigmoid(a) * tl.sigmoid(b), mask=inside)  # sigmoid where tanh belongs


@triton.jit
def gated_tanh_with_unmasked_loads(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    a = tl.load(a_ptr + offsets)  # reads past the end of a and b
    b = tl.load(b_ptr + offsets)
    tl.store(out_ptr + offsets, (2 * tl.sigmoid(2 * a) - 1) * tl.sigmoid(b), mask=offsets < n)


@triton.jit
def gated_tanh_through_exp(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    a = tl.load(a_ptr + offsets, mask=inside)
    b = tl.load(b_ptr + offsets, mask=inside)
    e = tl.exp(2 * a)  # inf above a = 44, and inf / inf is NaN
    tl.store(out_ptr + offsets, (e - 1) / (e + 1) * tl.sigmoid(b), mask=inside)


@triton.jit
def _does_nothing(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pass


def kernel_with_torch_as_its_launch():
    """A real @triton.jit object whose launch was swapped for torch calls: the concept skipped, in disguise."""
    kernel = triton.jit(_does_nothing.fn)
    kernel.run = lambda a, b, out, n, **launch: out.copy_(torch.tanh(a) * torch.sigmoid(b))
    return kernel


class TorchInDisguise:
    """Launched like a kernel, `kernel[grid](...)`, but computes with torch: the concept skipped."""

    def __getitem__(self, grid):
        def launch(a, b, out, n, BLOCK):
            out.copy_(torch.tanh(a) * torch.sigmoid(b))

        return launch


@triton.jit
def logsumexp_first_block_max(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    # Shifted by the first block's maximum only: overflows when the row's largest values come later.
    row = x_ptr + tl.program_id(0) * row_stride
    col = tl.arange(0, BLOCK)
    largest = tl.max(tl.load(row + col, mask=col < columns, other=-float("inf")), axis=0)
    total = 0.0
    for start in range(0, columns, BLOCK):
        col = start + tl.arange(0, BLOCK)
        total += tl.sum(tl.exp(tl.load(row + col, mask=col < columns, other=-float("inf")) - largest), axis=0)
    tl.store(out_ptr + tl.program_id(0), largest + tl.log(total))


def test_gated_tanh_passes_on_the_solution():
    assert ch11.check_gated_tanh(gated_tanh_solution).passed


def test_gated_tanh_stub_is_not_attempted():
    assert ch11.check_gated_tanh(gated_tanh_stub).status == checking.NOT_ATTEMPTED


# ---- 11.2 log-sum-exp in blocks ---------------------------------------------------------------------------


@triton.jit
def _two_passes(row, columns, BLOCK: tl.constexpr, OUTSIDE: tl.constexpr):
    # The maximum, then the sum of exp(x - maximum); lanes past the row's end load OUTSIDE.
    largest = -float("inf")
    for start in range(0, columns, BLOCK):
        col = start + tl.arange(0, BLOCK)
        largest = tl.maximum(largest, tl.max(tl.load(row + col, mask=col < columns, other=OUTSIDE), axis=0))
    total = 0.0
    for start in range(0, columns, BLOCK):
        col = start + tl.arange(0, BLOCK)
        total += tl.sum(tl.exp(tl.load(row + col, mask=col < columns, other=OUTSIDE) - largest), axis=0)
    return largest + tl.log(total)


@triton.jit
def logsumexp_solution(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * row_stride
    tl.store(out_ptr + tl.program_id(0), _two_passes(row, columns, BLOCK, -float("inf")))


@triton.jit
def _one_pass(row, columns, BLOCK: tl.constexpr, RESCALE: tl.constexpr):
    # A running maximum and a running sum of exp(x - maximum), in one pass over the row. The sum's terms are
    # taken against the maximum so far: RESCALE rescales them whenever the maximum grows (right); without it
    # the sum keeps terms taken against an older, smaller maximum (wrong on rows longer than BLOCK).
    largest = -float("inf")
    total = 0.0
    for start in range(0, columns, BLOCK):
        col = start + tl.arange(0, BLOCK)
        x = tl.load(row + col, mask=col < columns, other=-float("inf"))
        new_largest = tl.maximum(largest, tl.max(x, axis=0))
        if RESCALE:
            total = total * tl.exp(largest - new_largest)
        total += tl.sum(tl.exp(x - new_largest), axis=0)
        largest = new_largest
    return largest + tl.log(total)


@triton.jit
def logsumexp_online(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * row_stride
    tl.store(out_ptr + tl.program_id(0), _one_pass(row, columns, BLOCK, True))  # also right


@triton.jit
def logsumexp_online_without_rescaling(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * row_stride
    tl.store(out_ptr + tl.program_id(0), _one_pass(row, columns, BLOCK, False))


@triton.jit
def logsumexp_stub(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    # YOUR CODE HERE
    raise NotImplementedError("not attempted yet")


@triton.jit
def logsumexp_without_max(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * row_stride
    total = 0.0
    for start in range(0, columns, BLOCK):
        col = start + tl.arange(0, BLOCK)
        total += tl.sum(tl.exp(tl.load(row + col, mask=col < columns, other=-float("inf"))), axis=0)
    tl.store(out_ptr + tl.program_id(0), tl.log(total))


@triton.jit
def logsumexp_one_block(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    col = tl.arange(0, BLOCK)  # a row as long as one block, as in the softmax kernel
    x = tl.load(x_ptr + tl.program_id(0) * row_stride + col, mask=col < columns, other=-float("inf"))
    largest = tl.max(x, axis=0)
    tl.store(out_ptr + tl.program_id(0), largest + tl.log(tl.sum(tl.exp(x - largest), axis=0)))


@triton.jit
def logsumexp_contiguous_rows(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * columns  # row_stride ignored
    tl.store(out_ptr + tl.program_id(0), _two_passes(row, columns, BLOCK, -float("inf")))


@triton.jit
def logsumexp_masked_as_zero(x_ptr, out_ptr, columns, row_stride, BLOCK: tl.constexpr):
    row = x_ptr + tl.program_id(0) * row_stride
    tl.store(out_ptr + tl.program_id(0), _two_passes(row, columns, BLOCK, 0.0))  # lanes past the end count as 0


class LogsumexpInTorch:
    def __getitem__(self, grid):
        def launch(x, out, columns, row_stride, BLOCK):
            out.copy_(torch.logsumexp(x, dim=1))

        return launch


def test_logsumexp_passes_on_the_solution_and_on_the_one_pass_version():
    assert ch11.check_logsumexp(logsumexp_solution).passed
    assert ch11.check_logsumexp(logsumexp_online).passed


def test_logsumexp_stub_is_not_attempted():
    assert ch11.check_logsumexp(logsumexp_stub).status == checking.NOT_ATTEMPTED


# ---- 11.3 a custom op made compile-ready ------------------------------------------------------------------


def fake_solution(x):
    return x.new_empty(x.shape)


def save_output(ctx, inputs, output):
    ctx.save_for_backward(output)


def backward_solution(ctx, grad):
    (y,) = ctx.saved_tensors
    return y * (grad - (grad * y).sum(dim=1, keepdim=True))


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


def fake_runs_the_kernel(x):
    return tk.softmax(x)


def fake_like_the_input(x):
    return torch.empty_like(x)


def fake_of_the_notebooks_shape(x):
    return x.new_empty(20, 300)


def backward_without_the_sum(ctx, grad):
    (y,) = ctx.saved_tensors
    return y * grad


def backward_summed_over_the_batch(ctx, grad):
    (y,) = ctx.saved_tensors
    return y * (grad - (grad * y).sum(dim=0, keepdim=True))


def backward_by_torchs_formula(ctx, grad):
    (y,) = ctx.saved_tensors
    return torch.ops.aten._softmax_backward_data(grad, y, 1, y.dtype)


def save_input(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def backward_through_torch_softmax(ctx, grad):
    (x,) = ctx.saved_tensors
    with torch.enable_grad():
        x = x.detach().requires_grad_()
        return torch.autograd.grad(torch.softmax(x, dim=1), x, grad)[0]


def fake_always_float32(x):
    return x.new_empty(x.shape, dtype=torch.float32)


def test_softmax_op_passes_on_the_solution():
    assert ch11.check_softmax_op(fake_solution, save_output, backward_solution).passed


def test_softmax_op_stubs_are_not_attempted():
    assert ch11.check_softmax_op(stub, stub, stub).status == checking.NOT_ATTEMPTED
    assert ch11.check_softmax_op(fake_solution, stub, stub).status == checking.NOT_ATTEMPTED


# ---- the catalogue ----------------------------------------------------------------------------------------

WRONG_ANSWERS = [
    WrongAnswer(
        "11.1",
        "shown sizes only",
        "no mask: right only when n is a multiple of BLOCK",
        lambda: ch11.check_gated_tanh(gated_tanh_without_mask),
        ("n not a multiple of BLOCK", "mask"),
    ),
    WrongAnswer(
        "11.1",
        "hard-coded",
        "the mask compares with 1000, the example's size, not n",
        lambda: ch11.check_gated_tanh(gated_tanh_size_of_the_example),
        ("with n = 1 and BLOCK = 64",),
    ),
    WrongAnswer(
        "11.1",
        "wrong math",
        "every program works on the first block (program_id unused)",
        lambda: ch11.check_gated_tanh(gated_tanh_first_block_only),
        ("never written", "tl.program_id(0)"),
    ),
    WrongAnswer(
        "11.1",
        "wrong math",
        "a sigmoid where the tanh belongs",
        lambda: ch11.check_gated_tanh(gated_sigmoid),
        ("out with n = 256 and BLOCK = 64 is wrong at index",),
    ),
    WrongAnswer(
        "11.1",
        "concept skipped",
        "torch functions behind a kernel-like launch",
        lambda: ch11.check_gated_tanh(TorchInDisguise()),
        ("should be a @triton.jit kernel", "TorchInDisguise"),
    ),
    WrongAnswer(
        "11.1",
        "shown sizes only",
        "tanh through exp, (e^2a - 1) / (e^2a + 1): NaN once exp(2a) overflows",
        lambda: ch11.check_gated_tanh(gated_tanh_through_exp),
        ("is nan for a =", "large |a|"),
    ),
    WrongAnswer(
        "11.1",
        "concept skipped",
        "a @triton.jit object whose run was replaced by torch calls",
        lambda: ch11.check_gated_tanh(kernel_with_torch_as_its_launch()),
        ("launch was replaced",),
    ),
    WrongAnswer(
        "11.2",
        "wrong math",
        "shifted by the first block's maximum, not the row's",
        lambda: ch11.check_logsumexp(logsumexp_first_block_max),
        ("one rising from -100 to 100", "is inf", "not of its first block"),
    ),
    WrongAnswer(
        "11.2",
        "wrong math",
        "one pass without rescaling the running sum when the maximum grows",
        lambda: ch11.check_logsumexp(logsumexp_online_without_rescaling),
        ("rows longer than BLOCK", "rescaled"),
    ),
    WrongAnswer(
        "11.2",
        "wrong math",
        "exp without subtracting the row's maximum: overflows",
        lambda: ch11.check_logsumexp(logsumexp_without_max),
        ("large values", "is inf", "subtract the row's maximum"),
    ),
    WrongAnswer(
        "11.2",
        "shown sizes only",
        "one block per row, as the softmax kernel: right only for rows up to BLOCK",
        lambda: ch11.check_logsumexp(logsumexp_one_block),
        ("rows longer than BLOCK", "loop over it"),
    ),
    WrongAnswer(
        "11.2",
        "wrong math",
        "row r addressed at r * columns: row_stride ignored",
        lambda: ch11.check_logsumexp(logsumexp_contiguous_rows),
        ("rows that are not contiguous", "r * row_stride"),
    ),
    WrongAnswer(
        "11.2",
        "wrong math",
        "lanes past the row's end loaded as 0, not -inf",
        lambda: ch11.check_logsumexp(logsumexp_masked_as_zero),
        ("rows shorter than BLOCK", "-inf"),
    ),
    WrongAnswer(
        "11.2",
        "concept skipped",
        "torch.logsumexp behind a kernel-like launch",
        lambda: ch11.check_logsumexp(LogsumexpInTorch()),
        ("should be a @triton.jit kernel",),
    ),
    WrongAnswer(
        "11.3",
        "concept skipped",
        "the fake kernel launches the real kernel",
        lambda: ch11.check_softmax_op(fake_runs_the_kernel, save_output, backward_solution),
        ("ran the real kernel", "fake tensor has none"),
    ),
    WrongAnswer(
        "11.3",
        "wrong math",
        "empty_like: a transposed input's strides promised",
        lambda: ch11.check_softmax_op(fake_like_the_input, save_output, backward_solution),
        ("strides", "x.new_empty(x.shape)"),
    ),
    WrongAnswer(
        "11.3",
        "hard-coded",
        "a fake output of the shape section 4 shows, (20, 300)",
        lambda: ch11.check_softmax_op(fake_of_the_notebooks_shape, save_output, backward_solution),
        ("has shape (20, 300)",),
    ),
    WrongAnswer(
        "11.3",
        "wrong math",
        "backward without the row sum: grad * y",
        lambda: ch11.check_softmax_op(fake_solution, save_output, backward_without_the_sum),
        ("the gradient of x", "is wrong at index"),
    ),
    WrongAnswer(
        "11.3",
        "concept skipped",
        "backward by aten._softmax_backward_data, not the formula",
        lambda: ch11.check_softmax_op(fake_solution, save_output, backward_by_torchs_formula),
        ("torch's own softmax", "_softmax_backward_data"),
    ),
    WrongAnswer(
        "11.3",
        "concept skipped",
        "backward by autograd through torch.softmax on the saved input",
        lambda: ch11.check_softmax_op(fake_solution, save_input, backward_through_torch_softmax),
        ("torch's own softmax", "_softmax"),
    ),
    WrongAnswer(
        "11.3",
        "wrong math",
        "a fake output that is always float32",
        lambda: ch11.check_softmax_op(fake_always_float32, save_output, backward_solution),
        ("dtype torch.float32", "torch.float64"),
    ),
    WrongAnswer(
        "11.3",
        "wrong math",
        "backward sums over the batch (dim 0), not the row",
        lambda: ch11.check_softmax_op(fake_solution, save_output, backward_summed_over_the_batch),
        ("the gradient of x", "is wrong at index"),
    ),
]

if tk.INTERPRETED:  # only the interpreter can see a load it does not need; a GPU reads the bytes and moves on
    WRONG_ANSWERS.append(
        WrongAnswer(
            "11.1",
            "wrong math",
            "the store is masked, the loads are not",
            lambda: ch11.check_gated_tanh(gated_tanh_with_unmasked_loads),
            ("a load 1 element(s) past the end of a",),
        )
    )


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=wrong_answers.ids)
def test_wrong_answer_is_rejected(wrong):
    wrong_answers.assert_rejected(wrong)
