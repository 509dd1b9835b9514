"""Chapter 08's exercise checks pass on the solutions, say "not attempted" on the stubs, and explain
plausible wrong answers."""

import pytest
import torch
from torch.export import Dim

from workbook import checking, scatter, successor
from workbook.exercises import ch08


@pytest.fixture(scope="module")
def ops():
    return scatter.load()


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


def status(outcome):
    return outcome.status, outcome.explanation


# ---- 8.1 a fake kernel with a dynamic size ----------------------------------------------------------


def fake_solution(src, index):
    rows = torch.library.get_ctx().new_dynamic_size()
    return src.new_empty((rows, *src.shape[1:]))


def fake_one_row_per_entry(src, index):
    return src.new_empty((index.shape[0], *src.shape[1:]))


def fake_reads_values(src, index):
    return src.new_empty((int(index.max()) + 1, *src.shape[1:]))


def fake_drops_trailing_dims(src, index):
    return src.new_empty((torch.library.get_ctx().new_dynamic_size(),))


def fake_wrong_dtype(src, index):
    return src.new_empty((torch.library.get_ctx().new_dynamic_size(), *src.shape[1:]), dtype=torch.float32)


def test_dynamic_fake_passes_on_the_solution():
    assert ch08.check_dynamic_fake(fake_solution).passed


def test_dynamic_fake_stub_is_not_attempted():
    assert ch08.check_dynamic_fake(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (fake_one_row_per_entry, "Shapes"),
        (fake_reads_values, "new_dynamic_size"),
        (fake_drops_trailing_dims, "Shapes"),
        (fake_wrong_dtype, "Dtypes"),
    ],
)
def test_dynamic_fake_explains_wrong_answers(wrong, says):
    outcome = ch08.check_dynamic_fake(wrong)
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


# ---- 8.2 autograd for segment_sum --------------------------------------------------------------------


def save_index(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def backward_solution(ctx, grad):
    (index,) = ctx.saved_tensors
    return grad.index_select(0, index), None


def backward_truncates(ctx, grad):  # right shape for some inputs, but not the gradient
    (index,) = ctx.saved_tensors
    return grad.new_zeros((index.shape[0], *grad.shape[1:])) + grad.sum(0), None


def backward_scaled_by_count(ctx, grad):  # the mean's gradient, not the sum's
    (index,) = ctx.saved_tensors
    count = torch.bincount(index).to(grad.dtype).index_select(0, index)
    return grad.index_select(0, index) / count.view(-1, *[1] * (grad.dim() - 1)), None


def test_autograd_passes_on_the_solution():
    assert ch08.check_segment_sum_autograd(save_index, backward_solution).passed


def test_autograd_stub_is_not_attempted():
    assert ch08.check_segment_sum_autograd(stub, stub).status == checking.NOT_ATTEMPTED
    assert ch08.check_segment_sum_autograd(save_index, stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize("wrong", [backward_truncates, backward_scaled_by_count])
def test_autograd_explains_wrong_answers(wrong):
    outcome = ch08.check_segment_sum_autograd(save_index, wrong)
    assert outcome.status == checking.FAILED and "gradient of src" in outcome.explanation, status(outcome)


# ---- 8.3 remove a graph break ------------------------------------------------------------------------


def aggregate_solution(x, edge_index):
    source, target = edge_index[0], edge_index[1]
    nodes = x.shape[0]
    total = torch.ops.wb_scatter.scatter_sum(x.index_select(0, source), target, 0, nodes)
    degree = torch.ops.wb_scatter.scatter_sum(torch.ones_like(target, dtype=x.dtype), target, 0, nodes)
    return total / degree.clamp(min=1).unsqueeze(1)


def aggregate_with_break(x, edge_index):
    source, target = edge_index[0], edge_index[1]
    nodes = x.shape[0]
    total = torch.ops.wb_scatter.scatter_sum(x.index_select(0, source), target, 0, nodes)
    degree = torch.ops.wb_scatter.scatter_sum(torch.ones_like(target, dtype=x.dtype), target, 0, nodes)
    if (degree == 0).any():
        degree = degree.clamp(min=1)
    return total / degree.unsqueeze(1)


def aggregate_divides_by_zero(x, edge_index):  # branch removed, clamp forgotten: NaN for lonely nodes
    source, target = edge_index[0], edge_index[1]
    nodes = x.shape[0]
    total = torch.ops.wb_scatter.scatter_sum(x.index_select(0, source), target, 0, nodes)
    degree = torch.ops.wb_scatter.scatter_sum(torch.ones_like(target, dtype=x.dtype), target, 0, nodes)
    return total / degree.unsqueeze(1)


def aggregate_sized_by_edges(x, edge_index):  # dim_size left out: rows from the largest target
    source, target = edge_index[0], edge_index[1]
    return torch.ops.wb_scatter.scatter_mean(x.index_select(0, source), target, 0, None)


def test_no_graph_break_passes_on_the_solution(ops):
    assert ch08.check_no_graph_break(aggregate_solution).passed


def test_no_graph_break_stub_is_not_attempted(ops):
    assert ch08.check_no_graph_break(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (aggregate_with_break, "graph break"),
        (aggregate_divides_by_zero, "wrong at index"),
        (aggregate_sized_by_edges, "rows for a graph of 7 nodes"),
    ],
)
def test_no_graph_break_explains_wrong_answers(ops, wrong, says):
    outcome = ch08.check_no_graph_break(wrong)
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


# ---- 8.4 export the message-passing layer ------------------------------------------------------------


def export_solution(layer, x, edge_index):
    return torch.export.export(layer, (x, edge_index), dynamic_shapes={"x": None, "edge_index": {1: Dim("edges")}})


def export_static(layer, x, edge_index):
    return torch.export.export(layer, (x, edge_index))


def export_nodes_dynamic_too(layer, x, edge_index):
    dynamic_shapes = {"x": {0: Dim("nodes")}, "edge_index": {1: Dim("edges")}}
    return torch.export.export(layer, (x, edge_index), dynamic_shapes=dynamic_shapes)


def export_something_else(layer, x, edge_index):
    return torch.export.export(torch.nn.Linear(4, 4), (x,), dynamic_shapes={"input": {0: Dim("nodes")}})


def test_export_passes_on_the_solution(ops):
    assert ch08.check_export(export_solution).passed


def test_export_stub_is_not_attempted(ops):
    assert ch08.check_export(stub).status == checking.NOT_ATTEMPTED


@pytest.mark.parametrize(
    "wrong, says",
    [
        (export_static, "refused a graph of 6 nodes and 25 edges"),
        (export_nodes_dynamic_too, "keep x's size static"),
        (export_something_else, "calls no wb_scatter op"),
    ],
)
def test_export_explains_wrong_answers(ops, wrong, says):
    outcome = ch08.check_export(wrong)
    assert outcome.status == checking.FAILED and says in outcome.explanation, status(outcome)


def test_fresh_segment_sum_ops_do_not_clash():
    first, second = successor.new_segment_sum(fake=fake_solution), successor.new_segment_sum(fake=fake_solution)
    assert first._qualname != second._qualname
    src, index = torch.ones(3, 2), torch.tensor([0, 0, 1])
    torch.testing.assert_close(first(src, index), torch.tensor([[2.0, 2.0], [1.0, 1.0]]))
