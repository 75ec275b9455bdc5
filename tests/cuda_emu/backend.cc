/* cuda/cuda_backend.cu compiled for the emulated CUDA (tests/cuda_emu/README.md) */
#include "cuda_backend.cu"
