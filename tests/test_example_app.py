"""csrc/example_app: a C++ program runs models saved from Python; its link variants (chapter 06)."""

import pytest
import torch
from torchscript_warning import IGNORE_JIT_DEPRECATION

from workbook import build
from workbook.ops import example_app, warp_perspective

pytestmark = IGNORE_JIT_DEPRECATION


@pytest.fixture(scope="module")
def library():
    return warp_perspective.load_ops()


class Rectify(torch.nn.Module):
    def forward(self, image: torch.Tensor, warp: torch.Tensor) -> torch.Tensor:
        out = torch.ops.workbook_cv.warp_perspective(image, warp, 12, 16)
        if out.dim() == 3:
            out = out.mean(dim=-1)
        return out


class StackModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.history = torch.classes.workbook_classes.TensorStack([torch.arange(3.0)])

    def forward(self, image: torch.Tensor, warp: torch.Tensor):
        self.history.push(torch.ops.workbook_cv.warp_perspective(image, warp, 6, 6))
        return self.history.items(), self.history.size()


@pytest.fixture(scope="module")
def inputs():
    generator = torch.Generator().manual_seed(0)
    image = torch.rand(20, 24, 3, generator=generator)
    warp = torch.tensor([[0.8, 0.1, 2.0], [-0.2, 0.9, 1.0], [0.001, 0.0, 1.0]], dtype=torch.float64)
    return image, warp


@pytest.fixture(scope="module")
def saved_models(library, inputs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    scripted = torch.jit.script(Rectify())
    traced = torch.jit.trace(Rectify(), inputs)
    scripted.save(str(folder / "scripted.pt"))
    traced.save(str(folder / "traced.pt"))
    torch.jit.script(StackModel()).save(str(folder / "stack.pt"))
    return folder


@pytest.mark.parametrize("variant", ["no_as_needed", "call_function", "dlopen"])
@pytest.mark.parametrize("model", ["scripted.pt", "traced.pt"])
def test_program_output_equals_python(library, saved_models, inputs, variant, model):
    app = example_app.build(variant)
    path = saved_models / model
    result = example_app.run(app, path, inputs, library=library if variant == "dlopen" else None)
    assert "output: tensor of shape [12, 16]" in result.stdout
    expected = torch.jit.load(str(path))(*inputs)
    assert torch.equal(example_app.read_output(path), expected)


def test_as_needed_drops_the_library_and_the_op_is_unknown(library, saved_models, inputs):
    app = example_app.build("as_needed")
    result = example_app.run(app, saved_models / "scripted.pt", inputs, check=False)
    assert result.returncode == 1
    assert "Unknown builtin op: workbook_cv::warp_perspective" in result.stderr


def test_dlopen_variant_without_library_says_so(saved_models, inputs):
    result = example_app.run(example_app.build("dlopen"), saved_models / "scripted.pt", inputs, check=False)
    assert result.returncode == 1
    assert "needs the op library's path" in result.stderr


def test_custom_class_model_runs_in_the_program(library, saved_models, inputs):
    path = saved_models / "stack.pt"
    result = example_app.run(example_app.build(), path, inputs)
    items, size = example_app.read_output(path)
    expected_items, expected_size = torch.jit.load(str(path))(*inputs)
    assert size == expected_size == 2
    assert len(items) == 2 and all(torch.equal(a, b) for a, b in zip(items, expected_items))
    assert "tuple of 2" in result.stdout


def test_a_failed_cmake_configure_shows_cmake_s_error():
    with pytest.raises(build.BuildError, match="Set WORKBOOK_OPS_LIBRARY to the built op library"):
        build.cmake_build(
            "test_app_without_library",
            example_app.APP_SOURCE_DIR,
            options={"WORKBOOK_OPS_LIBRARY": "/no/such/library.so"},
        )


def test_a_failed_compile_shows_the_compiler_s_first_error(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(broken LANGUAGES CXX)\nadd_library(broken SHARED broken.cpp)\n"
    )
    (tmp_path / "broken.cpp").write_text("int broken() { return undeclared_name; }\n")
    with pytest.raises(build.BuildError, match="'undeclared_name' was not declared"):
        build.cmake_build("test_broken_project", tmp_path)
