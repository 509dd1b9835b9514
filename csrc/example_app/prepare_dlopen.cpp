// Variant example_app_dlopen: the op library is not linked at all; the program loads it at run
// time, which runs its TORCH_LIBRARY registrations (what torch.ops.load_library does in Python).
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "prepare.h"

void prepare_ops(const char* library) {
  if (library == nullptr) {
    throw std::runtime_error("example_app_dlopen needs the op library's path as its fourth argument");
  }
  // RTLD_NOW: resolve every symbol now, failing here rather than in the middle of a call.
  // RTLD_GLOBAL: let libraries loaded later see this one's symbols.
  if (dlopen(library, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    throw std::runtime_error(std::string("dlopen failed: ") + dlerror());
  }
}
