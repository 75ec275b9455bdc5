/* test_loader_info.c: `fogline info` on the fixture's models (text and --json, checked against
 * Python's expect.json and config.json), on an SDAR-1.7B-shaped model whose 4 GB of weights
 * are a sparse file (info must only read headers: it finishes fast in little memory), and on
 * broken directories (one line on stderr, exit 1) and bad usage (exit 2). */
#include <fcntl.h>
#include <jansson.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "check.h"
#include "test_loader_kit.h"

static char root[TK_PATH];

typedef tk_run_out run_out;

/* Runs $FL_BIN with args (NULL-terminated), capturing stdout and stderr. */
static run_out run(const char *const *args) { return tk_run(root, args); }

static void run_free(run_out *r) { tk_run_free(r); }

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static json_int_t cfg_int(const json_t *cfg, const char *key)
{
    return json_integer_value(json_object_get(cfg, key));
}

static void test_json(const char *name)
{
    char dir[TK_PATH], p[TK_PATH];
    tk_path(dir, tk_models_dir(), name);
    json_t *exp = json_load_file(tk_path(p, dir, "expect.json"), 0, NULL);
    json_t *cfg = json_load_file(tk_path(p, dir, "config.json"), 0, NULL);
    CHECK(exp && cfg, "%s: fixture files", name);
    const char *args[] = {"info", "--model", dir, "--json", NULL};
    run_out r = run(args);
    CHECK(r.status == 0, "%s: exit %d, stderr %s", name, r.status, r.err);
    json_error_t jerr;
    json_t *o = json_loads(r.out, 0, &jerr);
    CHECK(o != NULL, "%s: --json output is not JSON: %s", name, jerr.text);
    if (o && exp && cfg) {
        bool qwen2 = !strcmp(json_string_value(json_object_get(exp, "layout")), "qwen2");
        CHECK(!strcmp(json_string_value(json_object_get(o, "family")),
                      qwen2 ? "fast-dllm-v2" : "sdar"),
              "%s family", name);
        CHECK(!strcmp(json_string_value(json_object_get(o, "layout")), qwen2 ? "qwen2" : "qwen3"),
              "%s layout", name);
        CHECK(!strcmp(json_string_value(json_object_get(o, "architecture")),
                      json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0))),
              "%s arch", name);
        json_int_t np = json_integer_value(json_object_get(exp, "n_params"));
        CHECK(json_integer_value(json_object_get(o, "n_params")) == np, "%s n_params", name);
        CHECK(json_integer_value(json_object_get(o, "f32_weight_bytes")) == np * 4, "%s f32", name);
        CHECK(json_integer_value(json_object_get(o, "bytes_on_disk")) ==
                  json_integer_value(json_object_get(exp, "bytes")),
              "%s bytes", name);
        json_int_t kv = cfg_int(cfg, "num_key_value_heads"), heads = cfg_int(cfg, "num_attention_heads");
        json_int_t hd = json_object_get(cfg, "head_dim") ? cfg_int(cfg, "head_dim")
                                                          : cfg_int(cfg, "hidden_size") / heads;
        json_int_t block = qwen2 ? cfg_int(cfg, "bd_size") : cfg_int(cfg, "block_size");
        json_int_t page = block * cfg_int(cfg, "num_hidden_layers") * 2 * kv * hd * 4;
        CHECK(json_integer_value(json_object_get(o, "kv_page_bytes")) == page,
              "%s kv page %lld, want %lld", name,
              (long long)json_integer_value(json_object_get(o, "kv_page_bytes")), (long long)page);
        CHECK(json_integer_value(json_object_get(o, "kv_page_bytes_bf16")) == page / 2 &&
                  !strcmp(json_string_value(json_object_get(json_object_get(o, "kv_format_auto"),
                                                            "cpu")), "f32"),
              "%s bf16 kv page %lld, want %lld; cpu kv auto f32", name,
              (long long)json_integer_value(json_object_get(o, "kv_page_bytes_bf16")),
              (long long)(page / 2));
        CHECK(json_integer_value(json_object_get(o, "block_size")) == block, "%s block", name);
        CHECK(json_integer_value(json_object_get(o, "sub_block")) == (qwen2 ? 8 : block), "%s sub",
              name);
        CHECK(json_is_true(json_object_get(o, "tie_word_embeddings")) ==
                  json_is_true(json_object_get(exp, "tie")),
              "%s tie", name);
        /* the dtype on disk, with the bytes of all tensors */
        const char *dt = json_string_value(
            json_object_get(json_object_get(json_object_get(exp, "tensors"), "model.norm.weight"),
                            "dtype"));
        json_t *d = json_object_get(json_object_get(o, "dtypes"), dt ? dt : "?");
        CHECK(d && json_integer_value(json_object_get(d, "bytes")) ==
                       json_integer_value(json_object_get(exp, "bytes")),
              "%s dtypes", name);
        json_t *eos = json_object_get(o, "eos_token_ids");
        CHECK(json_array_size(eos) == 1 &&
                  json_integer_value(json_array_get(eos, 0)) == cfg_int(cfg, "eos_token_id"),
              "%s eos", name);
        /* SDAR's config names its mask; Fast-dLLM v2 needs the tokenizer, which is absent */
        json_t *mask = json_object_get(o, "mask_token_id");
        if (qwen2)
            CHECK(json_is_null(mask), "%s mask unresolved", name);
        else
            CHECK(json_integer_value(mask) == cfg_int(cfg, "mask_token_id"), "%s mask", name);
        const char *chat = json_string_value(json_object_get(o, "chat_template"));
        CHECK(chat && !strncmp(chat, "unavailable: ", 13) && tk_has(chat, "tokenizer.json"),
              "%s chat template: %s", name, chat ? chat : "(null)");
    }
    json_decref(o);
    json_decref(exp);
    json_decref(cfg);
    run_free(&r);
}

