/* deepinfer batch: the offline engine. Reads JSONL requests, runs them all
 * through one engine with continuous batching, writes one JSONL result per
 * input line in input order. A bad line becomes an error record; the rest
 * still runs. Progress on stderr, a throughput summary at the end. */
#include "gen_common.h"
#include "progress.h"
#include "tools.h"

#include "dist/dist.h"

#include <jansson.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Limits on hostile input lines. */
#define MAX_STOPS 16
#define MAX_MESSAGES 4096

#define BATCH_MAX_IMAGES 16

typedef struct job {
    json_t *id;         /* as given, or the line number */
    json_t *result;     /* the output record once known */
    /* storage the request points into, alive until the job finishes */
    di_message *msgs;
    const char *stops[MAX_STOPS];
    di_image_input images[BATCH_MAX_IMAGES]; /* "images", until submitted */
    size_t n_images;
    char *image_text;   /* the prompt / last user message with the placeholders */
    char *text;         /* completion text so far */
    size_t text_len, text_cap;
    struct batch_ctx *ctx;
} job;

typedef struct batch_ctx {
    job *jobs;
    size_t n_jobs, n_done, n_written;
    FILE *out;
    int rank, ranks;    /* --ep: this process runs lines i with i % ranks == rank */
    int64_t n_prompt, n_generated;
    double t0;
    di_progress prog;   /* requests done / total, generated tok/s, ETA */
} batch_ctx;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *finish_name(di_finish f) {
    switch (f) {
    case DI_FINISH_REASON_STOP: return "stop";
    case DI_FINISH_REASON_LENGTH: return "length";
    case DI_FINISH_REASON_CANCEL: return "cancelled";
    case DI_FINISH_REASON_ERROR: return "error";
    case DI_FINISH_REASON_NONE: break;
    }
    return "none";
}

/* Writes every finished record at the head of the input order (with --ep
 * the records stay until gather_records sends them to rank 0). */
static void flush_in_order(batch_ctx *c) {
    if (c->ranks > 1) return;
    while (c->n_written < c->n_jobs && c->jobs[c->n_written].result) {
        job *j = &c->jobs[c->n_written];
        char *line = json_dumps(j->result, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (line) {
            fprintf(c->out, "%s\n", line);
            free(line);
        }
        json_decref(j->result);
        j->result = json_null(); /* written; the singleton needs no decref */
        c->n_written++;
    }
    fflush(c->out);
}

static void progress(batch_ctx *c) {
    if (c->n_done == c->n_jobs) di_progress_end(&c->prog, (int64_t)c->n_done, (double)c->n_generated);
    else di_progress_update(&c->prog, (int64_t)c->n_done, (double)c->n_generated);
}

static void finish_job(job *j, json_t *record) {
    batch_ctx *c = j->ctx;
    json_object_set(record, "id", j->id);
    j->result = record;
    free(j->msgs);
    j->msgs = NULL;
    free(j->text);
    j->text = NULL;
    c->n_done++;
    flush_in_order(c);
    progress(c);
}

static json_t *error_record(const char *msg) {
    return json_pack("{s:s, s:s}", "finish_reason", "error", "error", msg);
}

static int on_event(const di_event *ev) {
    job *j = ev->user;
    if (ev->text_len) {
        if (j->text_len + ev->text_len + 1 > j->text_cap) {
            size_t cap = (j->text_len + ev->text_len + 1) * 2;
            char *p = realloc(j->text, cap);
            if (!p) return 1;
            j->text = p;
            j->text_cap = cap;
        }
        memcpy(j->text + j->text_len, ev->text, ev->text_len);
        j->text_len += ev->text_len;
    }
    if (ev->finish == DI_FINISH_REASON_NONE) return 0;
    batch_ctx *c = j->ctx;
    json_t *ids = json_array();
    for (int32_t i = 0; i < ev->n_tokens; i++) json_array_append_new(ids, json_integer(ev->tokens[i]));
    json_t *rec = json_object();
    json_object_set_new(rec, "finish_reason", json_string(finish_name(ev->finish)));
    json_object_set_new(rec, "text", json_stringn(j->text ? j->text : "", j->text_len));
    json_object_set_new(rec, "token_ids", ids);
    json_object_set_new(rec, "prompt_tokens", json_integer(ev->stats.n_prompt));
    json_object_set_new(rec, "completion_tokens", json_integer(ev->stats.n_generated));
    if (ev->error) json_object_set_new(rec, "error", json_string(ev->error));
    c->n_prompt += ev->stats.n_prompt;
    c->n_generated += ev->stats.n_generated;
    finish_job(j, rec);
    return 0;
}

/* "images": ["a.png", ...] -> the files read and one placeholder each in
 * front of the prompt (or of the last user message). */
static int attach_images(di_engine *e, json_t *o, job *j, di_request *r, char *msg, size_t msg_size) {
    json_t *v = json_object_get(o, "images");
    if (!v) return 0;
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > BATCH_MAX_IMAGES) {
        snprintf(msg, msg_size, "'images' must be a non-empty array of at most %d file names", BATCH_MAX_IMAGES);
        return 1;
    }
    const char *files[BATCH_MAX_IMAGES];
    size_t n = json_array_size(v);
    for (size_t i = 0; i < n; i++) {
        if (!json_is_string(json_array_get(v, i))) {
            snprintf(msg, msg_size, "'images' entries must be file names");
            return 1;
        }
        files[i] = json_string_value(json_array_get(v, i));
    }
    di_message *last = NULL;
    for (size_t i = 0; r->messages && i < r->n_messages; i++)
        if (!strcmp(j->msgs[i].role, "user")) last = &j->msgs[i];
    if (r->messages && !last) {
        snprintf(msg, msg_size, "'images' needs a user message to go into");
        return 1;
    }
    const char *text = last ? last->content : r->text;
    j->image_text = di_gen_images_prompt(e, files, n, text, j->images, msg, msg_size);
    if (!j->image_text) return 1;
    j->n_images = n;
    if (last) last->content = j->image_text;
    else r->text = j->image_text;
    r->images = j->images;
    r->n_images = n;
    return 0;
}

