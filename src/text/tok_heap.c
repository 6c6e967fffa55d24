/* The merge-candidate priority queue shared by byte-level BPE (lowest rank
 * first) and SentencePiece BPE (highest score first). Elements are copied
 * as fixed-size byte blocks so one heap serves both candidate structs. */
#include "tok_internal.h"

#include "base/alloc.h"

#include <string.h>

#define ELEM(h, i) ((char *)(h) + (size_t)(i) * TOK_HEAP_ELEM_BYTES)

bool tok_heap_push(tok_scratch *s, const void *elem, tok_heap_less_fn less) {
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        void *p = di_realloc_array(s->heap, cap, TOK_HEAP_ELEM_BYTES);
        if (!p) return false;
        s->heap = p;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!less(elem, ELEM(s->heap, parent))) break;
        memcpy(ELEM(s->heap, i), ELEM(s->heap, parent), TOK_HEAP_ELEM_BYTES);
        i = parent;
    }
    memcpy(ELEM(s->heap, i), elem, TOK_HEAP_ELEM_BYTES);
    return true;
}

void tok_heap_pop(tok_scratch *s, void *top, tok_heap_less_fn less) {
    char last[TOK_HEAP_ELEM_BYTES];
    memcpy(top, ELEM(s->heap, 0), TOK_HEAP_ELEM_BYTES);
    memcpy(last, ELEM(s->heap, --s->heap_n), TOK_HEAP_ELEM_BYTES);
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const void *best = last;
        if (l < n && less(ELEM(s->heap, l), best)) m = l, best = ELEM(s->heap, l);
        if (r < n && less(ELEM(s->heap, r), best)) m = r;
        if (m == i) break;
        memcpy(ELEM(s->heap, i), ELEM(s->heap, m), TOK_HEAP_ELEM_BYTES);
        i = m;
    }
    if (n) memcpy(ELEM(s->heap, i), last, TOK_HEAP_ELEM_BYTES);
}