static void test_text(void)
{
    char dir[TK_PATH], p[TK_PATH], want[128];
    tk_path(dir, tk_models_dir(), "q3_bf16_tie");
    json_t *exp = json_load_file(tk_path(p, dir, "expect.json"), 0, NULL);
    const char *args[] = {"info", "--model", dir, NULL};
    run_out r = run(args);
    CHECK(r.status == 0 && !r.err[0], "text: exit %d, stderr %s", r.status, r.err);
    CHECK(tk_has(r.out, "family           sdar\n"), "family line:\n%s", r.out);
    snprintf(want, sizeof want, "parameters       %lld ",
             (long long)json_integer_value(json_object_get(exp, "n_params")));
    CHECK(tk_has(r.out, want), "parameter line '%s':\n%s", want, r.out);
    CHECK(tk_has(r.out, "BF16") && tk_has(r.out, "tied embeddings  yes") &&
              tk_has(r.out, "layout           qwen3"),
          "text:\n%s", r.out);
    CHECK(tk_has(r.out, "chat template    unavailable: no tokenizer.json"), "chat:\n%s", r.out);
    json_decref(exp);
    run_free(&r);
}

/* An SDAR-1.7B-shaped directory with BF16 weights as one sparse 4 GB file: the headers are
 * real, the data is holes. If info converted or copied weights it would need gigabytes. */
static void test_big_sparse(void)
{
    char dir[TK_PATH], p[TK_PATH];
    snprintf(dir, sizeof dir, "%.4000s/sdar17", root);
    mkdir(dir, 0755);
    const int h = 2048, L = 28, nh = 16, kv = 8, hd = 128, ff = 6144, V = 151936;
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"SDARForCausalLM\"], \"model_type\": \"sdar\", "
             "\"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d, "
             "\"num_key_value_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d, "
             "\"vocab_size\": %d, \"block_size\": 4, \"mask_token_id\": 151669, "
             "\"eos_token_id\": 151645, \"tie_word_embeddings\": false}",
             h, L, nh, kv, hd, ff, V);
    tk_write_str(tk_path(p, dir, "config.json"), cfg);
    json_t *hdr = json_object();
    int64_t off = 0, n_params = 0;
    char n[128];
#define ADD(name, d0, d1)                                                                    \
    do {                                                                                     \
        int64_t ne_ = (int64_t)(d0) * ((d1) < 0 ? 1 : (d1));                                 \
        json_object_set_new(hdr, name,                                                       \
                            (d1) < 0 ? json_pack("{sss[I]s[II]}", "dtype", "BF16", "shape",  \
                                                 (json_int_t)(d0), "data_offsets",           \
                                                 (json_int_t)off, (json_int_t)(off + 2 * ne_)) \
                                     : json_pack("{sss[II]s[II]}", "dtype", "BF16", "shape", \
                                                 (json_int_t)(d0), (json_int_t)(d1),         \
                                                 "data_offsets", (json_int_t)off,            \
                                                 (json_int_t)(off + 2 * ne_)));              \
        off += 2 * ne_;                                                                      \
        n_params += ne_;                                                                     \
    } while (0)
    ADD("model.embed_tokens.weight", V, h);
    ADD("lm_head.weight", V, h);
    ADD("model.norm.weight", h, -1);
    for (int l = 0; l < L; l++) {
#define LAYER(suffix, d0, d1)                                    \
    do {                                                         \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix); \
        ADD(n, d0, d1);                                          \
    } while (0)
        LAYER("input_layernorm.weight", h, -1);
        LAYER("post_attention_layernorm.weight", h, -1);
        LAYER("self_attn.q_proj.weight", nh * hd, h);
        LAYER("self_attn.k_proj.weight", kv * hd, h);
        LAYER("self_attn.v_proj.weight", kv * hd, h);
        LAYER("self_attn.o_proj.weight", h, nh * hd);
        LAYER("self_attn.q_norm.weight", hd, -1);
        LAYER("self_attn.k_norm.weight", hd, -1);
        LAYER("mlp.gate_proj.weight", ff, h);
        LAYER("mlp.up_proj.weight", ff, h);
        LAYER("mlp.down_proj.weight", h, ff);
