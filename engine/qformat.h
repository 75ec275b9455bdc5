/* qformat.h: fogline's quantized weight formats as files hold them (q8, q4), their
 * quantizers and dequantizers. Engine core: the model loader validates these tensors,
 * `fogline quantize` writes them, and a backend turns them into its own layout (the CPU's
 * repacked tiles, engine/cpu/quant.h).
 *
 * A weight matrix W is (n, k) as in nn.Linear; k % 32 == 0 (FL_QG). Groups are 32
 * consecutive weights of a row; G = k / 32 groups per row. A matrix whose k is not a
 * multiple of 32 is not quantized: it stays in bf16/f32.
 *
 * q8 (8.5 bits per weight), two planes:
 *   scales d: (n, G) f16 bit patterns, d[j*G + g] = scale of group g of row j;
 *   quants q: (n, k) int8, row-major, q[j*k + c]; weight = d * q.
 *   The quantizer writes q in [-127, 127]; readers accept -128.
 * q4 (4.5 bits per weight; llama.cpp's Q4_0 idea, our layout), two planes:
 *   scales d: (n, G) f16, as q8 (d may be negative);
 *   quants q: (n, k/2) bytes; group g of row j is the 16 bytes at q[j*k/2 + g*16]; byte b
 *   of a group holds weight b in its low nibble and weight b + 16 in its high nibble;
 *   weight = d * (nibble - 8).
 * In a safetensors file (a directory `fogline quantize` wrote, docs/models.md) a quantized
 * matrix `NAME.weight` is its quants, I8 (n, k) for q8 or U8 (n, k/2) for q4, and
 * `NAME.weight_scale` its scales, F16 (n, k/32).
 * Why two planes rather than interleaved (scale, quants) blocks: a quant row starts at
 * j*k (q8) or j*k/2 (q4), so with k % 32 == 0 every group of quants is 32- (q8) or
 * 16-byte (q4) aligned relative to the plane, and a range of rows is two pointer offsets;
 * on disk the planes are an I8/U8 tensor and an F16 tensor whose shapes the loader checks.
 * Why f16 scales: 0.5 bit per weight less than f32 (6% of q8's bytes, 11% of q4's) on
 * kernels bound by weight bytes; the kernels widen them with one instruction. The
 * quantizer rounds a scale's magnitude UP to the next f16, so no weight clips:
 * |x - deq(x)| <= |d| / 2 (q8), see fl_q4_quantize for q4.
 * Range: a group's max |x| must be <= 65504 * 127 (q8) or 65504 * 8 (q4); groups with
 * max |x| below ~7.6e-6 (q8) or ~4.8e-7 (q4) get a subnormal scale: the absolute error
 * bound still holds, relative precision is lower.
 *
 * Quantization is plain C on float32 values (no FMA contraction, no SIMD): the same bytes
 * on every machine and every FL_SIMD level. */
#ifndef FL_QFORMAT_H
#define FL_QFORMAT_H

#include <stdint.h>

#include "fl.h"
#include "safetensors.h"

#define FL_QG 32 /* weights per group */

/* q8: x (n, k) f32 -> q (n, k) int8 and d (n, k/32) f16. FL_EINVAL with a message when
 * k % 32 != 0, a value is not finite or a group's scale overflows f16; q and d are then
 * partly written. */
int fl_q8_quantize(int8_t *q, uint16_t *d, const float *x, int n, int k, fl_err *e);
/* x (n, k) = the weights q, d stand for. */
void fl_q8_dequantize(float *x, const int8_t *q, const uint16_t *d, int n, int k);

/* q4: x (n, k) f32 -> q (n, k/2) bytes and d (n, k/32) f16. Per group: m = the value of
 * largest magnitude (the first such), d = m / -8 rounded away from zero to f16, nibble =
 * clamp(round(x / d) + 8, 0, 15). So m itself maps to nibble 0 and the 16 levels cover
 * [-8d, 7d]: |x - deq(x)| <= |d| / 2, except values of the sign opposite to m beyond
 * 7.5 |d|, which clip to 7d: error <= |x| - 7 |d| <= |d|. Errors as fl_q8_quantize. */
int fl_q4_quantize(uint8_t *q, uint16_t *d, const float *x, int n, int k, fl_err *e);
void fl_q4_dequantize(float *x, const uint8_t *q, const uint16_t *d, int n, int k);

/* Rows [r0, r0 + nr) of a k-column weight matrix held by file tensor t, as f32 into dst
 * (nr, k): t F32, F16 or BF16 (s NULL), or the quants of a q8 (I8) or q4 (U8) matrix with
 * s its F16 scales (the loader checked both shapes). FL_EUNSUPPORTED for another dtype or
 * a quantized t without scales. */
int fl_matrix_rows_f32(float *dst, const fl_tensor *t, const fl_tensor *s, size_t r0, size_t nr,
                       size_t k, fl_err *e);

/* v rounded to nearest (ties to even) and clamped to [-lim, lim]; NaN -> 0, so the int
 * conversion is defined for any input. Adding and subtracting 1.5 * 2^23 rounds |v| < 2^22
 * in plain f32 arithmetic: branch-free, so the compiler vectorizes the loops, and the same
 * result everywhere (roundf is a libm call at the baseline ISA). */
static inline int fl_qround(float v, int lim)
{
    v = v > (float)lim ? (float)lim : v;
    v = v < (float)-lim ? (float)-lim : v;
    v = v == v ? v : 0.0f;
    return (int)((v + 12582912.0f) - 12582912.0f);
}

#endif
