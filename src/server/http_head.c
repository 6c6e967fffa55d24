/* Checks a request head (request line + header lines + the empty line)
 * before libmicrohttpd sees it, so that what MHD would refuse with one of
 * its HTML pages gets an OpenAI-shaped JSON error from us instead
 * (http_listen.c sends it). Pure: bytes in, verdict out, no I/O.
 *
 * What is checked, in the order a client would hit it:
 *   size      the head, from the first byte through the empty line, must fit
 *             in max_header_bytes exactly (431);
 *   framing   every Content-Length must be 1-19 ASCII digits and all of them
 *             equal (400) - a smuggling-safe reading of RFC 9112 6.3;
 *   syntax    request line "METHOD SP TARGET SP HTTP/1.x", header lines
 *             "name: value" with a token name, Host on HTTP/1.1 (400);
 *             other versions get 505.
 * Bytes beyond the head (the body) are not looked at. */
#include "server/server_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char c) {
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static srv_head_verdict verdict(srv_head_kind kind, unsigned status, size_t head_bytes, const char *msg) {
    srv_head_verdict v = {.kind = kind, .status = status, .head_bytes = head_bytes};
    snprintf(v.message, sizeof v.message, "%s", msg);
    return v;
}

/* Finds the end of the head: the byte after the first empty line (CRLF or a
 * bare LF, as MHD accepts both) that follows the request line. Empty lines
 * before the request line are skipped (RFC 9112 2.2) but counted. 0 = not
 * in buf[0..n). */
static size_t head_end(const char *buf, size_t n) {
    size_t i = 0;
    while (i < n && (buf[i] == '\r' || buf[i] == '\n')) i++;
    for (; i < n; i++) {
        if (buf[i] != '\n') continue;
        size_t j = i + 1;
        if (j < n && buf[j] == '\n') return j + 1;
        if (j + 1 < n && buf[j] == '\r' && buf[j + 1] == '\n') return j + 2;
    }
    return 0;
}

/* One line [p, e) without its line end. */
static const char *line_end(const char *p, const char *end) {
    const char *q = memchr(p, '\n', (size_t)(end - p));
    if (!q) q = end;
    return q > p && q[-1] == '\r' ? q - 1 : q;
}

static const char *next_line(const char *p, const char *end) {
    const char *q = memchr(p, '\n', (size_t)(end - p));
    return q ? q + 1 : end;
}

/* The request line; *http11 when the version is 1.1. */
static bool request_line(const char *p, const char *e, bool *http11, bool *bad_version) {
    const char *m = p;
    while (p < e && is_tchar((unsigned char)*p)) p++;
    if (p == m || p == e || *p != ' ') return false;
    const char *t = ++p;
    while (p < e && *p != ' ' && (unsigned char)*p > 0x20 && *p != 0x7F) p++;
    if (p == t || p == e || *p != ' ') return false;
    p++;
    size_t vl = (size_t)(e - p);
    if (vl != 8 || memcmp(p, "HTTP/", 5) || p[6] != '.' || p[5] < '0' || p[5] > '9' || p[7] < '0' || p[7] > '9')
        return false;
    *bad_version = !(p[5] == '1' && (p[7] == '0' || p[7] == '1'));
    *http11 = p[5] == '1' && p[7] == '1';
    return true;
}

srv_head_verdict srv_head_check(const char *buf, size_t n, size_t max_header_bytes) {
    size_t end = head_end(buf, n);
    if (!end || end > max_header_bytes) {
        if (end || n > max_header_bytes) {
            char msg[160];
            snprintf(msg, sizeof msg, "Request line and headers exceed the limit of %zu bytes.", max_header_bytes);
            return verdict(SRV_HEAD_REFUSE, 431, end, msg);
        }
        return verdict(SRV_HEAD_NEED_MORE, 0, 0, "");
    }
    const char *p = buf, *stop = buf + end;
    while (p < stop && (*p == '\r' || *p == '\n')) p++;
    const char *e = line_end(p, stop);
    bool http11 = false, bad_version = false;
    if (!request_line(p, e, &http11, &bad_version))
        return verdict(SRV_HEAD_REFUSE, 400, end, "Malformed request line (expected 'METHOD /path HTTP/1.1').");
    if (bad_version) return verdict(SRV_HEAD_REFUSE, 505, end, "Only HTTP/1.0 and HTTP/1.1 are supported.");
    bool host = false, have_length = false;
    char length[20] = {0};
    for (p = next_line(p, stop); p < stop; p = next_line(p, stop)) {
        e = line_end(p, stop);
        if (e == p) break; /* the empty line */
        if (*p == ' ' || *p == '\t') continue; /* obsolete line folding: MHD joins it */
        const char *name = p;
        while (p < e && is_tchar((unsigned char)*p)) p++;
        if (p == name || p == e || *p != ':')
            return verdict(SRV_HEAD_REFUSE, 400, end, "Malformed header line (expected 'Name: value').");
        size_t nl = (size_t)(p - name);
        const char *v = p + 1;
        while (v < e && (*v == ' ' || *v == '\t')) v++;
        const char *ve = e;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        if (nl == 4 && !strncasecmp(name, "host", 4)) host = true;
        if (nl != 14 || strncasecmp(name, "content-length", 14)) continue;
        size_t vl = (size_t)(ve - v);
        bool digits = vl >= 1 && vl <= 19;
        for (const char *d = v; digits && d < ve; d++) digits = *d >= '0' && *d <= '9';
        if (!digits)
            return verdict(SRV_HEAD_REFUSE, 400, end, "Content-Length must be a decimal number of bytes.");
        if (have_length && (strlen(length) != vl || memcmp(length, v, vl)))
            return verdict(SRV_HEAD_REFUSE, 400, end, "Conflicting Content-Length headers.");
        memcpy(length, v, vl);
        length[vl] = '\0';
        have_length = true;
    }
    if (http11 && !host) return verdict(SRV_HEAD_REFUSE, 400, end, "HTTP/1.1 requests must carry a Host header.");
    return verdict(SRV_HEAD_OK, 0, end, "");
}
