/* fuzz_safetensors.c: safetensors headers and sharded-model indexes, the loader's untrusted
 * input. An input that starts with '{' is a model.safetensors.index.json, opened with
 * fl_weights_open in a directory that also holds two good shards (a.safetensors: x, y;
 * b.safetensors: z) and a truncated one (bad.safetensors). Anything else is a whole
 * .safetensors file, opened with fl_weights_open_file from a memfd (/proc/self/fd/N).
 * Checks: errors carry a message; an accepted file exposes only self-consistent tensors that
 * lie inside the file (every byte is read), sorted by unique name and found by fl_weights_get. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "safetensors.h"

static int memfd = -1;
static char memfd_path[64];
static char dir[4096], index_path[4200];

static void write_file(const char *name, const char *header, const void *payload, size_t plen,
                       size_t truncate_to)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t hlen = strlen(header);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    fl_buf b = {0};
    if (fl_buf_append(&b, len8, 8) || fl_buf_append(&b, header, hlen) ||
        fl_buf_append(&b, payload, plen))
        exit(2);
    FILE *f = fopen(p, "wb");
    size_t n = truncate_to && truncate_to < b.len ? truncate_to : b.len;
    if (!f || fwrite(b.data, 1, n, f) != n || fclose(f)) {
        perror(p);
        exit(2);
    }
    fl_buf_free(&b);
}

static void cleanup(void)
{
    static const char *const names[] = {"a.safetensors", "b.safetensors", "bad.safetensors",
                                        "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[4300];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    memfd = memfd_create("fl_fuzz_safetensors", MFD_CLOEXEC);
    if (memfd < 0) {
        perror("fuzz_safetensors: memfd_create");
        exit(2);
    }
    snprintf(memfd_path, sizeof memfd_path, "/proc/self/fd/%d", memfd);
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fl_fuzz_st.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz_safetensors: mkdtemp");
        exit(2);
    }
    atexit(cleanup);
    float xy[6] = {1, 2, 3, 4, 5, 6};
    uint16_t z[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
    write_file("a.safetensors",
               "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
               "\"y\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]}}",
               xy, sizeof xy, 0);
    write_file("b.safetensors",
               "{\"__metadata__\":{\"format\":\"pt\"},"
               "\"z\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[0,8]}}",
               z, sizeof z, 0);
    write_file("bad.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
               xy, sizeof xy, 40);
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    return 0;
}

/* file_size: an upper bound on any tensor's bytes (0: not known). */
static void check_weights(const fl_weights *w, size_t file_size)
{
    size_t n = fl_weights_count(w), total = 0;
    for (size_t i = 0; i < n; i++) {
        const fl_tensor *t = fl_weights_at(w, i);
        FZ_CHECK(t && t->name && t->name[0], "tensor %zu has no name", i);
        FZ_CHECK(fl_weights_get(w, t->name) == t, "tensor %s is not found by name", t->name);
        if (i > 0)
            FZ_CHECK(strcmp(fl_weights_at(w, i - 1)->name, t->name) < 0,
                     "tensors %s, %s not sorted and unique", fl_weights_at(w, i - 1)->name,
                     t->name);
        FZ_CHECK(t->dtype >= 0 && t->dtype < FL_DT_COUNT, "dtype %d", (int)t->dtype);
        FZ_CHECK(t->ndim >= 0 && t->ndim <= FL_MAX_DIMS, "ndim %d", t->ndim);
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            FZ_CHECK(t->shape[d] >= 0, "negative dim");
            numel *= t->shape[d]; /* bounded: the bytes fit the file */
        }
        FZ_CHECK(numel == t->numel, "%s: numel %lld, shape gives %lld", t->name,
                 (long long)t->numel, (long long)numel);
        FZ_CHECK(t->nbytes == (size_t)numel * fl_dtype_size(t->dtype), "%s: %zu bytes",
                 t->name, t->nbytes);
        FZ_CHECK(!file_size || t->nbytes <= file_size, "%s: %zu bytes in a %zu-byte file",
                 t->name, t->nbytes, file_size);
        /* touch every byte: a tensor outside its mapping faults here */
        const volatile unsigned char *p = t->data;
        unsigned sum = 0;
        for (size_t k = 0; k < t->nbytes; k++)
            sum += p[k];
        (void)sum;
        total += t->nbytes;
    }
    FZ_CHECK(total == fl_weights_total_bytes(w), "total bytes %zu, tensors sum to %zu",
             fl_weights_total_bytes(w), total);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fl_weights *w = NULL;
    fl_err e = {0};
    int rc;
    if (size > 0 && data[0] == '{') {
        FILE *f = fopen(index_path, "wb");
        FZ_CHECK(f && fwrite(data, 1, size, f) == size && !fclose(f), "cannot write the index");
        rc = fl_weights_open(&w, dir, &e);
        fz_check_err(rc, &e, "fl_weights_open(index)");
        if (!rc)
            check_weights(w, 0);
    } else {
        FZ_CHECK(!ftruncate(memfd, 0) && pwrite(memfd, data, size, 0) == (ssize_t)size,
                 "cannot write the memfd");
        rc = fl_weights_open_file(&w, memfd_path, &e);
        fz_check_err(rc, &e, "fl_weights_open_file");
        if (!rc)
            check_weights(w, size);
    }
    FZ_CHECK(rc ? w == NULL : w != NULL, "rc %d with weights %p", rc, (void *)w);
    fl_weights_close(w);
    return 0;
}
