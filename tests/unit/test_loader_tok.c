/* test_loader_tok.c: the loader with a tokenizer: the mask token resolved from tokenizer.json
 * per family ("<|MASK|>" for SDAR, "|<MASK>|" for Fast-dLLM v2) when config.json has no id, a
 * config id winning over the tokenizer, a tokenizer lacking the mask refused, and `fogline
 * info` reporting mask string and chat template. The tokenizer is a small byte-level BPE
 * written here (the fixture's random models have a 512-token vocab). */
#include <jansson.h>
#include <sys/wait.h>

#include "check.h"
#include "model.h"
#include "test_loader_kit.h"
#include "tokenizer/tokenizer.h"

static char root[TK_PATH];

/* GPT-2's byte -> printable code point map, as byte-level BPE vocabularies spell bytes. */
static void byte_symbol(int b, char out[4])
{
    int cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255)))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

/* tokenizer.json: ids 0..255 the bytes, then the given added tokens from id 256 on. */
static void write_tokenizer(const char *dir, const char *const *added, int n_added)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char s[4];
        byte_symbol(b, s);
        json_object_set_new(vocab, s, json_integer(b));
    }
    json_t *adds = json_array();
    for (int i = 0; i < n_added; i++)
        json_array_append_new(adds, json_pack("{sisssbsbsbsbsb}", "id", 256 + i, "content", added[i],
                                              "single_word", 0, "lstrip", 0, "rstrip", 0,
                                              "normalized", 0, "special", 1));
    json_t *tok = json_pack(
        "{sssosnsns{sssbsbsb}s{sssbsbsb}s{sssnsnsnsbsbsoso}}", "version", "1.0", "added_tokens",
        adds, "normalizer", "post_processor", "pre_tokenizer", "type", "ByteLevel",
        "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 1, "decoder", "type", "ByteLevel",
        "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 1, "model", "type", "BPE",
        "dropout", "unk_token", "continuing_subword_prefix", "fuse_unk", 0, "byte_fallback", 0,
        "vocab", vocab, "merges", json_array());
    CHECK(tok != NULL, "tokenizer.json built");
    char p[TK_PATH];
    CHECK(json_dump_file(tok, tk_path(p, dir, "tokenizer.json"), 0) == 0, "write %s", p);
    json_decref(tok);
}

static const char *copy_model(const char *name)
{
    static char dir[TK_PATH];
    static int n;
    char src[TK_PATH];
    snprintf(dir, sizeof dir, "%.3000s/%s-%d", root, name, n++);
    mkdir(dir, 0755);
    CHECK(tk_copy_dir(tk_path(src, tk_models_dir(), name), dir) == 0, "copy %s", src);
    return dir;
}

static void drop_config_key(const char *dir, const char *key)
{
    char p[TK_PATH];
    json_t *j = json_load_file(tk_path(p, dir, "config.json"), 0, NULL);
    json_object_del(j, key);
    json_dump_file(j, p, 0);
    json_decref(j);
}

static const char *const both_masks[] = {"<|MASK|>", "|<MASK>|", "<|im_end|>"};

static int load(const char *dir, const fl_load_opts *o, fl_model **m, fl_err *e)
{
    memset(e, 0, sizeof *e);
    *m = NULL;
    int rc = fl_model_load(m, dir, o, e);
    CHECK((rc == 0) == (*m != NULL) && (rc == 0 || e->msg[0]), "rc %d msg %s", rc, e->msg);
    return rc;
}

