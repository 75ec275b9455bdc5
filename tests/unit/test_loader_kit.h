/* test_loader_kit.h: helpers shared by the loader tests: temporary directories, copying a
 * model directory, reading and rewriting safetensors files (to break them on purpose), and a
 * tiny model written from C (for the fuzz test, which must not depend on Python), float or
 * quantized (q8/q4, engine/qformat.h; also the seeds of tests/fuzz's fuzz_qmodel). */
#ifndef FL_TEST_LOADER_KIT_H
#define FL_TEST_LOADER_KIT_H

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fl.h"
#include "qformat.h"

#define TK_PATH 4096

static inline const char *tk_build_dir(void)
{
    const char *d = getenv("FL_BUILD_DIR");
    return d ? d : ".";
}

/* The directory the ctest fixture fills with Python-written models (tests/loader.cmake). */
static inline const char *tk_models_dir(void)
{
    static char buf[TK_PATH];
    snprintf(buf, sizeof buf, "%s/loader_models", tk_build_dir());
    return buf;
}

static inline const char *tk_path(char *buf, const char *dir, const char *name)
{
    if (snprintf(buf, TK_PATH, "%s/%s", dir, name) >= TK_PATH)
        buf[0] = 0; /* too long: an empty path fails loudly in the caller */
    return buf;
}

/* A fresh directory under the build dir; out holds TK_PATH bytes. */
static inline int tk_mkdtemp(char *out, const char *tag)
{
    if (snprintf(out, TK_PATH, "%s/loader_tmp", tk_build_dir()) >= TK_PATH)
        return -1;
    mkdir(out, 0755);
    if (snprintf(out, TK_PATH, "%s/loader_tmp/%s-XXXXXX", tk_build_dir(), tag) >= TK_PATH)
        return -1;
    return mkdtemp(out) ? 0 : -1;
}

/* Like tk_mkdtemp, but in memory (/dev/shm) when there is one: the fuzz test writes thousands
 * of small files, and on a shared disk their metadata traffic, not the parsing, sets the pace. */
static inline int tk_mkdtemp_fast(char *out, const char *tag)
{
    if (!access("/dev/shm", W_OK)) {
        snprintf(out, TK_PATH, "/dev/shm/fl-loader-%s-XXXXXX", tag);
        if (mkdtemp(out))
            return 0;
    }
    return tk_mkdtemp(out, tag);
}

static inline int tk_write(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) || w != n) ? -1 : 0;
}

static inline int tk_write_str(const char *path, const char *s) { return tk_write(path, s, strlen(s)); }

/* Copies the regular files of a flat directory (model directories are flat). */
static inline int tk_copy_dir(const char *src, const char *dst)
{
    DIR *d = opendir(src);
    if (!d)
        return -1;
    struct dirent *de;
    int rc = 0;
    while (!rc && (de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char a[TK_PATH], b[TK_PATH];
        tk_path(a, src, de->d_name);
        tk_path(b, dst, de->d_name);
        char *buf = NULL;
        size_t len = 0;
        if (fl_read_file(a, &buf, &len, NULL) || tk_write(b, buf, len))
            rc = -1;
        free(buf);
    }
    closedir(d);
    return rc;
}

/* A safetensors file opened for editing: header as JSON, data section as bytes. */
typedef struct tk_st {
    json_t *header;
    unsigned char *data;
    size_t dlen;
} tk_st;

static inline void tk_st_init(tk_st *s)
{
    s->header = json_object();
    s->data = NULL;
    s->dlen = 0;
}

static inline void tk_st_free(tk_st *s)
{
    json_decref(s->header);
    free(s->data);
    s->header = NULL;
    s->data = NULL;
}

static inline int tk_st_read(tk_st *s, const char *path)
{
    s->header = NULL;
    s->data = NULL;
    s->dlen = 0;
    char *buf = NULL;
    size_t len = 0;
    if (fl_read_file(path, &buf, &len, NULL) || len < 8) {
        free(buf);
        return -1;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | (unsigned char)buf[i];
    s->header = json_loadb(buf + 8, (size_t)n, 0, NULL);
    s->dlen = len - 8 - (size_t)n;
    s->data = malloc(s->dlen ? s->dlen : 1);
    memcpy(s->data, buf + 8 + n, s->dlen);
    free(buf);
    return s->header ? 0 : -1;
}

/* Writes an explicit length field, header bytes and data: the raw form, for broken files. */
static inline int tk_st_write_raw(const char *path, uint64_t hlen, const char *hdr, size_t hdr_n,
                                  const void *data, size_t dlen)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hlen >> (8 * i));
    size_t ok = fwrite(le, 1, 8, f) == 8;
    ok = ok && (!hdr_n || fwrite(hdr, 1, hdr_n, f) == hdr_n);
    ok = ok && (!dlen || fwrite(data, 1, dlen, f) == dlen);
    return (fclose(f) || !ok) ? -1 : 0;
}

