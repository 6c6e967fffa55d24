/* The listening socket and the accept loop, in front of libmicrohttpd.
 *
 * Why not MHD's own listener: MHD answers a head that is too large, a bad
 * Content-Length or a malformed request line with HTML pages of its own
 * (and counts its buffers into the header limit, so --max-header-bytes let
 * through up to 16 KiB more). We accept connections ourselves, read the
 * first request head ahead with MSG_PEEK - nothing is consumed - and check
 * it (http_head.c). A bad head gets an OpenAI-shaped JSON error and the
 * connection is closed; a good one is handed to MHD untouched
 * (MHD_add_connection), which then reads the same bytes. Later requests on
 * a keep-alive connection are checked by on_headers in http.c (exact size
 * from MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE).
 *
 * Threads: one accept thread; one short-lived guard thread per connection
 * while its first head arrives (a slow client must not hold up accepting).
 * Guards count against --max-connections like MHD's connections; at the
 * cap the accept loop waits, and new clients wait in the kernel's backlog.
 *
 * Heads larger than GUARD_PEEK_MAX (only possible with --max-header-bytes
 * above it) are passed on when no error was seen in the first
 * GUARD_PEEK_MAX bytes: the kernel's receive buffer may not hold more. */
#include "server/server_internal.h"

#include "base/status.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Most bytes a guard peeks at: well inside Linux's default TCP receive
 * buffer (128 KiB and up), so the bytes can all be waiting at once. */
#define GUARD_PEEK_MAX (64u << 10)
/* A guard re-checks the stop flag this often while a client is silent. */
#define GUARD_POLL_MS 200
/* After refusing, read and drop what the client still sends (so that the
 * close does not reset the connection before it read our answer), for at
 * most this long and this many bytes. */
#define DRAIN_MS 1000
#define DRAIN_MAX_BYTES (4u << 20)

typedef struct guard_arg {
    di_server *s;
    int fd;
    struct sockaddr_storage addr;
    socklen_t addr_len;
} guard_arg;

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool stop_requested(di_server *s) {
    pthread_mutex_lock(&s->mu);
    bool stop = s->guard_stop;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

static const char *status_text(unsigned status) {
    switch (status) {
    case 400: return "Bad Request";
    case 431: return "Request Header Fields Too Large";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
    }
}

/* Writes the whole answer; false when the client is gone. */
static bool send_all(int fd, const char *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pf = {.fd = fd, .events = POLLOUT};
            if (poll(&pf, 1, DRAIN_MS) <= 0) return false;
            continue;
        }
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

/* Answers v (an OpenAI error object, Connection: close), then drains. */
static void refuse(di_server *s, int fd, const srv_head_verdict *v) {
    srv_metrics_http(&s->metrics, SRV_ROUTE_OTHER, v->status);
    srv_reply r = {0};
    const char *code = v->status == 431 ? "request_header_fields_too_large" : "bad_request";
    srv_reply_error(&r, v->status, "invalid_request_error", NULL, code, "%s", v->message);
    char *body = json_dumps(r.json, JSON_COMPACT);
    json_decref(r.json);
    if (!body) return;
    char cors[320] = "";
    if (s->cors_origin)
        snprintf(cors, sizeof cors, "Access-Control-Allow-Origin: %s\r\n%s", s->cors_origin,
                 strcmp(s->cors_origin, "*") ? "Vary: Origin\r\n" : "");
    char head[512];
    int hl = snprintf(head, sizeof head,
                      "HTTP/1.1 %u %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s\r\n",
                      v->status, status_text(v->status), strlen(body), cors);
    if (s->p.verbose) fprintf(stderr, "deepinfer serve: head refused -> %u: %s\n", v->status, v->message);
    if (hl > 0 && (size_t)hl < sizeof head && send_all(fd, head, (size_t)hl)) send_all(fd, body, strlen(body));
    free(body);
    shutdown(fd, SHUT_WR);
    char sink[4096];
    size_t dropped = 0;
    int64_t until = mono_ms() + DRAIN_MS;
    while (dropped < DRAIN_MAX_BYTES) {
        int64_t left = until - mono_ms();
        if (left <= 0) break;
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, (int)left) <= 0) break;
        ssize_t n = recv(fd, sink, sizeof sink, 0);
        if (n <= 0) break;
        dropped += (size_t)n;
    }
}

/* Waits for the first head; OK / REFUSE, or NEED_MORE when the client went
 * silent past the idle timeout, hung up, or the server stops. */
static srv_head_verdict await_head(di_server *s, int fd, char *buf, size_t cap) {
    srv_head_verdict v = {.kind = SRV_HEAD_NEED_MORE};
    size_t have = 0;
    int64_t idle_ms = (int64_t)s->p.idle_timeout_s * 1000, last = mono_ms();
    while (!stop_requested(s)) {
        /* Wake only when more than the bytes already seen are waiting. */
        int lowat = (int)have + 1;
        setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat);
        struct pollfd pf = {.fd = fd, .events = POLLIN | POLLRDHUP};
        int pr = poll(&pf, 1, GUARD_POLL_MS);
        if (pr < 0 && errno != EINTR) break;
        if (pr <= 0) {
            if (mono_ms() - last > idle_ms) break;
            continue;
        }
        ssize_t n = recv(fd, buf, cap, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n <= 0) break; /* hung up before a whole head */
        if ((size_t)n == have) {
            /* A hang-up (or half-close) with no new bytes: nothing more will come. */
            if (pf.revents & (POLLHUP | POLLERR | POLLRDHUP)) break;
            continue;
        }
        have = (size_t)n;
        last = mono_ms();
        v = srv_head_check(buf, have, s->p.max_header_bytes);
        if (v.kind != SRV_HEAD_NEED_MORE) break;
        if (have == cap) { /* a head larger than we can peek at: MHD's turn */
            v.kind = SRV_HEAD_OK;
            break;
        }
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
    return v;
}

