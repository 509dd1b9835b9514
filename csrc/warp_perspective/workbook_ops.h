// What a C++ program may call directly in the workbook's TorchScript library.
// Deliberately free of torch headers: including it costs nothing.
#pragma once

namespace workbook_ops {

// One line naming what the library registers.
const char* describe();

}  // namespace workbook_ops
