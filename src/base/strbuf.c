#include "base/strbuf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

bool di_strbuf_put(di_strbuf *b, const void *s, size_t n) {
    if (b->failed) return false;
    if (n == 0) return true;
    if (n > SIZE_MAX - 1 - b->len) {
        b->failed = true;
        return false;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) {
                cap = b->len + n + 1;
                break;
            }
            cap *= 2;
        }
        char *d = realloc(b->data, cap);
        if (!d) {
            b->failed = true;
            return false;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool di_strbuf_puts(di_strbuf *b, const char *s) { return di_strbuf_put(b, s, strlen(s)); }

void di_strbuf_sink(void *b, const char *s, size_t n) { (void)di_strbuf_put(b, s, n); }

void di_strbuf_free(di_strbuf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}