static void guard_done(di_server *s) {
    pthread_mutex_lock(&s->mu);
    s->n_guarding--;
    pthread_cond_broadcast(&s->slot_cv);
    pthread_mutex_unlock(&s->mu);
}

static void *guard_main(void *arg) {
    guard_arg *g = arg;
    di_server *s = g->s;
    size_t cap = s->p.max_header_bytes + 1 < GUARD_PEEK_MAX ? s->p.max_header_bytes + 1 : GUARD_PEEK_MAX;
    char *buf = malloc(cap);
    srv_head_verdict v = {.kind = SRV_HEAD_NEED_MORE};
    if (buf) v = await_head(s, g->fd, buf, cap);
    free(buf);
    if (v.kind == SRV_HEAD_OK && !stop_requested(s)) {
        /* MHD owns the socket from here (it closes it on failure too). */
        if (MHD_add_connection(s->mhd, g->fd, (const struct sockaddr *)&g->addr, g->addr_len) != MHD_YES &&
            s->p.verbose)
            fprintf(stderr, "deepinfer serve: a connection could not be handed over\n");
    } else {
        if (v.kind == SRV_HEAD_REFUSE) refuse(s, g->fd, &v);
        close(g->fd);
    }
    free(g);
    guard_done(s);
    return NULL;
}

static void *accept_main(void *arg) {
    di_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->accept_stop && s->n_connections + s->n_guarding >= s->p.max_connections)
            pthread_cond_wait(&s->slot_cv, &s->mu);
        bool stop = s->accept_stop;
        pthread_mutex_unlock(&s->mu);
        if (stop) break;
        struct pollfd pf[2] = {{.fd = s->listen_fd, .events = POLLIN}, {.fd = s->wake_fd[0], .events = POLLIN}};
        int pr = poll(pf, 2, -1);
        if (pr < 0 && errno == EINTR) continue;
        if (pr < 0 || pf[1].revents) break;
        guard_arg *g = calloc(1, sizeof *g);
        if (!g) break;
        g->s = s;
        g->addr_len = sizeof g->addr;
        g->fd = accept4(s->listen_fd, (struct sockaddr *)&g->addr, &g->addr_len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (g->fd < 0) {
            int e = errno;
            free(g);
            if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
                /* Out of descriptors: back off instead of spinning. */
                struct timespec ts = {0, 50 * 1000000L};
                nanosleep(&ts, NULL);
            }
            continue;
        }
        pthread_mutex_lock(&s->mu);
        s->n_guarding++;
        pthread_mutex_unlock(&s->mu);
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&th, &at, guard_main, g);
        pthread_attr_destroy(&at);
        if (rc) {
            close(g->fd);
            free(g);
            guard_done(s);
        }
    }
    return NULL;
}

di_status srv_listen_start(di_server *s, di_error *err) {
    s->listen_fd = -1;
    s->wake_fd[0] = s->wake_fd[1] = -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)s->p.port);
    int rc = getaddrinfo(s->host, port, &hints, &ai);
    if (rc || !ai)
        return di_error_set(err, DI_ERR_INVALID_ARG, "serve: cannot resolve host '%s': %s", s->host,
                            gai_strerror(rc));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    bool ok = fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
              bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, SOMAXCONN) == 0;
    freeaddrinfo(ai);
    if (!ok) {
        if (fd >= 0) close(fd);
        return di_error_set(err, DI_ERR_IO, "serve: cannot listen on %s:%u (in use, or not an address of this machine)",
                            s->host, (unsigned)s->p.port);
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    s->port = s->p.port;
    if (getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
        if (sa.ss_family == AF_INET) s->port = ntohs(((struct sockaddr_in *)&sa)->sin_port);
        else if (sa.ss_family == AF_INET6) s->port = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
    }
    if (pipe2(s->wake_fd, O_CLOEXEC)) {
        close(fd);
        return di_error_set(err, DI_ERR_IO, "serve: cannot create a pipe");
    }
    s->listen_fd = fd;
    if (pthread_create(&s->accept_thread, NULL, accept_main, s)) {
        srv_listen_quiesce(s);
        return di_error_set(err, DI_ERR_INTERNAL, "serve: cannot start the accept thread");
    }
    s->accept_started = true;
    return DI_OK;
}

void srv_listen_quiesce(di_server *s) {
    if (s->accept_started) {
        pthread_mutex_lock(&s->mu);
        s->accept_stop = true; /* ends a wait at the cap */
        pthread_cond_broadcast(&s->slot_cv);
        pthread_mutex_unlock(&s->mu);
        if (write(s->wake_fd[1], "x", 1) < 0) { /* the loop also ends on the flag */ }
        pthread_join(s->accept_thread, NULL);
        s->accept_started = false;
    }
    if (s->listen_fd >= 0) close(s->listen_fd);
    s->listen_fd = -1;
    for (int i = 0; i < 2; i++) {
        if (s->wake_fd[i] >= 0) close(s->wake_fd[i]);
        s->wake_fd[i] = -1;
    }
}

void srv_listen_stop(di_server *s) {
    srv_listen_quiesce(s);
    pthread_mutex_lock(&s->mu);
    s->guard_stop = true;
    pthread_cond_broadcast(&s->slot_cv);
    while (s->n_guarding > 0) pthread_cond_wait(&s->slot_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void srv_listen_slot_freed(di_server *s) {
    pthread_cond_broadcast(&s->slot_cv);
}
