/* check.h: the tiny assertion kit of fogline's C unit tests. A failed CHECK prints where and
 * why and marks the test failed; main returns check_summary(). */
#ifndef FL_CHECK_H
#define FL_CHECK_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_fails, check_count;

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        check_count++;                                                                    \
        if (!(cond)) {                                                                    \
            check_fails++;                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fputc('\n', stderr);                                                          \
        }                                                                                 \
    } while (0)

static inline int check_summary(const char *name)
{
    printf("%s: %d checks, %d failed\n", name, check_count, check_fails);
    return check_fails ? 1 : 0;
}

/* The directory of tests/ (set by ctest), for fixtures. */
static inline const char *check_tests_dir(void)
{
    const char *d = getenv("FL_TESTS_DIR");
    return d ? d : "tests";
}
#endif
