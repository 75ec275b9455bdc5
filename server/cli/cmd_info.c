/* cmd_info.c: `fogline info --model DIR`: what a model directory holds, read from config.json,
 * the safetensors headers and the tokenizer files. Weights are only mmapped and their headers
 * parsed: no tensor data is converted or copied, so this is instant even for an 8B model. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "cli.h"
#include "gen_opts.h"
#include "model.h"
#include "qformat.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: fogline info --model DIR [--json] [--chat-template NAME]\n\n"
               "Prints what a Hugging Face model directory holds: family, layout, shapes,\n"
               "parameter count, quantization (none, q8, q4), dtypes and bytes on disk, the\n"
               "weights' bytes, the memory f32 compute weights and one KV page need, block\n"
               "size, mask and eos tokens, chat template.\n"
               "Only config.json, the safetensors headers and the tokenizer files are read.\n\n"
               "  --model DIR           the model directory (config.json, *.safetensors)\n"
               "  --json                one JSON object on stdout\n"
               "  --chat-template NAME  override template detection (chatml, qwen3, fogline, ling)\n"
               "  --help                this text\n");
}

/* One line on stderr, whatever the message holds. */
static int fail(const char *msg)
{
    fputs("fogline info: ", stderr);
    for (const char *p = msg; *p; p++)
        fputc(*p == '\n' || *p == '\r' ? ' ' : *p, stderr);
    fputc('\n', stderr);
    return 1;
}

typedef struct info_tok {
    bool ok;
    char why[FL_ERR_MSG + 32]; /* reason when !ok */
    int mask_id;               /* config's, or resolved from the tokenizer; -1 when unknown */
    const char *mask_str;      /* points at mask_buf, or NULL when unknown */
    char mask_buf[256];        /* copied out: the tokenizer is freed before printing */
    char chat[64];             /* template kind name when ok */
    int end_id;                /* the family's end token from the tokenizer when config.json
                                  names none (LLaDA2), else -1 */
} info_tok;

static void probe_tokenizer(info_tok *it, const fl_model *m, const char *tmpl)
{
    it->mask_id = m->cfg.mask_token_id;
    it->end_id = -1;
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", m->dir);
    if (stat(path, &sb)) {
        snprintf(it->why, sizeof it->why, "no tokenizer.json");
        return;
    }
    fl_tokenizer *tok = NULL;
    fl_err e = {0};
    if (fl_tokenizer_load(&tok, m->dir, tmpl, &e) || !tok) {
        snprintf(it->why, sizeof it->why, "%s", e.msg[0] ? e.msg : "tokenizer failed to load");
        return;
    }
    it->ok = true;
    if (it->mask_id < 0 && fl_family_mask_string(m->cfg.family))
        it->mask_id = fl_tokenizer_find(tok, fl_family_mask_string(m->cfg.family));
    const char *ms = it->mask_id >= 0 ? fl_tokenizer_token(tok, it->mask_id) : NULL;
    if (ms) {
        snprintf(it->mask_buf, sizeof it->mask_buf, "%s", ms);
        it->mask_str = it->mask_buf;
    }
    snprintf(it->chat, sizeof it->chat, "%s", fl_chat_kind_name(fl_tokenizer_chat_kind(tok)));
    if (!m->cfg.n_eos && fl_family_end_string(m->cfg.family))
        it->end_id = fl_tokenizer_find(tok, fl_family_end_string(m->cfg.family));
    fl_tokenizer_free(tok);
}

typedef struct info_sum {
    size_t bytes[FL_DT_COUNT]; /* tensor data bytes per dtype */
    size_t count[FL_DT_COUNT]; /* tensors per dtype */
    int64_t f32_bytes;         /* n_params * 4 */
    int64_t kv_page_bytes;     /* block * layers * 2 (K,V) * kv_heads * head_dim * 4 */
    int mats_q8, mats_q4, mats_float; /* matrix roles by format (I8, U8, float) */
    int moe_layers;            /* layers with experts */
    int64_t expert_bytes;      /* file bytes (scales included) of one routed expert, the mean */
    int64_t active_bytes;      /* weight bytes one token's forward reads: weight_bytes less the
                                  routed experts it is not sent to */
} info_sum;

