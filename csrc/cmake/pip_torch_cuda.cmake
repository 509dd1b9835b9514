# Lets find_package(Torch) work with a CUDA build of torch from pip, on any machine (GPU and CUDA toolkit
# or not). workbook.build.cmake_options includes this file at the end of project() (CMAKE_PROJECT_INCLUDE)
# when torch is a CUDA build, and sets WORKBOOK_CUDA_RUNTIME to the CUDA runtime library pip installed
# with it (site-packages/nvidia/cu13/lib/libcudart.so.13 for CUDA 13).
#
# With a CUDA torch, find_package(Torch) looks for a whole CUDA toolkit (nvcc, the CUDA language, the
# runtime) and stops with "Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries"
# when it finds none (or, as through an nvcc wrapper script, only part of one). The workbook's CMake
# projects compile no CUDA code; they only link against torch, whose CUDA library needs the CUDA runtime.
# torch's public/cuda.cmake skips its search when a target torch::cudart exists: this file defines it.
if(WORKBOOK_CUDA_RUNTIME AND NOT TARGET torch::cudart)
  add_library(torch::cudart INTERFACE IMPORTED)
  set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES "${WORKBOOK_CUDA_RUNTIME}")
endif()
