/* test_outline.c: parsing the outline a model writes for a skeleton reply: good outlines, and
 * every malformed kind (no points, one point, duplicates, too many, bad numbering, stray text,
 * overlong or empty points) gives 0 and a reason, so the reply is decoded plainly. */
#include "check.h"
#include "outline.h"

#include <string.h>

static int parse(const char *t, char **pts, const char **why)
{
    return srv_outline_parse(t, strlen(t), pts, why);
}

int main(void)
{
    char *pts[SRV_OUTLINE_MAX];
    const char *why = NULL;
    int n = parse("1. Where is my order 48213?\n2. What are your hours on Sunday?\n", pts, &why);
    CHECK(n == 2 && !strcmp(pts[0], "Where is my order 48213?") &&
              !strcmp(pts[1], "What are your hours on Sunday?"), "two points (%d)", n);
    srv_outline_free(pts, n);
    n = parse("  1)  Cancel order 11223.  \r\n\n 2) Send a new password to a@b.io\n3. Is the kettle in stock?",
              pts, &why);
    CHECK(n == 3 && !strcmp(pts[0], "Cancel order 11223.") && !strcmp(pts[2], "Is the kettle in stock?"),
          "'N)' and 'N.', blank lines, CRLF, surrounding space (%d)", n);
    srv_outline_free(pts, n);
    /* duplicates are dropped; what remains must still be two or more points */
    n = parse("1. Track 48213\n2. track 48213 \n3. Store hours?\n", pts, &why);
    CHECK(n == 2 && !strcmp(pts[1], "Store hours?"), "a duplicate point is dropped (%d)", n);
    srv_outline_free(pts, n);
    struct { const char *text, *why; } bad[] = {
        {"", "no points"},
        {"\n\n  \n", "no points"},
        {"1. Only one thing", "only one point"},
        {"1. Track 48213\n2. Track 48213", "only one point"},
        {"Sure! Here is what you asked.", "not a numbered point"},
        {"1. a\nand then some\n2. b", "not a numbered point"},
        {"2. starts at two\n3. b", "numbered 1, 2, 3"},
        {"1. a\n3. skips\n", "numbered 1, 2, 3"},
        {"1. a\n1. b\n", "numbered 1, 2, 3"},
        {"1.no space\n2. b", "not a numbered point"},
        {"1. \n2. b", "not a numbered point"},
        {"1. a\n2. b\n3. c\n4. d\n5. e\n6. f\n7. g\n8. h\n9. i\n10. j\n11. k", "more than 10"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why = NULL;
        n = parse(bad[i].text, pts, &why);
        CHECK(n == 0 && why && strstr(why, bad[i].why), "bad outline %zu: %d, reason '%s'", i, n,
              why ? why : "(none)");
    }
    /* a point longer than SRV_POINT_MAX */
    char big[SRV_POINT_MAX + 64] = "1. ";
    memset(big + 3, 'x', SRV_POINT_MAX + 1);
    big[3 + SRV_POINT_MAX + 1] = 0;
    strcat(big, "\n2. b");
    n = parse(big, pts, &why);
    CHECK(n == 0 && strstr(why, "too long"), "an overlong point: %s", why ? why : "");
    /* exactly ten points is fine */
    n = parse("1. a\n2. b\n3. c\n4. d\n5. e\n6. f\n7. g\n8. h\n9. i\n10. j", pts, &why);
    CHECK(n == 10 && !strcmp(pts[9], "j"), "ten points (%d)", n);
    srv_outline_free(pts, n);
    /* not NUL-terminated input: len is honoured */
    const char *t = "1. a\n2. b\n3. c";
    n = srv_outline_parse(t, 9, pts, &why);
    CHECK(n == 2, "len honoured (%d)", n);
    srv_outline_free(pts, n);
    return check_summary("test_outline");
}
