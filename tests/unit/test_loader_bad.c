/* test_loader_bad.c: every malformed input the loader must refuse, each built here by copying
 * a good model (the fixture's, or one written from C) and breaking one thing. Each case checks
 * the error code and that the message names the problem: tensor, field or file. */
#include <jansson.h>

#include "check.h"
#include "model.h"
#include "test_loader_kit.h"

static char root[TK_PATH]; /* this run's scratch directory */

/* A fresh copy of fixture model `name` in a new directory; returns its path (static). */
static const char *copy_model(const char *name)
{
    static char dir[TK_PATH];
    static int n;
    char src[TK_PATH];
    snprintf(dir, sizeof dir, "%.3000s/%s-%d", root, name, n++);
    mkdir(dir, 0755);
    tk_path(src, tk_models_dir(), name);
    CHECK(tk_copy_dir(src, dir) == 0, "copy %s", src);
    return dir;
}

static int load(const char *dir, bool tokenizer, fl_err *e)
{
    fl_load_opts o = {.no_tokenizer = !tokenizer};
    fl_model *m = NULL;
    memset(e, 0, sizeof *e);
    int rc = fl_model_load(&m, dir, &o, e);
    CHECK((rc == 0) == (m != NULL), "model pointer follows rc");
    CHECK(rc <= 0, "rc %d", rc);
    CHECK(rc == 0 || (e->code == rc && e->msg[0]), "error carries code and message");
    CHECK(!strchr(e->msg, '\n'), "one-line message: %s", e->msg);
    fl_model_free(m);
    return rc;
}

/* Opens one safetensors file; checks the invariants every failure must keep. */
static int open_file(const char *path, fl_err *e)
{
    fl_weights *w = NULL;
    memset(e, 0, sizeof *e);
    int rc = fl_weights_open_file(&w, path, e);
    CHECK((rc == 0) == (w != NULL), "weights pointer follows rc");
    CHECK(rc == 0 || (e->code == rc && e->msg[0] && !strchr(e->msg, '\n')), "message: %s", e->msg);
    fl_weights_close(w);
    return rc;
}

#define EXPECT(rc_expr, code, ...)                                                          \
    do {                                                                                    \
        int rc_ = (rc_expr);                                                                \
        CHECK(rc_ == (code), "%s: rc %d (%s), want %d (%s): %s", #rc_expr, rc_,             \
              fl_strerror(rc_), code, fl_strerror(code), e.msg);                            \
        const char *needles_[] = {__VA_ARGS__, NULL};                                       \
        for (size_t i_ = 0; needles_[i_]; i_++)                                             \
            CHECK(tk_has(e.msg, needles_[i_]), "message '%s' does not name '%s'", e.msg,    \
                  needles_[i_]);                                                            \
    } while (0)

/* Rewrites dir/file's header through edit(header) and writes it back (data unchanged). */
static void edit_header(const char *dir, const char *file, void (*edit)(json_t *h, void *arg),
                        void *arg)
{
    char p[TK_PATH];
    tk_st s;
    CHECK(tk_st_read(&s, tk_path(p, dir, file)) == 0, "read %s", p);
    edit(s.header, arg);
    CHECK(tk_st_write(&s, p) == 0, "write %s", p);
    tk_st_free(&s);
}

static void del_key(json_t *h, void *arg) { json_object_del(h, arg); }

static void set_shape(json_t *h, void *arg)
{
    json_t *t = json_object_get(h, "model.layers.0.self_attn.q_proj.weight");
    json_object_set_new(t, "shape", json_pack("[ii]", 32, 128));
    (void)arg;
}

/* Sets one config.json key (value reference stolen). */
static void set_config(const char *dir, const char *key, json_t *value)
{
    char p[TK_PATH];
    json_t *j = json_load_file(tk_path(p, dir, "config.json"), 0, NULL);
    CHECK(j != NULL, "read %s", p);
    json_object_set_new(j, key, value);
    CHECK(json_dump_file(j, p, 0) == 0, "write %s", p);
    json_decref(j);
}

