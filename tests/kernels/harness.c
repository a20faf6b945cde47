/* The verification kernels without Python: `harness KERNEL IN OUT` reads the kernel's arrays from IN, calls the
 * kernel's plain-C loop (gb300lane/spec/_kernels_core.h, the code the extension runs) and writes every array back
 * to OUT. Built natively and with a cross compiler (aarch64-linux-gnu-gcc -static, run under qemu-aarch64-static),
 * so the same inputs give what each architecture computes; tests/test_spec_kernels_aarch64.py compares them with
 * the extension's own results on this machine.
 *
 * File format (little-endian): int64 count; per array: int64 dtype (0 float32, 1 float64, 2 int64, 3 int32),
 * int64 ndim, int64 dims[ndim], then the C-ordered data. The arrays come in the extension's argument order
 * (accept's and support_step's `block` flag as a one-element int64 array; a kernel's trailing scalars as
 * one-element arrays: int64 for integers, float64 for floats). */
#include <stdio.h>
#include <stdlib.h>

#include "../../gb300lane/spec/_kernels_core.h"

#define MAX_ARRAYS 32

typedef struct {
    int64_t dtype, ndim, dims[4];
    size_t bytes;
    void *data;
} Array;

static const size_t ITEM[4] = {4, 8, 8, 4};

static void die(const char *what) {
    fprintf(stderr, "harness: %s\n", what);
    exit(2);
}

static int64_t read_i64(FILE *f) {
    int64_t v;
    if (fread(&v, sizeof v, 1, f) != 1) die("short input");
    return v;
}

static int read_arrays(const char *path, Array *a) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open the input");
    int64_t count = read_i64(f);
    if (count < 0 || count > MAX_ARRAYS) die("bad array count");
    for (int64_t i = 0; i < count; i++) {
        a[i].dtype = read_i64(f);
        a[i].ndim = read_i64(f);
        if (a[i].dtype < 0 || a[i].dtype > 3 || a[i].ndim < 0 || a[i].ndim > 4) die("bad array header");
        size_t n = 1;
        for (int64_t d = 0; d < a[i].ndim; d++) n *= (size_t)(a[i].dims[d] = read_i64(f));
        a[i].bytes = n * ITEM[a[i].dtype];
        a[i].data = calloc(a[i].bytes ? a[i].bytes : 1, 1);
        if (!a[i].data || fread(a[i].data, 1, a[i].bytes, f) != a[i].bytes) die("short array data");
    }
    fclose(f);
    return (int)count;
}

static void write_arrays(const char *path, const Array *a, int count) {
    FILE *f = fopen(path, "wb");
    if (!f) die("cannot open the output");
    int64_t c = count;
    fwrite(&c, sizeof c, 1, f);
    for (int i = 0; i < count; i++) {
        fwrite(&a[i].dtype, sizeof(int64_t), 1, f);
        fwrite(&a[i].ndim, sizeof(int64_t), 1, f);
        fwrite(a[i].dims, sizeof(int64_t), (size_t)a[i].ndim, f);
        fwrite(a[i].data, 1, a[i].bytes, f);
    }
    if (fclose(f) != 0) die("cannot write the output");
}

static char pk(const Array *a) { return a->dtype == 0 ? 'f' : 'd'; }

