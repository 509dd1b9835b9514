"""Checks of this machine and its toolchain: the doctor, compile-only CUDA checks, compile times, the GPU report."""
