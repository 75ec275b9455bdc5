/* make_model.c: writes a random model as a Hugging Face directory (config.json +
 * model.safetensors) in one of fogline's layouts, without Python or PyTorch: the GPU machine
 * may have neither, and a SDAR-1.7B-shaped model (3.4 GB) is written in seconds here.
 *
 *   make_model OUT --layout qwen3|qwen2 [--shape NAME] [--dtype bf16|f32] [--seed N] [--tie]
 *
 * Shapes (hidden, layers, heads, kv heads, head_dim, intermediate, vocab):
 *   tiny 64,2,4,2,16,128,512     small 128,3,4,2,32,320,1024     hd128 512,2,4,2,128,1024,5000
 *   rep6 384,2,6,1,64,768,3000   sdar-1.7b 2048,28,16,8,128,6144,151936
 *   sdar-4b 2560,36,32,8,128,9728,151936   fastdllm-1.5b 1536,28,12,2,128,8960,151936
 * qwen3: SDAR's layout (q_norm/k_norm, block_size 4); qwen2: Fast-dLLM v2's (q/k/v bias,
 * bd_size 32, head_dim = hidden / heads). The configs match tests/reference/
 * make_random_model.py. Values: weights uniform with variance 1/fan_in, norms 1 + 0.1 u,
 * biases 0.1 u (u of unit variance), from a seeded generator: the same arguments write the
 * same bytes. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct shape {
    const char *name;
    int h, L, nh, kvh, hd, inter, vocab;
} shape;

static const shape SHAPES[] = {
    {"tiny", 64, 2, 4, 2, 16, 128, 512},
    {"small", 128, 3, 4, 2, 32, 320, 1024},
    {"hd128", 512, 2, 4, 2, 128, 1024, 5000},
    {"rep6", 384, 2, 6, 1, 64, 768, 3000},
    {"sdar-1.7b", 2048, 28, 16, 8, 128, 6144, 151936},
    {"sdar-4b", 2560, 36, 32, 8, 128, 9728, 151936},
    {"fastdllm-1.5b", 1536, 28, 12, 2, 128, 8960, 151936},
};

typedef enum { K_WEIGHT, K_NORM, K_BIAS } kind;

typedef struct tensor {
    char name[96];
    int64_t rows, cols; /* cols 0: a vector */
    kind k;
    uint64_t off, bytes;
} tensor;

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static int add(tensor *t, int *n, const char *name, int64_t rows, int64_t cols, kind k)
{
    if (*n >= 512)
        return -1;
    tensor *x = &t[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->rows = rows;
    x->cols = cols;
    x->k = k;
    return 0;
}

int main(int argc, char **argv)
{
    const char *out = NULL, *layout = NULL, *shape_name = "tiny", *dtype = "bf16";
    uint64_t seed = 0;
    int tie = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--layout") && i + 1 < argc)
            layout = argv[++i];
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
            shape_name = argv[++i];
        else if (!strcmp(argv[i], "--dtype") && i + 1 < argc)
            dtype = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--tie"))
            tie = 1;
        else if (argv[i][0] != '-' && !out)
            out = argv[i];
        else {
            fprintf(stderr, "make_model: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    const shape *sh = NULL;
    for (size_t i = 0; i < sizeof SHAPES / sizeof SHAPES[0]; i++)
        if (!strcmp(SHAPES[i].name, shape_name))
            sh = &SHAPES[i];
    int bf16 = !strcmp(dtype, "bf16");
    if (!out || !layout || (strcmp(layout, "qwen3") && strcmp(layout, "qwen2")) || !sh ||
        (!bf16 && strcmp(dtype, "f32"))) {
        fprintf(stderr, "usage: make_model OUT --layout qwen3|qwen2 [--shape tiny|small|hd128|"
                        "rep6|sdar-1.7b|sdar-4b|fastdllm-1.5b] [--dtype bf16|f32] [--seed N] [--tie]\n");
        return 2;
    }
    int q3 = !strcmp(layout, "qwen3");
    if (!q3 && sh->h / sh->nh != sh->hd) {
        fprintf(stderr, "make_model: the qwen2 layout needs head_dim == hidden / heads\n");
        return 2;
    }
    char dirbuf[4096];
    snprintf(dirbuf, sizeof dirbuf, "%s", out);
    for (char *p = dirbuf + 1;; p++) { /* mkdir -p */
        char ch = *p;
        if (ch == '/' || ch == 0) {
            *p = 0;
            if (mkdir(dirbuf, 0755) && errno != EEXIST) {
                fprintf(stderr, "make_model: mkdir %s: %s\n", dirbuf, strerror(errno));
                return 1;
            }
            *p = ch;
        }
        if (!ch)
            break;
    }
    int64_t H = sh->h, hd = sh->hd, qd = (int64_t)sh->nh * hd, kd = (int64_t)sh->kvh * hd;
    int64_t NI = sh->inter, V = sh->vocab;
    static tensor T[512];
    int n = 0;
    char nm[96];
    add(T, &n, "model.embed_tokens.weight", V, H, K_WEIGHT);
    for (int l = 0; l < sh->L; l++) {
#define ADD(suffix, r, c, k)                                                                 \
    do {                                                                                     \
        snprintf(nm, sizeof nm, "model.layers.%d.%s", l, suffix);                            \
        add(T, &n, nm, r, c, k);                                                             \
    } while (0)
        ADD("input_layernorm.weight", H, 0, K_NORM);
        ADD("self_attn.q_proj.weight", qd, H, K_WEIGHT);
        ADD("self_attn.k_proj.weight", kd, H, K_WEIGHT);
        ADD("self_attn.v_proj.weight", kd, H, K_WEIGHT);
        ADD("self_attn.o_proj.weight", H, qd, K_WEIGHT);
        if (q3) {
            ADD("self_attn.q_norm.weight", hd, 0, K_NORM);
            ADD("self_attn.k_norm.weight", hd, 0, K_NORM);
        } else {
            ADD("self_attn.q_proj.bias", qd, 0, K_BIAS);
            ADD("self_attn.k_proj.bias", kd, 0, K_BIAS);
            ADD("self_attn.v_proj.bias", kd, 0, K_BIAS);
        }
        ADD("post_attention_layernorm.weight", H, 0, K_NORM);
        ADD("mlp.gate_proj.weight", NI, H, K_WEIGHT);
        ADD("mlp.up_proj.weight", NI, H, K_WEIGHT);
        ADD("mlp.down_proj.weight", H, NI, K_WEIGHT);
#undef ADD
    }
    add(T, &n, "model.norm.weight", H, 0, K_NORM);
    if (!tie)
        add(T, &n, "lm_head.weight", V, H, K_WEIGHT);

    /* header: offsets in file order */
    size_t es = bf16 ? 2 : 4, hcap = (size_t)n * 200 + 256, hl = 0;
    char *hdr = malloc(hcap);
    if (!hdr)
        return 1;
    uint64_t off = 0;
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++) {
        tensor *t = &T[i];
        t->off = off;
        t->bytes = (uint64_t)t->rows * (uint64_t)(t->cols ? t->cols : 1) * es;
        off += t->bytes;
        if (t->cols)
            hl += (size_t)snprintf(hdr + hl, hcap - hl,
                                   ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRId64 ",%" PRId64
                                   "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                                   t->name, bf16 ? "BF16" : "F32", t->rows, t->cols, t->off,
                                   t->off + t->bytes);
        else
            hl += (size_t)snprintf(hdr + hl, hcap - hl,
                                   ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%" PRId64
                                   "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}",
                                   t->name, bf16 ? "BF16" : "F32", t->rows, t->off,
                                   t->off + t->bytes);
    }
    hl += (size_t)snprintf(hdr + hl, hcap - hl, "}");
    while (hl % 8)
        hdr[hl++] = ' ';

    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "make_model: %s: %s\n", path, strerror(errno));
        return 1;
    }
    uint64_t hl64 = hl;
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(hl64 >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    free(hdr);
    size_t chunk = (size_t)1 << 22;
    void *buf = malloc(chunk * 4);
    if (!buf)
        return 1;
    const float su = sqrtf(3.0f); /* uniform on [-sqrt 3, sqrt 3]: unit variance */
    for (int i = 0; i < n; i++) {
        tensor *t = &T[i];
        uint64_t st = seed * 0x100000001b3ull + (uint64_t)i * 0x9e3779b97f4a7c15ull + 1;
        int64_t total = t->rows * (t->cols ? t->cols : 1);
        float scale = t->k == K_WEIGHT ? 1.0f / sqrtf((float)(t->cols ? t->cols : 1)) : 0.1f;
        float base = t->k == K_NORM ? 1.0f : 0.0f;
        for (int64_t at = 0; at < total; at += (int64_t)chunk) {
            size_t len = (size_t)(total - at < (int64_t)chunk ? total - at : (int64_t)chunk);
            for (size_t j = 0; j < len; j += 2) {
                uint64_t r = splitmix(&st);
                for (size_t q = 0; q < 2 && j + q < len; q++) {
                    uint32_t bits = (uint32_t)(r >> (32 * q));
                    float u = ((float)bits * (1.0f / 4294967296.0f) * 2.0f - 1.0f) * su;
                    float v = base + scale * u;
                    if (bf16)
                        ((uint16_t *)buf)[j + q] = to_bf16(v);
                    else
                        ((float *)buf)[j + q] = v;
                }
            }
            if (fwrite(buf, es, len, f) != len) {
                fprintf(stderr, "make_model: writing %s: %s\n", path, strerror(errno));
                return 1;
            }
        }
    }
    free(buf);
    if (fclose(f)) {
        fprintf(stderr, "make_model: closing %s: %s\n", path, strerror(errno));
        return 1;
    }

    snprintf(path, sizeof path, "%s/config.json", out);
    f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "make_model: %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (q3)
        fprintf(f,
                "{\n  \"architectures\": [\"SDARForCausalLM\"], \"model_type\": \"sdar\",\n"
                "  \"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,\n"
                "  \"num_key_value_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d,\n"
                "  \"vocab_size\": %d, \"max_position_embeddings\": 4096, \"rope_theta\": 1000000.0,\n"
                "  \"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": %s, \"attention_bias\": false,\n"
                "  \"block_size\": 4, \"mask_token_id\": %d, \"eos_token_id\": %d,\n"
                "  \"bos_token_id\": null, \"torch_dtype\": \"bfloat16\", \"hidden_act\": \"silu\"\n}\n",
                sh->h, sh->L, sh->nh, sh->kvh, sh->hd, sh->inter, sh->vocab, tie ? "true" : "false",
                sh->vocab - 1, sh->vocab - 2);
    else
        fprintf(f,
                "{\n  \"architectures\": [\"Fast_dLLM_QwenForCausalLM\"], \"model_type\": "
                "\"Fast_dLLM_Qwen\",\n"
                "  \"hidden_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,\n"
                "  \"num_key_value_heads\": %d, \"intermediate_size\": %d, \"vocab_size\": %d,\n"
                "  \"max_position_embeddings\": 4096, \"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-06,\n"
                "  \"tie_word_embeddings\": %s, \"bd_size\": 32, \"eos_token_id\": %d,\n"
                "  \"bos_token_id\": %d, \"torch_dtype\": \"bfloat16\", \"hidden_act\": \"silu\"\n}\n",
                sh->h, sh->L, sh->nh, sh->kvh, sh->inter, sh->vocab, tie ? "true" : "false",
                sh->vocab - 2, sh->vocab - 3);
    if (fclose(f)) {
        fprintf(stderr, "make_model: closing %s: %s\n", path, strerror(errno));
        return 1;
    }
    printf("make_model: %s: %s %s %s%s, %.2f GB\n", out, layout, sh->name, dtype,
           tie ? " tied" : "", (double)off / 1e9);
    return 0;
}