int main(int argc, char **argv) {
    if (argc != 4) die("usage: harness KERNEL IN OUT");
    Array a[MAX_ARRAYS];
    int n = read_arrays(argv[2], a);
    const char *k = argv[1];
    if (!strcmp(k, "sample_rows") && n == 3) {
        k_sample_rows(a[0].dtype == 0, a[0].data, a[0].dims[0], a[0].dims[1], a[1].data, a[2].data);
    } else if (!strcmp(k, "accept") && n == 8) {
        double *joints = malloc((size_t)a[1].dims[1] * sizeof(double));
        k_accept((int)((int64_t *)a[0].data)[0], pk(&a[1]), a[1].data, a[2].data, a[1].dims[1], a[1].dims[2],
                 a[3].data, a[4].data, a[4].dims[0], a[5].data, a[6].data, a[7].data, joints);
        free(joints);
    } else if (!strcmp(k, "sample_correction") && n == 7) {
        k_sample_correction(pk(&a[0]), a[0].data, a[1].data, a[0].dims[1], a[0].dims[2], a[2].data, a[3].data,
                            a[4].data, a[5].data, a[2].dims[0], a[6].data);
    } else if (!strcmp(k, "sample_support") && n == 7) {
        float *dense_q = calloc((size_t)(a[0].dims[1] > 0 ? a[0].dims[1] : 1), sizeof(float));
        k_sample_support(a[0].data, a[0].dims[0], a[0].dims[1], a[1].data, a[2].data, a[2].dims[1], a[3].data,
                         a[4].data, a[5].data, a[6].data, dense_q);
        free(dense_q);
    } else if (!strcmp(k, "support_accept") && n == 6) {
        double *joints = malloc((size_t)(a[0].dims[1] + 1) * sizeof(double));
        k_support_accept(a[0].data, a[1].data, a[0].dims[0], a[0].dims[1], a[0].dims[2], a[2].data, a[3].data,
                         a[4].data, a[5].data, joints);
        free(joints);
    } else if (!strcmp(k, "draft_slot") && n == 12) {
        k_draft_slot(a[0].data, a[0].dims[1], a[1].data, a[1].dims[0], a[2].data, a[3].data, a[3].dims[0], a[4].data,
                     a[5].data, a[6].data, a[7].data, a[8].data, a[9].data, a[10].data, a[11].data);
    } else if (!strcmp(k, "target_rows") && n == 15) {
        k_target_rows(a[0].data, a[1].data, a[2].data, a[0].dims[0], a[3].dims[0], a[3].data, a[4].data, a[4].dims[0],
                      a[5].data, a[6].data, a[7].data, a[8].data, a[9].data, a[9].dims[0], a[10].data, a[11].data,
                      a[12].data, a[13].data, a[14].data);
    } else if (!strcmp(k, "anchor_rows") && n == 23) {
        const int64_t *iv[4] = {a[17].data, a[18].data, a[19].data, a[20].data};
        k_anchor_rows(a[0].data, a[1].data, a[2].data, a[3].data, a[0].dims[0], *iv[0], *iv[1], a[4].data,
                      a[4].dims[1], a[5].data, a[5].dims[0], a[6].data, a[7].data, a[8].data, a[9].data,
                      (uint64_t)*iv[2], (uint64_t)*iv[3], a[10].data, *(double *)a[21].data, *(double *)a[22].data,
                      a[11].data, a[12].data, a[13].data, a[14].data, a[15].data, a[16].data);
    } else if (!strcmp(k, "anchor_logits") && n == 5) {
        k_anchor_logits(a[0].data, a[1].data, a[2].data, a[0].dims[0], a[0].dims[1], *(double *)a[4].data, a[3].data);
    } else if (!strcmp(k, "anchor_finish") && n == 14) {
        k_anchor_finish(a[0].data, a[0].dims[0], a[1].data, a[2].data, a[1].dims[1], a[3].data, a[4].data, a[5].data,
                        a[6].data, a[7].data, a[8].data, *(int64_t *)a[13].data, a[9].data, a[10].data, a[11].data,
                        a[12].data);
    } else if (!strcmp(k, "support_step") && n == 24) {
        ptrdiff_t batch = a[1].dims[0], kk = a[1].dims[1], width = a[1].dims[2], vocab = a[10].dims[0];
        double *joints = malloc((size_t)(kk + 1) * sizeof(double));
        float *rowbuf = malloc((size_t)(batch > 0 ? batch : 1) * (size_t)vocab * sizeof(float));
        float *dense_q = calloc((size_t)vocab, sizeof(float));
        if (((int64_t *)a[0].data)[0])
            k_support_accept(a[1].data, a[2].data, batch, kk, width, a[3].data, a[4].data, a[21].data, a[23].data,
                             joints);
        else
            k_support_standard(a[1].data, a[2].data, batch, kk, width, a[3].data, a[4].data, a[21].data, a[23].data);
        k_support_emit(batch, kk, width, a[2].data, a[6].data, a[7].data, a[8].data, a[9].data, a[5].data,
                       a[21].data, a[23].data, vocab, a[10].data, a[11].data, a[11].dims[0], a[12].data, a[13].data,
                       a[14].data, a[15].data, a[16].data, a[16].dims[0], a[17].data, a[18].data, a[19].data,
                       a[20].data, a[22].data, rowbuf, dense_q);
        free(joints);
        free(rowbuf);
        free(dense_q);
    } else {
        die("unknown kernel or wrong number of arrays");
    }
    write_arrays(argv[3], a, n);
    return 0;
}
