/* tokenizer.c: loading a Hugging Face tokenizer.json (byte-level BPE) and the encode pipeline:
 *   invalid UTF-8 -> U+FFFD, added tokens (unnormalized ones) -> normalizer -> added tokens
 *   (normalized ones) -> pre-tokenizer stages (Split regexes, ByteLevel) -> BPE (bpe.c).
 * The tokenizer is immutable after loading except for its encoder slots (scratch buffers, regex
 * match data and the word cache), each behind its own mutex: several threads may encode with
 * one tokenizer at once. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "tok_internal.h"

/* ---- GPT-2's byte <-> printable character map (ByteLevel) ---- */

static void byte_map(uint32_t b2u[256])
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae);
        b2u[b] = printable ? (uint32_t)b : 256u + (uint32_t)n++;
    }
}

/* ---- token string map ---- */

static int32_t smap_find(const fl_tokenizer *t, const char *s, size_t n)
{
    uint64_t h = fl__hash_bytes(s, n);
    uint32_t h32 = (uint32_t)(h >> 32);
    uint64_t i = h & t->smask;
    for (;;) {
        int32_t id = t->smap[i];
        if (id < 0)
            return -1;
        if (t->smap_hash[i] == h32 && t->str_len[id] == n &&
            !memcmp(t->str_arena + t->str_off[id], s, n))
            return id;
        i = (i + 1) & t->smask;
    }
}

/* Inserts id under its string; an existing entry for the same string is replaced. */
static void smap_put(fl_tokenizer *t, int32_t id)
{
    const char *s = t->str_arena + t->str_off[id];
    size_t n = t->str_len[id];
    uint64_t h = fl__hash_bytes(s, n);
    uint32_t h32 = (uint32_t)(h >> 32);
    uint64_t i = h & t->smask;
    for (;;) {
        int32_t cur = t->smap[i];
        if (cur < 0 || (t->smap_hash[i] == h32 && t->str_len[cur] == n &&
                        !memcmp(t->str_arena + t->str_off[cur], s, n))) {
            t->smap[i] = id;
            t->smap_hash[i] = h32;
            return;
        }
        i = (i + 1) & t->smask;
    }
}

/* ---- added-token tries ---- */

static int trie_add(fl__trie *tr, const char *s, size_t n, int32_t token)
{
    if (!tr->nodes) {
        tr->cap = 64;
        tr->nodes = malloc(tr->cap * sizeof *tr->nodes);
        if (!tr->nodes)
            return FL_ENOMEM;
        tr->nodes[0] = (fl__trie_node){-1, -1, -1, 0};
        tr->n = 1;
    }
    if (n == 0)
        return 0;
    tr->first[(unsigned char)s[0]] = 1;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = tr->nodes[node].child;
        while (c >= 0 && tr->nodes[c].byte != b)
            c = tr->nodes[c].sibling;
        if (c < 0) {
            if (tr->n == tr->cap) {
                fl__trie_node *nn = realloc(tr->nodes, tr->cap * 2 * sizeof *nn);
                if (!nn)
                    return FL_ENOMEM;
                tr->nodes = nn;
                tr->cap *= 2;
            }
            c = (int32_t)tr->n++;
            tr->nodes[c] = (fl__trie_node){-1, tr->nodes[node].child, -1, b};
            tr->nodes[node].child = c;
        }
        node = c;
    }
    if (tr->nodes[node].token < 0) /* the first token with that content wins */
        tr->nodes[node].token = token;
    return 0;
}

/* Longest token starting at p[0]; its index, or -1. */
static int32_t trie_match(const fl__trie *tr, const unsigned char *p, size_t n, size_t *len)
{
    int32_t node = 0, best = -1;
    for (size_t j = 0; j < n; j++) {
        int32_t c = tr->nodes[node].child;
        while (c >= 0 && tr->nodes[c].byte != p[j])
            c = tr->nodes[c].sibling;
        if (c < 0)
            break;
        node = c;
        if (tr->nodes[c].token >= 0) {
            best = tr->nodes[c].token;
            *len = j + 1;
        }
    }
    return best;
}

/* ---- small helpers ---- */

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Short names for reading the JSON DOM (tok_json.c). */
typedef fl__json jv;
static const jv *jget(const jv *o, const char *key) { return fl__json_get(o, key); }
static const char *jstr(const jv *v) { return fl__json_str(v); }
static bool jis_str(const jv *v) { return fl__json_is(v, FL_JSON_STRING); }
static bool jis_arr(const jv *v) { return fl__json_is(v, FL_JSON_ARRAY); }
static bool jis_obj(const jv *v) { return fl__json_is(v, FL_JSON_OBJECT); }
static bool jis_null(const jv *v) { return !v || v->type == FL_JSON_NULL; }
static bool jis_int(const jv *v) { return fl__json_is(v, FL_JSON_NUMBER) && v->is_int; }

static bool json_flag(const jv *o, const char *key, bool dflt)
{
    const jv *v = jget(o, key);
    return fl__json_is(v, FL_JSON_TRUE) ? true : fl__json_is(v, FL_JSON_FALSE) ? false : dflt;
}

/* Rewrites Oniguruma's \s and \S (Unicode White_Space, as both references use) for PCRE2,
 * whose \s under UCP also matches U+180E; written as explicit ranges, which PCRE2's JIT tests
 * faster than a property. Everything else goes to PCRE2 as written. */
