// Runs an AOTInductor package (a .pt2 file from torch._inductor.aoti_compile_and_package) with no
// Python involved:
//
//   aoti_app PACKAGE INPUTS OUTPUT [LIBRARY...]
//
// PACKAGE  the .pt2 file
// INPUTS   a list of the model's input tensors, written by torch.save
// OUTPUT   where to write the list of output tensors (torch::pickle_save; Python reads it with torch.load)
// LIBRARY  op libraries the compiled model calls into (custom ops and classes), loaded in this order
//
// A package that calls a custom op looks the op up by name (say wb_scatter::scatter_sum) in the
// dispatcher when it is loaded, so the libraries that register those ops must be loaded first.
#include <c10/core/InferenceMode.h>
#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

namespace {

std::vector<char> read_file(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  TORCH_CHECK(stream, "cannot open INPUTS file '", path, "'");
  return {std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>()};
}

std::vector<at::Tensor> read_inputs(const std::string& path) {
  const c10::IValue value = torch::jit::pickle_load(read_file(path));
  TORCH_CHECK(value.isList() || value.isTuple(), "INPUTS must hold a list or tuple of tensors, got ", value.tagKind());
  const auto elements = value.isTuple() ? value.toTupleRef().elements().vec() : value.toList().vec();
  std::vector<at::Tensor> tensors;
  for (const c10::IValue& element : elements) {
    TORCH_CHECK(element.isTensor(), "INPUTS must hold only tensors, found a ", element.tagKind());
    tensors.push_back(element.toTensor());
  }
  return tensors;
}

void load_library(const char* path) {
  // RTLD_NOW: resolve every symbol now, failing here rather than in the middle of a call.
  // RTLD_GLOBAL: the library's TORCH_LIBRARY registrations run now and its symbols are visible
  // to what is loaded later (the package's own compiled model).
  TORCH_CHECK(dlopen(path, RTLD_NOW | RTLD_GLOBAL) != nullptr, "dlopen failed: ", dlerror());
}

void report(std::string message) {
  message.erase(0, message.find_first_not_of(" \n"));
  std::cerr << "error: " << message << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: " << argv[0] << " PACKAGE INPUTS OUTPUT [LIBRARY...]\n";
    return 2;
  }
  try {
    for (int i = 4; i < argc; ++i) {
      load_library(argv[i]);
    }
    const std::vector<at::Tensor> inputs = read_inputs(argv[2]);
    torch::inductor::AOTIModelPackageLoader loader(argv[1]);

    std::vector<at::Tensor> outputs;
    {
      c10::InferenceMode no_autograd;
      outputs = loader.run(inputs);
    }
    std::cout << "outputs: " << outputs.size() << "\n";
    c10::List<at::Tensor> saved;
    for (const at::Tensor& output : outputs) {
      std::cout << "  tensor of shape " << output.sizes() << ", dtype " << output.scalar_type() << "\n";
      saved.push_back(output);
    }
    const std::vector<char> bytes = torch::jit::pickle_save(saved);
    std::ofstream(argv[3], std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  } catch (const c10::Error& error) {
    report(error.what_without_backtrace());
    return 1;
  } catch (const std::exception& error) {
    report(error.what());
    return 1;
  }
  return 0;
}
