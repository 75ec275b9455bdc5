/* test_rope.c: RoPE's inverse frequencies (config.h fl_rope_inv_freq), which every backend
 * rotates with, against the formula evaluated another way: exp(-(2i / hd) ln theta) in long
 * double. */
#include <math.h>

#include "check.h"
#include "config.h"

static void check_shape(float theta, int hd)
{
    fl_config c = {.rope_theta = theta, .head_dim = hd};
    double inv[256 / 2 + 1];
    inv[hd / 2] = -7.0; /* one past the end: must stay untouched */
    fl_rope_inv_freq(&c, inv);
    CHECK(inv[0] == 1.0, "theta %g hd %d: inv[0] = %.17g", theta, hd, inv[0]);
    double worst = 0;
    for (int i = 0; i < hd / 2; i++) {
        long double want = expl(-(long double)(2 * i) / hd * logl((long double)theta));
        double rel = (double)fabsl(((long double)inv[i] - want) / want);
        if (rel > worst)
            worst = rel;
        if (i)
            CHECK(inv[i] < inv[i - 1], "theta %g hd %d: inv[%d] %.17g not below inv[%d]", theta,
                  hd, i, inv[i], i - 1);
    }
    /* a double result of pow: a few units in the last place (2^-52 = 2.2e-16) */
    CHECK(worst < 1e-15, "theta %g hd %d: relative error %.3g", theta, hd, worst);
    CHECK(inv[hd / 2] == -7.0, "theta %g hd %d: wrote past head_dim / 2", theta, hd);
}

int main(void)
{
    check_shape(10000.0f, 64);
    check_shape(10000.0f, 128);
    check_shape(1000000.0f, 128); /* Qwen3, SDAR */
    check_shape(1000000.0f, 256);
    check_shape(500000.0f, 2);
    /* the middle frequency of theta 10000 is exactly 1/100 up to rounding */
    fl_config c = {.rope_theta = 10000.0f, .head_dim = 128};
    double inv[64];
    fl_rope_inv_freq(&c, inv);
    CHECK(fabs(inv[32] - 0.01) < 1e-17, "inv[32] = %.17g", inv[32]);
    return check_summary("test_rope");
}
