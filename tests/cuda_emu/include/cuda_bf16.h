/* cuda_bf16.h of the emulated CUDA: bf16 as tests/unit/cuda_emu.hh's emu_bf16 (its bits) */
#ifndef FL_EMU_CUDA_BF16_H
#define FL_EMU_CUDA_BF16_H
#include "cuda_runtime.h"

typedef emu_bf16 __nv_bfloat16;
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b)
{
    return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
static inline float2 __bfloat1622float2(__nv_bfloat162 v)
{
    return float2{__bfloat162float(v.x), __bfloat162float(v.y)};
}
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
#endif