static int64_t tensor_bytes(const fl_model *m, const fl_tensor *t)
{
    const fl_tensor *sc = fl_model_scales(m, t);
    return t ? (int64_t)t->nbytes + (sc ? (int64_t)sc->nbytes : 0) : 0;
}

static void count_matrix(info_sum *s, const fl_tensor *t)
{
    if (!t)
        return;
    if (t->dtype == FL_DT_I8)
        s->mats_q8++;
    else if (t->dtype == FL_DT_U8)
        s->mats_q4++;
    else
        s->mats_float++;
}

static void summarise(info_sum *s, const fl_model *m)
{
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < fl_weights_count(m->weights); i++) {
        const fl_tensor *t = fl_weights_at(m->weights, i);
        s->bytes[t->dtype] += t->nbytes;
        s->count[t->dtype]++;
    }
    count_matrix(s, m->embed);
    if (m->lm_head != m->embed)
        count_matrix(s, m->lm_head);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const fl_layer_w *L = &m->layers[l];
        const fl_tensor *mats[] = {L->wq,     L->wk,          L->wv,        L->wo,
                                   L->w_gate, L->w_up,        L->w_down,    L->wqkv,
                                   L->shared.gate, L->shared.up, L->shared.down};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            count_matrix(s, mats[i]);
        if (!L->experts)
            continue;
        int64_t all = 0;
        for (int x = 0; x < m->cfg.moe.n_experts; x++) {
            const fl_expert_w *ex = &L->experts[x];
            count_matrix(s, ex->gate);
            count_matrix(s, ex->up);
            count_matrix(s, ex->down);
            all += tensor_bytes(m, ex->gate) + tensor_bytes(m, ex->up) + tensor_bytes(m, ex->down);
        }
        s->moe_layers++;
        s->expert_bytes = all / m->cfg.moe.n_experts;
        s->active_bytes -= all / m->cfg.moe.n_experts * (m->cfg.moe.n_experts - m->cfg.moe.top_k);
    }
    s->active_bytes += m->weight_bytes;
    const fl_config *c = &m->cfg;
    s->f32_bytes = m->n_params * 4;
    s->kv_page_bytes = (int64_t)(fl_kv_page_floats(c) * sizeof(float));
}

static const char *layout_name(const fl_config *c)
{
    if (c->family == FL_FAMILY_LLADA2)
        return "llada2-moe";
    if (c->family == FL_FAMILY_SDAR_MOE)
        return "qwen3-moe";
    return c->qk_norm ? "qwen3" : "qwen2";
}

/* The experts a layer's forward of one block touches when every token picks top_k of the
 * n_experts uniformly (distinct ones): E (1 - (1 - K/E)^B). An estimate: real routers favour
 * some experts (fewer), and bench forward measures what a model does. */
static double block_experts(const fl_config *c)
{
    double E = c->moe.n_experts, K = c->moe.top_k;
    return E * (1 - pow(1 - K / E, c->block_size));
}

static const char *router_name(fl_router r)
{
    return r == FL_ROUTER_SOFTMAX           ? "softmax"
           : r == FL_ROUTER_SIGMOID_GROUPED ? "sigmoid, group-limited"
                                            : "none";
}

static void human_bytes(char *dst, size_t cap, double b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int i = 0;
    while (b >= 1024 && i < 4) {
        b /= 1024;
        i++;
    }
    snprintf(dst, cap, i ? "%.2f %s" : "%.0f %s", b, u[i]);
}

