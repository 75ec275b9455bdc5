/* cuda/cuda_kernels.cu compiled for the emulated CUDA (tests/cuda_emu/README.md) */
#include "cuda_kernels.cu"
