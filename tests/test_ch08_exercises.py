"""Chapter 08's exercise checks pass on the solutions, say "not attempted" on the stubs, and reject the
catalogue of plausible wrong and cheating answers, each with a message that says what is wrong."""

import pytest
import torch
from torch.export import Dim
from wrong_answers import WrongAnswer, assert_rejected, ids

from workbook.chapters import torch_library_compile_export
from workbook.course import checking
from workbook.exercises import ch08
from workbook.ops import scatter


@pytest.fixture(scope="module")
def ops():
    return scatter.load()


def stub(*args, **kwargs):
    raise NotImplementedError("not attempted yet")


def new_rows(**bounds):
    return torch.library.get_ctx().new_dynamic_size(**bounds)


# ---- 8.1 a fake kernel with a dynamic size ----------------------------------------------------------


def fake_solution(src, index):
    return src.new_empty((new_rows(), *src.shape[1:]))


def fake_one_row_per_entry(src, index):
    return src.new_empty((index.shape[0], *src.shape[1:]))


def fake_every_dimension_dynamic(src, index):  # the issue's: a new size for every dimension
    return src.new_empty([new_rows() for _ in src.shape])


def fake_calls_item(src, index):  # used to fail with "Pending unbacked symbols {u1}"
    return src.new_empty((index.max().item() + 1, *src.shape[1:]))


def fake_runs_the_kernel(src, index):
    return torch_library_compile_export.segment_sum_reference(src, index)


def fake_copies_src_strides(src, index):  # right for a contiguous src only
    return src.new_empty_strided((new_rows(), *src.shape[1:]), src.stride())


def fake_made_on_the_cpu(src, index):
    return torch.empty((torch.library.get_ctx().new_dynamic_size(), *src.shape[1:]), dtype=src.dtype)


def fake_hard_codes_float64(src, index):
    return src.new_empty((new_rows(), *src.shape[1:]), dtype=torch.float64)


def fake_at_least_one_row(src, index):
    return src.new_empty((new_rows(min=1), *src.shape[1:]))


def fake_counts_distinct_values(src, index):  # a data-dependent size, but bounded by len(index)
    return src.new_empty((index.unique().numel(), *src.shape[1:]))


def fake_drops_trailing_dims(src, index):
    return src.new_empty((new_rows(),))


# ---- 8.2 autograd for segment_sum --------------------------------------------------------------------


def save_index(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])


def backward_solution(ctx, grad):
    (index,) = ctx.saved_tensors
    return grad.index_select(0, index), None


def backward_scaled_by_count(ctx, grad):  # the mean's gradient, not the sum's
    (index,) = ctx.saved_tensors
    count = torch.bincount(index).to(grad.dtype).index_select(0, index)
    return grad.index_select(0, index) / count.view(-1, *[1] * (grad.dim() - 1)), None


def backward_hard_codes_the_shown_index(ctx, grad):
    return grad.index_select(0, torch.tensor([0, 2, 2, 4, 1, 0])), None


def backward_views_a_contiguous_grad(ctx, grad):  # .view needs contiguous memory
    (index,) = ctx.saved_tensors
    rows = grad.view(grad.shape[0], -1).index_select(0, index)
    return rows.view(index.shape[0], *grad.shape[1:]), None


def backward_assumes_sorted_index(ctx, grad):  # right when the rows come grouped by index
    (index,) = ctx.saved_tensors
    return grad.repeat_interleave(torch.bincount(index, minlength=grad.shape[0]), 0), None


def backward_in_float32(ctx, grad):
    (index,) = ctx.saved_tensors
    return grad.float().index_select(0, index), None


# ---- 8.3 remove a graph break ------------------------------------------------------------------------


def sum_and_degree(x, edge_index, nodes):
    source, target = edge_index[0], edge_index[1]
    total = torch.ops.wb_scatter.scatter_sum(x.index_select(0, source), target, 0, nodes)
    degree = torch.ops.wb_scatter.scatter_sum(torch.ones_like(target, dtype=x.dtype), target, 0, nodes)
    return total, degree


def aggregate_solution(x, edge_index):
    total, degree = sum_and_degree(x, edge_index, x.shape[0])
    return total / degree.clamp(min=1).unsqueeze(1)


def aggregate_with_break(x, edge_index):
    total, degree = sum_and_degree(x, edge_index, x.shape[0])
    if (degree == 0).any():
        degree = degree.clamp(min=1)
    return total / degree.unsqueeze(1)


@torch.compiler.disable
def _degree_at_least_one(degree):
    if (degree == 0).any():
        degree = degree.clamp(min=1)
    return degree


def aggregate_branch_in_a_disabled_helper(x, edge_index):
    total, degree = sum_and_degree(x, edge_index, x.shape[0])
    return total / _degree_at_least_one(degree).unsqueeze(1)


def aggregate_divides_by_zero(x, edge_index):  # branch removed, clamp forgotten: NaN for lonely nodes
    total, degree = sum_and_degree(x, edge_index, x.shape[0])
    return total / degree.unsqueeze(1)