static void print_text(const fl_model *m, const info_sum *s, const info_tok *it)
{
    const fl_config *c = &m->cfg;
    char hb[32];
    printf("model            %s\n", m->dir);
    printf("family           %s\n", fl_family_name(c->family));
    printf("architecture     %s (model_type %s)\n", c->arch[0] ? c->arch : "-",
           c->model_type[0] ? c->model_type : "-");
    printf("layout           %s (%s, %s)\n", layout_name(c),
           c->qk_norm ? "q/k norm" : "no q/k norm", c->qkv_bias ? "q/k/v bias" : "no q/k/v bias");
    printf("shape            hidden %d, layers %d, heads %d, kv heads %d, head_dim %d, "
           "intermediate %d, vocab %d\n",
           c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->intermediate,
           c->vocab);
    printf("parameters       %lld (%.2f M)\n", (long long)m->n_params, (double)m->n_params / 1e6);
    if (c->moe.router != FL_ROUTER_NONE) {
        const fl_moe *mo = &c->moe;
        printf("experts          %d routed of width %d, top %d (router: %s", mo->n_experts,
               mo->inter, mo->top_k, router_name(mo->router));
        if (mo->router == FL_ROUTER_SIGMOID_GROUPED)
            printf(", %d groups keep %d, %s, scaling %g", mo->n_group, mo->topk_group,
                   mo->expert_bias ? "expert bias" : "no expert bias", (double)mo->scaling);
        else
            printf(", %s", mo->norm_topk ? "renormalised" : "not renormalised");
        printf("), %d shared; %d of %d layers\n", mo->n_shared, s->moe_layers, c->n_layers);
        printf("active params    %lld (%.2f M per token)\n", (long long)m->n_active,
               (double)m->n_active / 1e6);
        human_bytes(hb, sizeof hb, (double)s->active_bytes);
        printf("bytes per token  %lld (%s: the weights one token's forward reads)\n",
               (long long)s->active_bytes, hb);
        double touched = block_experts(c);
        double blk = (double)s->active_bytes +
                     (touched - mo->top_k) * (double)s->expert_bytes * s->moe_layers;
        human_bytes(hb, sizeof hb, blk);
        printf("bytes per block  %.0f (%s: a forward of one block of %d tokens, routed "
               "uniformly, touches %.1f of %d experts a layer; each is read once)\n",
               blk, hb, c->block_size, touched, mo->n_experts);
    }
    if (fl_config_rotary_dim(c) != c->head_dim)
        printf("rotary dims      %d of %d per head\n", fl_config_rotary_dim(c), c->head_dim);
    if (m->quant == FL_QUANT_NONE)
        printf("quantization     none\n");
    else
        printf("quantization     %s (fogline, groups of %d; matrices: %d q8, %d q4, %d float)\n",
               fl_quant_name(m->quant), FL_QG, s->mats_q8, s->mats_q4, s->mats_float);
    printf("dtypes on disk  ");
    for (int d = 0; d < FL_DT_COUNT; d++)
        if (s->count[d])
            printf(" %s (%zu tensors)", fl_dtype_name((fl_dtype)d), s->count[d]);
    printf("\n");
    human_bytes(hb, sizeof hb, (double)fl_weights_total_bytes(m->weights));
    printf("bytes on disk    %zu (%s)\n", fl_weights_total_bytes(m->weights), hb);
    human_bytes(hb, sizeof hb, (double)m->weight_bytes);
    printf("weight bytes     %lld (%s: the tensors the model uses, scales included)\n",
           (long long)m->weight_bytes, hb);
    human_bytes(hb, sizeof hb, (double)s->f32_bytes);
    printf("f32 weights      %lld bytes (%s)\n", (long long)s->f32_bytes, hb);
    fl_wformat wa = fl_wformat_resolve(FL_WEIGHTS_AUTO, m);
    printf("weights (auto)   %s (%s)\n", fl_wformat_name(wa),
           m->quant != FL_QUANT_NONE ? "the backend's choice for a quantized file"
           : wa == FL_WEIGHTS_BF16   ? "every matrix is bf16 on disk: held as the file's, exact"
                                     : "not every matrix is bf16 on disk: widened to f32, exact");
    human_bytes(hb, sizeof hb, (double)s->kv_page_bytes);
    printf("kv page          %lld bytes (%s: %d tokens x %d layers x K,V x %d kv heads x %d x 4)\n",
           (long long)s->kv_page_bytes, hb, c->block_size, c->n_layers, c->n_kv_heads,
           c->head_dim);
    human_bytes(hb, sizeof hb, (double)(s->kv_page_bytes / 2));
    printf("kv format (auto) f32 on the CPU (exact), bf16 on CUDA; a bf16 page (--kv-format bf16) "
           "holds %lld bytes (%s)\n", (long long)(s->kv_page_bytes / 2), hb);
    printf("block size       %d\n", c->block_size);
    printf("sub-block        %d\n", c->sub_block);
    printf("logits shift     %d\n", c->logits_shift);
    if (it->mask_id >= 0 && it->mask_str)
        printf("mask token       %d %s\n", it->mask_id, it->mask_str);
    else if (it->mask_id >= 0)
        printf("mask token       %d\n", it->mask_id);
    else
        printf("mask token       unresolved (needs the tokenizer's %s)\n",
               fl_family_mask_string(c->family) ? fl_family_mask_string(c->family) : "mask token");
    printf("eos ids         ");
    if (!c->n_eos && it->end_id >= 0)
        printf(" %d %s (the tokenizer's; config.json has no eos_token_id)", it->end_id,
               fl_family_end_string(c->family));
    else if (!c->n_eos)
        printf(" none");
    for (int i = 0; i < c->n_eos; i++)
        printf(" %d", c->eos_ids[i]);
    printf("\n");
    printf("tied embeddings  %s\n", c->tie_embeddings ? "yes" : "no");
    printf("rope_theta       %g\n", (double)c->rope_theta);
    printf("rms_norm_eps     %g\n", (double)c->rms_eps);
    printf("max positions    %d\n", c->max_pos);
    printf("torch_dtype      %s\n", c->torch_dtype[0] ? c->torch_dtype : "-");
    if (it->ok)
        printf("chat template    %s\n", it->chat);
    else
        printf("chat template    unavailable: %s\n", it->why);
    fl_decode_opts d;
    uint8_t src[FL_DF_COUNT];
    fl_config_decode_defaults(c, &d, src);
    printf("decoding defaults (family: the %s authors' settings; model: config.json fogline.decoding;\n"
           "                   flags and requests override them)\n", fl_family_name(c->family));
    fl_gen_opts_print(stdout, &d, src);
}

