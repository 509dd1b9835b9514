// Runs a TorchScript model saved from Python, with no Python involved:
//
//   example_app MODEL INPUTS OUTPUT [LIBRARY]
//
// MODEL   a file written by torch.jit.save
// INPUTS  a tuple of the model's arguments, written by torch.save
// OUTPUT  where to write the model's result (torch::jit::pickle_save; Python reads it with torch.load)
// LIBRARY the op library, for the variant that loads it at run time with dlopen
//
// The model calls workbook_cv::warp_perspective and may hold workbook_classes::TensorStack
// objects, so their library must be registered before torch::jit::load reads the model.
#include <torch/script.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "prepare.h"

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  TORCH_CHECK(stream, "cannot open ", path);
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

void describe(const c10::IValue& value) {
  if (value.isTensor()) {
    const at::Tensor& tensor = value.toTensor();
    std::cout << "tensor of shape " << tensor.sizes() << ", sum " << tensor.sum().item<double>() << "\n";
  } else if (value.isTuple() || value.isList()) {
    const auto elements = value.isTuple() ? value.toTupleRef().elements().vec() : value.toList().vec();
    std::cout << (value.isTuple() ? "tuple" : "list") << " of " << elements.size() << "\n";
    for (const auto& element : elements) {
      std::cout << "  ";
      describe(element);
    }
  } else {
    std::cout << value.tagKind() << " " << value << "\n";
  }
}

// An error message on stderr, without the blank lines some messages start with.
void report(std::string message) {
  message.erase(0, message.find_first_not_of(" \n"));
  std::cerr << "error: " << message << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " MODEL INPUTS OUTPUT [LIBRARY]\n";
    return 2;
  }
  try {
    prepare_ops(argc > 4 ? argv[4] : nullptr);
    torch::jit::Module model = torch::jit::load(argv[1]);
    model.eval();

    const c10::IValue packed = torch::jit::pickle_load(read_file(argv[2]));
    TORCH_CHECK(packed.isTuple(), "INPUTS must hold a tuple of arguments");
    std::vector<c10::IValue> inputs = packed.toTupleRef().elements().vec();

    c10::IValue output;
    {
      c10::InferenceMode no_autograd;
      output = model.forward(inputs);
    }
    std::cout << "output: ";
    describe(output);

    const std::vector<char> bytes = torch::jit::pickle_save(output);
    std::ofstream(argv[3], std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  } catch (const c10::Error& error) {
    report(error.what_without_backtrace());  // without the C++ backtrace of where it was thrown
    return 1;
  } catch (const std::exception& error) {
    report(error.what());
    return 1;
  }
  return 0;
}
