/* quant.h: the CPU backend's side of the quantized weight formats (q8, q4): the repacked
 * layout the integer dot-product kernels (kernels.h mm_q8, mm_q4) read, and the activation
 * quantizer. Private to engine/cpu. The formats as files hold them (the "plain layout"
 * below: two planes, quants and scales) and their quantizers are engine/qformat.h; the
 * repacked layout is built from the plain one at load and never leaves memory. */
#ifndef FL_QUANT_H
#define FL_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fl.h"
#include "qformat.h"

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
/* Where a matrix's repacked scales start when they follow its quants in one block: the
 * quants' bytes rounded up to 64. */
static inline size_t fl_qr_scales_at(int n, int k, bool q4)
{
    return (fl_qr_quant_bytes(n, k, q4) + 63) & ~(size_t)63;
}
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
 * AMX-INT8 (VNNI below 16 activation rows) when the CPU has AMX-INT8 and AVX-512 VNNI, Linux
 * grants the process the tile data, and want is ""; AVX-512 VNNI when the CPU has
 * avx512f/bw/vl/vnni and want is "" or "avx512"; AVX2 when it has avx2 and want is not
 * "plain"; else plain C. */
struct fl_kernels;
void fl_quant_kernels_init(struct fl_kernels *kk, const char *want);

#endif