static void test_model_tensors(void)
{
    fl_err e;
    /* missing tensor: named, with the shape it should have had */
    const char *d = copy_model("q3_f32");
    edit_header(d, "model.safetensors", del_key, "model.layers.1.mlp.up_proj.weight");
    EXPECT(load(d, false, &e), FL_ENOTFOUND, "model.layers.1.mlp.up_proj.weight", "[128, 64]");

    /* misshapen: same element count, other shape; both shapes named */
    d = copy_model("q3_f32");
    edit_header(d, "model.safetensors", set_shape, NULL);
    EXPECT(load(d, false, &e), FL_EFORMAT, "model.layers.0.self_attn.q_proj.weight", "[32, 128]",
           "[64, 64]");

    /* untied and no lm_head (the tied fixture stores none) */
    d = copy_model("q3_bf16_tie");
    char p[TK_PATH];
    set_config(d, "tie_word_embeddings", json_integer(0));
    EXPECT(load(d, false, &e), FL_EFORMAT, "tie_word_embeddings");
    set_config(d, "tie_word_embeddings", json_false());
    EXPECT(load(d, false, &e), FL_ENOTFOUND, "lm_head.weight", "tie_word_embeddings");

    /* a bias the Qwen3 config does not announce would be silently dropped: refused */
    d = copy_model("q3_f32");
    {
        tk_st s;
        tk_st_read(&s, tk_path(p, d, "model.safetensors"));
        float z[64] = {0};
        int64_t sh[1] = {64};
        tk_st_add(&s, "model.layers.1.self_attn.q_proj.bias", "F32", 1, sh, z, sizeof z);
        tk_st_write(&s, p);
        tk_st_free(&s);
    }
    EXPECT(load(d, false, &e), FL_EUNSUPPORTED, "model.layers.1.self_attn.q_proj.bias",
           "attention_bias");

    /* a role tensor with an integer dtype */
    d = copy_model("q2_f32_tie");
    {
        tk_st s;
        tk_st_read(&s, tk_path(p, d, "model.safetensors"));
        json_t *t = json_object_get(s.header, "model.norm.weight");
        json_object_set_new(t, "dtype", json_string("I32"));
        tk_st_write(&s, p);
        tk_st_free(&s);
    }
    EXPECT(load(d, false, &e), FL_EUNSUPPORTED, "model.norm.weight", "I32");

    /* Qwen2 layout without its q bias */
    d = copy_model("q2_f32_tie");
    edit_header(d, "model.safetensors", del_key, "model.layers.0.self_attn.k_proj.bias");
    EXPECT(load(d, false, &e), FL_ENOTFOUND, "model.layers.0.self_attn.k_proj.bias", "[32]");

    /* more layers in the weights than config.json says */
    d = copy_model("q3_f32");
    set_config(d, "num_hidden_layers", json_integer(1));
    EXPECT(load(d, false, &e), FL_EFORMAT, "num_hidden_layers", "model.layers.1");

    /* config and weights disagree on vocab: the embedding is named with both shapes */
    d = copy_model("q3_f32");
    set_config(d, "vocab_size", json_integer(1000));
    EXPECT(load(d, false, &e), FL_EFORMAT, "model.embed_tokens.weight", "[512, 64]", "[1000, 64]");
}

