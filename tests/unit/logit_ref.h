/* logit_ref.h: the tests' double-precision reference for a row of logits: the argmax (lowest
 * id on a tie), the top token's probability 1/z and the entropy h of the softmax, as the
 * engine's fused top-1 statistics must give them (test_kernels, test_forward, gpu_parity). */
#ifndef FL_TESTS_LOGIT_REF_H
#define FL_TESTS_LOGIT_REF_H

#include <math.h>

static inline int fl_ref_top1(const float *l, int n, double *p_top, double *entropy)
{
    double mx = -INFINITY, z = 0, zu = 0;
    int arg = 0;
    for (int i = 0; i < n; i++)
        if (l[i] > mx) {
            mx = l[i];
            arg = i;
        }
    for (int i = 0; i < n; i++) {
        double u = l[i] - mx, ex = exp(u);
        z += ex;
        zu += ex * u;
    }
    *p_top = 1 / z;
    *entropy = log(z) - zu / z;
    return arg;
}

#endif
