"""Chapter 08's path end to end: compile without graph breaks, export, AOTInductor, the C++ program."""

import importlib.util
import subprocess

import pytest
import torch
import torch._dynamo.testing
from torch.export import Dim
from torchscript_warning import IGNORE_JIT_DEPRECATION

from workbook import build
from workbook.chapters import torch_library_compile_export
from workbook.diagnostics import gpu_report
from workbook.ops import lltm, scatter, warp_perspective

# Compiling a package (when build/ch08 has none yet) runs torch code that calls torch.jit APIs and
# warns that TorchScript is deprecated; this file uses no TorchScript of its own.
pytestmark = IGNORE_JIT_DEPRECATION


class LLTMCell(torch.nn.Module):
    def __init__(self, input_features=16, state_size=32):
        super().__init__()
        _, weights, bias, _, _ = lltm.make_inputs(1, input_features, state_size, seed=1)
        self.weights = torch.nn.Parameter(weights)
        self.bias = torch.nn.Parameter(bias)

    def forward(self, input, old_h, old_cell):
        return lltm.lltm_op(input, self.weights, self.bias, old_h, old_cell)


def cell_inputs(batch_size):
    input, _, _, old_h, old_cell = lltm.make_inputs(batch_size, 16, 32, seed=batch_size)
    return [input, old_h, old_cell]


@pytest.fixture(scope="module")
def cell():
    lltm.load_extension()
    return LLTMCell().eval()


@pytest.fixture(scope="module")
def cell_package(cell):
    """The LLTM cell exported with a dynamic batch and compiled by AOTInductor (the notebook's package)."""
    batch = Dim("batch")
    exported = torch.export.export(
        cell, tuple(cell_inputs(8)), dynamic_shapes={"input": {0: batch}, "old_h": {0: batch}, "old_cell": {0: batch}}
    )
    return torch_library_compile_export.package(
        exported, "lltm_cell"
    )  # the notebook's package: the same program, compiled once


def eager(cell, inputs):
    with torch.no_grad():
        return cell(*inputs)


def test_package_runs_in_python_for_any_batch(cell, cell_package):
    loaded = torch._inductor.aoti_load_package(str(cell_package))
    for batch_size in (8, 3, 17):
        inputs = cell_inputs(batch_size)
        for got, expected in zip(loaded(*inputs), eager(cell, inputs)):
            assert torch.equal(got, expected)


def test_package_key_follows_the_program_and_its_weights(cell):
    batch = Dim("batch")
    dynamic = {"input": {0: batch}, "old_h": {0: batch}, "old_cell": {0: batch}}
    first = torch.export.export(cell, tuple(cell_inputs(8)), dynamic_shapes=dynamic)
    again = torch.export.export(cell, tuple(cell_inputs(4)), dynamic_shapes=dynamic)
    static = torch.export.export(cell, tuple(cell_inputs(8)))
    other_weights = LLTMCell().eval()
    with torch.no_grad():
        other_weights.bias[0] += 1
    changed = torch.export.export(other_weights, tuple(cell_inputs(8)), dynamic_shapes=dynamic)
    assert torch_library_compile_export.program_key(first) == torch_library_compile_export.program_key(again)
    assert torch_library_compile_export.program_key(first) != torch_library_compile_export.program_key(static)
    assert torch_library_compile_export.program_key(first) != torch_library_compile_export.program_key(changed)
    transposed = torch.export.export(
        cell, tuple(x.t().contiguous().t() for x in cell_inputs(8)), dynamic_shapes=dynamic
    )  # the same values and shapes in column-major memory: AOTInductor compiles for these strides
    assert torch_library_compile_export.program_key(first) != torch_library_compile_export.program_key(transposed)