#define WS_RANGES "\\t-\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
static char *rewrite_regex(const char *src, size_t n, size_t *out_len)
{
    fl_buf b = {0};
    bool in_class = false;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        char c = src[i];
        if (c == '\\' && i + 1 < n) {
            char x = src[i + 1];
            if (x == 's')
                rc = fl_buf_puts(&b, in_class ? WS_RANGES : "[" WS_RANGES "]");
            else if (x == 'S')
                rc = fl_buf_puts(&b, in_class ? "\\P{White_Space}" : "[^" WS_RANGES "]");
            else if (x == 'Q') { /* quoted run: verbatim up to \E */
                size_t j = i + 2;
                while (j + 1 < n && !(src[j] == '\\' && src[j + 1] == 'E'))
                    j++;
                size_t end = j + 1 < n ? j + 2 : n;
                rc = fl_buf_append(&b, src + i, end - i);
                i = end - 1;
                continue;
            } else
                rc = fl_buf_append(&b, src + i, 2);
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            size_t j = i + 1;
            if (j < n && src[j] == '^')
                j++;
            if (j < n && src[j] == ']') /* a leading ] is a literal */
                j++;
            rc = fl_buf_append(&b, src + i, j - i);
            i = j - 1;
            continue;
        }
        if (in_class && c == '[' && i + 1 < n && src[i + 1] == ':') { /* [:alpha:] */
            const char *end = NULL;
            for (size_t j = i + 2; j + 1 < n; j++)
                if (src[j] == ':' && src[j + 1] == ']') {
                    end = src + j + 2;
                    break;
                }
            if (end) {
                rc = fl_buf_append(&b, src + i, (size_t)(end - (src + i)));
                i = (size_t)(end - src) - 1;
                continue;
            }
        }
        if (in_class && c == ']')
            in_class = false;
        rc = fl_buf_append(&b, &c, 1);
    }
    if (rc || fl_buf_append(&b, "", 0)) {
        fl_buf_free(&b);
        return NULL;
    }
    *out_len = b.len;
    return b.data;
}

static int compile_stage_regex(fl__stage *st, const char *pat, size_t n, bool literal, fl_err *e)
{
    size_t rlen = 0;
    char *re = literal ? NULL : rewrite_regex(pat, n, &rlen);
    if (!literal && !re)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    int en;
    PCRE2_SIZE eo;
    pcre2_compile_context *cc = pcre2_compile_context_create(NULL);
    if (cc)
        pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    st->re = pcre2_compile((PCRE2_SPTR)(literal ? pat : re), literal ? n : rlen,
                           PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP), &en, &eo, cc);
    pcre2_compile_context_free(cc);
    free(re);
    if (!st->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(en, msg, sizeof msg);
        return fl_err_set(e, FL_EFORMAT, "pre_tokenizer regex does not compile (%s at offset %zu)",
                          (char *)msg, (size_t)eo);
    }
    st->jit = pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

/* ---- parsing tokenizer.json ---- */

static int parse_normalizer(fl_tokenizer *t, const jv *n, fl_err *e)
{
    if (!n || jis_null(n))
        return 0;
    const char *type = jstr(jget(n, "type"));
    if (!type)
        return fl_err_set(e, FL_EFORMAT, "normalizer without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        const jv *list = jget(n, "normalizers");
        if (!jis_arr(list))
            return fl_err_set(e, FL_EFORMAT, "normalizer Sequence without \"normalizers\"");
        size_t i;
        const jv *v;
        for (i = 0; i < list->n && (v = &list->items[i]); i++) {
            int rc = parse_normalizer(t, v, e);
            if (rc)
                return rc;
        }
        return 0;
    }
    static const char *forms[FL_NF_COUNT] = {"NFC", "NFD", "NFKC", "NFKD"};
    for (int f = 0; f < FL_NF_COUNT; f++)
        if (!strcmp(type, forms[f])) {
            if (t->n_forms == FL_TOK_MAX_FORMS)
                return fl_err_set(e, FL_EUNSUPPORTED, "more than %d normalizers", FL_TOK_MAX_FORMS);
            t->forms[t->n_forms++] = (fl_nf)f;
            return fl__nf_table_build(&t->nft, (fl_nf)f)
                       ? fl_err_set(e, FL_ENOMEM, "out of memory")
                       : 0;
        }
    return fl_err_set(e, FL_EUNSUPPORTED,
                      "normalizer \"%s\" is not supported (NFC, NFD, NFKC, NFKD, Sequence)", type);
}

