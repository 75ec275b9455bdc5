/* cpu.h: the CPU backend's public interface (engine/cpu/). The backend itself implements
 * backend.h; its kernels (kernels.h) and thread pool (threadpool.h) are private to this
 * folder. Everything here may be called from any thread. */
#ifndef FL_CPU_H
#define FL_CPU_H

#include "backend.h"

/* Creates the CPU backend for m (which must outlive it): weights in o->weights' format (f32
 * or bf16; AUTO as fl_wformat_resolve picks), converted into the backend's arena where its
 * layout differs from the file's and read from the file's mapping where it does not (o,
 * down, lm_head in the file's own format), o->n_pages KV pages in o->kv's format (f32 for
 * AUTO; bf16 rounds every key and value attention reads), a pool of o->n_threads threads
 * (0: every core). The caller owns *out (fl_backend_destroy). FL_ENOMEM, FL_EINVAL
 * or FL_EUNSUPPORTED (a format it does not hold), with a message, on failure; *out is NULL
 * then. */
int fl_backend_cpu_create(fl_backend **out, const fl_model *m, const fl_backend_opts *o,
                          fl_err *e);

/* Where b's (a CPU backend's) matrices are: *arena bytes converted into its own memory,
 * *mapped bytes read in place from the model's file mapping. FL_EINVAL for another
 * backend. */
int fl_cpu_weight_bytes(const fl_backend *b, size_t *arena, size_t *mapped);

/* What the mixture-of-experts layers of a CPU backend's last forward did (all 0 for a dense
 * model). */
typedef struct fl_cpu_moe_stats {
    int moe_layers;         /* layers with experts */
    int64_t touched;        /* routed experts at least one token went to, summed over layers */
    int64_t assignments;    /* (token, expert) pairs, summed over layers */
    int64_t expert_bytes;   /* bytes of expert weights the forward read (routed ones touched,
                               shared ones, routers), each read once */
    int64_t expert_bytes_all; /* bytes of every expert, shared expert and router the backend
                                 holds (a forward that touched every expert reads these) */
} fl_cpu_moe_stats;

/* Where a CPU backend's forwards spent their time (wall ms on the calling thread, summed over
 * forwards since the last fl_cpu_phases_get with reset): each phase from its start to the
 * start of the next, so the phases add up to the forwards' time. */
enum {
    FL_PH_EMBED,  /* batch set-up: RoPE angles, embedding rows */
    FL_PH_NORM,   /* RMS norms and the activations' quantization before q|k|v and gate|up */
    FL_PH_QKV,    /* q|k|v projection with its norms, RoPE and K/V stores */
    FL_PH_ATTN,   /* attention */
    FL_PH_WO,     /* output projection (with its input's quantization) */
    FL_PH_UP,     /* gate|up projection and SwiGLU (dense layers) */
    FL_PH_DOWN,   /* down projection (dense layers) */
    FL_PH_MOE,    /* a MoE layer's MLP: router, experts, shared expert, sums */
    FL_PH_HEAD,   /* final norm, LM head, softmax statistics */
    FL_PH_N
};
extern const char *const fl_cpu_phase_names[FL_PH_N];
typedef struct fl_cpu_phases {
    double ms[FL_PH_N];
    int64_t forwards;
} fl_cpu_phases;
/* Copies the phase times to *ph (and zeroes them when reset). FL_EINVAL for another backend. */
int fl_cpu_phases_get(fl_backend *b, fl_cpu_phases *ph, bool reset);

/* The row count from which b's f32/bf16 projections use sgemm, whose sums depend on the
 * call's shape (FL_SGEMM_ROWS, else INT_MAX on x86 and the plain C level's 8 elsewhere); -1 for
 * another backend. For tests. */
int fl_cpu_sgemm_rows(const fl_backend *b);

/* Copies the MoE statistics of b's last forward to *st. FL_EINVAL for another backend. */
int fl_cpu_moe_stats_get(const fl_backend *b, fl_cpu_moe_stats *st);

/* From now on, b (a CPU backend) records every forward's routing: after a forward of n tokens,
 * fl_cpu_routes gives, per layer, the top_k experts each token went to (best first; -1 for a
 * dense layer) and their weights. For tests; costs a copy per layer. FL_ENOMEM / FL_EINVAL. */
int fl_cpu_record_routes(fl_backend *b, fl_err *e);
/* ids: (n_layers, max_tokens, top_k) and w the same, row t of layer l at (l * max_tokens + t)
 * * top_k; valid for the tokens of the last forward. NULLs before fl_cpu_record_routes. */
void fl_cpu_routes(const fl_backend *b, const int32_t **ids, const float **w);

/* The number of online CPUs (>= 1): the backend's thread count when n_threads is 0. */
int fl_ncpus(void);

/* The name of the kernels the CPU backend picks on this machine ("AVX-512", "AVX2+FMA" or "plain C"),
 * capped as the backend caps them by the environment's FL_SIMD. */
const char *fl_cpu_kernels_name(void);
/* Likewise for the q8/q4 kernels: "AMX-INT8", "AVX-512 VNNI", "AVX2" or "plain C". */
const char *fl_cpu_qkernels_name(void);

/* The machine's read bandwidth in GB/s (*gbs), as n_threads threads of the backend's pool
 * read a 1 GiB buffer (4 streams each, as the streaming matmul reads weights), best of 4
 * passes: the floor of a step that streams its weights once is weight bytes over this.
 * FL_ENOMEM or FL_EINVAL with a message. Takes about a second. */
int fl_cpu_read_bandwidth(int n_threads, double *gbs, fl_err *e);

/* The same read, one pass at a time, to be taken right before and after what it bounds: on a
 * shared machine the bandwidth moves by 2x within minutes (docs/benchmarks.md), so a floor
 * from a probe taken at another moment says little about one step. A probe holds its own
 * threads and a buffer of `bytes` (at least 64 MiB, far past any last-level cache), filled
 * once; fl_bw_probe_read reads all of it once and returns GB/s. FL_ENOMEM or FL_EINVAL. */
typedef struct fl_bw_probe fl_bw_probe;
int fl_bw_probe_create(fl_bw_probe **out, int n_threads, size_t bytes, fl_err *e);
double fl_bw_probe_read(fl_bw_probe *p);
void fl_bw_probe_destroy(fl_bw_probe *p);

#endif
