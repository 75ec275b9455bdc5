/* cblas.h (stand-in): what engine/cpu/kernels.c and engine/cpu/cpu_backend.c use of OpenBLAS, for
 * the GPU test build (tests/gpu/CMakeLists.txt) on a machine without OpenBLAS. The CPU
 * backend there is only the parity reference and runs its own streaming kernels
 * (FL_SGEMM_ROWS=1000000); cblas_sgemm is a plain, correct, slow loop. */
#ifndef FL_CBLAS_SHIM_H
#define FL_CBLAS_SHIM_H

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int m,
                 int n, int k, float alpha, const float *a, int lda, const float *b, int ldb,
                 float beta, float *c, int ldc);
void openblas_set_num_threads(int n);
char *openblas_get_corename(void);

#endif