def aggregate_sized_by_edges(x, edge_index):  # dim_size left out: rows up to the largest target
    return torch.ops.wb_scatter.scatter_mean(x.index_select(0, edge_index[0]), edge_index[1], 0, None)


def aggregate_for_at_most_64_nodes(x, edge_index):
    # room for 64 nodes, cut to the graph's: right for every graph of the notebook's sizes
    source, target = edge_index[0], edge_index[1]
    total = torch.ops.wb_scatter.scatter_sum(x.index_select(0, source), target, 0, 64)[: x.shape[0]]
    degree = torch.ops.wb_scatter.scatter_sum(torch.ones_like(target, dtype=x.dtype), target, 0, 64)[: x.shape[0]]
    return total / degree.clamp(min=1).unsqueeze(1)


def aggregate_for_seven_nodes(x, edge_index):  # the node count of the notebook's example
    total, degree = sum_and_degree(x, edge_index, 7)
    return total / degree.clamp(min=1).unsqueeze(1)


def aggregate_with_index_add(x, edge_index):  # compiles, but not through the scatter ops
    source, target = edge_index[0], edge_index[1]
    total = x.new_zeros(x.shape).index_add_(0, target, x.index_select(0, source))
    degree = x.new_zeros(x.shape[0]).index_add_(0, target, torch.ones_like(target, dtype=x.dtype))
    return total / degree.clamp(min=1).unsqueeze(1)


def _compiled_eagerly():
    # torch.compile traces into a function wrapped by torch.compiler.disable when it is handed that
    # function itself, so the graph break still shows.
    return torch.compiler.disable(aggregate_with_break)


# ---- 8.4 export the message-passing layer ------------------------------------------------------------


def export_with(dynamic_shapes):
    def export_layer(layer, x, edge_index):
        return torch.export.export(layer, (x, edge_index), dynamic_shapes=dynamic_shapes)

    return export_layer


export_solution = export_with({"x": {0: Dim("nodes")}, "edge_index": {1: Dim("edges")}})


def export_something_else(layer, x, edge_index):
    return torch.export.export(torch.nn.Linear(4, 4), (x,), dynamic_shapes={"input": {0: Dim("nodes")}})


def on_81(fake):
    return lambda: ch08.check_dynamic_fake(fake)


def on_82(backward):
    return lambda: ch08.check_segment_sum_autograd(save_index, backward)


def on_83(aggregate):
    return lambda: ch08.check_no_graph_break(aggregate)


def on_84(dynamic_shapes):
    return lambda: ch08.check_export(export_with(dynamic_shapes))


NODES, EDGES = {0: Dim("nodes")}, {1: Dim("edges")}

