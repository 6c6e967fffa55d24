/* A growable byte string, always NUL-terminated once anything was put in
 * it. An allocation failure makes it sticky-failed: later puts do nothing
 * and return false, so a builder may put many pieces and check once. */
#ifndef DI_BASE_STRBUF_H
#define DI_BASE_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

typedef struct di_strbuf {
    char *data;
    size_t len, cap;
    bool failed;
} di_strbuf;

/* Appends n bytes of s (n may be 0); false once the buffer failed. */
bool di_strbuf_put(di_strbuf *b, const void *s, size_t n);
bool di_strbuf_puts(di_strbuf *b, const char *s);
/* di_strbuf_put as a (user, bytes, length) callback. */
void di_strbuf_sink(void *b, const char *s, size_t n);
/* Frees the bytes and empties b (failed cleared). */
void di_strbuf_free(di_strbuf *b);

#endif