#undef LAYER
    }
#undef ADD
    char *ht = json_dumps(hdr, JSON_COMPACT);
    json_decref(hdr);
    tk_path(p, dir, "model.safetensors");
    tk_st_write_raw(p, strlen(ht), ht, strlen(ht), NULL, 0);
    int64_t total = 8 + (int64_t)strlen(ht) + off;
    free(ht);
    CHECK(truncate(p, total) == 0, "sparse file of %lld bytes", (long long)total);

    const char *args[] = {"info", "--model", dir, "--json", NULL};
    struct timeval t0, t1;
    gettimeofday(&t0, NULL);
    run_out r = run(args);
    gettimeofday(&t1, NULL);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_usec - t0.tv_usec) / 1e6;
    CHECK(r.status == 0, "sparse: exit %d, %s", r.status, r.err);
    json_t *o = json_loads(r.out, 0, NULL);
    CHECK(o && json_integer_value(json_object_get(o, "n_params")) == n_params,
          "sparse n_params, want %lld", (long long)n_params);
    CHECK(o && json_integer_value(json_object_get(o, "f32_weight_bytes")) == n_params * 4,
          "sparse f32 bytes");
    CHECK(o && json_integer_value(json_object_get(o, "kv_page_bytes")) == 4LL * L * 2 * kv * hd * 4,
          "sparse kv page");
    json_decref(o);
    /* 4 GB of BF16 as f32 would be 8 GB resident; headers-only info stays small (ASan's own
     * shadow memory included) */
    CHECK(r.maxrss_kb < 300 * 1024, "info used %ld MB resident", r.maxrss_kb / 1024);
    printf("info on a 4 GB sparse SDAR-1.7B-shaped model: %.2f s, %ld MB peak RSS\n", secs,
           r.maxrss_kb / 1024);
    run_free(&r);
}

static void expect_fail(const char *const *args, int code, const char *needle)
{
    run_out r = run(args);
    CHECK(r.status == code, "%s %s: exit %d, want %d", args[1], args[2] ? args[2] : "", r.status,
          code);
    CHECK(count_lines(r.err) == 1 && !strncmp(r.err, "fogline info: ", 14),
          "one line on stderr, got: %s", r.err);
    CHECK(tk_has(r.err, needle), "stderr '%s' does not name '%s'", r.err, needle);
    CHECK(!r.out[0], "nothing on stdout: %s", r.out);
    run_free(&r);
}

static void test_errors(void)
{
    char d[TK_PATH], p[TK_PATH], src[TK_PATH];
    /* no such directory */
    tk_path(d, root, "missing");
    const char *a1[] = {"info", "--model", d, NULL};
    expect_fail(a1, 1, "missing");
    /* a directory without config.json */
    tk_path(d, root, "empty");
    mkdir(d, 0755);
    const char *a2[] = {"info", "--model", d, NULL};
    expect_fail(a2, 1, "config.json");
    /* a truncated shard, in --json mode too: errors never go to stdout */
    tk_path(d, root, "trunc");
    mkdir(d, 0755);
    tk_copy_dir(tk_path(src, tk_models_dir(), "q2_bf16_sh3"), d);
    CHECK(truncate(tk_path(p, d, "model-00003-of-00003.safetensors"), 1000) == 0, "truncate");
    const char *a3[] = {"info", "--model", d, "--json", NULL};
    expect_fail(a3, 1, "model-00003-of-00003.safetensors");
    /* a header that is not JSON: the message (jansson's text) stays on one line */
    tk_path(d, root, "garbage");
    mkdir(d, 0755);
    tk_copy_dir(tk_path(src, tk_models_dir(), "q3_f32"), d);
    tk_st_write_raw(tk_path(p, d, "model.safetensors"), 12, "{\n\n\"a\":\n\n\n}", 12, NULL, 0);
    const char *a4[] = {"info", "--model", d, NULL};
    expect_fail(a4, 1, "model.safetensors");

    /* usage errors: exit 2 */
    const char *u1[] = {"info", NULL};
    expect_fail(u1, 2, "--model");
    const char *u2[] = {"info", "--model", d, "--frobnicate", NULL};
    expect_fail(u2, 2, "--frobnicate");
    const char *u3[] = {"info", "--model", NULL};
    expect_fail(u3, 2, "--model");

    const char *h[] = {"info", "--help", NULL};
    run_out r = run(h);
    CHECK(r.status == 0 && tk_has(r.out, "usage: fogline info") && !r.err[0], "--help: %d %s",
          r.status, r.out);
    run_free(&r);
}

int main(void)
{
    if (tk_mkdtemp(root, "info"))
        return 1;
    test_json("q3_f32");
    test_json("q3_f16_sh3");
    test_json("q2_f16_tie_sh3");
    test_json("q2_bf16_sh3");
    test_text();
    test_big_sparse();
    test_errors();
    int rc = check_summary("test_loader_info");
    if (!rc)
        fl_rmtree(root);
    return rc;
}
