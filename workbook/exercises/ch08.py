"""Checks for chapter 08 (torch.library, torch.compile, torch.export).

Every check draws its inputs when it runs, from a seeded generator, at sizes and in layouts the
notebook does not show (empty inputs, non-contiguous tensors and incoming gradients, more groups
than rows, hundreds of nodes and thousands of edges), and computes what it grades against itself.
"""

from __future__ import annotations

from workbook.course.checking import Mistake, exercise, expect_close

# Errors raised when code asks a fake tensor for data it does not have: the names of torch's
# exception classes, and phrases of their messages.
_DATA_DEPENDENT = (
    "DataDependent",
    "DynamicOutputShape",
    "data-dependent",
    "data dependent",
    "Cannot access data pointer",
    "Pending unbacked symbols",
)


def _reads_data(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}"
    return any(phrase in text for phrase in _DATA_DEPENDENT)


def _segment_sum_samples(seed: int):
    """(src, index) pairs drawn now: a float64 matrix with more groups than rows, a float32 3-D src,
    a non-contiguous src, and an empty one. The number of groups (index.max() + 1), of rows and of
    trailing elements differ in each, so no shape can be copied from another."""
    import torch

    generator = torch.Generator().manual_seed(seed)

    def draw(low, high):
        return int(torch.randint(low, high, (), generator=generator))

    samples = []
    for dtype, trailing, transposed in [
        (torch.float64, (draw(2, 6),), False),
        (torch.float32, (draw(2, 4), draw(2, 4)), False),
        (torch.float64, (draw(3, 7),), True),
    ]:
        rows, groups = draw(5, 30), draw(2, 60)
        index = torch.randint(0, groups, (rows,), generator=generator)
        index[draw(0, rows)] = groups - 1  # index.max() + 1 == groups, whatever was drawn
        if transposed:  # the same values, laid out column by column
            src = torch.randn(*trailing, rows, generator=generator, dtype=dtype).movedim(-1, 0)
        else:
            src = torch.randn(rows, *trailing, generator=generator, dtype=dtype)
        samples.append((src, index))
    samples.append((torch.empty(0, draw(2, 5), dtype=torch.float64), torch.empty(0, dtype=torch.int64)))
    return samples


def _opcheck_failures(op, samples, tests) -> str:
    """The first failing opcheck sub-test, explained in one line (empty when all pass)."""
    import torch

    for src, index in samples:
        results = torch.library.opcheck(op, (src, index), test_utils=tests, raise_exception=False)
        for test, result in results.items():
            if result != "SUCCESS":
                first_line = str(result).strip().splitlines()[0] if str(result).strip() else type(result).__name__
                layout = "" if src.is_contiguous() else " (not contiguous)"
                return (
                    f"opcheck's {test} failed for src of shape {tuple(src.shape)}{layout}, index of "
                    f"{index.numel()} entries: {first_line[:300]}"
                )
    return ""


