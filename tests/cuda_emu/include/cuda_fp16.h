/* cuda_fp16.h of the emulated CUDA: f16 as its bits, widened exactly */
#ifndef FL_EMU_CUDA_FP16_H
#define FL_EMU_CUDA_FP16_H
#include <math.h>
#include "cuda_runtime.h"

struct __half {
    uint16_t x;
};
static inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
static inline float __half2float(__half h)
{
    const unsigned sign = (unsigned)(h.x >> 15), e = (h.x >> 10) & 31u, f = h.x & 1023u;
    float v;
    if (e == 0)
        v = ldexpf((float)f, -24);
    else if (e == 31)
        v = f ? NAN : INFINITY;
    else
        v = ldexpf((float)(f | 1024u), (int)e - 25);
    return sign ? -v : v;
}
#endif
