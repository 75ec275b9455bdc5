/* test_util.c: dtype conversions, the byte buffer, removing a tree. */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>
#include "check.h"
#include "fl.h"

static int put(const char *dir, const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* fl_rmtree: nested directories, files, an empty directory and a link that points out of the
   tree; the tree goes, what the link points at stays. */
static void test_rmtree(void)
{
    char root[] = "/tmp/fl-util-rmtree-XXXXXX", outside[] = "/tmp/fl-util-keep-XXXXXX";
    CHECK(mkdtemp(root) && mkdtemp(outside), "mkdtemp");
    char p[512], q[512];
    CHECK(put(outside, "kept", "stay") == 0, "the outside file");
    snprintf(p, sizeof p, "%s/a", root);
    CHECK(mkdir(p, 0755) == 0, "mkdir a");
    snprintf(p, sizeof p, "%s/a/b", root);
    CHECK(mkdir(p, 0755) == 0, "mkdir a/b");
    snprintf(p, sizeof p, "%s/empty", root);
    CHECK(mkdir(p, 0700) == 0, "mkdir empty");
    CHECK(put(root, "top.kv", "x") == 0 && put(root, "a/mid", "y") == 0 &&
              put(root, "a/b/deep.kv", "z") == 0,
          "files");
    snprintf(p, sizeof p, "%s/a/link", root);
    CHECK(symlink(outside, p) == 0, "a link to a directory outside");
    CHECK(fl_rmtree(root) == 0, "rmtree: %s", strerror(errno));
    CHECK(access(root, F_OK) != 0 && errno == ENOENT, "the tree is gone");
    snprintf(q, sizeof q, "%s/kept", outside);
    CHECK(access(q, F_OK) == 0, "what the link pointed at stays");
    errno = 0;
    CHECK(fl_rmtree(root) == -1 && errno == ENOENT, "a missing path: -1, ENOENT (%d)", errno);
    CHECK(fl_rmtree("") == -1 && errno == EINVAL, "an empty path: -1, EINVAL");
    CHECK(fl_rmtree(q) == 0 && access(q, F_OK) != 0, "a plain file is removed");
    CHECK(fl_rmtree(outside) == 0 && access(outside, F_OK) != 0, "an emptied directory too");
}

int main(void)
{
    /* bf16: exact round trip for representable values, round-to-nearest-even otherwise */
    float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 3.140625f, 1e-30f, 65504.0f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float back = fl_bf16_to_f32(fl_f32_to_bf16(vals[i]));
        float rel = vals[i] ? (back - vals[i]) / vals[i] : back;
        CHECK(rel < 0.004f && rel > -0.004f, "bf16 %g -> %g", vals[i], back);
    }
    CHECK(fl_f32_to_bf16(1.0f) == 0x3f80, "bf16(1) = %x", fl_f32_to_bf16(1.0f));
    /* 1 + 2^-8 is a tie between bf16 1.0 and 1.0078125: even wins (1.0) */
    CHECK(fl_f32_to_bf16(1.00390625f) == 0x3f80, "tie to even: %x", fl_f32_to_bf16(1.00390625f));
    /* f16 */
    CHECK(fl_f16_to_f32(0x3c00) == 1.0f, "f16 1.0");
    CHECK(fl_f16_to_f32(0xc000) == -2.0f, "f16 -2.0");
    CHECK(fl_f16_to_f32(0x7bff) == 65504.0f, "f16 max");
    CHECK(fl_f16_to_f32(0x0001) == 5.9604644775390625e-08f, "f16 smallest subnormal: %g",
          fl_f16_to_f32(0x0001));
    CHECK(fl_f16_to_f32(0x03ff) == 6.097555160522461e-05f, "f16 largest subnormal");
    /* buffer */
    fl_buf b = {0};
    for (int i = 0; i < 1000; i++)
        fl_buf_printf(&b, "%d,", i);
    CHECK(b.len == 3890, "buf len %zu", b.len);
    CHECK(!strncmp(b.data, "0,1,2,", 6), "buf start");
    fl_buf_free(&b);
    /* a failed append is sticky: what follows is a no-op, the one check at the end sees it,
       and what came before stays as it was (a request that can never be met stands for an
       allocation that fails) */
    CHECK(fl_buf_puts(&b, "data: ") == 0 && b.err == 0, "buf ok");
    CHECK(fl_buf_append(&b, "x", SIZE_MAX - 3) == FL_ENOMEM, "huge append fails");
    CHECK(b.err == FL_ENOMEM && b.len == 6, "error recorded, nothing appended: err %d len %zu",
          b.err, b.len);
    CHECK(fl_buf_puts(&b, "{}\n\n") == FL_ENOMEM, "append after a failure fails");
    CHECK(fl_buf_printf(&b, "%d", 7) == FL_ENOMEM, "printf after a failure fails");
    CHECK(b.len == 6 && !strcmp(b.data, "data: "), "nothing appended after the failure: %s", b.data);
    fl_buf_fail(&b, FL_EINVAL);
    CHECK(b.err == FL_ENOMEM, "the first error stays");
    fl_buf_rewind(&b, 0);
    CHECK(b.err == 0 && b.len == 0, "rewind clears the error");
    CHECK(fl_buf_puts(&b, "ok") == 0 && !strcmp(b.data, "ok"), "appends work after a rewind");
    fl_buf_fail(&b, FL_ENOMEM);
    CHECK(fl_buf_puts(&b, "more") == FL_ENOMEM && b.len == 2, "a caller's failure is sticky too");
    fl_buf_free(&b);
    CHECK(b.err == 0 && fl_buf_puts(&b, "fresh") == 0, "free resets the buffer");
    fl_buf_free(&b);
    fl_err e = {0};
    CHECK(fl_err_set(&e, FL_EFORMAT, "bad %s", "thing") == FL_EFORMAT, "err code");
    fl_err_prefix(&e, "file %d", 3);
    CHECK(!strcmp(e.msg, "file 3: bad thing"), "prefix: %s", e.msg);
    test_rmtree();
    return check_summary("test_util");
}
