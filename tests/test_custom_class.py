"""workbook_classes::TensorStack (csrc/warp_perspective/tensor_stack.cpp, chapter 07)."""

import io
from typing import List

import pytest
import torch
from torchscript_warning import IGNORE_JIT_DEPRECATION

from workbook.ops import warp_perspective

pytestmark = IGNORE_JIT_DEPRECATION


@pytest.fixture(scope="module", autouse=True)
def library():
    return warp_perspective.load_ops()


def test_methods_from_python():
    stack = torch.classes.workbook_classes.TensorStack([torch.zeros(1)])
    stack.push(torch.ones(2))
    assert stack.size() == 2 and not stack.empty()
    assert torch.equal(stack.top(), torch.ones(2))
    copy = stack.clone()
    assert torch.equal(stack.pop(), torch.ones(2))
    assert stack.size() == 1 and copy.size() == 2
    assert [t.tolist() for t in copy.items()] == [[0.0], [1.0, 1.0]]
    assert torch.equal(stack.pop(), torch.zeros(1))
    assert stack.empty()


@pytest.mark.parametrize("method", ["pop", "top"])
def test_empty_stack_raises_a_clear_error(method):
    stack = torch.classes.workbook_classes.TensorStack([])
    with pytest.raises(RuntimeError, match=f"TensorStack.{method}: the stack is empty"):
        getattr(stack, method)()


class History(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.stack = torch.classes.workbook_classes.TensorStack([torch.tensor([1.0])])

    def forward(self, x: torch.Tensor) -> List[torch.Tensor]:
        self.stack.push(x)
        return self.stack.items()


def test_survives_save_and_load_in_a_scripted_module():
    module = torch.jit.script(History())
    module(torch.tensor([2.0]))
    buffer = io.BytesIO()
    torch.jit.save(module, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    assert [t.item() for t in loaded.stack.items()] == [1.0, 2.0]
    assert [t.item() for t in loaded(torch.tensor([3.0]))] == [1.0, 2.0, 3.0]
    # the original is unchanged by what the loaded copy did
    assert module.stack.size() == 2


def test_scripted_function_uses_the_class():
    """The constructor, clone, top, pop, empty and size from TorchScript (History above pushes; exercise 7.2's
    solution, in tests/test_ch07_exercises.py, reverses by push and pop)."""

    @torch.jit.script
    def reverse(tensors: List[torch.Tensor]) -> List[torch.Tensor]:
        stack = torch.classes.workbook_classes.TensorStack(tensors)
        copy = stack.clone()
        out: List[torch.Tensor] = []
        while not copy.empty():
            out.append(copy.top())
            copy.pop()
        assert stack.size() == len(tensors)
        return out

    assert "TensorStack" in str(reverse.graph)
    assert [t.item() for t in reverse([torch.tensor(float(i)) for i in range(3)])] == [2.0, 1.0, 0.0]