# fmt: off
WRONG_ANSWERS = [
    WrongAnswer("8.1", "wrong math", "one row per index entry", on_81(fake_one_row_per_entry), ("fixed number of rows",)),
    WrongAnswer("8.1", "wrong math", "every dimension dynamic", on_81(fake_every_dimension_dynamic), ("src.shape[1]",)),
    WrongAnswer("8.1", "concept skipped", "reads index with .item()", on_81(fake_calls_item), ("values of index",)),
    WrongAnswer("8.1", "concept skipped", "runs the real kernel", on_81(fake_runs_the_kernel), ("values of index",)),
    WrongAnswer("8.1", "shown sizes only", "src's strides copied", on_81(fake_copies_src_strides), ("Stride mismatch",)),
    WrongAnswer("8.1", "hard-coded", "float64 whatever src is", on_81(fake_hard_codes_float64), ("Dtypes",)),
    WrongAnswer("8.1", "wrong math", "at least one row", on_81(fake_at_least_one_row), ("at least 1 rows", "empty")),
    WrongAnswer("8.1", "wrong math", "distinct index values", on_81(fake_counts_distinct_values), ("at most",)),
    WrongAnswer("8.1", "wrong math", "trailing dimensions dropped", on_81(fake_drops_trailing_dims), ("dimensions",)),
    WrongAnswer("8.1", "shown sizes only", "made on the CPU whatever src's device", on_81(fake_made_on_the_cpu),
                ("meta device", "src's device")),
    WrongAnswer("8.2", "wrong math", "the mean's gradient", on_82(backward_scaled_by_count), ("wrong at index",)),
    WrongAnswer("8.2", "hard-coded", "the notebook's index", on_82(backward_hard_codes_the_shown_index), ("src",)),
    WrongAnswer("8.2", "wrong math", ".view of the gradient", on_82(backward_views_a_contiguous_grad), ("view",)),
    WrongAnswer("8.2", "shown sizes only", "sorted index only", on_82(backward_assumes_sorted_index), ("wrong at",)),
    WrongAnswer("8.2", "wrong math", "rounded through float32", on_82(backward_in_float32), ("last digits",)),
    WrongAnswer("8.3", "concept skipped", "the graph break left in", on_83(aggregate_with_break), ("graph break",)),
    WrongAnswer("8.3", "concept skipped", "branch in a disabled helper", on_83(aggregate_branch_in_a_disabled_helper),
                ("graph break", "disable")),
    WrongAnswer("8.3", "concept skipped", "torch.compiler.disable", on_83(_compiled_eagerly()), ("graph break",)),
    WrongAnswer("8.3", "concept skipped", "index_add_", on_83(aggregate_with_index_add), ("calls no wb_scatter op",)),
    WrongAnswer("8.3", "wrong math", "divides by zero", on_83(aggregate_divides_by_zero), ("wrong at index",)),
    WrongAnswer("8.3", "wrong math", "rows up to the largest target", on_83(aggregate_sized_by_edges),
                ("rows for a graph of", "without in-edges")),
    WrongAnswer("8.3", "hard-coded", "seven nodes", on_83(aggregate_for_seven_nodes), ("out of range",)),
    WrongAnswer("8.3", "shown sizes only", "room for 64 nodes", on_83(aggregate_for_at_most_64_nodes), ("out of range",)),
    WrongAnswer("8.4", "shown sizes only", "static shapes", on_84(None), ("refused a graph",)),
    WrongAnswer("8.4", "shown sizes only", "only the edges dynamic", on_84({"x": None, "edge_index": EDGES}),
                ("any number of nodes",)),
    WrongAnswer("8.4", "shown sizes only", "Dim('e', min=4, max=40)",
                on_84({"x": NODES, "edge_index": {1: Dim("e", min=4, max=40)}}), ("any number of edges",)),
    WrongAnswer("8.4", "shown sizes only", "Dim('e', max=100)", on_84({"x": NODES, "edge_index": {1: Dim("e", max=100)}}),
                ("any number of edges", "<= 100")),
    WrongAnswer("8.4", "shown sizes only", "at least four nodes", on_84({"x": {0: Dim("n", min=4)}, "edge_index": EDGES}),
                ("any number of nodes",)),
    WrongAnswer("8.4", "shown sizes only", "Dim max far above the sizes tried",
                on_84({"x": {0: Dim("n", max=1000)}, "edge_index": {1: Dim("e", max=10000)}}),
                ("at most 1000 nodes", "no max")),
    WrongAnswer("8.4", "shown sizes only", "at least three nodes", on_84({"x": {0: Dim("n", min=3)}, "edge_index": EDGES}),
                ("at least 3 nodes", "no min")),
    WrongAnswer("8.4", "concept skipped", "another module exported", lambda: ch08.check_export(export_something_else),
                ("calls no wb_scatter op",)),
]
# fmt: on


@pytest.mark.parametrize("wrong", WRONG_ANSWERS, ids=ids)
def test_wrong_answer_is_rejected(ops, wrong):
    assert_rejected(wrong)


@pytest.mark.parametrize(
    "check, solution",
    [
        (ch08.check_dynamic_fake, (fake_solution,)),
        (ch08.check_segment_sum_autograd, (save_index, backward_solution)),
        (ch08.check_no_graph_break, (aggregate_solution,)),
        (ch08.check_export, (export_solution,)),
    ],
    ids=["8.1", "8.2", "8.3", "8.4"],
)
def test_check_passes_on_the_solution_and_reports_the_stub(ops, check, solution):
    assert check(*solution).passed, check(*solution)
    assert check(*[stub] * len(solution)).status == checking.NOT_ATTEMPTED


def test_autograd_stub_of_backward_alone_is_not_attempted():
    assert ch08.check_segment_sum_autograd(save_index, stub).status == checking.NOT_ATTEMPTED


def test_other_correct_answers_pass(ops):
    """Ways to the right answer that the checks must not refuse."""

    def fake_from_bincount(src, index):  # bincount's length is index.max() + 1, a new unbounded size
        return src.new_empty((torch.bincount(index).shape[0], *src.shape[1:]))

    def aggregate_with_scatter_mean(x, edge_index):  # scatter_mean gives a node without in-edges 0 itself
        return torch.ops.wb_scatter.scatter_mean(x.index_select(0, edge_index[0]), edge_index[1], 0, x.shape[0])

    assert ch08.check_dynamic_fake(fake_from_bincount).passed
    assert ch08.check_no_graph_break(aggregate_with_scatter_mean).passed
    assert ch08.check_export(export_with({"x": {0: Dim.AUTO}, "edge_index": {1: Dim.AUTO}})).passed


def test_fresh_segment_sum_ops_do_not_clash():
    first, second = (
        torch_library_compile_export.new_segment_sum(fake=fake_solution),
        torch_library_compile_export.new_segment_sum(fake=fake_solution),
    )
    assert first._qualname != second._qualname
    src, index = torch.ones(3, 2), torch.tensor([0, 0, 1])
    torch.testing.assert_close(first(src, index), torch.tensor([[2.0, 2.0], [1.0, 1.0]]))
