/* quant.h: the CPU backend's quantized weight formats (q8, q4), their quantizers and the
 * activation quantizer the integer dot-product kernels (kernels.h mm_q8, mm_q4) read.
 * Private to engine/cpu. The layouts below are also the on-disk layout of quantized
 * tensors: each weight matrix is two plain tensors, its quants and its scales.
 *
 * A weight matrix W is (n, k) as in nn.Linear; k % 32 == 0 (FL_QG). Groups are 32
 * consecutive weights of a row; G = k / 32 groups per row. A matrix whose k is not a
 * multiple of 32 is not quantized: the caller keeps it in bf16/f32 (or pads k with zero
 * columns in both W and X, which leaves the product unchanged).
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
 * Why two planes rather than interleaved (scale, quants) blocks: a quant row starts at
 * j*k (q8) or j*k/2 (q4), so with k % 32 == 0 every group of quants is 32- (q8) or
 * 16-byte (q4) aligned relative to the plane, and a column range [j0, j0 + n) of the
 * output is two pointer offsets; on disk the planes are an I8/U8 tensor and an F16 tensor
 * whose shapes the loader checks. Why f16 scales: 0.5 bit per weight less than f32 (6% of
 * q8's bytes, 11% of q4's) on kernels bound by weight bytes; the kernels widen them with
 * one instruction. The quantizer rounds a scale's magnitude UP to the next f16, so no
 * weight clips: |x - deq(x)| <= |d| / 2 (q8), see fl_q4_quantize for q4.
 * Range: a group's max |x| must be <= 65504 * 127 (q8) or 65504 * 8 (q4); groups with
 * max |x| below ~7.6e-6 (q8) or ~4.8e-7 (q4) get a subnormal scale: the absolute error
 * bound still holds, relative precision is lower.
 *
 * Quantization is plain C on float32 values (no FMA contraction, no SIMD): the same bytes
 * on every machine and every FL_SIMD level. */
#ifndef FL_QUANT_H
#define FL_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "fl.h"

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

/* Activations: m rows of X (f32, stride ldx, k % 32 == 0) quantized once per projection,
 * before the product is split over threads, into a caller-provided buffer of
 * fl_qx_bytes(m, k) bytes (64-byte aligned for speed; any alignment works). Row i of the
 * buffer is the 2k bytes at qx + i * 2k: k int8 quants (in [-127, 127], group scale
 * dx = max|x| / 127 in f32, quant = round(x / dx)), then k/4 floats: each group's dx
 * repeated 8 times (the 8 int32 lanes of one group in the AVX-512 kernel read their
 * scales with one load). The kernels take any m consecutive rows of the buffer.
 * Non-finite x give an unspecified (but memory-safe) result. */
size_t fl_qx_bytes(int m, int k);
void fl_qx_quantize(void *qx, const float *x, int ldx, int m, int k);

/* Installs the q8/q4 kernels into kk (called by fl_kernels_init with its cap `want`):
 * AVX-512 VNNI when the CPU has avx512f/bw/vl/vnni and want is "", AVX2 when it has avx2
 * and want is not "plain", else plain C. */
struct fl_kernels;
void fl_quant_kernels_init(struct fl_kernels *kk, const char *want);

#endif
