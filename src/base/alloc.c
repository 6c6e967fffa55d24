#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

void *di_calloc(size_t n, size_t size) {
    if (n == 0 || size == 0) return calloc(1, 1);
    return calloc(n, size);
}

void *di_malloc_array(size_t n, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) return NULL;
    return malloc(bytes ? bytes : 1);
}

void *di_realloc_array(void *p, size_t n, size_t size) {
    size_t bytes;
    if (__builtin_mul_overflow(n, size, &bytes)) return NULL;
    return realloc(p, bytes ? bytes : 1);
}

char *di_strdup(const char *s) { return di_strndup(s, strlen(s)); }

char *di_strndup(const char *s, size_t n) {
    char *r = malloc(n + 1);
    if (!r) return NULL;
    memcpy(r, s, n);
    r[n] = '\0';
    return r;
}
