/* libFuzzer target: the safetensors single-file parser and the shard-index
 * parser on the same bytes (seeds: tests/data/{seeds,malformed}/safetensors,
 * which hold both kinds). Every accepted tensor's first and last byte are
 * read so a pointer outside the image shows up under ASan. */
#include "format/safetensors.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    di_error err;
    di_safetensors *st = NULL;
    volatile uint8_t sink = 0;
    if (di_safetensors_open_memory(data, size, "fuzz", &st, &err) == DI_OK) {
        uint64_t n = di_safetensors_tensor_count(st);
        for (uint64_t i = 0; i < n; i++) {
            const di_safetensors_tensor *t = di_safetensors_tensor_at(st, i);
            if (t->n_bytes) {
                const uint8_t *p = t->data;
                sink ^= p[0] ^ p[t->n_bytes - 1];
            }
            if (di_safetensors_find(st, t->name) != t) __builtin_trap();
            sink ^= (uint8_t)strlen(t->name);
        }
        for (uint64_t i = 0; i < di_safetensors_metadata_count(st); i++) {
            const char *k, *v;
            di_safetensors_metadata_at(st, i, &k, &v);
            sink ^= (uint8_t)(strlen(k) + strlen(v));
        }
        di_safetensors_close(st);
    }
    di_safetensors_index *idx = NULL;
    if (di_safetensors_index_parse(data, size, "fuzz.index.json", &idx, &err) == DI_OK) {
        for (uint64_t i = 0; i < di_safetensors_index_entry_count(idx); i++) {
            const char *t;
            uint32_t s;
            di_safetensors_index_entry_at(idx, i, &t, &s);
            if (s >= di_safetensors_index_shard_count(idx)) __builtin_trap();
            sink ^= (uint8_t)strlen(di_safetensors_index_shard_name(idx, s));
        }
        di_safetensors_index_free(idx);
    }
    (void)sink;
    return 0;
}