static inline int tk_st_write(const tk_st *s, const char *path)
{
    char *h = json_dumps(s->header, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!h)
        return -1;
    size_t n = strlen(h), pad = (8 - n % 8) % 8;
    char *hp = malloc(n + pad + 1);
    memcpy(hp, h, n);
    memset(hp + n, ' ', pad); /* as the Rust writer pads, so data stays 8-byte aligned */
    free(h);
    int rc = tk_st_write_raw(path, n + pad, hp, n + pad, s->data, s->dlen);
    free(hp);
    return rc;
}

/* Appends a tensor (data copied) at the end of the data section. */
static inline void tk_st_add(tk_st *s, const char *name, const char *dtype, int ndim,
                             const int64_t *shape, const void *p, size_t nbytes)
{
    json_t *sh = json_array();
    for (int i = 0; i < ndim; i++)
        json_array_append_new(sh, json_integer(shape[i]));
    json_object_set_new(s->header, name,
                        json_pack("{sssos[II]}", "dtype", dtype, "shape", sh, "data_offsets",
                                  (json_int_t)s->dlen, (json_int_t)(s->dlen + nbytes)));
    s->data = realloc(s->data, s->dlen + nbytes + 1);
    if (nbytes)
        memcpy(s->data + s->dlen, p, nbytes);
    s->dlen += nbytes;
}

/* An F32 tensor whose element i is base + i / 1024 (recognisable, deterministic). */
static inline void tk_st_add_f32(tk_st *s, const char *name, int64_t d0, int64_t d1, float base)
{
    int64_t shape[2] = {d0, d1};
    int ndim = d1 < 0 ? 1 : 2;
    size_t n = (size_t)(d1 < 0 ? d0 : d0 * d1);
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = base + (float)i / 1024.0f;
    tk_st_add(s, name, "F32", ndim, shape, v, n * sizeof *v);
    free(v);
}

/* The tiny model's shape: hidden 8, 2 layers, 2 heads / 1 kv head, head_dim 4,
 * intermediate 16, vocab 32. */
enum { TK_H = 8, TK_L = 2, TK_NH = 2, TK_KV = 1, TK_HD = 4, TK_FF = 16, TK_V = 32 };

static inline const char *tk_tiny_config(bool qwen2, bool tie)
{
    static char buf[1024];
    if (qwen2)
        snprintf(buf, sizeof buf,
                 "{\"architectures\": [\"Fast_dLLM_QwenForCausalLM\"], \"model_type\": "
                 "\"Fast_dLLM_Qwen\", \"hidden_size\": %d, \"num_hidden_layers\": %d, "
                 "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
                 "\"intermediate_size\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 256, "
                 "\"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": %s, "
                 "\"bd_size\": 8, \"eos_token_id\": [30, 29], \"bos_token_id\": 28, "
                 "\"torch_dtype\": \"float32\"}",
                 TK_H, TK_L, TK_NH, TK_KV, TK_FF, TK_V, tie ? "true" : "false");
    else
        snprintf(buf, sizeof buf,
                 "{\"architectures\": [\"FoglineForDiffusionLM\"], \"model_type\": \"fogline\", "
                 "\"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
                 "\"num_key_value_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d, "
                 "\"vocab_size\": %d, \"max_position_embeddings\": 256, \"rope_theta\": 10000.0, "
                 "\"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": %s, \"attention_bias\": false, "
                 "\"block_size\": 4, \"mask_token_id\": 31, \"eos_token_id\": 30, "
                 "\"torch_dtype\": \"float32\"}",
                 TK_H, TK_L, TK_NH, TK_KV, TK_HD, TK_FF, TK_V, tie ? "true" : "false");
    return buf;
}