def _value_reads():
    """A dispatch mode that records every call reading a tensor's values into Python (.item(), int())."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    reads = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default}

    class ValueReads(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in reads:
                self.seen.append(func)
            return func(*args, **(kwargs or {}))

    return ValueReads()


_READS_VALUES = (
    "the fake kernel reads the values of index ({how}), but a fake tensor has a shape and no values: "
    "the number of rows is unknown until the real kernel runs, so ask for it with "
    "torch.library.get_ctx().new_dynamic_size() instead of computing it"
)


@exercise("8.1 a fake kernel with a data-dependent size")
def check_dynamic_fake(fake):
    """`fake(src, index)` describes segment_sum's output: (index.max() + 1, *src.shape[1:]), same dtype."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv
    from torch.utils._sympy.numbers import int_oo

    from workbook.chapters import torch_library_compile_export

    watcher = _value_reads()

    def watched(src, index):
        with watcher:
            return fake(src, index)

    op = torch_library_compile_export.new_segment_sum(fake=watched)
    samples = _segment_sum_samples(seed=81)
    src, index = samples[1]  # 3-D: two trailing dimensions to get right
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        try:
            output = op(mode.from_tensor(src, static_shapes=True), mode.from_tensor(index, static_shapes=True))
        except (NotImplementedError, Mistake):
            raise
        except Exception as error:
            if not (_reads_data(error) or watcher.seen):
                raise
            raise Mistake(_READS_VALUES.format(how=f"{type(error).__name__}")) from None
    if watcher.seen:
        raise Mistake(_READS_VALUES.format(how=".item(), int(), .tolist() or a tensor used as a size"))
    if not isinstance(output, torch.Tensor):
        raise Mistake(f"the fake kernel should return a tensor, got {type(output).__name__}")
    if output.dim() != src.dim():
        raise Mistake(
            f"for src of shape {tuple(src.shape)} the fake kernel returned {output.dim()} dimensions; the output "
            f"has src's: the number of groups, then src.shape[1:]"
        )
    if isinstance(output.shape[0], int):
        raise Mistake(
            f"the fake kernel gave the output a fixed number of rows ({output.shape[0]}); it depends on "
            "the values in index, which a fake tensor does not have: ask for a new size with "
            "torch.library.get_ctx().new_dynamic_size()"
        )
    # The range the compiler is told the number of rows lies in: an empty index gives 0 rows, and
    # index values have no upper limit.
    rows = output.shape[0].node
    bounds = rows.shape_env.bound_sympy(rows.expr)
    if bounds.lower > 0:
        raise Mistake(
            f"the fake kernel tells the compiler that there are at least {bounds.lower} rows, but an empty "
            "index gives 0: compiled code relies on such bounds, so leave new_dynamic_size() its default min=0"
        )
    if bounds.upper != int_oo:
        raise Mistake(
            f"the fake kernel tells the compiler that there are at most {bounds.upper} rows, but index "
            "values, and so the number of rows, have no upper limit: ask for a new size with "
            "new_dynamic_size() and no max (a size taken from another data-dependent op carries that op's bounds)"
        )
    for d in range(1, src.dim()):
        if not isinstance(output.shape[d], int) or output.shape[d] != src.shape[d]:
            raise Mistake(
                f"dimension {d} of the output is {output.shape[d]}, but it is src.shape[{d}] = {src.shape[d]}, "
                "known from the shapes alone: only the number of rows depends on index's values, so only "
                "that one is a new dynamic size (a symbol where the compiler could have had a number "
                "hides the size from every later shape check)"
            )
    # The same call on another device (meta: no data, no GPU needed): the output lives where src does.
    src_meta, index_meta = src.to("meta"), index.to("meta")
    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        on_meta = op(mode.from_tensor(src_meta, static_shapes=True), mode.from_tensor(index_meta, static_shapes=True))
    if isinstance(on_meta, torch.Tensor) and on_meta.device != torch.device("meta"):
        raise Mistake(
            f"for src on the meta device the fake kernel returned a tensor on {on_meta.device}: the output "
            "lives on src's device (a CUDA src gives a CUDA output), so make it with src.new_empty(...) or "
            "pass device=src.device"
        )
    failure = _opcheck_failures(op, samples, ("test_faketensor",)) or _opcheck_failures(
        op, samples[2:], ("test_aot_dispatch_dynamic",)
    )
    if failure:
        raise Mistake(failure)


@exercise("8.2 autograd for segment_sum")
def check_segment_sum_autograd(setup_context, backward):
    """setup_context(ctx, inputs, output) and backward(ctx, grad) give segment_sum a correct gradient."""
    import torch

    from workbook.chapters import torch_library_compile_export

    op = torch_library_compile_export.new_segment_sum(
        fake=torch_library_compile_export.segment_sum_fake, setup_context=setup_context, backward=backward
    )
    samples = _segment_sum_samples(seed=82)
    generator = torch.Generator().manual_seed(820)
    for src, index in samples[:3]:
        src = src.detach().requires_grad_()
        output = op(src, index)
        rows, rest = output.shape[0], output.shape[1:]
        incoming = {
            "a random incoming gradient": torch.randn(output.shape, generator=generator, dtype=src.dtype),
            # what .sum() sends back: every element 1, stride 0
            "the incoming gradient of .sum() (an expanded tensor)": torch.ones((), dtype=src.dtype).expand(
                output.shape
            ),
            "a non-contiguous incoming gradient": torch.randn(
                *rest[::-1], rows, generator=generator, dtype=src.dtype
            ).permute(-1, *range(len(rest) - 1, -1, -1)),
        }
        for what, grad_output in incoming.items():
            (grad,) = torch.autograd.grad(op(src, index), src, grad_output)
            expected = grad_output.index_select(0, index)
            what = f"the gradient of src (shape {tuple(src.shape)}, {src.dtype}) for {what}"
            # Each row's gradient is a copy of one incoming row: exact, in src's dtype.
            if grad.shape == expected.shape and not torch.equal(grad, expected) and torch.allclose(grad, expected):
                raise Mistake(
                    f"{what} differs from the incoming rows in the last digits (by up to "
                    f"{(grad - expected).abs().max().item():.2g}): each row is an exact copy of one incoming "
                    "row, so something on the way rounds it (a conversion to float32?)"
                )
            expect_close(grad, expected, what, rtol=0, atol=0)
    src, index = samples[0]
    src = src.detach().requires_grad_()
    if not torch.autograd.gradcheck(lambda s: op(s, index), (src,), raise_exception=False):
        raise Mistake(f"gradcheck failed for src of shape {tuple(src.shape)}")
    failure = _opcheck_failures(op, samples[2:3], ("test_autograd_registration", "test_aot_dispatch_dynamic"))
    if failure:
        raise Mistake(failure)


