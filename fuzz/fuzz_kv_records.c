/* libFuzzer target: KV records as the disk tier and /v1/kv/import read
 * them (seeds: tests/data/malformed/kv_records): a stream of records split
 * by their headers, each parsed against the corpus geometry (model id
 * (1, 2), block 4, 64-byte payload) and against the one the header claims.
 * Only crashes and sanitizer reports matter. */
#include "kv/kv_record.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1); /* aligned, as the readers parse */
    if (!copy) return 0;
    memcpy(copy, data, size);
    const di_kv_key model = {1, 2};
    size_t at = 0;
    while (at < size) {
        size_t len = di_kv_record_peek_size(copy + at, size - at);
        if (len == 0 || len > size - at) len = size - at;
        uint8_t *rec = malloc(len ? len : 1);
        if (!rec) break;
        memcpy(rec, copy + at, len);
        di_kv_record_view v;
        di_error err;
        (void)di_kv_record_parse(rec, len, model, 4, 64, &v, &err);
        uint64_t pay = 0;
        if (len >= DI_KV_RECORD_HEADER_BYTES) memcpy(&pay, rec + 56, sizeof pay);
        if (di_kv_record_parse(rec, len, model, 4, pay, &v, &err) == DI_OK && v.n_prefix_tokens > 0) {
            volatile int32_t sink = v.tokens[v.n_prefix_tokens - 1];
            (void)sink;
        }
        free(rec);
        at += len;
    }
    free(copy);
    return 0;
}