static int print_json(const fl_model *m, const info_sum *s, const info_tok *it)
{
    const fl_config *c = &m->cfg;
    json_t *o = json_object(), *dt = json_object(), *eos = json_array();
    if (!o || !dt || !eos) {
        json_decref(o);
        json_decref(dt);
        json_decref(eos);
        return fail("out of memory");
    }
    for (int d = 0; d < FL_DT_COUNT; d++)
        if (s->count[d])
            json_object_set_new(dt, fl_dtype_name((fl_dtype)d),
                                json_pack("{sIsI}", "tensors", (json_int_t)s->count[d], "bytes",
                                          (json_int_t)s->bytes[d]));
    for (int i = 0; i < c->n_eos; i++)
        json_array_append_new(eos, json_integer(c->eos_ids[i]));
    if (!c->n_eos && it->end_id >= 0)
        json_array_append_new(eos, json_integer(it->end_id));
    json_object_set_new(o, "model", json_string(m->dir));
    json_object_set_new(o, "family", json_string(fl_family_name(c->family)));
    json_object_set_new(o, "architecture", json_string(c->arch));
    json_object_set_new(o, "model_type", json_string(c->model_type));
    json_object_set_new(o, "layout", json_string(layout_name(c)));
    json_object_set_new(o, "qk_norm", json_boolean(c->qk_norm));
    json_object_set_new(o, "qkv_bias", json_boolean(c->qkv_bias));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->n_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->n_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->n_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_pos));
    json_object_set_new(o, "rope_theta", json_real(c->rope_theta));
    json_object_set_new(o, "rms_norm_eps", json_real(c->rms_eps));
    json_object_set_new(o, "n_params", json_integer(m->n_params));
    json_object_set_new(o, "n_active_params", json_integer(m->n_active));
    json_object_set_new(o, "rotary_dim", json_integer(fl_config_rotary_dim(c)));
    if (c->moe.router != FL_ROUTER_NONE) {
        const fl_moe *mo = &c->moe;
        json_object_set_new(
            o, "experts",
            json_pack("{sssisisisisisisbsbsfsisIsI}", "router", router_name(mo->router),
                      "num_experts", mo->n_experts, "num_experts_per_tok", mo->top_k,
                      "moe_intermediate_size", mo->inter, "num_shared_experts", mo->n_shared,
                      "n_group", mo->n_group, "topk_group", mo->topk_group, "norm_topk_prob",
                      mo->norm_topk, "expert_bias", mo->expert_bias, "routed_scaling_factor",
                      (double)mo->scaling, "moe_layers", s->moe_layers, "expert_bytes",
                      (json_int_t)s->expert_bytes, "active_weight_bytes",
                      (json_int_t)s->active_bytes));
        json_object_set_new(json_object_get(o, "experts"), "block_experts_uniform",
                            json_real(block_experts(c)));
    }
    json_object_set_new(o, "n_tensors", json_integer((json_int_t)fl_weights_count(m->weights)));
    json_object_set_new(o, "quantization", json_string(fl_quant_name(m->quant)));
    json_object_set_new(o, "matrices", json_pack("{sisisi}", "q8", s->mats_q8, "q4", s->mats_q4,
                                                  "float", s->mats_float));
    json_object_set_new(o, "dtypes", dt);
    json_object_set_new(o, "bytes_on_disk",
                        json_integer((json_int_t)fl_weights_total_bytes(m->weights)));
    json_object_set_new(o, "weight_bytes", json_integer(m->weight_bytes));
    json_object_set_new(o, "f32_weight_bytes", json_integer(s->f32_bytes));
    json_object_set_new(o, "kv_page_bytes", json_integer(s->kv_page_bytes));
    json_object_set_new(o, "kv_page_bytes_bf16", json_integer(s->kv_page_bytes / 2));
    json_t *kva = json_object();
    json_object_set_new(kva, "cpu", json_string(fl_kvformat_name(FL_KV_F32)));
    json_object_set_new(kva, "cuda", json_string(fl_kvformat_name(FL_KV_BF16)));
    json_object_set_new(o, "kv_format_auto", kva);
    json_object_set_new(o, "block_size", json_integer(c->block_size));
    json_object_set_new(o, "sub_block", json_integer(c->sub_block));
    json_object_set_new(o, "logits_shift", json_integer(c->logits_shift));
    json_object_set_new(o, "mask_token_id", it->mask_id >= 0 ? json_integer(it->mask_id) : json_null());
    json_object_set_new(o, "mask_token", it->mask_str ? json_string(it->mask_str) : json_null());
    json_object_set_new(o, "eos_token_ids", eos);
    json_object_set_new(o, "bos_token_id", c->bos_id >= 0 ? json_integer(c->bos_id) : json_null());
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    json_object_set_new(o, "weights_auto",
                        json_string(fl_wformat_name(fl_wformat_resolve(FL_WEIGHTS_AUTO, m))));
    json_object_set_new(o, "torch_dtype", c->torch_dtype[0] ? json_string(c->torch_dtype) : json_null());
    char chat[FL_ERR_MSG + 64];
    snprintf(chat, sizeof chat, it->ok ? "%s" : "unavailable: %s", it->ok ? it->chat : it->why);
    json_object_set_new(o, "chat_template", json_string(chat));
    fl_decode_opts d;
    uint8_t src[FL_DF_COUNT];
    fl_config_decode_defaults(c, &d, src);
    if (fl_gen_opts_json(o, &d, src)) {
        json_decref(o);
        return fail("out of memory");
    }
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
    json_decref(o);
    if (!text)
        return fail("out of memory");
    puts(text);
    free(text);
    return 0;
}