/* Fills s with every tensor of the tiny model (qwen2: biases; qwen3: q/k norms). */
static inline void tk_tiny_tensors(tk_st *s, bool qwen2, bool tie)
{
    char n[128];
    float b = 0;
    tk_st_add_f32(s, "model.embed_tokens.weight", TK_V, TK_H, b += 1);
    tk_st_add_f32(s, "model.norm.weight", TK_H, -1, b += 1);
    if (!tie)
        tk_st_add_f32(s, "lm_head.weight", TK_V, TK_H, b += 1);
    for (int l = 0; l < TK_L; l++) {
#define TK_T(suffix, d0, d1) \
    (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), tk_st_add_f32(s, n, d0, d1, b += 1))
        TK_T("input_layernorm.weight", TK_H, -1);
        TK_T("post_attention_layernorm.weight", TK_H, -1);
        TK_T("self_attn.q_proj.weight", TK_NH * TK_HD, TK_H);
        TK_T("self_attn.k_proj.weight", TK_KV * TK_HD, TK_H);
        TK_T("self_attn.v_proj.weight", TK_KV * TK_HD, TK_H);
        TK_T("self_attn.o_proj.weight", TK_H, TK_NH * TK_HD);
        TK_T("mlp.gate_proj.weight", TK_FF, TK_H);
        TK_T("mlp.up_proj.weight", TK_FF, TK_H);
        TK_T("mlp.down_proj.weight", TK_H, TK_FF);
        if (qwen2) {
            TK_T("self_attn.q_proj.bias", TK_NH * TK_HD, -1);
            TK_T("self_attn.k_proj.bias", TK_KV * TK_HD, -1);
            TK_T("self_attn.v_proj.bias", TK_KV * TK_HD, -1);
        } else {
            TK_T("self_attn.q_norm.weight", TK_HD, -1);
            TK_T("self_attn.k_norm.weight", TK_HD, -1);
        }
#undef TK_T
    }
}

/* Writes dir/config.json and dir/model.safetensors of the tiny model. */
static inline int tk_tiny_model(const char *dir, bool qwen2, bool tie)
{
    char p[TK_PATH];
    if (tk_write_str(tk_path(p, dir, "config.json"), tk_tiny_config(qwen2, tie)))
        return -1;
    tk_st s;
    tk_st_init(&s);
    tk_tiny_tensors(&s, qwen2, tie);
    int rc = tk_st_write(&s, tk_path(p, dir, "model.safetensors"));
    tk_st_free(&s);
    return rc;
}

/* ---- The quantized tiny model: hidden 32, 2 layers, 2 heads / 1 kv head, head_dim 16,
 * intermediate ff (64; 48 leaves down_proj's rows 48 long, so it stays F32), vocab 48.
 * Matrices are quantized with the engine's own quantizers from pseudo-random values. */
enum { TQ_H = 32, TQ_L = 2, TQ_NH = 2, TQ_KV = 1, TQ_HD = 16, TQ_V = 48 };

/* quant: "q8", "q4" or NULL (no quantization_config). */
static inline const char *tk_qtiny_config(const char *quant, int ff, bool tie)
{
    static char buf[1024], q[160];
    q[0] = 0;
    if (quant)
        snprintf(q, sizeof q, ", \"quantization_config\": {\"quant_method\": \"fogline\", "
                              "\"format\": \"%s\", \"group_size\": 32}", quant);
    snprintf(buf, sizeof buf,
             "{\"architectures\": [\"FoglineForDiffusionLM\"], \"model_type\": \"fogline\", "
             "\"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d, "
             "\"vocab_size\": %d, \"max_position_embeddings\": 256, \"rope_theta\": 10000.0, "
             "\"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": %s, \"attention_bias\": false, "
             "\"block_size\": 4, \"mask_token_id\": 47, \"eos_token_id\": 46%s}",
             TQ_H, TQ_L, TQ_NH, TQ_KV, TQ_HD, ff, TQ_V, tie ? "true" : "false", q);
    return buf;
}

/* (n, k) pseudo-random values in about [-1, 1) from seed (an LCG: the same on every host). */
static inline float *tk_rand_f32(size_t n, uint32_t seed)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = (float)((int32_t)(x >> 8) - (1 << 23)) / (float)(1 << 23);
    }
    return v;
}

/* Adds matrix NAME (n, k): F32 when quant is 0 or k % 32 != 0, else its quants (quant 8: I8
 * (n, k); 4: U8 (n, k/2)) and NAME_scale F16 (n, k/32). */
static inline void tk_st_add_mat(tk_st *s, const char *name, int n, int k, int quant, uint32_t seed)
{
    float *x = tk_rand_f32((size_t)n * k, seed);
    int64_t sh[2] = {n, k};
    if (!quant || k % FL_QG) {
        tk_st_add(s, name, "F32", 2, sh, x, (size_t)n * k * sizeof *x);
        free(x);
        return;
    }
    size_t qb = quant == 8 ? (size_t)n * k : (size_t)n * k / 2, G = (size_t)k / FL_QG;
    unsigned char *q = malloc(qb);
    uint16_t *d = malloc((size_t)n * G * sizeof *d);
    if (quant == 8)
        fl_q8_quantize((int8_t *)q, d, x, n, k, NULL);
    else
        fl_q4_quantize(q, d, x, n, k, NULL);
    sh[1] = quant == 8 ? k : k / 2;
    tk_st_add(s, name, quant == 8 ? "I8" : "U8", 2, sh, q, qb);
    char sn[192];
    snprintf(sn, sizeof sn, "%s_scale", name);
    int64_t ss[2] = {n, (int64_t)G};
    tk_st_add(s, sn, "F16", 2, ss, d, (size_t)n * G * sizeof *d);
    free(x);
    free(q);
    free(d);
}

