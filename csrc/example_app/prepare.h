// Each link variant of the example program supplies its own prepare_ops (see CMakeLists.txt).
#pragma once

// Called first thing in main(); `library` is argv[4] or nullptr.
void prepare_ops(const char* library);