static int parse_pretok(fl_tokenizer *t, const jv *p, fl_err *e)
{
    const char *type = jstr(jget(p, "type"));
    if (!type)
        return fl_err_set(e, FL_EFORMAT, "pre_tokenizer without a \"type\"");
    if (!strcmp(type, "Sequence")) {
        const jv *list = jget(p, "pretokenizers");
        if (!jis_arr(list))
            return fl_err_set(e, FL_EFORMAT, "pre_tokenizer Sequence without \"pretokenizers\"");
        size_t i;
        const jv *v;
        for (i = 0; i < list->n && (v = &list->items[i]); i++) {
            int rc = parse_pretok(t, v, e);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (t->n_stages == FL_TOK_MAX_STAGES)
        return fl_err_set(e, FL_EUNSUPPORTED, "more than %d pre_tokenizers", FL_TOK_MAX_STAGES);
    if (t->n_stages && t->stages[t->n_stages - 1].kind == FL_ST_BYTELEVEL)
        return fl_err_set(e, FL_EUNSUPPORTED, "pre_tokenizer \"%s\" after ByteLevel is not supported",
                          type);
    fl__stage *st = &t->stages[t->n_stages];
    memset(st, 0, sizeof *st);
    if (!strcmp(type, "Split")) {
        st->kind = FL_ST_SPLIT;
        const jv *pat = jget(p, "pattern");
        const jv *re = jget(pat, "Regex"), *str = jget(pat, "String");
        if (!jis_str(re) && !jis_str(str))
            return fl_err_set(e, FL_EFORMAT, "Split pre_tokenizer without a Regex or String pattern");
        if (json_flag(p, "invert", false))
            return fl_err_set(e, FL_EUNSUPPORTED, "Split pre_tokenizer with invert=true is not supported");
        const char *beh = jstr(jget(p, "behavior"));
        if (!beh || !strcmp(beh, "Isolated"))
            st->behavior = FL_SPLIT_ISOLATED;
        else if (!strcmp(beh, "Removed"))
            st->behavior = FL_SPLIT_REMOVED;
        else if (!strcmp(beh, "MergedWithPrevious"))
            st->behavior = FL_SPLIT_MERGED_PREV;
        else if (!strcmp(beh, "MergedWithNext"))
            st->behavior = FL_SPLIT_MERGED_NEXT;
        else
            return fl_err_set(e, FL_EUNSUPPORTED, "Split behavior \"%s\" is not supported", beh);
        const jv *src = jis_str(re) ? re : str;
        int rc = compile_stage_regex(st, jstr(src), (src)->n,
                                     !jis_str(re), e);
        if (rc)
            return rc;
    } else if (!strcmp(type, "ByteLevel")) {
        st->kind = FL_ST_BYTELEVEL;
        st->behavior = FL_SPLIT_ISOLATED;
        st->add_prefix_space = json_flag(p, "add_prefix_space", false);
        if (json_flag(p, "use_regex", true)) {
            /* GPT-2's pattern, as Hugging Face's ByteLevel uses it */
            static const char gpt2[] =
                "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
            int rc = compile_stage_regex(st, gpt2, sizeof gpt2 - 1, false, e);
            if (rc)
                return rc;
        }
    } else {
        return fl_err_set(e, FL_EUNSUPPORTED,
                          "pre_tokenizer \"%s\" is not supported (Split, ByteLevel, Sequence)", type);
    }
    t->n_stages++;
    return 0;
}

/* Reads model.vocab and added_tokens into the id tables. */
static int parse_vocab(fl_tokenizer *t, const jv *vocab, const jv *added, fl_err *e)
{
    const jv *v;
    int32_t max_id = -1;
    size_t bytes = 0;
    for (uint32_t k = 0; k < vocab->n; k++) {
        const jv *key = &vocab->items[2 * k];
        v = key + 1;
        if (!jis_int(v) || v->i < 0 || v->i >= FL_TOK_MAX_ID)
            return fl_err_set(e, FL_EFORMAT, "model.vocab: id of \"%.40s\" is not an integer in [0, %d)",
                              key->str, FL_TOK_MAX_ID);
        if (v->i > max_id)
            max_id = (int32_t)v->i;
        bytes += key->n + 1;
    }
    size_t i;
    for (i = 0; i < added->n && (v = &added->items[i]); i++) {
        const jv *id = jget(v, "id"), *content = jget(v, "content");
        if (!jis_int(id) || (id)->i < 0 ||
            (id)->i >= FL_TOK_MAX_ID || !jis_str(content))
            return fl_err_set(e, FL_EFORMAT, "added_tokens[%zu]: needs an integer \"id\" and a "
                              "string \"content\"", i);
        if ((id)->i > max_id)
            max_id = (int32_t)(id)->i;
        bytes += (content)->n + 1;
    }
    if (max_id < 0)
        return fl_err_set(e, FL_EFORMAT, "model.vocab is empty");
    t->n_ids = max_id + 1;
    size_t n = (size_t)t->n_ids;
    t->str_off = malloc((n + 1) * sizeof *t->str_off);
    t->str_len = calloc(n, sizeof *t->str_len);
    t->flags = calloc(n, 1);
    t->str_arena = malloc(bytes + 1);
    if (!t->str_off || !t->str_len || !t->flags || !t->str_arena)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    memset(t->str_off, 0xff, (n + 1) * sizeof *t->str_off);
    size_t used = 0;
    for (uint32_t k = 0; k < vocab->n; k++) {
        const jv *key = &vocab->items[2 * k];
        size_t len = key->n;
        int32_t id = (int32_t)key[1].i;
        memcpy(t->str_arena + used, key->str, len + 1);
        t->str_off[id] = (uint32_t)used;
        t->str_len[id] = (uint32_t)len;
        used += len + 1;
    }
    t->n_added = (added)->n;
    t->added = calloc(t->n_added ? t->n_added : 1, sizeof *t->added);
    if (!t->added)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    for (i = 0; i < added->n && (v = &added->items[i]); i++) {
        const jv *content = jget(v, "content");
        fl__added *a = &t->added[i];
        a->id = (int32_t)(jget(v, "id"))->i;
        a->len = (content)->n;
        a->content = t->str_arena + used;
        memcpy(a->content, jstr(content), a->len + 1);
        a->special = json_flag(v, "special", false);
        a->normalized = json_flag(v, "normalized", !a->special);
        a->lstrip = json_flag(v, "lstrip", false);
        a->rstrip = json_flag(v, "rstrip", false);
        a->single_word = json_flag(v, "single_word", false);
        t->str_off[a->id] = (uint32_t)used; /* an added token's content names its id */
        t->str_len[a->id] = (uint32_t)a->len;
        t->flags[a->id] = FL_TOKF_ADDED | (a->special ? FL_TOKF_SPECIAL : 0);
        used += a->len + 1;
    }
    /* string -> id */
    size_t cap = 1024;
    while (cap < n * 2)
        cap *= 2;
    t->smask = cap - 1;
    t->smap = malloc(cap * sizeof *t->smap);
    t->smap_hash = malloc(cap * sizeof *t->smap_hash);
    if (!t->smap || !t->smap_hash)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    memset(t->smap, 0xff, cap * sizeof *t->smap);
    /* the model's own vocab only, for merges and byte tokens; added tokens go in after them
     * (parse_tokenizer_json), winning for fl_tokenizer_find as they do in the references */
    for (size_t id = 0; id < n; id++)
        if (t->str_off[id] != UINT32_MAX && !(t->flags[id] & FL_TOKF_ADDED))
            smap_put(t, (int32_t)id);
    return 0;
}

/* Bytes each token decodes to: the ByteLevel inverse, or the token's own UTF-8 when one of its
 * characters is outside the byte map (as Hugging Face's ByteLevel decoder does) and for added
 * tokens, which are emitted as written. */
static int build_token_bytes(fl_tokenizer *t, const uint32_t b2u[256], fl_err *e)
{
    int16_t u2b[512];
    for (int i = 0; i < 512; i++)
        u2b[i] = -1;
    for (int b = 0; b < 256; b++)
        u2b[b2u[b]] = (int16_t)b;
    size_t n = (size_t)t->n_ids, total = 0;
    for (size_t id = 0; id < n; id++)
        if (t->str_off[id] != UINT32_MAX)
            total += t->str_len[id];
    t->byt_off = malloc(n * sizeof *t->byt_off);
    t->byt_len = calloc(n, sizeof *t->byt_len);
    t->byt_arena = malloc(total + 1);
    if (!t->byt_off || !t->byt_len || !t->byt_arena)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    size_t used = 0;
    for (size_t id = 0; id < n; id++) {
        t->byt_off[id] = (uint32_t)used;
        if (t->str_off[id] == UINT32_MAX)
            continue;
        const unsigned char *s = (const unsigned char *)t->str_arena + t->str_off[id];
        size_t len = t->str_len[id], k = 0;
        bool mapped = !(t->flags[id] & FL_TOKF_ADDED);
        for (size_t i = 0; mapped && i < len;) {
            size_t cl;
            uint32_t cp;
            if (fl__utf8_classify(s + i, len - i, &cl, &cp) != 1 || cp >= 512 || u2b[cp] < 0) {
                mapped = false;
                break;
            }
            t->byt_arena[used + k++] = (unsigned char)u2b[cp];
            i += cl;
        }
        if (!mapped) {
            memcpy(t->byt_arena + used, s, len);
            k = len;
        }
        t->byt_len[id] = (uint32_t)k;
        used += k;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char u[4];
        int k = fl__utf8_put(u, b2u[b]);
        t->byte_id[b] = smap_find(t, (const char *)u, (size_t)k); /* vocab only so far */
    }
    return 0;
}

static int merge_part(const fl_tokenizer *t, const char *s, size_t n, size_t rank, int32_t *id,
                      fl_err *e)
{
    *id = smap_find(t, s, n);
    if (*id < 0)
        return fl_err_set(e, FL_EFORMAT, "merges[%zu]: token \"%.*s\" is not in the vocab", rank,
                          (int)(n > 40 ? 40 : n), s);
    return 0;
}

static int parse_merges(fl_tokenizer *t, const jv *merges, fl_err *e)
{
    size_t n = (merges)->n;
    if (fl__pairmap_init(&t->merges, n))
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    fl_buf cat = {0};
    size_t r;
    const jv *m;
    int rc = 0;
    for (r = 0; r < merges->n && (m = &merges->items[r]); r++) {
        const char *a, *b;
        size_t la, lb;
        if (jis_str(m)) { /* "a b" */
            a = jstr(m);
            const char *sp = memchr(a, ' ', (m)->n);
            if (!sp || memchr(sp + 1, ' ', (m)->n - (size_t)(sp + 1 - a))) {
                rc = fl_err_set(e, FL_EFORMAT, "merges[%zu]: expected \"left right\"", r);
                break;
            }
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = (m)->n - la - 1;
        } else if (jis_arr(m) && (m)->n == 2 &&
                   jis_str((&(m)->items[0])) && jis_str((&(m)->items[1]))) {
            a = jstr((&(m)->items[0]));
            la = ((&(m)->items[0]))->n;
            b = jstr((&(m)->items[1]));
            lb = ((&(m)->items[1]))->n;
        } else {
            rc = fl_err_set(e, FL_EFORMAT, "merges[%zu]: expected \"left right\" or [left, right]", r);
            break;
        }
        int32_t ia, ib, im;
        cat.len = 0;
        if (fl_buf_append(&cat, a, la) || fl_buf_append(&cat, b, lb)) {
            rc = fl_err_set(e, FL_ENOMEM, "out of memory");
            break;
        }
        if ((rc = merge_part(t, a, la, r, &ia, e)) || (rc = merge_part(t, b, lb, r, &ib, e)) ||
            (rc = merge_part(t, cat.data, cat.len, r, &im, e)))
            break;
        fl__pairmap_put(&t->merges, ia, ib, (uint32_t)r, im);
    }
    fl_buf_free(&cat);
    return rc;
}

static int build_bmap(fl_tokenizer *t, fl_err *e)
{
    size_t cap = 1024;
    while (cap < (size_t)t->n_ids * 2)
        cap *= 2;
    t->bmap = malloc(cap * sizeof *t->bmap);
    if (!t->bmap)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    memset(t->bmap, 0xff, cap * sizeof *t->bmap);
    t->bmask = cap - 1;
    for (int32_t id = 0; id < t->n_ids; id++) {
        if (t->str_off[id] == UINT32_MAX || (t->flags[id] & FL_TOKF_ADDED))
            continue;
        const unsigned char *w = t->byt_arena + t->byt_off[id];
        size_t n = t->byt_len[id];
        uint64_t i = fl__hash_bytes(w, n) & t->bmask;
        while (t->bmap[i] >= 0 && !(t->byt_len[t->bmap[i]] == n &&
                                    !memcmp(t->byt_arena + t->byt_off[t->bmap[i]], w, n)))
            i = (i + 1) & t->bmask;
        if (t->bmap[i] < 0)
            t->bmap[i] = id;
    }
    return 0;
}

static int build_tries(fl_tokenizer *t, fl_err *e)
{
    for (int ps = 0; ps < 2; ps++) {
        if (trie_add(&t->trie_raw[ps], "", 0, -1) || trie_add(&t->trie_norm[ps], "", 0, -1))
            return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    fl_buf nb = {0};
    fl__nf_scratch sc = {0};
    int rc = 0;
    for (size_t k = 0; k < t->n_added && !rc; k++) {
        fl__added *a = &t->added[k];
        if (!a->len)
            continue;
        if (a->normalized && t->n_forms) {
            /* matched after normalisation, against its normalised content */
            const char *s = a->content;
            size_t n = a->len;
            fl_buf tmp = {0};
            for (int f = 0; f < t->n_forms && !rc; f++) {
                nb.len = 0;
                rc = fl__nf_apply(&t->nft, t->forms[f], s, n, &nb, &sc);
                if (!rc) {
                    fl_buf_free(&tmp);
                    tmp = nb;
                    nb = (fl_buf){0};
                    s = tmp.data ? tmp.data : "";
                    n = tmp.len;
                }
            }
            if (!rc) {
                a->norm = malloc(n + 1);
                if (!a->norm)
                    rc = FL_ENOMEM;
                else {
                    memcpy(a->norm, s, n);
                    a->norm[n] = 0;
                    a->norm_len = n;
                }
            }
            fl_buf_free(&tmp);
            for (int ps = 0; ps < 2 && !rc; ps++)
                if (ps || !a->special)
                    rc = trie_add(&t->trie_norm[ps], a->norm, a->norm_len, (int32_t)k);
        } else {
            for (int ps = 0; ps < 2 && !rc; ps++)
                if (ps || !a->special)
                    rc = trie_add(&t->trie_raw[ps], a->content, a->len, (int32_t)k);
        }
    }
    fl_buf_free(&nb);
    free(sc.u32);
    return rc ? fl_err_set(e, rc, "out of memory") : 0;
}

static int parse_model(fl_tokenizer *t, const jv *root, fl_err *e)
{
    const jv *model = jget(root, "model");
    if (!jis_obj(model))
        return fl_err_set(e, FL_EFORMAT, "no \"model\" object");
    const char *type = jstr(jget(model, "type"));
    const jv *vocab = jget(model, "vocab"), *merges = jget(model, "merges");
    if (type ? strcmp(type, "BPE") : !jis_arr(merges))
        return fl_err_set(e, FL_EUNSUPPORTED, "model type \"%s\" is not supported (byte-level BPE only)",
                          type ? type : "?");
    if (!jis_obj(vocab) || !jis_arr(merges))
        return fl_err_set(e, FL_EFORMAT, "BPE model needs a \"vocab\" object and a \"merges\" array");
    const char *cs = jstr(jget(model, "continuing_subword_prefix"));
    const char *ew = jstr(jget(model, "end_of_word_suffix"));
    if ((cs && *cs) || (ew && *ew) || json_flag(model, "byte_fallback", false))
        return fl_err_set(e, FL_EUNSUPPORTED, "BPE with continuing_subword_prefix, end_of_word_suffix "
                          "or byte_fallback is not supported (byte-level BPE only)");
    const jv *added = jget(root, "added_tokens");
    if (added && !jis_arr(added) && !jis_null(added))
        return fl_err_set(e, FL_EFORMAT, "\"added_tokens\" is not an array");
    static const jv none = {.type = FL_JSON_ARRAY};
    int rc = parse_vocab(t, vocab, jis_arr(added) ? added : &none, e);
    if (rc)
        return rc;
    t->ignore_merges = json_flag(model, "ignore_merges", false);
    const char *unk = jstr(jget(model, "unk_token"));
    t->unk_id = unk ? smap_find(t, unk, strlen(unk)) : -1;
    return 0;
}

static int parse_tokenizer_json(fl_tokenizer *t, const jv *root, fl_err *e)
{
    int rc = parse_model(t, root, e);
    if (rc)
        return rc;
    if ((rc = parse_normalizer(t, jget(root, "normalizer"), e)))
        return rc;
    const jv *pre = jget(root, "pre_tokenizer");
    if (jis_obj(pre) && (rc = parse_pretok(t, pre, e)))
        return rc;
    if (!t->n_stages || t->stages[t->n_stages - 1].kind != FL_ST_BYTELEVEL)
        return fl_err_set(e, FL_EUNSUPPORTED, "pre_tokenizer has no ByteLevel step (byte-level BPE only)");
    const jv *dec = jget(root, "decoder");
    const char *dt = jstr(jget(dec, "type"));
    if (!dt || strcmp(dt, "ByteLevel"))
        return fl_err_set(e, FL_EUNSUPPORTED, "decoder \"%s\" is not supported (ByteLevel only)",
                          dt ? dt : "null");
    uint32_t b2u[256];
    byte_map(b2u);
    if ((rc = build_token_bytes(t, b2u, e)))
        return rc;
    if ((rc = parse_merges(t, jget(jget(root, "model"), "merges"), e)))
        return rc;
    if (t->ignore_merges && (rc = build_bmap(t, e)))
        return rc;
    for (size_t k = 0; k < t->n_added; k++)
        smap_put(t, t->added[k].id);
    return build_tries(t, e);
}

/* Reads and parses a JSON file (one read into a buffer of the file's size: tokenizer.json is
 * large); errors name the file. */
static int load_json(const char *path, fl__json_doc *doc, fl_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return fl_err_set(e, FL_EIO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    char *text = NULL;
    size_t n = 0;
    if (fstat(fileno(f), &st) == 0 && st.st_size >= 0 && (text = malloc((size_t)st.st_size + 1)))
        n = fread(text, 1, (size_t)st.st_size, f);
    bool bad = !text || ferror(f) || n != (size_t)st.st_size;
    fclose(f);
    if (bad) {
        free(text);
        return fl_err_set(e, text ? FL_EIO : FL_ENOMEM, "cannot read %s", path);
    }
    text[n] = 0;
    int rc;
    char why[256];
    rc = fl__json_parse(text, n, doc, why, sizeof why);
    free(text);
    return rc ? fl_err_set(e, rc, "%s: %s", path, why) : 0;
}

/* ---- chat template ---- */

static int chat_kind_parse(const char *s, fl_chat_kind *k)
{
    if (!strcmp(s, "chatml"))
        *k = FL_CHAT_CHATML;
    else if (!strcmp(s, "qwen3"))
        *k = FL_CHAT_QWEN3;
    else if (!strcmp(s, "fogline"))
        *k = FL_CHAT_FOGLINE;
    else if (!strcmp(s, "ling"))
        *k = FL_CHAT_LING;
    else
        return -1;
    return 0;
}

static int load_chat(fl_tokenizer *t, const char *dir, const char *override, fl_err *e)
{
    char *jpath = fl_path_join(dir, "chat_template.jinja");
    char *cpath = fl_path_join(dir, "tokenizer_config.json");
    int rc = 0;
    if (!jpath || !cpath) {
        rc = fl_err_set(e, FL_ENOMEM, "out of memory");
        goto out;
    }
    if (file_exists(jpath)) { /* the newer convention; it wins over the config's copy */
        if ((rc = fl_read_file(jpath, &t->chat_template, NULL, e)))
            goto out;
        t->chat_source = strdup(jpath);
    } else if (file_exists(cpath)) {
        fl__json_doc doc;
        if ((rc = load_json(cpath, &doc, e)))
            goto out;
        const jv *cfg = &doc.root;
        const jv *ct = jget(cfg, "chat_template");
        const char *text = jstr(ct);
        if (jis_arr(ct)) { /* [{"name": ..., "template": ...}]: the "default" one */
            size_t i;
            const jv *v;
            for (i = 0; i < ct->n && (v = &ct->items[i]); i++) {
                const char *name = jstr(jget(v, "name"));
                if (name && !strcmp(name, "default"))
                    text = jstr(jget(v, "template"));
            }
            if (!text)
                t->chat_none_reason = strdup("its chat_template list has no \"default\" entry");
        }
        if (text) {
            t->chat_template = strdup(text);
            t->chat_source = strdup(cpath);
        }
        fl__json_free(&doc);
    }
    if (t->chat_template && !t->chat_source) {
        rc = fl_err_set(e, FL_ENOMEM, "out of memory");
        goto out;
    }
    if (override) {
        if (chat_kind_parse(override, &t->chat)) {
            rc = fl_err_set(e, FL_EINVAL, "unknown chat template \"%s\" (--chat-template takes chatml, "
                            "qwen3, fogline or ling)", override);
            goto out;
        }
        if (t->chat_template)
            t->default_system = fl__chat_default_system(t->chat_template);
    } else if (t->chat_template) {
        t->chat = fl_chat_detect(t->chat_template);
        if (t->chat == FL_CHAT_NONE) {
            rc = fl_err_set(e, FL_EUNSUPPORTED, "%s: chat template not recognised (not Qwen3's, "
                            "Qwen2.5's ChatML, fogline's or Ling's); choose a renderer with "
                            "--chat-template chatml|qwen3|fogline|ling", t->chat_source);
            goto out;
        }
        if (t->chat == FL_CHAT_CHATML)
            t->default_system = fl__chat_default_system(t->chat_template);
    }
    if (t->chat == FL_CHAT_NONE && !t->chat_none_reason) {
        char msg[FL_ERR_MSG];
        snprintf(msg, sizeof msg, "%s has no chat template (no \"chat_template\" in "
                 "tokenizer_config.json, no chat_template.jinja); pass --chat-template "
                 "chatml|qwen3|fogline|ling to choose one", dir);
        t->chat_none_reason = strdup(msg);
    }
out:
    free(jpath);
    free(cpath);
    return rc;
}

/* ---- load / free ---- */

int fl_tokenizer_load(fl_tokenizer **out, const char *dir, const char *chat_override, fl_err *e)
{
    *out = NULL;
    fl_tokenizer *t = calloc(1, sizeof *t);
    char *path = fl_path_join(dir, "tokenizer.json");
    if (!t || !path) {
        free(t);
        free(path);
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&t->slots_mu, NULL);
    t->unk_id = -1;
    int rc;
    struct stat st;
    memset(&st, 0, sizeof st);
    errno = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        bool missing = errno == ENOENT || errno == ENOTDIR;
        rc = fl_err_set(e, missing ? FL_ENOTFOUND : FL_EIO, "%s: %s", path,
                        missing ? "no such file (a model directory needs tokenizer.json)"
                                : S_ISDIR(st.st_mode) ? "is a directory" : strerror(errno));
        goto fail;
    }
    fl__json_doc doc;
    if ((rc = load_json(path, &doc, e)))
        goto fail;
    rc = jis_obj(&doc.root) ? parse_tokenizer_json(t, &doc.root, e)
                            : fl_err_set(e, FL_EFORMAT, "top level is not an object");
    fl__json_free(&doc);
    if (rc) {
        fl_err_prefix(e, "%s", path);
        goto fail;
    }
    if ((rc = load_chat(t, dir, chat_override, e)))
        goto fail;
    free(path);
    *out = t;
    return 0;
fail:
    free(path);
    fl_tokenizer_free(t);
    return rc;
}

static void slot_free(fl__slot *s)
{
    if (!s)
        return;
    free(s->ids);
    fl_buf_free(&s->clean);
    for (int i = 0; i < FL_TOK_MAX_FORMS; i++)
        fl_buf_free(&s->norm[i]);
    for (int i = 0; i < FL_TOK_MAX_STAGES; i++)
        fl_buf_free(&s->pfx[i]);
    free(s->nf.u32);
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mctx);
    pcre2_jit_stack_free(s->jstack);
    fl__bpe_scratch_free(&s->bpe);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void fl_tokenizer_free(fl_tokenizer *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_slots; i++)
        slot_free(t->slots[i]);
    pthread_mutex_destroy(&t->slots_mu);
    for (int i = 0; i < FL_TOK_MAX_STAGES; i++)
        pcre2_code_free(t->stages[i].re);
    for (size_t k = 0; k < t->n_added; k++)
        free(t->added[k].norm);
    free(t->added);
    for (int ps = 0; ps < 2; ps++) {
        free(t->trie_raw[ps].nodes);
        free(t->trie_norm[ps].nodes);
    }
    fl__pairmap_free(&t->merges);
    fl__nf_table_free(&t->nft);
    free(t->str_off);
    free(t->str_len);
    free(t->str_arena);
    free(t->byt_off);
    free(t->byt_len);
    free(t->byt_arena);
    free(t->flags);
    free(t->smap);
    free(t->smap_hash);
    free(t->bmap);
    free(t->chat_template);
    free(t->chat_source);
    free(t->default_system);
    free(t->chat_none_reason);
    free(t);
}

/* ---- encoder slots ---- */

static fl__slot *slot_new(void)
{
    fl__slot *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->md = pcre2_match_data_create(16, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    s->jstack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (!s->md || !s->mctx || !s->jstack) {
        slot_free(s);
        return NULL;
    }
    pcre2_jit_stack_assign(s->mctx, NULL, s->jstack);
    return s;
}

/* A free slot, a new one, or (all FL_TOK_SLOTS busy) a wait for one. The slots are the only
 * state an encode changes, hence the cast. */
static fl__slot *slot_acquire(const fl_tokenizer *tc)
{
    fl_tokenizer *t = (fl_tokenizer *)tc;
    pthread_mutex_lock(&t->slots_mu);
    for (int i = 0; i < t->n_slots; i++)
        if (pthread_mutex_trylock(&t->slots[i]->mu) == 0) {
            pthread_mutex_unlock(&t->slots_mu);
            return t->slots[i];
        }
    fl__slot *s = NULL;
    if (t->n_slots < FL_TOK_SLOTS && (s = slot_new())) {
        pthread_mutex_lock(&s->mu);
        t->slots[t->n_slots++] = s;
        pthread_mutex_unlock(&t->slots_mu);
        return s;
    }
    if (!t->n_slots) {
        pthread_mutex_unlock(&t->slots_mu);
        return NULL;
    }
    s = t->slots[t->next_wait++ % (unsigned)t->n_slots];
    pthread_mutex_unlock(&t->slots_mu);
    pthread_mutex_lock(&s->mu);
    return s;
}

static void slot_release(fl__slot *s) { pthread_mutex_unlock(&s->mu); }

/* ---- the encode pipeline ---- */

static int re_match(const fl__stage *st, fl__slot *s, const char *p, size_t n, size_t off)
{
    int rc;
    if (st->jit) {
        rc = pcre2_jit_match(st->re, (PCRE2_SPTR)p, n, off, 0, s->md, s->mctx);
        if (rc != PCRE2_ERROR_JIT_STACKLIMIT)
            return rc;
    }
    return pcre2_match(st->re, (PCRE2_SPTR)p, n, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, s->md,
                       s->mctx);
}

static int pretok(const fl_tokenizer *t, fl__slot *s, int k, const char *p, size_t n);

/* One stage's regex split of p; pieces go to stage k + 1. */
static int split_regex(const fl_tokenizer *t, fl__slot *s, int k, const char *p, size_t n)
{
    const fl__stage *st = &t->stages[k];
    size_t off = 0, prev = 0;
    int rc = 0;
    while (off < n) {
        int m = re_match(st, s, p, n, off);
        if (m == PCRE2_ERROR_NOMATCH)
            break;
        if (m < 0)
            return FL_ERANGE; /* match limits: an input the regex cannot handle */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* empty match: not a piece; move on by one character */
            size_t len = 1;
            uint32_t cp;
            if ((unsigned char)p[ms] >= 0x80)
                fl__utf8_classify((const unsigned char *)p + ms, n - ms, &len, &cp);
            off = ms + len;
            continue;
        }
        switch (st->behavior) {
        case FL_SPLIT_ISOLATED:
            if (ms > prev && (rc = pretok(t, s, k + 1, p + prev, ms - prev)))
                return rc;
            if ((rc = pretok(t, s, k + 1, p + ms, me - ms)))
                return rc;
            prev = me;
            break;
        case FL_SPLIT_REMOVED:
            if (ms > prev && (rc = pretok(t, s, k + 1, p + prev, ms - prev)))
                return rc;
            prev = me;
            break;
        case FL_SPLIT_MERGED_PREV:
            if ((rc = pretok(t, s, k + 1, p + prev, me - prev)))
                return rc;
            prev = me;
            break;
        case FL_SPLIT_MERGED_NEXT:
            if (ms > prev && (rc = pretok(t, s, k + 1, p + prev, ms - prev)))
                return rc;
            prev = ms;
            break;
        }
        off = me;
    }
    if (n > prev)
        return pretok(t, s, k + 1, p + prev, n - prev);
    return 0;
}

static int pretok(const fl_tokenizer *t, fl__slot *s, int k, const char *p, size_t n)
{
    if (n == 0)
        return 0;
    if (k == t->n_stages)
        return fl__bpe_encode_word(t, s, (const unsigned char *)p, n);
    const fl__stage *st = &t->stages[k];
    if (st->kind == FL_ST_BYTELEVEL && st->add_prefix_space && p[0] != ' ') {
        fl_buf *b = &s->pfx[k];
        fl_buf_rewind(b, 0); /* the slot's scratch: an earlier encode's failure is not ours */
        if (fl_buf_append(b, " ", 1) || fl_buf_append(b, p, n))
            return FL_ENOMEM;
        p = b->data;
        n = b->len;
    }
    if (!st->re)
        return pretok(t, s, k + 1, p, n);
    return split_regex(t, s, k, p, n);
}

static bool is_word_cp(uint32_t cp)
{
    if (cp == '_')
        return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* The code point ending just before p[i] (i > 0); its start in *start. */
static uint32_t cp_before(const unsigned char *p, size_t i, size_t *start)
{
    size_t j = i - 1;
    while (j > 0 && (p[j] & 0xc0) == 0x80 && i - j < 4)
        j--;
    size_t len;
    uint32_t cp = 0xfffd;
    fl__utf8_classify(p + j, i - j, &len, &cp);
    *start = j;
    return cp;
}

static int encode_normalized(const fl_tokenizer *t, fl__slot *s, const char *p, size_t n, int ps);

/* Splits p at added tokens of trie tr (level 0: unnormalized tokens in the raw text, level 1:
 * normalized tokens in normalised text); tokens go to the output, the text between to the next
 * step. Leftmost-longest matching, as both references do. */
static int split_added(const fl_tokenizer *t, fl__slot *s, const fl__trie *tr, int level,
                       const char *text, size_t n, int ps)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0, start = 0;
    int rc;
    if (tr->n > 1) {
        while (i < n) {
            if (!tr->first[p[i]]) {
                i++;
                continue;
            }
            size_t len = 0;
            int32_t k = trie_match(tr, p + i, n - i, &len);
            if (k < 0) {
                i++;
                continue;
            }
            const fl__added *a = &t->added[k];
            size_t ms = i, me = i + len;
            if (a->single_word) {
                size_t b4, clen;
                uint32_t next = 0;
                bool ok = ms == start || ms == 0 || !is_word_cp(cp_before(p, ms, &b4));
                if (ok && me < n && fl__utf8_classify(p + me, n - me, &clen, &next) == 1 &&
                    is_word_cp(next))
                    ok = false;
                if (!ok) {
                    i = me;
                    continue;
                }
            }
            while (a->lstrip && ms > start) {
                size_t b4;
                if (!fl__utf8_is_white_space(cp_before(p, ms, &b4)))
                    break;
                ms = b4;
            }
            while (a->rstrip && me < n) {
                size_t clen;
                uint32_t cp;
                if (fl__utf8_classify(p + me, n - me, &clen, &cp) != 1 || !fl__utf8_is_white_space(cp))
                    break;
                me += clen;
            }
            if (ms > start) {
                rc = level ? pretok(t, s, 0, text + start, ms - start)
                           : encode_normalized(t, s, text + start, ms - start, ps);
                if (rc)
                    return rc;
            }
            if (fl__slot_reserve(s, 1))
                return FL_ENOMEM;
            s->ids[s->nids++] = a->id;
            i = start = me;
        }
    }
    if (n > start)
        return level ? pretok(t, s, 0, text + start, n - start)
                     : encode_normalized(t, s, text + start, n - start, ps);
    return 0;
}

/* A section between unnormalized added tokens: normalizer, then normalized added tokens, then
 * the pre-tokenizer. */
static int encode_normalized(const fl_tokenizer *t, fl__slot *s, const char *p, size_t n, int ps)
{
    for (int f = 0; f < t->n_forms; f++) {
        if (fl__nf_quick_yes(&t->nft, t->forms[f], p, n))
            continue;
        fl_buf *b = &s->norm[f];
        fl_buf_rewind(b, 0);
        int rc = fl__nf_apply(&t->nft, t->forms[f], p, n, b, &s->nf);
        if (rc)
            return rc;
        p = b->data ? b->data : "";
        n = b->len;
    }
    return split_added(t, s, &t->trie_norm[ps], 1, p, n, ps);
}

int fl_tokenizer_encode(const fl_tokenizer *t, const char *text, size_t len, bool parse_special,
                        int32_t **ids, size_t *n, fl_err *e)
{
    *ids = NULL;
    *n = 0;
    if (!t || (!text && len))
        return fl_err_set(e, FL_EINVAL, "fl_tokenizer_encode: no tokenizer or no text");
    fl__slot *s = slot_acquire(t);
    if (!s)
        return fl_err_set(e, FL_ENOMEM, "out of memory");
    s->nids = 0;
    const char *p = len ? text : "";
    size_t good = fl__utf8_valid_prefix((const unsigned char *)p, len);
    int rc = 0;
    if (good < len) { /* the documented rule: each maximal invalid subpart -> U+FFFD */
        fl_buf_rewind(&s->clean, 0);
        if (fl_buf_append(&s->clean, p, good) ||
            fl__utf8_append_lossy(&s->clean, (const unsigned char *)p + good, len - good))
            rc = FL_ENOMEM;
        p = s->clean.data;
        len = s->clean.len;
    }
    if (!rc)
        rc = split_added(t, s, &t->trie_raw[parse_special ? 1 : 0], 0, p, len, parse_special ? 1 : 0);
    if (!rc) {
        *ids = malloc((s->nids ? s->nids : 1) * sizeof **ids);
        if (!*ids)
            rc = FL_ENOMEM;
        else {
            if (s->nids) /* s->ids is NULL before a first id */
                memcpy(*ids, s->ids, s->nids * sizeof **ids);
            *n = s->nids;
        }
    }
    slot_release(s);
    if (rc == FL_ENOMEM)
        return fl_err_set(e, rc, "out of memory while encoding");
    if (rc)
        return fl_err_set(e, rc, "the pre-tokenizer regex hit its match limits on this input");
    return 0;
}

/* ---- token tables ---- */

int fl_tokenizer_vocab_size(const fl_tokenizer *t) { return t->n_ids; }

int fl_tokenizer_find(const fl_tokenizer *t, const char *token)
{
    return token ? smap_find(t, token, strlen(token)) : -1;
}

const char *fl_tokenizer_token(const fl_tokenizer *t, int id)
{
    if (id < 0 || id >= t->n_ids || t->str_off[id] == UINT32_MAX)
        return NULL;
    return t->str_arena + t->str_off[id];
}

bool fl_tokenizer_is_special(const fl_tokenizer *t, int id)
{
    return id >= 0 && id < t->n_ids && (t->flags[id] & FL_TOKF_SPECIAL);
}

const unsigned char *fl_tokenizer_token_bytes(const fl_tokenizer *t, int id, size_t *len)
{
    if (id < 0 || id >= t->n_ids || t->str_off[id] == UINT32_MAX) {
        *len = 0;
        return NULL;
    }
    *len = t->byt_len[id];
    return t->byt_arena + t->byt_off[id];
}

fl_chat_kind fl_tokenizer_chat_kind(const fl_tokenizer *t) { return t->chat; }
