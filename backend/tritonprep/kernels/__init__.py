"""CUDA kernels of the GPU executor: sources live in this folder, compiled once per device and cached."""