/* Fills r from one parsed input object; msg gets the reason on failure. */
static int parse_request(json_t *o, job *j, const di_gen_opts *defaults, di_request *r, char *msg,
                         size_t msg_size) {
    memset(r, 0, sizeof *r);
    di_gen_opts g = *defaults;
    r->max_tokens = (int32_t)g.max_tokens;
    json_t *v;
#define FAIL(...) do { snprintf(msg, msg_size, __VA_ARGS__); return 1; } while (0)
    if (!json_is_object(o)) FAIL("line is not a JSON object");
    json_t *prompt = json_object_get(o, "prompt"), *messages = json_object_get(o, "messages");
    if ((prompt != NULL) == (messages != NULL)) FAIL("give exactly one of 'prompt' or 'messages'");
    if (prompt) {
        if (!json_is_string(prompt)) FAIL("'prompt' must be a string");
        r->text = json_string_value(prompt);
    } else {
        if (!json_is_array(messages) || json_array_size(messages) == 0 ||
            json_array_size(messages) > MAX_MESSAGES)
            FAIL("'messages' must be a non-empty array (at most %d)", MAX_MESSAGES);
        size_t n = json_array_size(messages);
        j->msgs = calloc(n, sizeof *j->msgs);
        if (!j->msgs) FAIL("out of memory");
        for (size_t i = 0; i < n; i++) {
            json_t *m = json_array_get(messages, i);
            json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
            if (!json_is_string(role) || !json_is_string(content))
                FAIL("messages[%zu] needs string 'role' and 'content'", i);
            j->msgs[i] = (di_message){json_string_value(role), json_string_value(content)};
        }
        r->messages = j->msgs;
        r->n_messages = n;
    }
    if ((v = json_object_get(o, "max_tokens"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 20))
            FAIL("'max_tokens' must be an integer in [1, 1048576]");
        r->max_tokens = (int32_t)json_integer_value(v);
    }
#define NUM(name, field, lo, hi)                                                       \
    if ((v = json_object_get(o, name))) {                                              \
        if (!json_is_number(v) || json_number_value(v) < (lo) || json_number_value(v) > (hi)) \
            FAIL("'%s' must be a number in [%g, %g]", name, (double)(lo), (double)(hi));        \
        g.field = json_number_value(v);                                               \
    }
    NUM("temperature", temp, 0, 100)
    NUM("top_p", top_p, 1e-6, 1)
    NUM("min_p", min_p, 0, 1)
#undef NUM
    if ((v = json_object_get(o, "top_k"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24))
            FAIL("'top_k' must be an integer >= 0");
        g.top_k = json_integer_value(v);
    }
    if ((v = json_object_get(o, "seed"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 0) FAIL("'seed' must be a non-negative integer");
        g.seed = json_integer_value(v);
    }
    r->sampling = di_gen_sampling(&g);
    if ((v = json_object_get(o, "stop"))) {
        if (json_is_string(v)) {
            j->stops[0] = json_string_value(v);
            r->n_stop = 1;
        } else if (json_is_array(v) && json_array_size(v) <= MAX_STOPS) {
            for (size_t i = 0; i < json_array_size(v); i++) {
                json_t *s = json_array_get(v, i);
                if (!json_is_string(s)) FAIL("'stop' entries must be strings");
                j->stops[i] = json_string_value(s);
            }
            r->n_stop = json_array_size(v);
        } else {
            FAIL("'stop' must be a string or an array of at most %d strings", MAX_STOPS);
        }
        r->stop = j->stops;
    }
    r->on_event = on_event;
    r->user = j;
    return 0;
#undef FAIL
}

/* --ep: every rank's records (index, line) go to rank 0, which writes all
 * of them in input order. */
static int gather_records(batch_ctx *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) return 1;
    for (size_t i = (size_t)c->rank; i < c->n_jobs; i += (size_t)c->ranks) {
        job *j = &c->jobs[i];
        char *line = j->result ? json_dumps(j->result, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
        fprintf(m, "%zu\t%s\n", i, line ? line : "{\"finish_reason\": \"error\", \"error\": \"lost\"}");
        free(line);
        json_decref(j->result);
        j->result = NULL;
    }
    fclose(m);
    void *all = NULL;
    int64_t *lens = calloc((size_t)c->ranks, sizeof *lens);
    di_error err;
    int rc = !lens || di_dist_gather_bytes(di_gen_dist(), 0, buf, (int64_t)len, &all, lens, &err);
    free(buf);
    if (!rc && c->rank == 0) {
        char **rec = calloc(c->n_jobs ? c->n_jobs : 1, sizeof *rec);
        char *p = all, *end = p;
        for (int q = 0; q < c->ranks; q++) end += lens[q];
        while (rec && p < end) {
            char *nl = memchr(p, '\n', (size_t)(end - p)), *tab = memchr(p, '\t', (size_t)(end - p));
            if (!nl || !tab || tab > nl) break;
            *nl = 0;
            size_t i = strtoull(p, NULL, 10);
            if (i < c->n_jobs) rec[i] = tab + 1;
            p = nl + 1;
        }
        for (size_t i = 0; rec && i < c->n_jobs; i++) fprintf(c->out, "%s\n", rec[i] ? rec[i] : "{}");
        fflush(c->out);
        free(rec);
    }
    free(all);
    free(lens);
    return rc;
}

int di_cmd_batch(int argc, char **argv) {
    di_gen_opts o;
    di_gen_opts_defaults(&o);
    const char *in_path = NULL, *out_path = NULL;
    di_arg specs[DI_GEN_MAX_SPECS];
    int n = di_gen_opts_specs(&o, specs, 0);
    specs[n++] = (di_arg){"--in", "-i", DI_ARG_STR, &in_path, 0, 0, "input JSONL (one request per line)"};
    specs[n++] = (di_arg){"--out", "-o", DI_ARG_STR, &out_path, 0, 0, "output JSONL"};
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("batch", "-m MODEL --in prompts.jsonl --out results.jsonl [options]", specs, n,
                           argc, argv, pos, 0, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    if (!in_path || !out_path) {
        fprintf(stderr, "deepinfer batch: --in and --out are required\n");
        return 2;
    }
    FILE *in = fopen(in_path, "r");
    struct stat st;
    if (!in || fstat(fileno(in), &st) || S_ISDIR(st.st_mode)) {
        /* fopen opens a directory for reading, and getline then reads
         * nothing: "0 requests", exit 0, for a typo */
        fprintf(stderr, "deepinfer batch: cannot read %s: %s\n", in_path,
                in && S_ISDIR(st.st_mode) ? "is a directory (give a JSONL file)" : strerror(errno));
        if (in) fclose(in);
        return 1;
    }
    /* Read every line first: the jobs array must not move once requests
     * point into it. */
    size_t cap = 64, n_lines = 0;
    json_t **lines = malloc(cap * sizeof *lines);
    char **errors = malloc(cap * sizeof *errors);
    char *buf = NULL;
    size_t bcap = 0;
    ssize_t len;
    while (lines && errors && (len = getline(&buf, &bcap, in)) >= 0) {
        if (len == 0 || (len == 1 && buf[0] == '\n')) continue;
        if (n_lines == cap) {
            cap *= 2;
            json_t **l2 = realloc(lines, cap * sizeof *lines);
            if (l2) lines = l2;
            char **e2 = realloc(errors, cap * sizeof *errors);
            if (e2) errors = e2;
            if (!l2 || !e2) break;
        }
        json_error_t jerr;
        lines[n_lines] = json_loadb(buf, (size_t)len, JSON_REJECT_DUPLICATES, &jerr);
        errors[n_lines] = NULL;
        if (!lines[n_lines]) {
            char m[256];
            snprintf(m, sizeof m, "invalid JSON: %s", jerr.text);
            errors[n_lines] = strdup(m);
        }
        n_lines++;
    }
    free(buf);
    fclose(in);
    FILE *out = fopen(out_path, "w");
    if (!out || !lines || !errors) {
        fprintf(stderr, "deepinfer batch: cannot write %s\n", out_path);
        if (out) fclose(out);
        rc = 1;
        goto done_lines;
    }
    di_engine *e = di_gen_engine_open("batch", &o);
    if (!e) {
        fclose(out);
        rc = 1;
        goto done_lines;
    }
    /* --cp: every rank runs every line (one request set, prefills split);
     * rank 0 alone writes */
    if (o.cp && di_gen_rank() > 0) {
        fclose(out);
        if (!(out = fopen("/dev/null", "w"))) {
            rc = 1;
            di_gen_engine_close(e);
            goto done_lines;
        }
    }
    batch_ctx c = {.out = out, .n_jobs = n_lines, .t0 = now_s(), .rank = o.cp ? 0 : di_gen_rank(),
                   .ranks = o.cp ? 1 : di_gen_ranks()};
    di_progress_start(&c.prog, "batch", (int64_t)n_lines, "generated tok/s");
    c.jobs = calloc(n_lines ? n_lines : 1, sizeof *c.jobs);
    if (!c.jobs) {
        rc = 1;
        goto done_engine;
    }
    for (size_t i = 0; i < n_lines; i++) {
        job *j = &c.jobs[i];
        j->ctx = &c;
        json_t *id = lines[i] ? json_object_get(lines[i], "id") : NULL;
        j->id = id ? json_incref(id) : json_integer((json_int_t)i);
        if (i % (size_t)c.ranks != (size_t)c.rank) continue; /* another rank's line */
        if (errors[i]) {
            finish_job(j, error_record(errors[i]));
            continue;
        }
        di_request r;
        char msg[512];
        di_error err;
        if (parse_request(lines[i], j, &o, &r, msg, sizeof msg)) {
            finish_job(j, error_record(msg));
        } else if (attach_images(e, lines[i], j, &r, msg, sizeof msg)) {
            finish_job(j, error_record(msg));
        } else if (di_engine_submit(e, &r, NULL, &err)) {
            finish_job(j, error_record(err.msg));
        }
        /* submit has read the images and the prompt text */
        di_gen_images_free(j->images, j->n_images);
        j->n_images = 0;
        free(j->image_text);
        j->image_text = NULL;
    }
    di_error err;
    if (di_engine_run(e, &err)) {
        fprintf(stderr, "\ndeepinfer batch: %s\n", err.msg);
        rc = 1;
    }
    if (c.ranks > 1 && gather_records(&c)) {
        fprintf(stderr, "deepinfer batch: gathering the records on rank 0 failed\n");
        rc = 1;
    }
    double dt = now_s() - c.t0;
    if (c.n_done < c.n_jobs && c.prog.tty) fputc('\n', stderr); /* --ep: other ranks' lines */
    fprintf(stderr, "[batch: %zu requests, %lld prompt + %lld generated tokens in %.2f s | %.1f generated tok/s]\n",
            n_lines, (long long)c.n_prompt, (long long)c.n_generated, dt, dt > 0 ? c.n_generated / dt : 0.0);
    di_gen_print_spec_stats(e);
    for (size_t i = 0; i < n_lines; i++) {
        json_decref(c.jobs[i].id);
        free(c.jobs[i].msgs);
    }
    free(c.jobs);
done_engine:
    di_gen_engine_close(e);
    fclose(out);
done_lines:
    for (size_t i = 0; lines && i < n_lines; i++) {
        json_decref(lines[i]);
        if (errors) free(errors[i]);
    }
    free(lines);
    free(errors);
    return rc;
}
