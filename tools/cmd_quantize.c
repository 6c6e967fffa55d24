/* deepinfer quantize IN.gguf OUT.gguf TYPE: rewrites a model with its
 * matrices in another weight type through the reference quantizers of
 * src/tensor (so the files are ours, not llama.cpp's). Every 2-D tensor is
 * dequantized to f32 and quantized to TYPE; 1-D tensors (norms) are copied.
 * K-quants need rows that are a multiple of 256: narrower matrices fall
 * back to FALLBACK_K (SmolLM2-135M: every 576-wide matrix, i.e. all but
 * ffn_down; llama.cpp falls back too, to q5_0). Re-quantizing an already
 * quantized file compounds the rounding: the outputs are for speed
 * comparisons on identical files, not for quality. */
#include "progress.h"
#include "tools.h"

#include "format/gguf.h"
#include "format/gguf_write.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FALLBACK_K DI_DTYPE_Q4_1

/* llama.cpp's general.file_type ids ("mostly TYPE") for the types we write. */
static int file_type_of(di_dtype t) {
    switch (t) {
    case DI_DTYPE_F32: return 0;
    case DI_DTYPE_F16: return 1;
    case DI_DTYPE_Q4_0: return 2;
    case DI_DTYPE_Q4_1: return 3;
    case DI_DTYPE_Q8_0: return 7;
    case DI_DTYPE_Q4_K: return 14; /* Q4_K_S */
    case DI_DTYPE_Q6_K: return 18;
    default: return -1;
    }
}

int di_cmd_quantize(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: deepinfer quantize IN.gguf OUT.gguf TYPE\n  TYPE: f32 f16 q4_0 q4_1 q8_0 q4_K q6_K\n");
        return 0;
    }
    if (argc != 4) {
        fprintf(stderr, "usage: deepinfer quantize IN.gguf OUT.gguf TYPE\n");
        return 2;
    }
    di_dtype target = DI_DTYPE_COUNT;
    for (int d = 0; d < DI_DTYPE_COUNT; d++) {
        const di_dtype_traits *tr = di_dtype_traits_of((di_dtype)d);
        if (tr && !strcmp(tr->name, argv[3]) && file_type_of((di_dtype)d) >= 0 && tr->from_float) target = (di_dtype)d;
    }
    if (target == DI_DTYPE_COUNT) {
        fprintf(stderr, "deepinfer quantize: type '%s' not one of f32 f16 q4_0 q4_1 q8_0 q4_K q6_K\n", argv[3]);
        return 2;
    }
    /* The output is written to OUT.tmp and renamed over OUT only when
     * complete (di_gguf_write_file); still, OUT naming the input would
     * replace the model being read, so that is refused outright. */
    struct stat st_in, st_out;
    if (stat(argv[1], &st_in) == 0 && stat(argv[2], &st_out) == 0 && st_in.st_dev == st_out.st_dev &&
        st_in.st_ino == st_out.st_ino) {
        fprintf(stderr, "deepinfer quantize: %s is the input file; write to another path\n", argv[2]);
        return 2;
    }
    di_error err;
    di_gguf *g;
    if (di_gguf_open(argv[1], &g, &err)) {
        fprintf(stderr, "deepinfer quantize: %s\n", err.msg);
        return 1;
    }
    uint64_t n = di_gguf_tensor_count(g);
    di_gguf_wtensor *wt = calloc(n ? n : 1, sizeof *wt);
    void **owned = calloc(n ? n : 1, sizeof *owned);
    int rc = wt && owned ? 0 : 1;
    int n_changed = 0, n_fallback = 0;
    di_progress prog;
    di_progress_start(&prog, "quantize", (int64_t)n, "tensors/s");
    for (uint64_t i = 0; !rc && i < n; i++) {
        di_progress_update(&prog, (int64_t)i, (double)i);
        const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
        wt[i] = (di_gguf_wtensor){t->name, t->n_dims, {t->ne[0], t->ne[1], t->ne[2], t->ne[3]},
                                  t->ggml_type, t->data, t->n_bytes};
        const di_dtype_traits *src = di_dtype_traits_of(t->dtype);
        if (t->n_dims != 2 || !src || !src->to_float) continue;
        di_dtype dt = target;
        if (t->ne[0] % di_dtype_traits_of(dt)->block_size != 0) {
            dt = FALLBACK_K;
            n_fallback++;
        }
        if (t->ne[0] % di_dtype_traits_of(dt)->block_size != 0 || dt == t->dtype) continue; /* kept as is */
        uint64_t rb_in, rb_out;
        if (di_dtype_row_bytes(t->dtype, t->ne[0], &rb_in) || di_dtype_row_bytes(dt, t->ne[0], &rb_out)) continue;
        uint8_t *out = malloc((size_t)(rb_out * (uint64_t)t->ne[1]));
        float *row = malloc(sizeof(float) * (size_t)t->ne[0]);
        if (!out || !row) {
            free(out);
            free(row);
            fprintf(stderr, "deepinfer quantize: out of memory\n");
            rc = 1;
            break;
        }
        for (int64_t r = 0; r < t->ne[1]; r++) {
            src->to_float((const uint8_t *)t->data + (uint64_t)r * rb_in, row, t->ne[0]);
            di_dtype_traits_of(dt)->from_float(row, out + (uint64_t)r * rb_out, t->ne[0]);
        }
        free(row);
        owned[i] = out;
        wt[i].ggml_type = (uint32_t)di_dtype_traits_of(dt)->ggml_type;
        wt[i].data = out;
        wt[i].n_bytes = rb_out * (uint64_t)t->ne[1];
        n_changed++;
    }
    di_progress_end(&prog, (int64_t)n, (double)n);
    if (!rc && di_gguf_write_file(argv[2], g, "general.file_type", (uint32_t)file_type_of(target), wt, n, &err)) {
        fprintf(stderr, "deepinfer quantize: %s\n", err.msg);
        rc = 1;
    }
    if (!rc)
        fprintf(stderr, "quantize: wrote %s: %d tensors converted; %d matrices with rows not a multiple of %d are %s\n",
                argv[2], n_changed, n_fallback, (int)di_dtype_traits_of(target)->block_size,
                di_dtype_traits_of(FALLBACK_K)->name);
    for (uint64_t i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(wt);
    di_gguf_close(g);
    return rc;
}