int fl_cmd_info(int argc, char **argv)
{
    const char *dir = NULL, *tmpl = NULL;
    bool as_json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            as_json = true;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--chat-template")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "fogline info: %s needs a value (try --help)\n", a);
                return 2;
            }
            *(a[2] == 'm' ? &dir : &tmpl) = argv[++i];
        } else if (!strncmp(a, "--model=", 8)) {
            dir = a + 8;
        } else if (!strncmp(a, "--chat-template=", 16)) {
            tmpl = a + 16;
        } else {
            fprintf(stderr, "fogline info: unknown option '%s' (try --help)\n", a);
            return 2;
        }
    }
    if (!dir || !*dir) {
        fprintf(stderr, "fogline info: --model DIR is required (try --help)\n");
        return 2;
    }
    /* the tokenizer is probed separately: info must still describe a directory whose
     * tokenizer is missing or broken, and say why */
    fl_load_opts opts = {.no_tokenizer = true};
    fl_model *m = NULL;
    fl_err e = {0};
    if (fl_model_load(&m, dir, &opts, &e))
        return fail(e.msg);
    info_tok it = {0};
    probe_tokenizer(&it, m, tmpl);
    info_sum s;
    summarise(&s, m);
    int rc = as_json ? print_json(m, &s, &it) : (print_text(m, &s, &it), 0);
    fl_model_free(m);
    if (!rc && (fflush(stdout) || ferror(stdout)))
        return fail("cannot write to stdout");
    return rc;
}