static void test_resolve(void)
{
    fl_load_opts o = {0};
    fl_model *m;
    fl_err e;
    /* SDAR without the key: "<|MASK|>" (256), not Fast-dLLM's look-alike (257) */
    const char *d = copy_model("q3_f32");
    drop_config_key(d, "mask_token_id");
    write_tokenizer(d, both_masks, 3);
    CHECK(load(d, &o, &m, &e) == 0, "sdar + tokenizer: %s", e.msg);
    if (m) {
        CHECK(m->tok != NULL && m->cfg.mask_token_id == 256, "sdar mask %d", m->cfg.mask_token_id);
        CHECK(m->embed != NULL, "weights bound too");
        fl_model_free(m);
    }
    /* config.json's id wins */
    d = copy_model("q3_f32");
    write_tokenizer(d, both_masks, 3);
    CHECK(load(d, &o, &m, &e) == 0 && m->cfg.mask_token_id == 511, "config id: %s", e.msg);
    fl_model_free(m);
    /* Fast-dLLM v2: "|<MASK>|" */
    d = copy_model("q2_f32_tie");
    write_tokenizer(d, both_masks, 3);
    CHECK(load(d, &o, &m, &e) == 0 && m->cfg.mask_token_id == 257, "fast mask: %s", e.msg);
    fl_model_free(m);
    /* no_weights: config + tokenizer, mask still resolved */
    fl_load_opts nw = {.no_weights = true};
    CHECK(load(d, &nw, &m, &e) == 0 && m->cfg.mask_token_id == 257 && !m->weights && m->tok,
          "no_weights: %s", e.msg);
    fl_model_free(m);
    /* a tokenizer without the family's mask token */
    d = copy_model("q2_f32_tie");
    const char *only_sdar[] = {"<|MASK|>"};
    write_tokenizer(d, only_sdar, 1);
    CHECK(load(d, &o, &m, &e) == FL_ENOTFOUND && tk_has(e.msg, "|<MASK>|") &&
              tk_has(e.msg, "mask_token_id"),
          "missing mask: %s", e.msg);
    /* a tokenizer whose mask id lies outside the model's vocabulary */
    d = copy_model("q3_f32");
    drop_config_key(d, "mask_token_id");
    const char *many[300];
    char names[300][24]; /* room for any int: -O1 checks the bound */
    for (int i = 0; i < 300; i++) {
        snprintf(names[i], sizeof names[i], "<|x%d|>", i);
        many[i] = names[i];
    }
    many[299] = "<|MASK|>"; /* id 555 >= vocab 512 */
    write_tokenizer(d, many, 300);
    CHECK(load(d, &o, &m, &e) == FL_ERANGE && tk_has(e.msg, "<|MASK|>") && tk_has(e.msg, "555"),
          "mask outside vocab: %s", e.msg);
}

static char *run_info(const char *dir, const char *extra, int *status)
{
    char cmd[3 * TK_PATH], out[TK_PATH];
    tk_path(out, root, "info.out");
    snprintf(cmd, sizeof cmd, "'%s' info --model '%s' --json %s > '%s'",
             getenv("FL_BIN") ? getenv("FL_BIN") : "fogline", dir, extra, out);
    int st = system(cmd);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *text = NULL;
    fl_read_file(out, &text, NULL, NULL);
    return text;
}

static void test_info(void)
{
    const char *d = copy_model("q2_f32_tie");
    write_tokenizer(d, both_masks, 3);
    int st;
    char *text = run_info(d, "--chat-template chatml", &st);
    json_t *o = text ? json_loads(text, 0, NULL) : NULL;
    CHECK(st == 0 && o, "info exit %d", st);
    if (o) {
        CHECK(json_integer_value(json_object_get(o, "mask_token_id")) == 257, "info mask id");
        CHECK(!strcmp(json_string_value(json_object_get(o, "mask_token")), "|<MASK>|"),
              "info mask string");
        CHECK(!strcmp(json_string_value(json_object_get(o, "chat_template")), "chatml"),
              "info chat: %s", json_string_value(json_object_get(o, "chat_template")));
    }
    json_decref(o);
    free(text);
    /* a tokenizer that fails is reported, and the rest still described */
    text = run_info(d, "--chat-template nonesuch", &st);
    o = text ? json_loads(text, 0, NULL) : NULL;
    CHECK(st == 0 && o, "info with a bad override: exit %d", st);
    const char *chat = o ? json_string_value(json_object_get(o, "chat_template")) : NULL;
    CHECK(chat && !strncmp(chat, "unavailable: ", 13) && tk_has(chat, "nonesuch"),
          "chat: %s", chat ? chat : "(null)");
    CHECK(o && json_integer_value(json_object_get(o, "n_params")) > 0, "rest described");
    json_decref(o);
    free(text);
}

int main(void)
{
    if (tk_mkdtemp(root, "tok"))
        return 1;
    test_resolve();
    test_info();
    int rc = check_summary("test_loader_tok");
    if (!rc)
        fl_rmtree(root);
    return rc;
}
