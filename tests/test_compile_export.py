"""Chapter 08's path end to end: compile without graph breaks, export, AOTInductor, the C++ program."""

import pytest
import torch
from torch.export import Dim

from workbook import lltm, scatter, successor, torchscript

# Compiling a package (when build/ch08 has none yet) runs torch code that calls torch.jit APIs and
# warns that TorchScript is deprecated; this file uses no TorchScript of its own.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")


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
    return successor.package(exported, "lltm_cell")  # the notebook's package: the same program, compiled once


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
    assert successor.program_key(first) == successor.program_key(again)
    assert successor.program_key(first) != successor.program_key(static)
    assert successor.program_key(first) != successor.program_key(changed)


def test_cpp_program_runs_the_package(cell, cell_package):
    inputs = cell_inputs(5)
    run = successor.run_aoti_app(cell_package, inputs, libraries=[lltm.ops_library()])
    assert "outputs: 2" in run.stdout
    got = successor.read_outputs(cell_package)
    assert len(got) == 2
    for actual, expected in zip(got, eager(cell, inputs)):
        assert torch.equal(actual, expected)


def test_cpp_program_names_the_missing_op(cell_package):
    run = successor.run_aoti_app(cell_package, cell_inputs(2), check=False)
    assert run.returncode == 1
    assert "Could not find schema for wb_lltm::lltm_forward" in run.stderr


def test_cpp_program_explains_bad_arguments(cell_package, tmp_path):
    app = str(successor.aoti_app())
    import subprocess

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
    layer = successor.MessagePassing(8)
    x, edge_index = successor.make_graph(12, 40, 8)
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
    layer = successor.MessagePassing(4)
    x, edge_index = successor.make_graph(5, 30, 4)
    assert not (edge_index[1] == 4).any()
    with torch.no_grad():
        output = layer(x, edge_index)
        expected_last = torch.relu(layer.self_weight(x[4]))
    assert output.shape == (5, 4)
    torch.testing.assert_close(output[4], expected_last)


def test_a_model_holding_a_tensor_stack_exports():
    torchscript.load_ops()

    class AddTop(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.offsets = torch.classes.workbook_classes.TensorStack([torch.zeros(3), torch.arange(3.0)])

        def forward(self, x):
            return x + self.offsets.top()

    exported = torch.export.export(AddTop(), (torch.ones(3),))
    assert any("call_torchbind" in str(node.target) for node in exported.graph.nodes)
    assert exported.module()(torch.ones(3)).tolist() == [1.0, 2.0, 3.0]


def test_kernels_of_and_the_dispatcher_figure():
    scatter.load()
    assert successor.kernels_of("wb_scatter::scatter_sum")[:2] == ["Autograd", "CPU"]
    assert "fake (Python)" in successor.kernels_of("wb_scatter::scatter_sum")

    import matplotlib

    matplotlib.use("Agg")
    figure = successor.dispatcher_figure()
    texts = " ".join(text.get_text() for text in figure.axes[0].texts)
    for part in ("schema", "Autograd", "CPU kernel", "CUDA kernel", "Meta kernel", "register_fake"):
        assert part in texts
