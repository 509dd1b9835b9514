// Variant example_app_call_function: calling any function defined in the op library makes the
// program depend on it, so the linker keeps it even with --as-needed.
#include <iostream>

#include "prepare.h"
#include "workbook_ops.h"

void prepare_ops(const char*) {
  std::cout << "linked: " << workbook_ops::describe() << "\n";
}
