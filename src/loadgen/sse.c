/* Incremental Server-Sent-Events parser for `bench serve`.
 *
 * A server's stream arrives in arbitrary pieces (a CRLF can be split across
 * two reads, an event across many), so the parser keeps the unfinished line
 * and the unfinished event between calls. Sizes are bounded: a server that
 * never ends a line cannot make us allocate without limit. */
#include "loadgen/loadgen.h"

#include "base/alloc.h"
#include "base/status.h"

#include <stdlib.h>
#include <string.h>

void di_sse_init(di_sse_parser *p, size_t max_event_bytes) {
    memset(p, 0, sizeof *p);
    p->max_event_bytes = max_event_bytes;
}

void di_sse_free(di_sse_parser *p) {
    free(p->line);
    free(p->data);
    memset(p, 0, sizeof *p);
}

bool di_sse_pending(const di_sse_parser *p) {
    return p->line_len > 0 || p->has_data;
}

/* Grows *buf to hold need bytes (+1 for a terminator), within limit. */
static di_status reserve(char **buf, size_t *cap, size_t need, size_t limit, di_error *err) {
    if (need > limit) return di_error_set(err, DI_ERR_FULL, "SSE event longer than %zu bytes", limit);
    if (need + 1 <= *cap) return DI_OK;
    size_t c = *cap ? *cap : 256;
    while (c < need + 1) c *= 2;
    char *b = realloc(*buf, c);
    if (!b) return di_error_set(err, DI_ERR_NOMEM, "SSE buffer of %zu bytes", c);
    *buf = b;
    *cap = c;
    return DI_OK;
}

/* One complete line (without its end). Blank: dispatch; "data": append. */
static di_status on_line(di_sse_parser *p, di_sse_event_fn fn, void *user, di_error *err) {
    const char *l = p->line ? p->line : "";
    size_t n = p->line_len;
    p->line_len = 0;
    if (n == 0) {
        if (!p->has_data) return DI_OK;
        p->has_data = false;
        /* the spec drops the last data line's newline */
        if (p->data_len && p->data[p->data_len - 1] == '\n') p->data_len--;
        p->data[p->data_len] = 0;
        size_t len = p->data_len;
        p->data_len = 0;
        if (fn && fn(user, p->data, len)) return di_error_set(err, DI_ERR_CANCELLED, "SSE consumer stopped");
        return DI_OK;
    }
    if (l[0] == ':') return DI_OK; /* comment (keep-alive) */
    const char *colon = memchr(l, ':', n);
    size_t name_len = colon ? (size_t)(colon - l) : n;
    if (name_len != 4 || memcmp(l, "data", 4) != 0) return DI_OK; /* event, id, retry, other */
    const char *v = colon ? colon + 1 : l + n;
    size_t vn = (size_t)(l + n - v);
    if (vn && v[0] == ' ') {
        v++;
        vn--;
    }
    di_status st = reserve(&p->data, &p->data_cap, p->data_len + vn + 1, p->max_event_bytes, err);
    if (st) return st;
    memcpy(p->data + p->data_len, v, vn);
    p->data_len += vn;
    p->data[p->data_len++] = '\n';
    p->has_data = true;
    return DI_OK;
}

di_status di_sse_feed(di_sse_parser *p, const char *buf, size_t n_bytes, di_sse_event_fn on_event,
                      void *user, di_error *err) {
    for (size_t i = 0; i < n_bytes; i++) {
        char ch = buf[i];
        if (ch == '\n' && p->after_cr) { /* the LF of a CRLF */
            p->after_cr = false;
            continue;
        }
        p->after_cr = ch == '\r';
        if (ch == '\n' || ch == '\r') {
            di_status st = on_line(p, on_event, user, err);
            if (st) return st;
            continue;
        }
        /* copy the run of ordinary bytes up to the next line end at once */
        size_t j = i;
        while (j < n_bytes && buf[j] != '\n' && buf[j] != '\r') j++;
        size_t run = j - i;
        di_status st = reserve(&p->line, &p->line_cap, p->line_len + run, p->max_event_bytes, err);
        if (st) return st;
        memcpy(p->line + p->line_len, buf + i, run);
        p->line_len += run;
        p->line[p->line_len] = 0;
        i = j - 1;
    }
    return DI_OK;
}