def _random_graphs(seed: int):
    """Graphs drawn now: a few dozen nodes, then a few hundred (more than any size a learner might hard-code),
    then a few dozen again (the last node of each without in-edges); the last x non-contiguous."""
    import torch

    from workbook.chapters import torch_library_compile_export

    generator = torch.Generator().manual_seed(seed)
    graphs = []
    for i in range(3):
        nodes = int(torch.randint(*((150, 400) if i == 1 else (5, 40)), (), generator=generator))
        edges = int(torch.randint(nodes, 4 * nodes, (), generator=generator))
        features = int(torch.randint(3, 9, (), generator=generator))
        x, edge_index = torch_library_compile_export.make_graph(nodes, edges, features, seed=seed * 10 + i)
        if i == 2:
            x = x.t().contiguous().t()  # the same values in column-major layout
        graphs.append((x, edge_index))
    return graphs


@exercise("8.3 a mean aggregation with no graph break")
def check_no_graph_break(aggregate):
    """`aggregate(x, edge_index)` averages x over in-edges, one row per node, with the scatter ops, and
    compiles with fullgraph=True."""
    import torch
    import torch._dynamo.testing

    from workbook.ops import scatter

    scatter.load()  # the ops the aggregation calls
    graphs = _random_graphs(seed=83)
    aggregate(*graphs[0])  # in eager mode first: an error of its own shows as itself, not as a graph break
    torch._dynamo.reset()
    # aot_eager traces the function as Inductor would, forward and backward, without generating code;
    # the counter records each graph torch.compile captured.
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(aggregate, fullgraph=True, backend=counter)
    for x, edge_index in graphs:
        nodes = x.shape[0]
        expected = scatter.reference_mean(x[edge_index[0]], edge_index[1], dim=0, dim_size=nodes)
        x_compiled = x.clone().requires_grad_()
        try:
            got = compiled(x_compiled, edge_index)
        except torch._dynamo.exc.Unsupported as error:
            lines = [line for line in str(error).strip().splitlines() if line.strip()]
            raise Mistake(f"torch.compile(fullgraph=True) found a graph break: {' '.join(lines[:2])[:300]}") from None
        if counter.frame_count == 0:
            raise Mistake(
                "torch.compile captured no graph at all: the function ran eagerly, outside the compiler "
                "(torch.compiler.disable, or a function the compiler skips), which hides the graph break "
                "instead of removing it"
            )
        called = {str(node.target) for graph in counter.graphs for node in graph.graph.nodes}
        if not any("wb_scatter" in target for target in called):
            raise Mistake(
                "the compiled graph calls no wb_scatter op: aggregate with the workbook's scatter ops "
                "(ops.scatter_sum), which is what this exercise compiles"
            )
        if isinstance(got, torch.Tensor) and got.dim() >= 1 and got.shape[0] != nodes:
            raise Mistake(
                f"the result has {got.shape[0]} rows for a graph of {nodes} nodes: a node without "
                "in-edges must get a row too (size the output from x, not from the edges)"
            )
        expect_close(got, expected, f"the compiled result for a graph of {nodes} nodes and {edge_index.shape[1]} edges")
        x_eager = x.clone().requires_grad_()
        reference = scatter.reference_mean(x_eager[edge_index[0]], edge_index[1], dim=0, dim_size=nodes)
        weights = torch.randn(reference.shape, generator=torch.Generator().manual_seed(nodes), dtype=x.dtype)
        (expected_grad,) = torch.autograd.grad((reference * weights).sum(), x_eager)
        (got_grad,) = torch.autograd.grad((got * weights).sum(), x_compiled)
        expect_close(got_grad, expected_grad, f"the gradient of x through the compiled function ({nodes} nodes)")


