/* fuzz_config.c: config.json text, both in memory (fl_config_parse) and from a model
 * directory (fl_config_load, which also refuses NUL bytes). The two must agree; an accepted
 * config must satisfy every consistency rule config.h promises (positive sizes, heads divisible
 * by kv heads, even head_dim, block a multiple of the sub-block, token ids inside the
 * vocabulary), because the model loader and the forward pass trust it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "fuzz_common.h"

static char dir[4096], path[4200];

static void remove_dir(void)
{
    unlink(path);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fl_fuzz_config.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz_config: mkdtemp");
        exit(2);
    }
    snprintf(path, sizeof path, "%s/config.json", dir);
    atexit(remove_dir);
    return 0;
}

static void check_config(const fl_config *c)
{
    FZ_CHECK(memchr(c->arch, 0, sizeof c->arch) && memchr(c->model_type, 0, sizeof c->model_type) &&
                 memchr(c->torch_dtype, 0, sizeof c->torch_dtype),
             "a string field is not terminated");
    FZ_CHECK(c->family >= 0 && c->family < FL_FAMILY_COUNT, "family %d", (int)c->family);
    FZ_CHECK(c->hidden > 0 && c->n_layers > 0 && c->n_heads > 0 && c->n_kv_heads > 0 &&
                 c->head_dim > 0 && c->intermediate > 0 && c->vocab > 0 && c->max_pos > 0,
             "a size is not positive (hidden %d layers %d heads %d/%d head_dim %d inter %d "
             "vocab %d max_pos %d)",
             c->hidden, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim, c->intermediate,
             c->vocab, c->max_pos);
    FZ_CHECK(c->n_heads % c->n_kv_heads == 0, "heads %d not a multiple of kv heads %d",
             c->n_heads, c->n_kv_heads);
    FZ_CHECK(c->head_dim % 2 == 0, "odd head_dim %d", c->head_dim);
    FZ_CHECK(c->block_size > 0 && c->sub_block > 0 && c->block_size % c->sub_block == 0,
             "block %d sub-block %d", c->block_size, c->sub_block);
    FZ_CHECK(c->rope_theta > 0 && c->rms_eps > 0, "rope_theta %g rms_eps %g",
             (double)c->rope_theta, (double)c->rms_eps);
    FZ_CHECK(c->mask_token_id >= -1 && c->mask_token_id < c->vocab, "mask %d", c->mask_token_id);
    FZ_CHECK(c->family != FL_FAMILY_FOGLINE || c->mask_token_id >= 0, "fogline without mask");
    FZ_CHECK(c->bos_id >= -1 && c->bos_id < c->vocab, "bos %d", c->bos_id);
    FZ_CHECK(c->n_eos >= 0 && c->n_eos <= 8, "n_eos %d", c->n_eos);
    for (int i = 0; i < c->n_eos; i++)
        FZ_CHECK(c->eos_ids[i] >= 0 && c->eos_ids[i] < c->vocab, "eos %d", c->eos_ids[i]);
    FZ_CHECK(c->logits_shift == 0 || c->logits_shift == 1, "logits_shift %d", c->logits_shift);
    FZ_CHECK(c->quant >= FL_QUANT_NONE && c->quant < FL_QUANT_COUNT, "quant %d", (int)c->quant);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    FZ_CHECK(text != NULL, "out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    fl_config a, b;
    fl_err ea = {0}, eb = {0};
    int ra = fl_config_parse(&a, text, &ea);
    fz_check_err(ra, &ea, "fl_config_parse");
    if (!ra)
        check_config(&a);

    FILE *f = fopen(path, "wb");
    FZ_CHECK(f && fwrite(data, 1, size, f) == size && !fclose(f), "cannot write %s", path);
    int rb = fl_config_load(&b, dir, &eb);
    fz_check_err(rb, &eb, "fl_config_load");
    if (memchr(data, 0, size)) {
        FZ_CHECK(rb == FL_EFORMAT, "a config.json with a NUL byte loaded (rc %d)", rb);
    } else {
        FZ_CHECK(ra == rb, "parse gave %d, load gave %d (%s / %s)", ra, rb, ea.msg, eb.msg);
        FZ_CHECK(ra || !memcmp(&a, &b, sizeof a), "parse and load give different configs");
    }
    free(text);
    return 0;
}
