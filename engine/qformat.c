/* qformat.c: the quantized weight file format's quantizers and dequantizers (qformat.h). */
#include "qformat.h"

#include <math.h>
#include <string.h>

/* The smallest f16 (bit pattern, sign clear) whose value is >= a, for 0 <= a <= 65504;
 * -1 when a is larger (or NaN). Positive f16 bit patterns order like their values, so
 * truncating and stepping up once is enough. */
static int fl_f16_up(float a)
{
    if (!(a <= 65504.0f))
        return -1;
    uint32_t u;
    memcpy(&u, &a, sizeof u);
    int ex = (int)((u >> 23) & 0xff) - 127;
    uint16_t h;
    if (ex >= -14)
        h = (uint16_t)(((ex + 15) << 10) | ((u >> 13) & 0x3ff));
    else
        h = (uint16_t)(a * 16777216.0f); /* subnormal: units of 2^-24, exact scaling */
    if (fl_f16_to_f32(h) < a)
        h++;
    return h;
}

static int fl_q_check(const float *x, int k, int j, fl_err *e)
{
    if (k <= 0 || k % FL_QG)
        return fl_err_set(e, FL_EINVAL, "quantize: row length %d is not a positive multiple of %d",
                          k, FL_QG);
    for (int c = 0; c < k; c++)
        if (!isfinite(x[c]))
            return fl_err_set(e, FL_EINVAL, "quantize: row %d column %d is not finite", j, c);
    return 0;
}

/* The f16 bit pattern (sign clear) of a group's scale: the smallest f16 >= mag / levels, at
 * least the smallest subnormal when mag > 0 (mag / levels may underflow f32: that scale still
 * bounds the error); FL_EINVAL with a message past the f16 range. */
static int fl_q_scale(float mag, float levels, int bits, int j, int g, fl_err *e)
{
    int h = fl_f16_up(mag / levels);
    if (h < 0)
        return fl_err_set(e, FL_EINVAL, "quantize q%d: row %d group %d: |x| = %g beyond the f16 "
                          "scale range", bits, j, g, (double)mag);
    return h == 0 && mag > 0 ? 1 : h;
}

/* One group of 32 weights xg of row j: its scale into *d, its quants into qg (32 int8 for q8,
 * 16 bytes of nibble pairs for q4). */
static int fl_q8_group(void *qg, uint16_t *d, const float *xg, int j, int g, fl_err *e)
{
    float amax = 0;
    for (int c = 0; c < FL_QG; c++)
        amax = fabsf(xg[c]) > amax ? fabsf(xg[c]) : amax;
    int h = fl_q_scale(amax, 127.0f, 8, j, g, e);
    if (h < 0)
        return h;
    *d = (uint16_t)h;
    float dv = fl_f16_to_f32((uint16_t)h);
    for (int c = 0; c < FL_QG; c++)
        ((int8_t *)qg)[c] = (int8_t)(dv > 0 ? fl_qround(xg[c] / dv, 127) : 0);
    return 0;
}

static int fl_q4_group(void *qg, uint16_t *d, const float *xg, int j, int g, fl_err *e)
{
    float mx = 0;
    for (int c = 0; c < FL_QG; c++)
        if (fabsf(xg[c]) > fabsf(mx))
            mx = xg[c];
    int h = fl_q_scale(fabsf(mx), 8.0f, 4, j, g, e);
    if (h < 0)
        return h;
    if (mx > 0)
        h |= 0x8000; /* d = mx / -8: the largest magnitude lands on nibble 0 */
    *d = (uint16_t)h;
    float dv = fl_f16_to_f32((uint16_t)h);
    for (int b = 0; b < FL_QG / 2; b++) {
        int lo = dv != 0 ? fl_qround(xg[b] / dv, 8) + 8 : 8;
        int hi = dv != 0 ? fl_qround(xg[b + 16] / dv, 8) + 8 : 8;
        lo = lo > 15 ? 15 : lo;
        hi = hi > 15 ? 15 : hi;
        ((uint8_t *)qg)[b] = (uint8_t)(lo | hi << 4);
    }
    return 0;
}

/* Rows of x through a group quantizer; qbytes: bytes of quants per group. */
static int fl_q_rows(uint8_t *q, uint16_t *d, const float *x, int n, int k, size_t qbytes,
                     int (*group)(void *, uint16_t *, const float *, int, int, fl_err *),
                     fl_err *e)
{
    int G = k / FL_QG;
    for (int j = 0; j < n; j++) {
        const float *xr = x + (size_t)j * k;
        int rc = fl_q_check(xr, k, j, e);
        for (int g = 0; g < G && !rc; g++)
            rc = group(q + ((size_t)j * G + g) * qbytes, d + (size_t)j * G + g, xr + g * FL_QG, j,
                       g, e);
        if (rc)
            return rc;
    }
    return 0;
}

int fl_q8_quantize(int8_t *q, uint16_t *d, const float *x, int n, int k, fl_err *e)
{
    return fl_q_rows((uint8_t *)q, d, x, n, k, FL_QG, fl_q8_group, e);
}

int fl_q4_quantize(uint8_t *q, uint16_t *d, const float *x, int n, int k, fl_err *e)
{
    return fl_q_rows(q, d, x, n, k, FL_QG / 2, fl_q4_group, e);
}

void fl_q8_dequantize(float *x, const int8_t *q, const uint16_t *d, int n, int k)
{
    int G = k / FL_QG;
    for (int j = 0; j < n; j++)
        for (int g = 0; g < G; g++) {
            float dv = fl_f16_to_f32(d[(size_t)j * G + g]);
            for (int c = 0; c < FL_QG; c++) {
                size_t o = (size_t)j * k + g * FL_QG + c;
                x[o] = dv * q[o];
            }
        }
}

void fl_q4_dequantize(float *x, const uint8_t *q, const uint16_t *d, int n, int k)
{
    int G = k / FL_QG;
    for (int j = 0; j < n; j++)
        for (int g = 0; g < G; g++) {
            float dv = fl_f16_to_f32(d[(size_t)j * G + g]);
            const uint8_t *qg = q + (size_t)j * (k / 2) + g * (FL_QG / 2);
            float *xg = x + (size_t)j * k + g * FL_QG;
            for (int b = 0; b < FL_QG / 2; b++) {
                xg[b] = dv * (float)((qg[b] & 15) - 8);
                xg[b + 16] = dv * (float)((qg[b] >> 4) - 8);
            }
        }
}


int fl_matrix_rows_f32(float *dst, const fl_tensor *t, const fl_tensor *s, size_t r0, size_t nr,
                       size_t k, fl_err *e)
{
    if (t->dtype == FL_DT_I8 || t->dtype == FL_DT_U8) {
        if (!s || s->dtype != FL_DT_F16 || k % FL_QG)
            return fl_err_set(e, FL_EUNSUPPORTED, "tensor %s: quantized without F16 scales",
                              t->name);
        const uint16_t *d = (const uint16_t *)s->data + r0 * (k / FL_QG);
        if (t->dtype == FL_DT_I8)
            fl_q8_dequantize(dst, (const int8_t *)t->data + r0 * k, d, (int)nr, (int)k);
        else
            fl_q4_dequantize(dst, (const uint8_t *)t->data + r0 * k / 2, d, (int)nr, (int)k);
        return 0;
    }
    if (fl_to_f32(dst, (const char *)t->data + r0 * k * fl_dtype_size(t->dtype), t->dtype,
                  nr * k))
        return fl_err_set(e, FL_EUNSUPPORTED, "tensor %s: dtype %s is not a weight type",
                          t->name, fl_dtype_name(t->dtype));
    return 0;
}