static void test_config_dir(void)
{
    fl_err e;
    char p[TK_PATH];
    /* missing config.json */
    const char *d = copy_model("q3_f32");
    remove(tk_path(p, d, "config.json"));
    EXPECT(load(d, false, &e), FL_ENOTFOUND, "config.json", d);

    /* inconsistent configs, through the whole load */
    static const struct {
        const char *key, *value, *names;
        int code;
    } cases[] = {
        {"num_key_value_heads", "3", "num_key_value_heads", FL_ERANGE},
        {"head_dim", "15", "head_dim", FL_ERANGE},
        {"vocab_size", "0", "vocab_size", FL_ERANGE},
        {"block_size", "1000", "block_size", FL_ERANGE},
        {"mask_token_id", "512", "mask_token_id", FL_ERANGE},
        {"hidden_size", "null", "hidden_size", FL_EFORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        d = copy_model("q3_f32");
        set_config(d, cases[i].key, json_loads(cases[i].value, JSON_DECODE_ANY, NULL));
        EXPECT(load(d, false, &e), cases[i].code, cases[i].names, "config.json");
    }

    /* a directory without weights */
    d = copy_model("q3_f32");
    remove(tk_path(p, d, "model.safetensors"));
    EXPECT(load(d, false, &e), FL_ENOTFOUND, "model.safetensors");

    /* missing tokenizer when one is asked for */
    d = copy_model("q3_f32");
    EXPECT(load(d, true, &e), FL_ENOTFOUND, "tokenizer.json", d);
    /* a tokenizer.json that does not load: the loader's error, under the directory's name */
    tk_write_str(tk_path(p, d, "tokenizer.json"), "{\"not\": \"a tokenizer\"}");
    int rc = load(d, true, &e);
    CHECK(rc < 0 && tk_has(e.msg, d) && tk_has(e.msg, "tokenizer"), "bad tokenizer: %d %s", rc,
          e.msg);
}

static void test_shards(void)
{
    fl_err e;
    char p[TK_PATH];
    /* the index names a shard that is not there */
    const char *d = copy_model("q3_f16_sh3");
    remove(tk_path(p, d, "model-00002-of-00003.safetensors"));
    EXPECT(load(d, false, &e), FL_ENOTFOUND, "model-00002-of-00003.safetensors",
           "model.safetensors.index.json");

    /* a tensor held by two shards */
    d = copy_model("q3_f16_sh3");
    {
        tk_st a, b;
        char pa[TK_PATH], pb[TK_PATH];
        tk_st_read(&a, tk_path(pa, d, "model-00001-of-00003.safetensors"));
        tk_st_read(&b, tk_path(pb, d, "model-00003-of-00003.safetensors"));
        const char *name;
        json_t *v;
        json_object_foreach(a.header, name, v)
        {
            if (!strcmp(name, "__metadata__"))
                continue;
            json_int_t o0 = json_integer_value(json_array_get(json_object_get(v, "data_offsets"), 0));
            json_int_t o1 = json_integer_value(json_array_get(json_object_get(v, "data_offsets"), 1));
            int64_t sh[FL_MAX_DIMS];
            json_t *js = json_object_get(v, "shape");
            for (size_t k = 0; k < json_array_size(js); k++)
                sh[k] = json_integer_value(json_array_get(js, k));
            tk_st_add(&b, name, json_string_value(json_object_get(v, "dtype")),
                      (int)json_array_size(js), sh, a.data + o0, (size_t)(o1 - o0));
            break;
        }
        tk_st_write(&b, pb);
        tk_st_free(&a);
        tk_st_free(&b);
    }
    EXPECT(load(d, false, &e), FL_EFORMAT, "in both", "model-00001-of-00003.safetensors",
           "model-00003-of-00003.safetensors");

    /* index breakage: not JSON, no weight_map, a shard name leaving the directory, a tensor
     * mapped to a shard that does not hold it */
    static const char *bad_index[][2] = {
        {"{\"weight_map\": ", "not valid JSON"},
        {"{\"metadata\": {}}", "weight_map"},
        {"{\"weight_map\": {\"model.norm.weight\": \"../model-00001-of-00003.safetensors\"}}",
         "model.norm.weight"},
        {"{\"weight_map\": {\"model.norm.weight\": 3}}", "model.norm.weight"},
        {"{\"weight_map\": {}}", "empty"},
    };
    for (size_t i = 0; i < sizeof bad_index / sizeof bad_index[0]; i++) {
        d = copy_model("q3_f16_sh3");
        tk_write_str(tk_path(p, d, "model.safetensors.index.json"), bad_index[i][0]);
        EXPECT(load(d, false, &e), FL_EFORMAT, bad_index[i][1], "model.safetensors.index.json");
    }
    d = copy_model("q3_f16_sh3");
    {
        json_t *j = json_load_file(tk_path(p, d, "model.safetensors.index.json"), 0, NULL);
        json_t *wm = json_object_get(j, "weight_map");
        json_object_set_new(wm, "model.ghost.weight", json_string("model-00001-of-00003.safetensors"));
        json_dump_file(j, p, 0);
        json_decref(j);
    }
    EXPECT(load(d, false, &e), FL_ENOTFOUND, "model.ghost.weight", "model-00001-of-00003.safetensors");
}

/* safetensors files written byte by byte */
static void test_files(void)
{
    fl_err e;
    char p[TK_PATH];
    float data[16] = {0};
    tk_path(p, root, "t.safetensors");
    const char *good = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}";

    CHECK(tk_st_write_raw(p, strlen(good), good, strlen(good), data, 16) == 0, "write");
    EXPECT(open_file(p, &e), 0, "");

    /* shorter than the length field */
    tk_write(p, "\x05\0\0", 3);
    EXPECT(open_file(p, &e), FL_EFORMAT, "t.safetensors", "too short");
    tk_write(p, "", 0);
    EXPECT(open_file(p, &e), FL_EFORMAT, "t.safetensors", "too short");

    /* header length past the end, above the limit, too small to be an object */
    tk_st_write_raw(p, strlen(good) + 17, good, strlen(good), data, 16);
    EXPECT(open_file(p, &e), FL_EFORMAT, "t.safetensors", "header length");
    tk_st_write_raw(p, 200000000, good, strlen(good), data, 16);
    EXPECT(open_file(p, &e), FL_EFORMAT, "t.safetensors", "200000000", "limit");
    tk_st_write_raw(p, UINT64_MAX, good, strlen(good), data, 16);
    EXPECT(open_file(p, &e), FL_EFORMAT, "t.safetensors", "header length");
    tk_st_write_raw(p, 0, "", 0, data, 16);
    EXPECT(open_file(p, &e), FL_EFORMAT, "t.safetensors", "header length");

    /* truncated data: the tensor whose bytes run past the end is named */
    tk_st_write_raw(p, strlen(good), good, strlen(good), data, 12);
    EXPECT(open_file(p, &e), FL_ERANGE, "t.safetensors", "'w'", "truncated");

    static const struct {
        const char *hdr, *names;
        int code;
    } cases[] = {
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,64]}}", "'w'", FL_ERANGE},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[4,20]}}", "'w'", FL_ERANGE},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,12]}}", "need 16", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", "need 8", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[16,0]}}", "backwards", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[-4,12]}}", "data_offsets", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0]}}", "data_offsets", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2]}}", "data_offsets", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[2,2],\"data_offsets\":[0,4]}}",
         "unknown dtype F8_E4M3 for tensor w", FL_EUNSUPPORTED},
        {"{\"w\":{\"dtype\":7,\"shape\":[2,2],\"data_offsets\":[0,16]}}", "dtype", FL_EFORMAT},
        {"{\"w\":{\"shape\":[2,2],\"data_offsets\":[0,16]}}", "dtype", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", "shape", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", "shape[1]", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2.0],\"data_offsets\":[0,16]}}", "shape[1]", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,4],\"data_offsets\":[0,16]}}", "9 dims",
         FL_EUNSUPPORTED},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],\"data_offsets\":[0,16]}}",
         "overflows", FL_ERANGE},
        {"{\"w\":{\"dtype\":\"F64\",\"shape\":[1152921504606846976],\"data_offsets\":[0,16]}}",
         "overflows", FL_ERANGE},
        {"{\"w\":[1,2]}", "'w'", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}",
         "JSON", FL_EFORMAT},
        {"{\"w\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]", "not valid JSON", FL_EFORMAT},
        {"[1, 2, 3]", "not a JSON object", FL_EFORMAT},
        {"\"w\"  ", "JSON", FL_EFORMAT},
        {"{\"__metadata__\": 5}", "__metadata__", FL_EFORMAT},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", "empty name", FL_EFORMAT},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tk_st_write_raw(p, strlen(cases[i].hdr), cases[i].hdr, strlen(cases[i].hdr), data, 16);
        EXPECT(open_file(p, &e), cases[i].code, "t.safetensors", cases[i].names);
    }

    /* nesting deep enough to overflow a recursive parser's stack is refused, not followed */
    {
        size_t depth = 100000;
        char *deep = malloc(2 * depth);
        memset(deep, '[', depth);
        memset(deep + depth, ']', depth);
        tk_st_write_raw(p, 2 * depth, deep, 2 * depth, data, 16);
        EXPECT(open_file(p, &e), FL_EFORMAT, "t.safetensors", "JSON");
        free(deep);
    }

    /* accepted: metadata, zero-size tensors, scalars, every known dtype */
    const char *ok = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"e\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[16,16]},"
                     "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
                     "\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[8,10]},"
                     "\"h\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[10,16]},"
                     "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]},"
                     "\"u\":{\"dtype\":\"U8\",\"shape\":[16],\"data_offsets\":[0,16]},"
                     "\"i\":{\"dtype\":\"I8\",\"shape\":[4],\"data_offsets\":[0,4]},"
                     "\"j\":{\"dtype\":\"I32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                     "\"f\":{\"dtype\":\"F16\",\"shape\":[8],\"data_offsets\":[0,16]}}";
    tk_st_write_raw(p, strlen(ok), ok, strlen(ok), data, 16);
    fl_weights *w = NULL;
    int rc = fl_weights_open_file(&w, p, &e);
    CHECK(rc == 0, "variety: %s", e.msg);
    if (w) {
        CHECK(fl_weights_count(w) == 9, "count %zu (metadata is no tensor)", fl_weights_count(w));
        const fl_tensor *t = fl_weights_get(w, "e");
        CHECK(t && t->numel == 0 && t->nbytes == 0 && t->ndim == 2, "empty tensor");
        t = fl_weights_get(w, "s");
        CHECK(t && t->numel == 1 && t->ndim == 0 && t->dtype == FL_DT_I64, "scalar");
        CHECK(fl_weights_get(w, "__metadata__") == NULL, "metadata hidden");
    }
    fl_weights_close(w);

    /* not a file at all */
    EXPECT(open_file(root, &e), FL_EIO, root);
    tk_path(p, root, "absent.safetensors");
    EXPECT(open_file(p, &e), FL_ENOTFOUND, "absent.safetensors");
}

int main(void)
{
    if (tk_mkdtemp(root, "bad")) {
        fprintf(stderr, "cannot make a scratch directory\n");
        return 1;
    }
    test_model_tensors();
    test_config_dir();
    test_shards();
    test_files();
    int rc = check_summary("test_loader_bad");
    if (!rc)
        fl_rmtree(root); /* kept on failure, to look at */
    return rc;
}
