/* libFuzzer target for the GGUF reader: parse the input as a GGUF image and,
 * when it parses, run the llama hyper-parameter and tensor validation too,
 * then touch every kv and tensor accessor so a bad pointer shows up under
 * ASan. Crashes found are kept in tests/data/fuzz-regress/gguf/. */
#include "format/gguf.h"
#include "model/llama_hparams.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    di_gguf *g = NULL;
    di_error err;
    if (di_gguf_open_memory(data, size, "fuzz.gguf", &g, &err) != DI_OK) return 0;
    volatile uint64_t sink = 0;
    for (uint64_t i = 0; i < di_gguf_kv_count(g); i++) {
        const di_gguf_kv *kv = di_gguf_kv_at(g, i);
        sink += (uint64_t)(di_gguf_find_kv(g, kv->key) != NULL);
        if (kv->type == DI_GGUF_STRING && kv->str.len) sink += (uint8_t)kv->str.ptr[kv->str.len - 1];
        if (kv->type == DI_GGUF_ARRAY && kv->arr_len) {
            int64_t v;
            double d;
            di_gguf_str s;
            if (di_gguf_arr_get_i64(kv, kv->arr_len - 1, &v) == DI_OK) sink += (uint64_t)v;
            if (di_gguf_arr_get_f64(kv, 0, &d) == DI_OK) sink += (uint64_t)(d == d);
            if (di_gguf_arr_get_str(kv, kv->arr_len - 1, &s) == DI_OK && s.len)
                sink += (uint8_t)s.ptr[s.len - 1];
        }
    }
    for (uint64_t i = 0; i < di_gguf_tensor_count(g); i++) {
        const di_gguf_tensor *t = di_gguf_tensor_at(g, i);
        sink += (uint64_t)(di_gguf_find_tensor(g, t->name) == t);
        if (t->n_bytes) sink += ((const uint8_t *)t->data)[t->n_bytes - 1];
    }
    di_llama_hparams hp;
    if (di_llama_hparams_from_gguf(g, &hp, &err) == DI_OK) {
        di_llama_tensors lt;
        di_llama_validate_tensors(g, &hp, &lt, &err);
        di_llama_tensors_free(&lt);
    }
    (void)sink;
    di_gguf_close(g);
    return 0;
}
