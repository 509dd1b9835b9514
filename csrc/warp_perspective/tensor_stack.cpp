// workbook_classes::TensorStack: a last-in, first-out stack of tensors that TorchScript can hold,
// call, save and load. Chapter 07 builds it up method by method.
#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace workbook_classes {

// CustomClassHolder gives the object an intrusive reference count, so TorchScript values,
// Python objects and C++ code can share one stack.
class TensorStack : public torch::CustomClassHolder {
 public:
  explicit TensorStack(std::vector<at::Tensor> items) : items_(std::move(items)) {}

  void push(at::Tensor item) { items_.push_back(std::move(item)); }

  at::Tensor pop() {
    TORCH_CHECK(!items_.empty(), "TensorStack.pop: the stack is empty");
    at::Tensor top = std::move(items_.back());
    items_.pop_back();
    return top;
  }

  at::Tensor top() const {
    TORCH_CHECK(!items_.empty(), "TensorStack.top: the stack is empty");
    return items_.back();
  }

  int64_t size() const { return static_cast<int64_t>(items_.size()); }

  bool empty() const { return items_.empty(); }

  // A new stack holding the same tensors (not copies of their data).
  c10::intrusive_ptr<TensorStack> clone() const { return c10::make_intrusive<TensorStack>(items_); }

  // Bottom to top, as a list; also the state that def_pickle saves.
  std::vector<at::Tensor> items() const { return items_; }

 private:
  std::vector<at::Tensor> items_;
};

TORCH_LIBRARY(workbook_classes, m) {
  m.class_<TensorStack>("TensorStack")
      .def(torch::init<std::vector<at::Tensor>>())
      .def("push", &TensorStack::push)
      .def("pop", &TensorStack::pop)
      .def("top", &TensorStack::top)
      .def("size", &TensorStack::size)
      .def("empty", &TensorStack::empty)
      .def("clone", &TensorStack::clone)
      .def("items", &TensorStack::items)
      // What torch.export sees of a stack: (name, value) pairs. While tracing, export swaps the object
      // for a Python fake (workbook/ops/warp_perspective.py, register_fake_class) rebuilt from these pairs,
      // whose __obj_unflatten__ takes the same names.
      .def("__obj_flatten__",
           [](const c10::intrusive_ptr<TensorStack>& self) {
             return std::make_tuple(std::make_tuple(std::string("items"), self->items()));
           })
      // What torch.jit.save writes for a TensorStack (__getstate__) and how torch.jit.load
      // rebuilds one (__setstate__). Without def_pickle, saving a module holding one fails.
      .def_pickle([](const c10::intrusive_ptr<TensorStack>& self) -> std::vector<at::Tensor> { return self->items(); },
                  [](std::vector<at::Tensor> state) -> c10::intrusive_ptr<TensorStack> {
                    return c10::make_intrusive<TensorStack>(std::move(state));
                  });
}

}  // namespace workbook_classes
