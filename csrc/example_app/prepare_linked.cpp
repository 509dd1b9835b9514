// Variants example_app and example_app_as_needed: the op library is linked; nothing to do here.
// Whether its registrations run depends on the linker keeping it (see CMakeLists.txt).
#include "prepare.h"

void prepare_ops(const char*) {}