def test_package_key_ignores_where_the_model_was_defined(tmp_path):
    # A notebook's model lives in a file of its kernel's process (/tmp/ipykernel_<pid>/...), new in every
    # session: the printed program names it in comments, and the key must not change with it.
    source = (
        "import torch\n\n\nclass Double(torch.nn.Module):\n    def forward(self, x):\n        return torch.sin(x) * 2\n"
    )
    keys = set()
    for folder in ("ipykernel_1", "ipykernel_2"):
        path = tmp_path / folder / "model.py"
        path.parent.mkdir()
        path.write_text(source)
        spec = importlib.util.spec_from_file_location(f"model_in_{folder}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        exported = torch.export.export(module.Double(), (torch.ones(2, 2),))
        assert str(path) in str(exported), "the printed program no longer names the file: this test tests nothing"
        keys.add(torch_library_compile_export.program_key(exported))
    assert len(keys) == 1


def test_cpp_program_runs_the_package(cell, cell_package):
    inputs = cell_inputs(5)
    run = torch_library_compile_export.run_aoti_app(cell_package, inputs, libraries=[lltm.ops_library()])
    assert "outputs: 2" in run.stdout
    got = torch_library_compile_export.read_outputs(cell_package)
    assert len(got) == 2
    for actual, expected in zip(got, eager(cell, inputs)):
        assert torch.equal(actual, expected)


def test_cpp_program_names_the_missing_op(cell_package):
    run = torch_library_compile_export.run_aoti_app(cell_package, cell_inputs(2), check=False)
    assert run.returncode == 1
    assert "Could not find schema for wb_lltm::lltm_forward" in run.stderr


def test_cpp_program_explains_bad_arguments(cell_package, tmp_path):
    app = str(torch_library_compile_export.aoti_app())
    usage = subprocess.run([app], capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr

    not_tensors = tmp_path / "inputs.pt"
    torch.save([torch.ones(2), 3], not_tensors)
    run = subprocess.run(
        [app, str(cell_package), str(not_tensors), str(tmp_path / "out.pt")], capture_output=True, text=True
    )
    assert run.returncode == 1 and "INPUTS must hold only tensors" in run.stderr

    missing = subprocess.run(
        [app, str(cell_package), str(not_tensors), str(tmp_path / "out.pt"), str(tmp_path / "no_such_library.so")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and "dlopen failed" in missing.stderr


def test_message_passing_layer_compiles_as_one_graph():
    scatter.load()
    torch.manual_seed(0)
    layer = torch_library_compile_export.MessagePassing(8)
    x, edge_index = torch_library_compile_export.make_graph(12, 40, 8)
    explanation = torch._dynamo.explain(layer)(x, edge_index)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0)

    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    results = []
    for module in (layer, compiled):
        x_grad = x.clone().requires_grad_()
        output = module(x_grad, edge_index)
        results.append((output, torch.autograd.grad(output.square().sum(), [x_grad, *layer.parameters()])))
    (eager_output, eager_grads), (compiled_output, compiled_grads) = results
    torch.testing.assert_close(compiled_output, eager_output)
    for got, expected in zip(compiled_grads, eager_grads):
        torch.testing.assert_close(got, expected)


def test_a_node_without_in_edges_gets_a_zero_row():
    scatter.load()
    layer = torch_library_compile_export.MessagePassing(4)
    x, edge_index = torch_library_compile_export.make_graph(5, 30, 4)
    assert not (edge_index[1] == 4).any()
    with torch.no_grad():
        output = layer(x, edge_index)
        expected_last = torch.relu(layer.self_weight(x[4]))
    assert output.shape == (5, 4)
    torch.testing.assert_close(output[4], expected_last)


def test_a_model_holding_a_tensor_stack_exports():
    warp_perspective.load_ops()

    class AddTop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.offsets = torch.classes.workbook_classes.TensorStack([torch.zeros(3), torch.arange(3.0)])

        def forward(self, x):
            return x + self.offsets.top()

    exported = torch.export.export(AddTop(), (torch.ones(3),))
    assert any("call_torchbind" in str(node.target) for node in exported.graph.nodes)
    assert exported.module()(torch.ones(3)).tolist() == [1.0, 2.0, 3.0]


# ---- SymInt? dim_size: the node count stays a symbol --------------------------------------------------


def count_compilations(layer, sizes, **options):
    """How many graphs torch.compile (aot_eager, fullgraph) makes for graphs of these (nodes, edges)."""
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(layer, backend=counter, fullgraph=True, **options)
    for nodes, edges in sizes:
        x, edge_index = torch_library_compile_export.make_graph(nodes, edges, 8, seed=nodes)
        torch.testing.assert_close(compiled(x, edge_index), layer(x, edge_index))
    return counter.frame_count


SIZES = [(40, 160), (60, 200), (90, 400)]


def test_dynamic_shapes_compile_once_for_any_node_count():
    scatter.load()
    torch.manual_seed(0)
    layer = torch_library_compile_export.MessagePassing(8)
    assert count_compilations(layer, SIZES, dynamic=True) == 1


def test_an_int_dim_size_recompiles_for_every_node_count():
    """What the schema said before: `int? dim_size` turns the node count back into a number."""
    ops = torch_library_compile_export.int_schema_ops()
    assert "int? dim_size" in str(ops.scatter_mean.default._schema)
    torch.manual_seed(0)
    layer = torch_library_compile_export.MessagePassing(8, ops=ops)
    assert count_compilations(layer, SIZES[:2], dynamic=True) == 2


def test_export_keeps_the_node_count_symbolic():
    scatter.load()
    torch.manual_seed(0)
    layer = torch_library_compile_export.MessagePassing(8).eval()
    example = torch_library_compile_export.make_graph(12, 40, 8)
    exported = torch.export.export(layer, example, dynamic_shapes={"x": {0: Dim("nodes")}, "edge_index": {1: Dim("e")}})
    dim_sizes = [node.args[3] for node in exported.graph.nodes if str(node.target).startswith("wb_scatter.")]
    assert dim_sizes and all(isinstance(size, torch.fx.Node) for size in dim_sizes)  # a symbol, not a number
    for nodes, edges in [(3, 1), (200, 1500)]:
        x, edge_index = torch_library_compile_export.make_graph(nodes, edges, 8, seed=nodes)
        with torch.no_grad():
            torch.testing.assert_close(exported.module()(x, edge_index), layer(x, edge_index))


# ---- a package refuses inputs it was not compiled for ----------------------------------------------------


def neighbour_inputs(nodes=50, edges=400, seed=5):
    return list(torch_library_compile_export.make_graph(nodes, edges, 16, seed=seed))


@pytest.fixture(scope="module")
def neighbour_package():
    """The chapter's NeighbourSum package: float32 x of 16 features, any number (>= 1) of nodes and edges."""
    model = torch_library_compile_export.NeighbourSum()
    exported = torch.export.export(
        model,
        tuple(neighbour_inputs(8, 30, seed=4)),
        dynamic_shapes={"x": {0: Dim("nodes", min=1)}, "edge_index": {1: Dim("edges")}},
    )
    return torch_library_compile_export.package(exported, "neighbour_sum")  # the notebook's package


def bad_inputs():
    """(what is wrong, inputs, words of the refusal): one of each kind the contract or the model refuses."""
    x, edge_index = neighbour_inputs()
    outside = edge_index.clone()
    outside[0, 7] = x.shape[0]  # a source node that does not exist
    return {
        "dtype": ([x.double(), edge_index], ["input 0", "'x'", "float64", "float32"]),
        "rank": ([x[:, 0].contiguous(), edge_index], ["input 0", "'x'", "1-D", "2-D"]),
        "size": ([x[:, :8].contiguous(), edge_index], ["'x'", "size 8 at dimension 1", "exactly 16"]),
        # read unchecked, a transposed x gives wrong numbers and no error (the package assumes row-major)
        "layout": ([x.t().contiguous().t(), edge_index], ["input 0", "'x'", "not contiguous", "strides"]),
        "index": ([x, outside], ["edge_index holds a node number outside"]),
    }


def test_a_package_fed_the_wrong_dtype_runs_and_computes_garbage(neighbour_package):
    x, edge_index = neighbour_inputs()
    unchecked = torch._inductor.aoti_load_package(str(neighbour_package))
    expected = torch_library_compile_export.NeighbourSum()(x, edge_index)
    assert torch.equal(unchecked(x, edge_index), expected)
    wrong = unchecked(x.double(), edge_index)  # no error: float64 bytes read as float32
    assert wrong.dtype == torch.float32 and not torch.allclose(wrong, expected)
    transposed = unchecked(x.t().contiguous().t(), edge_index)  # no error: column-major read as row-major
    assert not torch.allclose(transposed, expected)


def test_aoti_runtime_check_inputs_catches_the_wrong_dtype(neighbour_package, monkeypatch):
    x, edge_index = neighbour_inputs()
    monkeypatch.setenv("AOTI_RUNTIME_CHECK_INPUTS", "1")  # read by the package's code when it first runs
    checked = torch._inductor.aoti_load_package(str(neighbour_package))
    with pytest.raises(RuntimeError, match="unmatched dtype"):
        checked(x.double(), edge_index)


@pytest.mark.parametrize("case", ["dtype", "rank", "size", "layout", "index"])
def test_the_package_refuses_bad_inputs_in_python(neighbour_package, case):
    inputs, words = bad_inputs()[case]
    loaded = torch_library_compile_export.load_package(neighbour_package)
    with pytest.raises((ValueError, RuntimeError)) as refused:
        loaded(*inputs)
    assert all(word in str(refused.value) for word in words), str(refused.value)


@pytest.mark.parametrize("case", ["dtype", "rank", "size", "layout", "index"])
def test_the_cpp_program_refuses_bad_inputs(neighbour_package, case):
    inputs, words = bad_inputs()[case]
    library = build.build_directory(scatter.NAME) / f"{scatter.NAME}.so"  # scatter.load() built it
    run = torch_library_compile_export.run_aoti_app(neighbour_package, inputs, libraries=[library], check=False)
    assert run.returncode == 1 and "error: " in run.stderr, run.stderr
    message = run.stderr.split("error: ", 1)[1]
    cpp_words = [word.replace("float64", "Double").replace("float32", "Float") for word in words]
    assert all(word in message for word in cpp_words), run.stderr


def test_the_cpp_program_runs_good_inputs_of_new_sizes(neighbour_package):
    library = build.build_directory(scatter.NAME) / f"{scatter.NAME}.so"
    inputs = neighbour_inputs(nodes=3, edges=2, seed=6)
    torch_library_compile_export.run_aoti_app(neighbour_package, inputs, libraries=[library])
    assert torch.equal(
        torch_library_compile_export.read_outputs(neighbour_package)[0],
        torch_library_compile_export.NeighbourSum()(*inputs),
    )


def test_the_contract_round_trips_through_the_metadata(neighbour_package):
    contract = torch_library_compile_export.load_package(neighbour_package).contract
    assert [entry["name"] for entry in contract] == ["x", "edge_index"]
    assert contract[0]["sizes"] == [(1, torch_library_compile_export.UNBOUNDED), (16, 16)]
    assert contract[1]["dtype"] == torch.int64 and contract[1]["sizes"] == [
        (2, 2),
        (0, torch_library_compile_export.UNBOUNDED),
    ]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs (mode='reduce-overhead') need a CUDA GPU")
def test_reduce_overhead_matches_eager_on_the_gpu():
    assert gpu_report.reduce_overhead_mismatches("cuda") == []


def test_kernels_of_and_the_dispatcher_figure():
    scatter.load()
    assert torch_library_compile_export.kernels_of("wb_scatter::scatter_sum")[:2] == ["Autograd", "CPU"]
    assert "fake (Python)" in torch_library_compile_export.kernels_of("wb_scatter::scatter_sum")

    import matplotlib

    matplotlib.use("Agg")
    figure = torch_library_compile_export.dispatcher_figure()
    texts = " ".join(text.get_text() for text in figure.axes[0].texts)
    for part in ("schema", "SymInt? dim_size", "Autograd", "CPU kernel", "CUDA kernel", "register_fake", "Meta key"):
        assert part in texts
    assert "Meta kernel" not in texts  # these ops' Meta entry is the Python fake kernel, not C++


def test_the_stable_abi_and_migration_figures_name_their_parts():
    import matplotlib

    matplotlib.use("Agg")
    stable = " ".join(text.get_text() for text in torch_library_compile_export.stable_abi_figure().axes[0].texts)
    for part in ("wb_scatter_stable", "autograd::Function", "aoti_torch_", "abi3", "libtorch_cpu.so"):
        assert part in stable
    migration = " ".join(text.get_text() for text in torch_library_compile_export.migration_figure().axes[0].texts)
    for part in ("torch.jit.script", "torch.export.export", "AOTIModelPackageLoader", "RTLD_GLOBAL", "--no-as-needed"):
        assert part in migration
