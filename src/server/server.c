/* Server lifecycle, the engine thread, and jobs: the per-request queues
 * between the engine's event callback (engine thread) and the connection
 * thread that answers the HTTP request. See server_internal.h for the lock
 * order. */
#include "server/server_internal.h"

#include "base/alloc.h"
#include "base/status.h"
#include "dist/dist.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How often a waiting connection thread checks whether its client hung up:
 * short enough that a disconnect frees KV blocks "at once" for a human,
 * long enough to cost nothing with hundreds of waiting connections. */
#define HANGUP_POLL_MS 50
/* After the grace period, how long cancelled requests get to deliver their
 * final events (the engine applies cancels at its next step). */
#define CANCEL_DRAIN_MS 10000
/* Back-off after a failed engine step, so a persistent failure (out of
 * memory) does not spin a core. */
#define STEP_ERROR_BACKOFF_MS 10
/* In an expert-parallel group, how long the engine thread sleeps after a
 * step in which no rank had work: the group polls at this rate when idle. */
#define GROUP_IDLE_POLL_MS 2

/* ---- small helpers ----------------------------------------------------------- */

bool srv_buf_printf(srv_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    if ((size_t)n < sizeof tmp) return srv_buf_append(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) return false;
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bool ok = srv_buf_append(b, big, (size_t)n);
    free(big);
    return ok;
}

void srv_buf_free(srv_buf *b) { di_strbuf_free(b); }

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid.
 * Rejects overlongs, surrogates and code points past U+10FFFF. */
