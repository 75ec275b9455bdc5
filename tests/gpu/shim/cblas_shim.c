/* cblas_shim.c: the stand-in for OpenBLAS of shim/cblas.h. */
#include "cblas.h"

static float at(const float *x, int ld, int r, int c, int col_major, int trans)
{
    if (trans)
        return col_major ? x[(long)r * ld + c] : x[(long)c * ld + r];
    return col_major ? x[(long)c * ld + r] : x[(long)r * ld + c];
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc)
{
    int cm = order == CblasColMajor;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            float s = 0;
            for (int q = 0; q < k; q++)
                s += at(a, lda, i, q, cm, ta != CblasNoTrans) * at(b, ldb, q, j, cm, tb != CblasNoTrans);
            float *y = cm ? &c[(long)j * ldc + i] : &c[(long)i * ldc + j];
            *y = alpha * s + (beta == 0 ? 0 : beta * *y);
        }
}

void openblas_set_num_threads(int n)
{
    (void)n;
}

char *openblas_get_corename(void)
{
    static char name[] = "cblas-shim";
    return name;
}
