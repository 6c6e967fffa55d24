/* Minimal HTTP/1.1 client (contract in upstream.h). */
#include "router/upstream.h"

#include "base/alloc.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#define HEAD_MAX 16384 /* a longer response head is refused */
#define RBUF 65536

struct di_up {
    int fd;
    int timeout_ms;
    int status;
    char content_type[128];
    bool chunked;
    long long remaining;  /* Content-Length left, -1 = until close */
    long long chunk_left; /* chunked: bytes left of the current chunk, -1 = read a size line */
    bool done;
    char buf[RBUF];       /* bytes read from the socket, not yet consumed */
    size_t pos, len;
};

static ssize_t raw_read(di_up *u) {
    if (u->pos < u->len) return (ssize_t)(u->len - u->pos);
    struct pollfd p = {u->fd, POLLIN, 0};
    int r = poll(&p, 1, u->timeout_ms);
    if (r <= 0) return -1;
    ssize_t n;
    do n = recv(u->fd, u->buf, sizeof u->buf, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    u->pos = 0;
    u->len = (size_t)n;
    return n;
}

static bool send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static int connect_to(const char *host, int port, int timeout_ms) {
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai) || !ai) return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    if (fd >= 0) {
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    return fd;
}

/* Reads the head into h (NUL-terminated); false on close/timeout/too long. */
static bool read_head(di_up *u, char *h, size_t cap, size_t *n_out) {
    size_t n = 0;
    for (;;) {
        ssize_t got = raw_read(u);
        if (got <= 0) return false;
        while (u->pos < u->len) {
            if (n + 1 >= cap) return false;
            h[n++] = u->buf[u->pos++];
            if (n >= 4 && !memcmp(h + n - 4, "\r\n\r\n", 4)) {
                h[n] = 0;
                *n_out = n;
                return true;
            }
        }
    }
}

static void parse_headers(di_up *u, char *h) {
    u->remaining = -1;
    u->chunk_left = -1;
    for (char *line = strstr(h, "\r\n"); line && line[2]; line = strstr(line + 2, "\r\n")) {
        char *l = line + 2, *colon = strchr(l, ':'), *eol = strstr(l, "\r\n");
        if (!colon || !eol || colon > eol) continue;
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t') v++;
        size_t klen = (size_t)(colon - l), vlen = (size_t)(eol - v);
        if (klen == 14 && !strncasecmp(l, "content-length", 14)) {
            u->remaining = strtoll(v, NULL, 10);
            if (u->remaining < 0) u->remaining = 0;
        } else if (klen == 17 && !strncasecmp(l, "transfer-encoding", 17) && vlen >= 7 &&
                   !strncasecmp(v, "chunked", 7)) {
            u->chunked = true;
        } else if (klen == 12 && !strncasecmp(l, "content-type", 12)) {
            snprintf(u->content_type, sizeof u->content_type, "%.*s", (int)(vlen < 127 ? vlen : 127), v);
        }
    }
    if (u->chunked) u->remaining = -1;
}

di_status di_up_open(const char *host, int port, const char *method, const char *path, const char *body,
                     size_t body_len, const char *headers, int timeout_ms, di_up **out, di_error *err) {
    *out = NULL;
    di_up *u = di_calloc(1, sizeof *u);
    if (!u) return di_error_set(err, DI_ERR_NOMEM, "router: out of memory");
    u->timeout_ms = timeout_ms;
    u->fd = connect_to(host, port, timeout_ms);
    if (u->fd < 0) {
        free(u);
        return di_error_set(err, DI_ERR_IO, "engine %s:%d unreachable", host, port);
    }
    char head[4096];
    int hn = snprintf(head, sizeof head,
                      "%s %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\nContent-Length: %zu\r\n%s\r\n", method,
                      path, host, port, body_len, headers ? headers : "");
    char *h = malloc(HEAD_MAX);
    size_t n = 0;
    bool ok = h && hn > 0 && (size_t)hn < sizeof head && send_all(u->fd, head, (size_t)hn) &&
              (!body_len || send_all(u->fd, body, body_len)) && read_head(u, h, HEAD_MAX, &n) &&
              sscanf(h, "HTTP/1.%*d %d", &u->status) == 1 && u->status >= 100 && u->status < 600;
    if (ok) parse_headers(u, h);
    free(h);
    if (!ok) {
        di_up_close(u);
        return di_error_set(err, DI_ERR_IO, "engine %s:%d failed before answering", host, port);
    }
    *out = u;
    return DI_OK;
}

void di_up_close(di_up *u) {
    if (!u) return;
    if (u->fd >= 0) close(u->fd);
    free(u);
}

int di_up_status(const di_up *u) { return u->status; }
const char *di_up_content_type(const di_up *u) { return u->content_type; }

/* Reads a chunk-size line; false on a malformed or over-long one. */
static bool read_chunk_size(di_up *u) {
    char line[64];
    size_t n = 0;
    for (;;) {
        if (raw_read(u) <= 0) return false;
        char c = u->buf[u->pos++];
        if (c == '\n') break;
        if (n + 1 >= sizeof line) return false;
        line[n++] = c;
    }
    line[n] = 0;
    char *end;
    long long v = strtoll(line, &end, 16);
    if (end == line || v < 0 || v > (1ll << 40)) return false;
    u->chunk_left = v;
    return true;
}

static bool skip_crlf(di_up *u) {
    for (int i = 0; i < 2; i++) {
        if (raw_read(u) <= 0) return false;
        u->pos++;
    }
    return true;
}

ssize_t di_up_read(di_up *u, char *buf, size_t cap) {
    if (u->done || cap == 0) return 0;
    if (u->chunked) {
        if (u->chunk_left <= 0) {
            if (u->chunk_left == 0 && !skip_crlf(u)) return -1; /* CRLF after the previous chunk */
            if (!read_chunk_size(u)) return -1;
            if (u->chunk_left == 0) {
                u->done = true;
                return 0;
            }
        }
        ssize_t got = raw_read(u);
        if (got <= 0) return -1;
        size_t n = (size_t)got;
        if ((long long)n > u->chunk_left) n = (size_t)u->chunk_left;
        if (n > cap) n = cap;
        memcpy(buf, u->buf + u->pos, n);
        u->pos += n;
        u->chunk_left -= (long long)n;
        return (ssize_t)n;
    }
    if (u->remaining == 0) {
        u->done = true;
        return 0;
    }
    ssize_t got = raw_read(u);
    if (got < 0) return -1;
    if (got == 0) {
        u->done = true;
        return u->remaining < 0 ? 0 : -1; /* closed early with a length promised */
    }
    size_t n = (size_t)got;
    if (u->remaining >= 0 && (long long)n > u->remaining) n = (size_t)u->remaining;
    if (n > cap) n = cap;
    memcpy(buf, u->buf + u->pos, n);
    u->pos += n;
    if (u->remaining > 0) u->remaining -= (long long)n;
    return (ssize_t)n;
}
