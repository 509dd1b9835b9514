"""Chapter 11's Triton kernels against the workbook's references, their argument checks, and their two
registrations. Without a GPU every kernel runs in Triton's interpreter (workbook.ops.triton_kernels turns it on)."""

import os

import pytest
import torch

from workbook.ops import lltm, scatter_reference
from workbook.ops import triton_kernels as tk


def test_without_a_gpu_the_kernels_are_interpreted():
    if torch.cuda.is_available():
        assert tk.DEVICE == ("cpu" if tk.INTERPRETED else "cuda")
    else:
        assert os.environ["TRITON_INTERPRET"] == "1" and tk.INTERPRETED and tk.DEVICE == "cpu"
    assert tk.is_kernel(tk.softmax_kernel) and not tk.is_kernel(tk.softmax)


# ---- LLTM ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 1e-6), (torch.float64, 1e-12)])
def test_lltm_forward_matches_the_python_cell(dtype, atol):
    input, weights, bias, old_h, old_cell = lltm.make_inputs(3, 5, 97, dtype=dtype, device=tk.DEVICE, seed=11)
    old_cell = old_cell.t().contiguous().t()  # not row-major: the launcher must make it so
    new_h, new_cell, gates, X = tk.lltm_forward(input, weights, bias, old_h, old_cell)
    expected_h, expected_cell = lltm.lltm_python(input, weights, bias, old_h, old_cell)
    torch.testing.assert_close(new_h, expected_h, atol=atol, rtol=0)
    torch.testing.assert_close(new_cell, expected_cell, atol=atol, rtol=0)
    assert gates.shape == (3, 3 * 97) and X.shape == (3, 97 + 5)


def test_lltm_backward_matches_autograd_of_the_python_cell():
    inputs = lltm.make_inputs(4, 6, 70, dtype=torch.float64, device=tk.DEVICE, seed=12, requires_grad=True)
    expected_h, expected_cell = lltm.lltm_python(*inputs)
    grad_h = torch.randn_like(expected_h)
    grad_cell = torch.ones(1, dtype=torch.float64, device=tk.DEVICE).expand_as(
        expected_cell
    )  # stride 0, as .sum() gives
    expected = torch.autograd.grad((expected_h * grad_h).sum() + (expected_cell * grad_cell).sum(), inputs)
    new_h, new_cell, gates, X = tk.lltm_forward(*[t.detach() for t in inputs])
    d_old_h, d_input, d_weights, d_bias, d_old_cell = tk.lltm_backward(
        grad_h, grad_cell, new_cell, gates, X, inputs[1].detach()
    )
    for got, want in zip([d_input, d_weights, d_bias, d_old_h, d_old_cell], expected):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_lltm_checks_its_arguments():
    input, weights, bias, old_h, old_cell = lltm.make_inputs(2, 3, 4, device=tk.DEVICE)
    with pytest.raises(ValueError, match=r"old_cell must have shape \(2, 4\), got \(2, 5\)"):
        tk.lltm_forward(input, weights, bias, old_h, torch.zeros(2, 5, device=tk.DEVICE))
    with pytest.raises(ValueError, match="bias is a torch.float64 tensor"):
        tk.lltm_forward(input, weights, bias.double(), old_h, old_cell)
    with pytest.raises(ValueError, match="input must be float32 or float64, got torch.int64"):
        tk.lltm_forward(input.long(), weights, bias, old_h, old_cell)


@pytest.mark.parametrize("ops", ["wb_triton_opaque", "wb_triton"])
def test_both_registrations_run_eagerly_with_gradients(ops):
    inputs = lltm.make_inputs(3, 4, 9, dtype=torch.float64, device=tk.DEVICE, seed=13, requires_grad=True)
    new_h, new_cell = tk.lltm_cell(*inputs, ops=getattr(torch.ops, ops))
    expected_h, expected_cell = lltm.lltm_python(*inputs)
    torch.testing.assert_close((new_h, new_cell), (expected_h, expected_cell))
    got = torch.autograd.grad((new_h.sin() + new_cell).sum(), inputs)
    want = torch.autograd.grad((expected_h.sin() + expected_cell).sum(), inputs)
    torch.testing.assert_close(got, want)


def test_tracing_into_the_triton_op_needs_compiled_kernels():
    sample = lltm.make_inputs(3, 4, 9, device=tk.DEVICE, seed=15)
    if tk.INTERPRETED:  # the chapter's claim: the interpreter reads the data of the tracer's fake tensors
        with tk.quiet_tracing_errors(), pytest.raises(RuntimeError, match="Cannot access data pointer of Tensor"):
            torch.export.export(tk.LLTMCell(torch.ops.wb_triton), sample)
        return
    exported = torch.export.export(tk.LLTMCell(torch.ops.wb_triton), sample)
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    assert any("triton_kernel_wrapper" in target for target in targets), targets
    torch.testing.assert_close(exported.module()(*sample), tk.lltm_cell(*sample, ops=torch.ops.wb_triton))


