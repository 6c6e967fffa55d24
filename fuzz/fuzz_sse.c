/* libFuzzer target: the `bench serve` SSE parser fed a server's bytes in two
 * pieces (the split point taken from the first byte), each event parsed as
 * JSON like the client does, plus the same bytes as a workload spec and a
 * length spec (seeds: tests/data/malformed/sse). Only crashes, leaks and
 * sanitizer reports matter. */
#include "loadgen/loadgen.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A small event limit so the too-long paths are reached too. */
#define FUZZ_MAX_EVENT 4096

static int on_event(void *user, const char *d, size_t n) {
    size_t *count = user;
    json_t *j = json_loadb(d, n, 0, NULL);
    json_decref(j);
    return ++*count > 10000;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    size_t cut = data[0] % size;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (cut > n) cut = n;
    di_sse_parser p;
    di_sse_init(&p, FUZZ_MAX_EVENT);
    di_error err;
    size_t count = 0;
    if (!di_sse_feed(&p, s, cut, on_event, &count, &err)) (void)di_sse_feed(&p, s + cut, n - cut, on_event, &count, &err);
    (void)di_sse_pending(&p);
    di_sse_free(&p);

    char *spec = malloc(n + 1);
    if (!spec) return 0;
    memcpy(spec, s, n);
    spec[n] = 0;
    di_lg_workload w;
    if (!di_lg_workload_parse(spec, &w, &err)) {
        w.prompts_path[0] = 0; /* never open files named by the input */
        json_decref(di_lg_workload_json(&w));
    }
    di_lg_workload_free(&w);
    di_lg_len d;
    if (!di_lg_len_parse(spec, &d, &err)) {
        uint64_t rng = 1;
        for (int i = 0; i < 8; i++) (void)di_lg_len_sample(&d, &rng);
    }
    free(spec);
    return 0;
}
