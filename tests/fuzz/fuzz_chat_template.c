/* fuzz_chat_template.c: the four built-in chat renderers (fogline, chatml, qwen3, ling: the
 * default model's tokenizer loaded with each override) on arbitrary roles and content, and
 * template recognition (fl_chat_detect) on arbitrary text. (Ling's tool JSON is not fuzzed here:
 * test_tokenizer_chat and tests/node/tok_chat.mjs cover it.)
 *
 * Input: byte 0 is flags (bits 0-1 renderer, 2 add_generation_prompt, 3 enable_thinking,
 * 4 raw roles, 5 NULL opts, 6 also run fl_chat_detect on the rest); the rest is split at NUL
 * bytes into role, content, role, content, ... With raw roles off, a role field picks one of
 * system/user/assistant/tool/developer by its first byte. Checks: the renderer fails exactly
 * when the conversation is empty or (chatml, qwen3) a role is not system/user/assistant or
 * (ling) not system/user/assistant/tool, with a message, and then writes nothing; fogline's
 * output is exactly its turns; chatml starts with a system turn, ling with its system header;
 * the generation prompt (and qwen3's empty think block) ends the text when asked; the rendered
 * text tokenizes and decodes (fuzz_common.c). */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

#define MAX_MSGS 64

static fl_tokenizer *tok[4]; /* fogline, chatml, qwen3, ling */
static const fl_chat_kind kinds[4] = {FL_CHAT_FOGLINE, FL_CHAT_CHATML, FL_CHAT_QWEN3, FL_CHAT_LING};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static const char *const names[4] = {NULL, "chatml", "qwen3", "ling"};
    for (int i = 0; i < 4; i++) {
        tok[i] = fz_load_tokenizer(names[i]);
        FZ_CHECK(fl_tokenizer_chat_kind(tok[i]) == kinds[i], "override %s gave kind %s",
                 names[i] ? names[i] : "(none)", fl_chat_kind_name(fl_tokenizer_chat_kind(tok[i])));
    }
    return 0;
}

static bool ends_with(const fl_buf *b, const char *s)
{
    size_t n = strlen(s);
    return b->len >= n && !memcmp(b->data + b->len - n, s, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned flags = data[0];
    int which = (int)(flags & 3);
    fl_chat_opts opts = {.add_generation_prompt = flags & 4, .enable_thinking = flags & 8};
    bool raw_roles = flags & 16, null_opts = flags & 32;
    if (null_opts)
        opts = (fl_chat_opts){false, true}; /* the documented default */

    /* one NUL-terminated copy of the rest; fields are pointers into it */
    char *text = malloc(size);
    FZ_CHECK(text != NULL, "out of memory");
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    if (flags & 64) {
        fl_chat_kind k = fl_chat_detect(text);
        FZ_CHECK(k >= FL_CHAT_NONE && k <= FL_CHAT_LING, "fl_chat_detect gave %d", (int)k);
    }

    static const char *const roles[5] = {"system", "user", "assistant", "tool", "developer"};
    fl_chat_msg msgs[MAX_MSGS];
    size_t n = 0;
    const char *p = text, *end = text + (size - 1);
    while (p < end && n < MAX_MSGS) {
        const char *role = p;
        p += strlen(p) + 1;
        if (p > end)
            break; /* a role without content */
        const char *content = p;
        p += strlen(p) + 1;
        msgs[n].role = raw_roles ? role : roles[(unsigned char)role[0] % 5];
        msgs[n].content = content;
        n++;
    }

    bool want_ok = n > 0;
    if (kinds[which] != FL_CHAT_FOGLINE)
        for (size_t i = 0; i < n; i++)
            if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") &&
                strcmp(msgs[i].role, "assistant") &&
                (kinds[which] != FL_CHAT_LING || strcmp(msgs[i].role, "tool")))
                want_ok = false;

    fl_buf out = {0};
    fl_err e = {0};
    int rc = fl_chat_render(tok[which], msgs, n, null_opts ? NULL : &opts, &out, &e);
    fz_check_err(rc, &e, "fl_chat_render");
    FZ_CHECK((rc == 0) == want_ok, "%s renderer: rc %d for %zu messages, expected %s (%s)",
             fl_chat_kind_name(kinds[which]), rc, n, want_ok ? "success" : "an error", e.msg);
    if (rc) {
        FZ_CHECK(out.len == 0, "a failed render wrote %zu bytes", out.len);
        fl_buf_free(&out);
        free(text);
        return 0;
    }
    if (kinds[which] == FL_CHAT_FOGLINE) {
        fl_buf want = {0};
        for (size_t i = 0; i < n; i++)
            FZ_CHECK(!fl_buf_puts(&want, "<|im_start|>") && !fl_buf_puts(&want, msgs[i].role) &&
                         !fl_buf_puts(&want, "\n") && !fl_buf_puts(&want, msgs[i].content) &&
                         !fl_buf_puts(&want, "<|im_end|>\n"),
                     "out of memory");
        if (opts.add_generation_prompt)
            FZ_CHECK(!fl_buf_puts(&want, "<|im_start|>assistant\n"), "out of memory");
        FZ_CHECK(fz_same(out.data, out.len, want.data, want.len),
                 "fogline render differs from its turns (%zu vs %zu bytes)", out.len, want.len);
        fl_buf_free(&want);
    }
    if (kinds[which] == FL_CHAT_CHATML)
        FZ_CHECK(out.len >= 19 && !memcmp(out.data, "<|im_start|>system\n", 19),
                 "chatml render does not start with a system turn");
    if (kinds[which] == FL_CHAT_LING)
        FZ_CHECK(out.len >= 19 && !memcmp(out.data, "<role>SYSTEM</role>", 19) &&
                     strstr(out.data, "detailed thinking off<|role_end|>"),
                 "ling render does not start with its system header");
    if (opts.add_generation_prompt) {
        const char *tail = kinds[which] == FL_CHAT_LING ? "<role>ASSISTANT</role>"
                           : kinds[which] == FL_CHAT_QWEN3 && !opts.enable_thinking
                               ? "<|im_start|>assistant\n<think>\n\n</think>\n\n"
                               : "<|im_start|>assistant\n";
        FZ_CHECK(ends_with(&out, tail), "the generation prompt does not end the text");
    }
    FZ_CHECK(out.data && out.data[out.len] == '\0', "render output not terminated");
    FZ_CHECK(fz_tokenize_roundtrip(tok[which], out.data, out.len) == 0,
             "the rendered chat fails to tokenize");
    fl_buf_free(&out);
    free(text);
    return 0;
}