def test_the_doctor_names_a_triton_whose_interpreter_does_not_run(monkeypatch):
    from workbook.diagnostics import doctor

    monkeypatch.setattr(doctor, "_run", lambda *command: None)
    finding = doctor.check_triton()
    assert not finding.ok and finding.problem and "cannot run a kernel" in finding.fix


# ---- scatter_sum and segment_sum --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows, features, groups, used",
    [(150, 20, 12, 9), (1, 1, 1, 1), (10, 3, 25, 25), (77, None, 5, 5), (0, 3, 4, 4)],
    ids=["tiles-and-empty-groups", "one-element", "more-groups-than-rows", "1-D-src", "no-rows"],
)
def test_scatter_sum_and_segment_sum_equal_the_reference(rows, features, groups, used):
    # Several tiles of 64 rows and 16 features; index values in [0, used), so groups from `used` on stay empty.
    generator = torch.Generator().manual_seed(rows)
    shape = (rows,) if features is None else (rows, features)
    src = torch.randint(-9, 10, shape, generator=generator).double().to(tk.DEVICE)  # small integers: exact sums
    index = torch.randint(0, used, (rows,), generator=generator).to(tk.DEVICE)
    expected = scatter_reference.reference_sum(src, index, 0, dim_size=groups)
    assert torch.equal(tk.scatter_sum(src, index, groups), expected)
    sorted_src, offsets = tk.sort_by_group(src, index, groups)
    assert torch.equal(tk.segment_sum(sorted_src, offsets), expected)


@pytest.mark.parametrize(
    "index, message",
    [
        (
            [0, 1, 3],
            r"index value 3 at position 2 is out of range: index values must lie in \[0, dim_size\) = \[0, 3\)",
        ),
        ([0, -1, 2], "index value -1 at position 1 is out of range"),
        ([0, 1], r"index must be 1-D with one entry per row of src \(3\)"),
    ],
)
def test_scatter_sum_refuses_an_index_that_would_write_outside_out(index, message):
    with pytest.raises(ValueError, match=message):
        tk.scatter_sum(torch.ones(3, 2, device=tk.DEVICE), torch.tensor(index, device=tk.DEVICE), 3)


def test_segment_sum_refuses_offsets_that_do_not_cover_the_rows():
    with pytest.raises(ValueError, match=r"offsets must rise from 0 to the number of rows \(4\)"):
        tk.segment_sum(torch.ones(4, 2, device=tk.DEVICE), torch.tensor([0, 3, 2, 4], device=tk.DEVICE))


# ---- softmax ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x",
    [
        torch.randn(9, 300, generator=torch.Generator().manual_seed(1)) * 100,  # exp would overflow without the max
        torch.randn(300, 7, generator=torch.Generator().manual_seed(2)).t(),  # not contiguous
        torch.randn(5, 1, generator=torch.Generator().manual_seed(3)),
        torch.randn(3, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(4)),
        torch.empty(0, 5),
    ],
    ids=["large-values", "transposed", "one-column", "float64", "no-rows"],
)
def test_softmax_matches_torch(x):
    x = x.to(tk.DEVICE)
    y = tk.softmax(x)
    torch.testing.assert_close(y, torch.softmax(x, dim=1))
    assert y.is_contiguous()


def test_softmax_refuses_rows_wider_than_a_block():
    with pytest.raises(ValueError, match="do not fit in one block"):
        tk.softmax(torch.zeros(1, tk.SOFTMAX_MAX_COLUMNS + 1, device=tk.DEVICE))


# ---- the interpreter's memory watch -----------------------------------------------------------------------


@pytest.mark.skipif(not tk.INTERPRETED, reason="compiled kernels run on the GPU, where the interpreter cannot watch")
def test_watch_memory_reports_and_skips_accesses_outside_the_tensors():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_without_mask(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK) - 1
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets))

    x_buffer, out_buffer = torch.arange(20.0), torch.full((20,), -1.0)
    x, out = x_buffer[4:10], out_buffer[4:10]
    with tk.watch_memory(x=x, out=out) as report:
        copy_without_mask[(1,)](x, out, BLOCK=8)
    assert (report.loads, report.stores, report.strays) == (8, 8, 2 + 2)  # offsets -1 and 6, loaded and stored
    assert report.first_stray == "a load 1 element(s) before the start of x"
    assert out_buffer.tolist() == [-1.0] * 4 + [4.0, 5.0, 6.0, 7.0, 8.0, 9.0] + [-1.0] * 10  # strays skipped