static size_t utf8_seq(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

json_t *srv_json_string(const char *s, size_t n) {
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    /* Invalid UTF-8 (a token that is half a character) or an embedded NUL:
     * copy with U+FFFD in place of each bad byte, NUL as U+FFFD too. */
    srv_buf b = {0};
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = u[i] ? utf8_seq(u + i, n - i) : 0;
        if (k) {
            srv_buf_append(&b, u + i, k);
            i += k;
        } else {
            srv_buf_append(&b, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    j = json_stringn(b.data ? b.data : "", b.len);
    srv_buf_free(&b);
    return j;
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Absolute CLOCK_REALTIME deadline ms from now, for pthread_cond_timedwait. */
static struct timespec deadline_in(int64_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

/* splitmix64: decorrelates consecutive counter values. */
static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t srv_random_seed(di_server *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t v = splitmix64(&s->seed_state);
    pthread_mutex_unlock(&s->mu);
    /* Keep seeds within 2^53 so a client can echo them through JSON
     * doubles without loss. */
    return v >> 11;
}

void srv_request_id(di_server *s, char out[32]) {
    pthread_mutex_lock(&s->mu);
    uint64_t a = splitmix64(&s->id_state), b = splitmix64(&s->id_state);
    pthread_mutex_unlock(&s->mu);
    snprintf(out, 32, "%016llx%08llx", (unsigned long long)a, (unsigned long long)(b & 0xffffffffull));
}

/* ---- params ---------------------------------------------------------------- */

di_server_params di_server_params_default(void) {
    di_server_params p;
    memset(&p, 0, sizeof p);
    p.host = "127.0.0.1";
    p.port = 8080;
    p.max_queue = 256;
    p.max_body_bytes = 1u << 20;
    p.max_kv_body_bytes = (size_t)1 << 30; /* a 4k-token prompt of the default model is ~95 MB */
    p.max_header_bytes = 16u << 10;
    p.max_connections = 256;
    p.idle_timeout_s = 60;
    p.max_n = 128;
    p.sampling = di_sampling_params_default();
    p.sampling.temperature = 1.0f;
    p.sampling.top_p = 1.0f;
    return p;
}

/* ---- jobs -------------------------------------------------------------------- */

static void release_slots(di_server *s, int32_t n) {
    if (n <= 0) return;
    pthread_mutex_lock(&s->mu);
    s->in_flight -= n;
    if (s->in_flight == 0) pthread_cond_broadcast(&s->drained_cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_answering_begin(di_server *s) {
    pthread_mutex_lock(&s->mu);
    s->n_answering++;
    pthread_mutex_unlock(&s->mu);
}

void srv_answering_end(di_server *s) {
    pthread_mutex_lock(&s->mu);
    if (--s->n_answering == 0) pthread_cond_broadcast(&s->drained_cv);
    pthread_mutex_unlock(&s->mu);
}

srv_admit_result srv_job_create(di_server *s, size_t n, int fd, srv_job **out) {
    *out = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return SRV_ADMIT_STOPPING;
    }
    if (n > (size_t)s->p.max_queue || s->in_flight + (int32_t)n > s->p.max_queue) {
        pthread_mutex_unlock(&s->mu);
        return SRV_ADMIT_FULL;
    }
    s->in_flight += (int32_t)n;
    pthread_mutex_unlock(&s->mu);

    srv_job *j = calloc(1, sizeof *j);
    srv_choice *c = j ? di_calloc(n ? n : 1, sizeof *c) : NULL;
    if (!c) {
        free(j);
        release_slots(s, (int32_t)n);
        /* Out of memory is transient here: report it like a full queue. */
        return SRV_ADMIT_FULL;
    }
    j->srv = s;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->n_choices = n;
    j->choices = c;
    j->fd = fd;
    for (size_t i = 0; i < n; i++) {
        c[i].job = j;
        c[i].index = (int32_t)i;
    }
    pthread_mutex_lock(&s->mu);
    j->next = s->jobs;
    if (s->jobs) s->jobs->prev = j;
    s->jobs = j;
    pthread_mutex_unlock(&s->mu);
    *out = j;
    return SRV_ADMIT_OK;
}

static void job_free(srv_job *j) {
    di_server *s = j->srv;
    pthread_mutex_lock(&s->mu);
    if (j->prev) j->prev->next = j->next;
    else s->jobs = j->next;
    if (j->next) j->next->prev = j->prev;
    pthread_mutex_unlock(&s->mu);
    int32_t unreleased = 0;
    for (size_t i = 0; i < j->n_choices; i++) {
        srv_choice *c = &j->choices[i];
        if (!c->slot_released) unreleased++;
        srv_buf_free(&c->text);
        free(c->toks);
    }
    release_slots(s, unreleased);
    if (j->route_free) j->route_free(j->route);
    free(j->choices);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void job_unref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&j->mu);
    if (last) job_free(j);
}

/* The engine's event callback (engine thread, engine mutex held). Appends
 * the event to the choice's pending output; returns non-zero to cancel
 * when the connection is gone or memory ran out. */
static int on_event(const di_event *ev) {
    srv_choice *c = ev->user;
    srv_job *j = c->job;
    di_server *s = j->srv;
    pthread_mutex_lock(&j->mu);
    bool oom = false;
    if (ev->text_len && !srv_buf_append(&c->text, ev->text, ev->text_len)) oom = true;
    if (c->want_logprobs && ev->token >= 0) {
        if (c->n_toks == c->cap_toks) {
            size_t cap = c->cap_toks ? c->cap_toks * 2 : 16;
            srv_tok *t = di_realloc_array(c->toks, cap, sizeof *t);
            if (t) {
                c->toks = t;
                c->cap_toks = cap;
            }
        }
        if (c->n_toks < c->cap_toks) {
            srv_tok *t = &c->toks[c->n_toks++];
            t->token = ev->token;
            t->logprob = ev->logprob;
            t->n_top = ev->n_top < SRV_MAX_TOP_LOGPROBS ? ev->n_top : SRV_MAX_TOP_LOGPROBS;
            if (t->n_top < 0) t->n_top = 0;
            for (int32_t k = 0; k < t->n_top; k++) t->top[k] = ev->top[k];
        } else {
            oom = true;
        }
    }
    bool final = ev->finish != DI_FINISH_REASON_NONE;
    if (final) {
        c->done = true;
        c->slot_released = true;
        c->finish = ev->finish;
        c->stats = ev->stats;
        if (ev->error) snprintf(c->error, sizeof c->error, "%s", ev->error);
        j->n_done++;
    }
    j->dirty = true;
    pthread_cond_broadcast(&j->cv);
    int cancel = j->cancelled || oom;
    pthread_mutex_unlock(&j->mu);
    if (final) {
        srv_metrics_finish(&s->metrics, ev->finish, &ev->stats);
        release_slots(s, 1);
        job_unref(j); /* the choice's reference; j may be gone now */
    }
    return cancel;
}

static void wake_engine(di_server *s) {
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->engine_cv);
    pthread_mutex_unlock(&s->mu);
}

di_status srv_job_submit(srv_job *j, size_t i, di_request *r, di_error *err) {
    srv_choice *c = &j->choices[i];
    r->on_event = on_event;
    r->user = c;
    c->want_logprobs = r->sampling.logprobs;
    /* The reference is taken first: the final event may come before
     * di_engine_submit even returns. */
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
    int64_t id = 0;
    di_status st = di_engine_submit(j->srv->engine, r, &id, err);
    pthread_mutex_lock(&j->mu);
    bool cancel_now = false;
    if (st) {
        j->refs--; /* cannot reach 0: the connection holds one */
        c->done = true;
        j->n_done++;
    } else {
        c->id = id;
        c->submitted = true;
        cancel_now = j->cancelled;
    }
    pthread_mutex_unlock(&j->mu);
    if (cancel_now) di_engine_cancel(j->srv->engine, id);
    if (!st) wake_engine(j->srv);
    return st;
}

/* True when the peer closed or reset the connection. POLLRDHUP reports a
 * FIN even while unread bytes (a pipelined request) are queued. */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    int n = poll(&p, 1, 0);
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* Checks for a hang-up at most every HANGUP_POLL_MS, whatever woke us:
 * a steady token stream must not hide a vanished client. Connection thread
 * only (last_hangup_check_ms is its own). */
static bool hung_up(srv_job *j) {
    int64_t t = now_ms();
    if (t - j->last_hangup_check_ms < HANGUP_POLL_MS) return false;
    j->last_hangup_check_ms = t;
    return client_gone(j->fd);
}

bool srv_job_wait(srv_job *j, bool for_output) {
    pthread_mutex_lock(&j->mu);
    for (;;) {
        bool ready = j->n_done == j->n_choices || (for_output && j->dirty);
        pthread_mutex_unlock(&j->mu);
        if (hung_up(j)) return false;
        if (ready) return true;
        pthread_mutex_lock(&j->mu);
        ready = j->n_done == j->n_choices || (for_output && j->dirty);
        if (ready) continue;
        struct timespec ts = deadline_in(HANGUP_POLL_MS);
        pthread_cond_timedwait(&j->cv, &j->mu, &ts);
    }
}

void srv_job_take(srv_job *j, size_t i, srv_taken *t) {
    memset(t, 0, sizeof *t);
    srv_choice *c = &j->choices[i];
    pthread_mutex_lock(&j->mu);
    t->text = c->text.data;
    t->text_len = c->text.len;
    memset(&c->text, 0, sizeof c->text);
    t->toks = c->toks;
    t->n_toks = c->n_toks;
    c->toks = NULL;
    c->n_toks = c->cap_toks = 0;
    /* Reported once, so the caller writes finish_reason exactly once. */
    if (c->done && !c->final_taken) {
        c->final_taken = true;
        t->finished = true;
        t->finish = c->submitted ? c->finish : DI_FINISH_REASON_ERROR;
        memcpy(t->error, c->error, sizeof t->error);
        t->stats = c->stats;
    }
    bool all_taken = true;
    for (size_t k = 0; k < j->n_choices; k++)
        if (j->choices[k].text.len || j->choices[k].n_toks) all_taken = false;
    if (all_taken) j->dirty = false;
    pthread_mutex_unlock(&j->mu);
}

void srv_taken_free(srv_taken *t) {
    free(t->text);
    free(t->toks);
    memset(t, 0, sizeof *t);
}

bool srv_job_all_done(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    bool done = j->n_done == j->n_choices;
    pthread_mutex_unlock(&j->mu);
    return done;
}

void srv_job_poke(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->dirty = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_cancel(srv_job *j) {
    /* Collect ids under the job lock, cancel without it (lock order). */
    pthread_mutex_lock(&j->mu);
    j->cancelled = true;
    size_t n = 0;
    int64_t *ids = di_malloc_array(j->n_choices ? j->n_choices : 1, sizeof *ids);
    if (ids)
        for (size_t i = 0; i < j->n_choices; i++)
            if (j->choices[i].submitted && !j->choices[i].done) ids[n++] = j->choices[i].id;
    pthread_mutex_unlock(&j->mu);
    /* Without memory for the ids, the callbacks still see j->cancelled at
     * the next token and cancel from there. */
    for (size_t i = 0; i < n; i++) di_engine_cancel(j->srv->engine, ids[i]);
    free(ids);
    wake_engine(j->srv);
}

void srv_job_release(srv_job *j) {
    if (j) job_unref(j);
}

/* ---- the engine thread --------------------------------------------------------- */

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* In a group (serve --ep) every rank's engine thread steps in lock step,
 * idle or not (a rank without work joins the others' MoE exchanges with
 * placeholder steps), and they stop together: each round first agrees on
 * whether any rank is stopping. A group that fails (a peer died or hung)
 * stops this process's server too: its engine can no longer step. */
static void engine_main_group(di_server *s, di_dist *d) {
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int64_t stop = s->engine_stop;
        pthread_mutex_unlock(&s->mu);
        di_error err;
        bool idle = di_engine_idle(s->engine);
        di_status st = di_dist_allreduce_i64(d, &stop, 1, DI_DIST_MAX, &err);
        if (!st && stop) break;
        if (st || (st = di_engine_step(s->engine, &err))) {
            fprintf(stderr, "deepinfer serve: rank %d: the group's step failed: %s; stopping\n", (int)d->rank,
                    err.msg);
            break;
        }
        if (idle) sleep_ms(GROUP_IDLE_POLL_MS);
    }
    pthread_mutex_lock(&s->mu);
    bool asked = s->engine_stop;
    pthread_mutex_unlock(&s->mu);
    if (!asked) kill(getpid(), SIGTERM); /* another rank stopped or failed: shut this server down too */
}

static void *engine_main(void *arg) {
    di_server *s = arg;
    di_dist *d = di_engine_group(s->engine);
    if (d && d->size > 1) {
        engine_main_group(s, d);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    while (!s->engine_stop) {
        if (di_engine_idle(s->engine)) {
            /* Submitters signal engine_cv under s->mu after submitting, and
             * idle was checked under s->mu, so no wake-up is lost. */
            pthread_cond_wait(&s->engine_cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        di_error err;
        if (di_engine_step(s->engine, &err)) {
            fprintf(stderr, "deepinfer serve: engine step failed: %s\n", err.msg);
            struct timespec ts = {0, STEP_ERROR_BACKOFF_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------- */

di_status di_server_create(di_engine *engine, const di_server_params *p, di_server **out,
                           di_error *err) {
    *out = NULL;
    if (!engine || !p) return di_error_set(err, DI_ERR_INVALID_ARG, "server: NULL argument");
    if (p->max_queue < 1 || p->max_connections < 1 || p->max_n < 1 || p->max_body_bytes < 2 || p->max_kv_body_bytes < 2 ||
        p->max_header_bytes < 256 || p->idle_timeout_s < 1)
        return di_error_set(err, DI_ERR_RANGE,
                            "server: limits must be positive (queue, connections, n, body >= 2, "
                            "headers >= 256, idle timeout >= 1 s)");
    if (p->cors_origin) {
        /* It goes into a header verbatim: one visible ASCII token. */
        bool ok = p->cors_origin[0] != '\0' && strlen(p->cors_origin) < 256;
        for (const char *c = p->cors_origin; ok && *c; c++) ok = *c > 0x20 && *c < 0x7F;
        if (!ok)
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "server: CORS origin must be '*' or an origin such as https://example.com");
    }
    const char *role = p->role ? p->role : "both";
    bool exports = !strcmp(role, "prefill") || !strcmp(role, "both");
    bool imports = !strcmp(role, "decode") || !strcmp(role, "both");
    if (!exports && !imports)
        return di_error_set(err, DI_ERR_INVALID_ARG, "server: role '%.32s' is not prefill, decode or both", role);
    di_server *s = calloc(1, sizeof *s);
    if (!s) return di_error_set(err, DI_ERR_NOMEM, "server: out of memory");
    s->p = *p;
    s->p.role = NULL; /* not kept: the two flags say it */
    s->kv_export = exports;
    s->kv_import = imports;
    s->engine = engine;
    s->host = di_strdup(p->host ? p->host : "127.0.0.1");
    s->model_name = di_strdup(p->model_name ? p->model_name : "deepinfer");
    s->api_key = p->api_key ? di_strdup(p->api_key) : NULL;
    s->cors_origin = p->cors_origin ? di_strdup(p->cors_origin) : NULL;
    s->listen_fd = s->wake_fd[0] = s->wake_fd[1] = -1;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->slot_cv, NULL);
    pthread_cond_init(&s->engine_cv, NULL);
    pthread_cond_init(&s->drained_cv, NULL);
    srv_metrics_init(&s->metrics);
    if (!s->host || !s->model_name || (p->api_key && !s->api_key) || (p->cors_origin && !s->cors_origin)) {
        di_server_free(s);
        return di_error_set(err, DI_ERR_NOMEM, "server: out of memory");
    }
    s->p.host = s->host;
    s->p.model_name = s->model_name;
    s->p.api_key = s->api_key;
    s->p.cors_origin = s->cors_origin;
    di_engine_describe(engine, &s->desc);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->t_start = ts.tv_sec;
    s->seed_state = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
    s->id_state = splitmix64(&s->seed_state);
    di_status ds = srv_dsml_setup(s, err);
    if (ds) {
        di_server_free(s);
        return ds;
    }

    if (pthread_create(&s->engine_thread, NULL, engine_main, s)) {
        di_server_free(s);
        return di_error_set(err, DI_ERR_INTERNAL, "server: cannot start the engine thread");
    }
    s->engine_started = true;
    di_status st = srv_http_start(s, err);
    if (st) {
        di_server_free(s);
        return st;
    }
    *out = s;
    return DI_OK;
}

uint16_t di_server_port(const di_server *s) {
    return s->port;
}

/* Waits until no engine request is in flight and every dispatched request
 * has its answer sent (a stream's last chunks are written after its engine
 * request ends), or the deadline passes; true when drained. */
static bool wait_drained(di_server *s, int64_t ms) {
    int64_t until = now_ms() + ms;
    pthread_mutex_lock(&s->mu);
    while (s->in_flight > 0 || s->n_answering > 0) {
        int64_t left = until - now_ms();
        if (left <= 0) break;
        struct timespec ts = deadline_in(left < 100 ? left : 100);
        pthread_cond_timedwait(&s->drained_cv, &s->mu, &ts);
    }
    bool drained = s->in_flight == 0 && s->n_answering == 0;
    pthread_mutex_unlock(&s->mu);
    return drained;
}

void di_server_cancel_all(di_server *s) {
    /* Snapshot the ids, cancel with no lock held (lock order). */
    size_t cap = 64, n = 0;
    int64_t *ids = malloc(cap * sizeof *ids);
    pthread_mutex_lock(&s->mu);
    for (srv_job *j = s->jobs; j && ids; j = j->next) {
        pthread_mutex_lock(&j->mu);
        j->cancelled = true;
        for (size_t i = 0; i < j->n_choices && ids; i++) {
            srv_choice *c = &j->choices[i];
            if (!c->submitted || c->done) continue;
            if (n == cap) {
                int64_t *p = di_realloc_array(ids, cap * 2, sizeof *ids);
                if (!p) break; /* the callbacks see j->cancelled anyway */
                ids = p;
                cap *= 2;
            }
            ids[n++] = c->id;
        }
        pthread_mutex_unlock(&j->mu);
    }
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++) di_engine_cancel(s->engine, ids[i]);
    free(ids);
    wake_engine(s);
}

void di_server_shutdown(di_server *s, int32_t grace_ms) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    bool already = s->shut_down;
    s->shut_down = true;
    s->stopping = true;
    pthread_mutex_unlock(&s->mu);
    if (already) return;
    srv_http_quiesce(s);
    if (!wait_drained(s, grace_ms > 0 ? grace_ms : 0)) {
        di_server_cancel_all(s);
        if (!wait_drained(s, CANCEL_DRAIN_MS))
            fprintf(stderr, "deepinfer serve: requests still running after cancel\n");
    }
    srv_http_stop(s);
    if (s->engine_started) {
        pthread_mutex_lock(&s->mu);
        s->engine_stop = true;
        pthread_cond_signal(&s->engine_cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->engine_thread, NULL);
        s->engine_started = false;
    }
}

void di_server_free(di_server *s) {
    if (!s) return;
    if (s->mhd || s->engine_started) {
        /* Created (or half-created): stop the threads before freeing. */
        pthread_mutex_lock(&s->mu);
        bool done = s->shut_down;
        pthread_mutex_unlock(&s->mu);
        if (!done) di_server_shutdown(s, 0);
    }
    srv_metrics_destroy(&s->metrics);
    pthread_cond_destroy(&s->drained_cv);
    pthread_cond_destroy(&s->engine_cv);
    pthread_cond_destroy(&s->slot_cv);
    pthread_mutex_destroy(&s->mu);
    free(s->host);
    free(s->model_name);
    free(s->api_key);
    free(s->cors_origin);
    srv_dsml_teardown(s);
    free(s);
}
