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
//
// The compiled model trusts its inputs: it reads each one with the dtype, rank, sizes and strides it
// was compiled for, whatever it is given. So before running, the program checks every input against
// the contract the package carries in its metadata (written by workbook.chapters.torch_library_compile_export.package,
// one entry per input: "workbook.input.<i>" = "<name> <dtype> <Python dtype> <device> <contiguous|any>
// <min>:<max>,..."), and refuses a mismatch with a message naming the input.
#include <c10/core/InferenceMode.h>
#include <dlfcn.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <unordered_map>
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

// What the package expects of one input (see the top of this file).
struct InputContract {
  std::string name, dtype, device;
  bool contiguous = false;
  std::vector<std::pair<int64_t, int64_t>> sizes;  // (min, max) per dimension; max is INT64_MAX for "inf"
};

std::vector<InputContract> read_contract(const std::unordered_map<std::string, std::string>& metadata) {
  std::vector<InputContract> contract;
  for (auto entry = metadata.find("workbook.input.0"); entry != metadata.end();
       entry = metadata.find("workbook.input." + std::to_string(contract.size()))) {
    std::istringstream fields(entry->second);
    InputContract input;
    std::string python_dtype, layout, sizes;
    fields >> input.name >> input.dtype >> python_dtype >> input.device >> layout >> sizes;
    TORCH_CHECK(!fields.fail(), "the package's metadata entry ", entry->first, " is malformed: '", entry->second, "'");
    input.contiguous = layout == "contiguous";
    std::istringstream ranges(sizes == "-" ? "" : sizes);
    for (std::string range; std::getline(ranges, range, ',');) {
      const auto colon = range.find(':');
      const std::string high = range.substr(colon + 1);
      input.sizes.emplace_back(std::stoll(range.substr(0, colon)),
                               high == "inf" ? std::numeric_limits<int64_t>::max() : std::stoll(high));
    }
    contract.push_back(std::move(input));
  }
  return contract;
}

// Refuses (TORCH_CHECK) the first input that breaks the contract, naming it.
void check_inputs(const std::vector<InputContract>& contract, const std::vector<at::Tensor>& inputs) {
  TORCH_CHECK(inputs.size() == contract.size(), "the package takes ", contract.size(), " inputs, INPUTS holds ",
              inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const InputContract& expected = contract[i];
    const at::Tensor& input = inputs[i];
    const std::string what = "input " + std::to_string(i) + " ('" + expected.name + "')";
    const std::string dtype = c10::toString(input.scalar_type());
    TORCH_CHECK(dtype == expected.dtype, what, " has dtype ", dtype, ", but the package was compiled for ",
                expected.dtype, " (it would read the bytes as ", expected.dtype, ")");
    TORCH_CHECK(input.device().type() == c10::Device(expected.device).type(), what, " is on ", input.device(),
                ", but the package was compiled for ", expected.device);
    TORCH_CHECK(input.dim() == static_cast<int64_t>(expected.sizes.size()), what, " is ", input.dim(), "-D (shape ",
                input.sizes(), "), but the package expects a ", expected.sizes.size(), "-D tensor");
    for (int64_t d = 0; d < input.dim(); ++d) {
      const auto [low, high] = expected.sizes[d];
      const int64_t size = input.size(d);
      if (size >= low && size <= high) continue;
      std::ostringstream accepted;
      if (low == high) {
        accepted << "exactly " << low;
      } else {
        accepted << "from " << low << " to ";
        if (high == std::numeric_limits<int64_t>::max()) {
          accepted << "any size";
        } else {
          accepted << high;
        }
      }
      TORCH_CHECK(false, what, " has size ", size, " at dimension ", d, " (shape ", input.sizes(),
                  "), outside what the package was exported for: ", accepted.str());
    }
    TORCH_CHECK(!expected.contiguous || input.is_contiguous(), what, " is not contiguous (strides ", input.strides(),
                "), and the package reads it as the row-major layout it was compiled for");
  }
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
    const std::vector<InputContract> contract = read_contract(loader.get_metadata());
    if (contract.empty()) {
      std::cerr << "warning: the package carries no input contract (workbook.input.* metadata), so its inputs "
                   "are not checked; workbook.chapters.torch_library_compile_export.package writes one\n";
    } else {
      check_inputs(contract, inputs);
    }

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