/* Every tensor of the quantized tiny model; quant 8, 4 or 0 (all F32). Norms are F32 near 1. */
static inline void tk_qtiny_tensors(tk_st *s, int quant, int ff, bool tie)
{
    char n[128];
    uint32_t seed = 0;
    int head = quant ? 8 : 0; /* embedding and lm_head are q8 in every quantized directory */
    tk_st_add_mat(s, "model.embed_tokens.weight", TQ_V, TQ_H, head, ++seed);
    tk_st_add_f32(s, "model.norm.weight", TQ_H, -1, 1.0f);
    if (!tie)
        tk_st_add_mat(s, "lm_head.weight", TQ_V, TQ_H, head, ++seed);
    for (int l = 0; l < TQ_L; l++) {
#define TQ_M(suffix, d0, d1) \
    (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), tk_st_add_mat(s, n, d0, d1, quant, ++seed))
#define TQ_N(suffix, d0) \
    (snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix), tk_st_add_f32(s, n, d0, -1, 0.9f))
        TQ_N("input_layernorm.weight", TQ_H);
        TQ_N("post_attention_layernorm.weight", TQ_H);
        TQ_M("self_attn.q_proj.weight", TQ_NH * TQ_HD, TQ_H);
        TQ_M("self_attn.k_proj.weight", TQ_KV * TQ_HD, TQ_H);
        TQ_M("self_attn.v_proj.weight", TQ_KV * TQ_HD, TQ_H);
        TQ_M("self_attn.o_proj.weight", TQ_H, TQ_NH * TQ_HD);
        TQ_M("mlp.gate_proj.weight", ff, TQ_H);
        TQ_M("mlp.up_proj.weight", ff, TQ_H);
        TQ_M("mlp.down_proj.weight", TQ_H, ff);
        TQ_N("self_attn.q_norm.weight", TQ_HD);
        TQ_N("self_attn.k_norm.weight", TQ_HD);
#undef TQ_M
#undef TQ_N
    }
}

/* Writes dir/config.json and dir/model.safetensors of the quantized tiny model (quant 8, 4,
 * or 0: a float model without quantization_config). */
static inline int tk_qtiny_model(const char *dir, int quant, int ff, bool tie)
{
    char p[TK_PATH];
    const char *qn = quant == 8 ? "q8" : quant == 4 ? "q4" : NULL;
    if (tk_write_str(tk_path(p, dir, "config.json"), tk_qtiny_config(qn, ff, tie)))
        return -1;
    tk_st s;
    tk_st_init(&s);
    tk_qtiny_tensors(&s, quant, ff, tie);
    int rc = tk_st_write(&s, tk_path(p, dir, "model.safetensors"));
    tk_st_free(&s);
    return rc;
}

static inline bool tk_has(const char *msg, const char *needle) { return strstr(msg, needle) != NULL; }

/* ---- Running the fogline binary ($FL_BIN). */
typedef struct tk_run_out {
    int status; /* exit code, or -1 when it did not exit normally */
    char *out, *err;
    long maxrss_kb; /* the child's peak resident memory */
} tk_run_out;

static inline void tk_run_free(tk_run_out *r)
{
    free(r->out);
    free(r->err);
}

/* Runs $FL_BIN with args (NULL-terminated, at most 14), capturing stdout and stderr in files
 * under scratch. */
static inline tk_run_out tk_run(const char *scratch, const char *const *args)
{
    tk_run_out r = {-1, NULL, NULL, 0};
    const char *bin = getenv("FL_BIN");
    char po[TK_PATH], pe[TK_PATH];
    tk_path(po, scratch, "stdout");
    tk_path(pe, scratch, "stderr");
    const char *argv[16] = {bin ? bin : "fogline"};
    int n = 1;
    for (; args[n - 1] && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fo = open(po, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = open(pe, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    if (pid > 0 && wait4(pid, &st, 0, &ru) == pid && WIFEXITED(st))
        r.status = WEXITSTATUS(st);
    r.maxrss_kb = ru.ru_maxrss;
    fl_read_file(po, &r.out, NULL, NULL);
    fl_read_file(pe, &r.err, NULL, NULL);
    if (!r.out)
        r.out = strdup("");
    if (!r.err)
        r.err = strdup("");
    return r;
}

#endif
