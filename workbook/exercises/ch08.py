"""Checks for chapter 08 (torch.library, torch.compile, torch.export)."""

from __future__ import annotations

from ..checking import Mistake, exercise, expect_close


def _segment_sum_samples():
    """(src, index) pairs where index.max() + 1, the number of rows and index's length all differ."""
    import torch

    generator = torch.Generator().manual_seed(8)
    return [
        (torch.randn(6, 3, dtype=torch.float64, generator=generator), torch.tensor([0, 2, 2, 4, 1, 0])),
        (torch.randn(5, 2, 3, dtype=torch.float64, generator=generator), torch.tensor([1, 1, 0, 2, 1])),
    ]


def _opcheck_failures(op, samples, tests) -> str:
    """The first failing opcheck sub-test, explained in one line (empty when all pass)."""
    import torch

    for src, index in samples:
        results = torch.library.opcheck(op, (src, index), test_utils=tests, raise_exception=False)
        for test, result in results.items():
            if result != "SUCCESS":
                first_line = str(result).strip().splitlines()[0] if str(result).strip() else type(result).__name__
                return f"opcheck's {test} failed for src of shape {tuple(src.shape)}: {first_line[:300]}"
    return ""


@exercise("8.1 a fake kernel with a data-dependent size")
def check_dynamic_fake(fake):
    """`fake(src, index)` describes segment_sum's output: (index.max() + 1, *src.shape[1:]), same dtype."""
    import torch

    from .. import successor

    op = successor.new_segment_sum(fake=fake)
    src, index = _segment_sum_samples()[0]
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        try:
            output = op(mode.from_tensor(src), mode.from_tensor(index))
        except (NotImplementedError, Mistake):
            raise
        except Exception as error:
            if "data-dependent" not in str(error) and "DataDependent" not in type(error).__name__:
                raise
            raise Mistake(
                "the fake kernel reads the values of index (int(), .item(), .max() of a tensor ...), "
                "but a fake tensor has shapes only: ask for the unknown size with "
                "torch.library.get_ctx().new_dynamic_size()"
            ) from None
    if not isinstance(output, torch.Tensor):
        raise Mistake(f"the fake kernel should return a tensor, got {type(output).__name__}")
    if isinstance(output.shape[0], int):
        raise Mistake(
            f"the fake kernel gave the output a fixed number of rows ({output.shape[0]}); it depends on "
            "the values in index, which a fake tensor does not have: ask for a new size with "
            "torch.library.get_ctx().new_dynamic_size()"
        )
    failure = _opcheck_failures(op, _segment_sum_samples(), ("test_faketensor", "test_aot_dispatch_dynamic"))
    if failure:
        raise Mistake(failure)


@exercise("8.2 autograd for segment_sum")
def check_segment_sum_autograd(setup_context, backward):
    """setup_context(ctx, inputs, output) and backward(ctx, grad) give segment_sum a correct gradient."""
    import torch

    from .. import successor

    op = successor.new_segment_sum(fake=successor.segment_sum_fake, setup_context=setup_context, backward=backward)
    for src, index in _segment_sum_samples():
        src = src.clone().requires_grad_()
        output = op(src, index)
        grad_output = torch.randn_like(output)
        (grad,) = torch.autograd.grad(output, src, grad_output)
        expect_close(grad, grad_output.index_select(0, index), f"the gradient of src (shape {tuple(src.shape)})")
        if not torch.autograd.gradcheck(lambda s: op(s, index), (src,), raise_exception=False):
            raise Mistake(f"gradcheck failed for src of shape {tuple(src.shape)}")
    failure = _opcheck_failures(op, _segment_sum_samples(), ("test_autograd_registration", "test_aot_dispatch_dynamic"))
    if failure:
        raise Mistake(failure)


@exercise("8.3 a mean aggregation with no graph break")
def check_no_graph_break(aggregate):
    """`aggregate(x, edge_index)` averages x over in-edges, one row per node, and compiles with fullgraph=True."""
    import torch

    from .. import scatter, successor

    scatter.load()  # the ops the aggregation calls
    x, edge_index = successor.make_graph(7, 20, 4, seed=3)
    expected = scatter.reference_mean(x[edge_index[0]], edge_index[1], dim=0, dim_size=x.shape[0])
    aggregate(x, edge_index)  # in eager mode first: an error of its own shows as itself, not as a graph break
    torch._dynamo.reset()
    try:
        # aot_eager traces the function as Inductor would, forward and backward, without generating code.
        compiled = torch.compile(aggregate, fullgraph=True, backend="aot_eager")
        x_compiled = x.clone().requires_grad_()
        got = compiled(x_compiled, edge_index)
    except torch._dynamo.exc.Unsupported as error:
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        raise Mistake(f"torch.compile(fullgraph=True) found a graph break: {' '.join(lines[:2])[:300]}") from None
    if isinstance(got, torch.Tensor) and got.shape[0] != x.shape[0]:
        raise Mistake(
            f"the result has {got.shape[0]} rows for a graph of {x.shape[0]} nodes: a node without "
            "in-edges must get a row too (size the output from x, not from the edges)"
        )
    expect_close(got, expected, "the compiled result")
    x_eager = x.clone().requires_grad_()
    (expected_grad,) = torch.autograd.grad(
        scatter.reference_mean(x_eager[edge_index[0]], edge_index[1], dim=0, dim_size=x.shape[0]).sum(), x_eager
    )
    (got_grad,) = torch.autograd.grad(got.sum(), x_compiled)
    expect_close(got_grad, expected_grad, "the gradient of x through the compiled function")


@exercise("8.4 export the message-passing layer for any number of edges")
def check_export(export_layer):
    """`export_layer(layer, x, edge_index)` returns an ExportedProgram that runs on 6-node graphs with any
    number of edges."""
    import torch

    from .. import successor

    torch.manual_seed(0)
    layer = successor.MessagePassing(4).eval()
    x, edge_index = successor.make_graph(6, 15, 4, seed=1)
    try:
        exported = export_layer(layer, x, edge_index)
    except torch._dynamo.exc.UserError as error:
        if "Constraints violated" not in str(error):
            raise
        first_line = str(error).strip().splitlines()[0]
        raise Mistake(
            f"torch.export refused the dynamic dimensions you asked for ({first_line}): the node count "
            "reaches scatter's `int? dim_size` argument, which specialises it; keep x's size static "
            "and make only the number of edges dynamic"
        ) from None
    if not isinstance(exported, torch.export.ExportedProgram):
        raise Mistake(f"export_layer should return a torch.export.ExportedProgram, got {type(exported).__name__}")
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    if not any(target.startswith("wb_scatter.") for target in targets):
        raise Mistake("the exported graph calls no wb_scatter op: export the layer itself")
    for edges in [15, 25, 4, 40]:
        x, edge_index = successor.make_graph(6, edges, 4, seed=edges)
        with torch.no_grad():
            expected = layer(x, edge_index)
        try:
            got = exported.module()(x, edge_index)
        except Exception as error:  # a size the export fixed: the guard says which
            first_line = str(error).strip().splitlines()[0]
            raise Mistake(
                f"the exported program refused a graph of 6 nodes and {edges} edges "
                f"({first_line[:200]}): mark the number of edges dynamic"
            ) from None
        expect_close(got, expected, f"the exported program's output for {edges} edges")
