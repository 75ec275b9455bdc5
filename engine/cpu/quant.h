/* quant.h: the CPU backend's quantized weight formats (q8, q4), their quantizers, the
 * repacked layout the integer dot-product kernels (kernels.h mm_q8, mm_q4) read, and the
 * activation quantizer. Private to engine/cpu. The plain layouts below are also the on-disk
 * layout of quantized tensors: each weight matrix is two plain tensors, its quants and its
 * scales; the repacked layout is built from them at load and never leaves memory.
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

#include <stdbool.h>
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

/* The repacked layout: what the kernels read. The two-plane layouts above are the file
 * format; fl_q8_repack / fl_q4_repack turn them, once at load, into this backend-internal
 * layout (same bytes per weight). Why: at 4-8 activation rows the kernels must be bound by
 * reading the weights, and with a weight row's groups in a vector every lane needs its own
 * group's scale (dpbusd + convert + scale + fma per 64 bytes and activation row). Here one
 * 64-byte vector holds 16 weight rows x 4 columns, the activations' 4 bytes are broadcast,
 * and after a group's 8 steps each 32-bit lane holds one (weight row, group) int32 dot
 * product: 8 vpdpbusd + convert + scale + fma per 512 weights and activation row.
 *
 * Rows are in tiles of FL_QR = 16 (n padded up to fl_qr_rows(n); padding rows have zero
 * scales and zero weights). Per tile t and group g (G = k / 32), in order t, then g:
 *   quants: the group's bytes of each row of the plain layout (q8: 32 bytes, q4: 16 bytes)
 *     cut into 4-byte chunks, chunk c of tile row r at byte (c * 16 + r) * 4 of the block:
 *     q8: 512 bytes, each byte the plain int8 XOR 0x80 (= w + 128, unsigned);
 *     q4: 256 bytes, the plain bytes unchanged: chunk c < 4 holds columns 4c..4c+3 of the
 *     group in its low nibbles and columns 16+4c..16+4c+3 in its high nibbles;
 *   scales: 16 f16, row r's scale at r (plain d[row * G + g]).
 * So tile t's quants start at t * 16 * k (q8) or t * 8 * k (q4) bytes, its scales at
 * t * 16 * G: a column range starting at a multiple of 16 is the same two pointer offsets
 * as in the plain layout (wq + j0 * k, wq + j0 * k / 2; wd + j0 * G). The kernels read
 * whole tiles: a range [j0, j0 + n) needs j0 % 16 == 0 and may end inside a tile only at
 * the end of the matrix (the padding is read, never written). A caller splitting output
 * columns over threads gets exactly that from fl_split(n, nt, t, FL_QR, ...). */
#define FL_QR 16 /* weight rows per tile of the repacked layout */
static inline int fl_qr_rows(int n) { return (n + FL_QR - 1) / FL_QR * FL_QR; }
/* Bytes of the repacked quants of an (n, k) matrix: fl_qr_rows(n) * k (q8) or half (q4);
 * its scales are fl_qr_rows(n) * (k / 32) f16. */
size_t fl_qr_quant_bytes(int n, int k, bool q4);
size_t fl_qr_scale_count(int n, int k);
/* Plain two-plane (q, d) -> repacked (rq, rd). k % 32 == 0 (the loader checked it). */
void fl_q8_repack(uint8_t *rq, uint16_t *rd, const int8_t *q, const uint16_t *d, int n, int k);
void fl_q4_repack(uint8_t *rq, uint16_t *rd, const uint8_t *q, const uint16_t *d, int n, int k);

/* Activations: m rows of X (f32, stride ldx, k % 32 == 0) quantized once per projection,
 * before the product is split over threads, into a caller-provided buffer of
 * fl_qx_bytes(m, k) bytes (any alignment; 64 is best). Row i is the fl_qx_row_bytes(k)
 * bytes at qx + i * fl_qx_row_bytes(k): k int8 quants (in [-127, 127], group scale
 * dx = max|x| / 127 in f32, quant = round(x / dx), 0 when dx == 0), then G floats dx, then
 * G int32 -128 * s, then G int32 -8 * s, s = the sum of the group's quants. The two
 * corrections start the kernels' integer sums: vpdpbusd multiplies unsigned by signed
 * bytes, and the weights are the unsigned side (q8 stores w + 128, q4 nibbles are w + 8),
 * so sum (w + o) x - o s = sum w x, exact. The kernels take any m consecutive rows.
 * fl_qx_quantize is the plain C version; kk->qx_quantize writes the same bytes faster.
 * Non-finite x give an unspecified (but memory-safe) result. */
size_t fl_qx_row_bytes(int k);
size_t fl_qx_bytes(int m, int k);
void fl_qx_quantize(void *qx, const float *x, int ldx, int m, int k);

/* Installs the q8/q4 kernels into kk (called by fl_kernels_init with its cap `want`):
 * AVX-512 VNNI when the CPU has avx512f/bw/vl/vnni and want is "", AVX2 when it has avx2
 * and want is not "plain", else plain C. */
struct fl_kernels;
void fl_quant_kernels_init(struct fl_kernels *kk, const char *want);

#endif