@exercise("8.4 export the message-passing layer for any graph")
def check_export(export_layer):
    """`export_layer(layer, x, edge_index)` returns an ExportedProgram that runs on graphs of any number of
    nodes and edges."""
    import torch

    from workbook.chapters import torch_library_compile_export

    torch.manual_seed(0)
    layer = torch_library_compile_export.MessagePassing(4).eval()
    x, edge_index = torch_library_compile_export.make_graph(6, 15, 4, seed=1)
    try:
        exported = export_layer(layer, x, edge_index)
    except torch._dynamo.exc.UserError as error:
        if "Constraints violated" not in str(error):
            raise
        first_line = str(error).strip().splitlines()[0]
        raise Mistake(f"torch.export refused the dynamic dimensions you asked for: {first_line[:300]}") from None
    if not isinstance(exported, torch.export.ExportedProgram):
        raise Mistake(f"export_layer should return a torch.export.ExportedProgram, got {type(exported).__name__}")
    targets = {str(node.target) for node in exported.graph.nodes if node.op == "call_function"}
    if not any(target.startswith("wb_scatter.") for target in targets):
        raise Mistake("the exported graph calls no wb_scatter op: export the layer itself")
    generator = torch.Generator().manual_seed(84)
    # The example graph, then few and many nodes, and edge counts far beyond the example's.
    sizes = [(6, 15), (3, 2), (6, int(torch.randint(900, 1100, (), generator=generator)))]
    sizes += [
        (int(torch.randint(200, 400, (), generator=generator)), int(torch.randint(3000, 5000, (), generator=generator)))
    ]
    for nodes, edges in sizes:
        x, edge_index = torch_library_compile_export.make_graph(nodes, edges, 4, seed=nodes + edges)
        with torch.no_grad():
            expected = layer(x, edge_index)
        try:
            got = exported.module()(x, edge_index)
        except Exception as error:  # a size the export fixed or bounded: the guard says which
            first_line = str(error).strip().splitlines()[0]
            if "edge_index.size()" in first_line:
                which = "edges (edge_index.shape[1])"
            elif "x.size()" in first_line:
                which = "nodes (x.shape[0])"
            else:
                which = "nodes and edges"
            raise Mistake(
                f"the exported program refused a graph of {nodes} nodes and {edges} edges ({first_line[:200]}): "
                f"it must take any number of {which}: make that dimension a Dim, with no bound that only "
                "the example graph suggests"
            ) from None
        expect_close(got, expected, f"the exported program's output for {nodes} nodes and {edges} edges")
    _check_export_ranges(exported)


def _check_export_ranges(exported):
    """The range the program accepts for the node and the edge count: no upper bound, and down to 2 at
    least (no graph size can be run to infinity, so the ranges recorded in the program are read instead)."""
    import torch
    from torch.utils._sympy.numbers import int_oo

    placeholders = {node.name: node for node in exported.graph.nodes if node.op == "placeholder"}
    user_inputs = exported.graph_signature.user_inputs
    for name, dim, what in [(user_inputs[0], 0, "nodes"), (user_inputs[1], 1, "edges")]:
        size = placeholders[name].meta["val"].shape[dim]
        if not isinstance(size, torch.SymInt):
            raise Mistake(
                f"the exported program fixed the number of {what} at {size}: it must take any number of {what}"
            )
        ranges = exported.range_constraints.get(size.node.expr)
        if ranges is None:
            continue
        if ranges.upper != int_oo:
            raise Mistake(
                f"the exported program takes at most {ranges.upper} {what}: it must take any number of {what}, so "
                "give that Dim no max (any bound is one only the example graph suggests)"
            )
        if ranges.lower > 2:  # Dim.AUTO's programs start at 2: torch specialises sizes 0 and 1 by default
            raise Mistake(
                f"the exported program takes at least {ranges.lower} {what}, but it must take any number of {what}, "
                "small graphs too: give that Dim no min"
            )
