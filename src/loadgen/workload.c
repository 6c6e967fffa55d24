/* Seeded request generator for `bench serve`: length distributions,
 * multi-turn conversations that re-send their history, a shared system
 * prompt, and user turns read from a JSONL file.
 *
 * Lengths are in words of a fixed English word list; servers count tokens
 * themselves and the record takes its token counts from their `usage`. */
#include "loadgen/loadgen.h"

#include "base/alloc.h"
#include "base/status.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* z of the standard normal's 99th percentile. */
#define Z99 2.3263478740408408
/* Cap on one user turn from a file (a prompt file line is untrusted). */
#define MAX_PROMPT_BYTES (1 << 20)
/* Salt so the shared system prompt is not the same text as conversation 0's. */
#define SHARED_SYSTEM_SALT 0x5eedULL

static const char *const WORDS[] = {
    "the",    "model",  "answer", "question", "small",  "river",   "light",  "system", "memory", "quick",
    "brown",  "across", "number", "simple",   "garden", "window",  "story",  "paper",  "table",  "city",
    "winter", "music",  "travel", "history",  "energy", "machine", "friend", "market", "ocean",  "forest",
    "cloud",  "signal", "engine", "value",    "bright", "future",  "letter", "corner", "summer", "family",
    "school", "science", "report", "planet",  "silver", "morning", "voice",  "minute", "change", "design",
    "water",  "mountain", "street", "animal", "doctor", "picture", "season", "orange", "yellow", "green",
    "people", "example", "reason", "result"};
#define N_WORDS (sizeof WORDS / sizeof WORDS[0])

uint64_t di_lg_rng_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

double di_lg_rng_uniform(uint64_t *state) {
    return (double)(di_lg_rng_next(state) >> 11) * (1.0 / 9007199254740992.0);
}

/* Parses a whole decimal number (no trailing junk). */
static bool parse_num(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

di_status di_lg_len_parse(const char *spec, di_lg_len *out, di_error *err) {
    memset(out, 0, sizeof *out);
    char buf[128];
    if (!spec || strlen(spec) >= sizeof buf)
        return di_error_set(err, DI_ERR_INVALID_ARG, "length spec missing or too long");
    strcpy(buf, spec);
    char *f[4] = {0};
    int nf = 0;
    for (char *p = buf, *tok; nf < 4 && (tok = strsep(&p, ":"));) f[nf++] = tok;
    double a = 0, b = 0;
    bool ok = nf >= 2 && parse_num(f[1], &a) && (nf < 3 || parse_num(f[2], &b));
    if (ok && !strcmp(f[0], "fixed") && nf == 2 && a >= 1 && a <= DI_LG_MAX_LEN) {
        out->kind = DI_LG_LEN_FIXED;
        out->a = floor(a);
        return DI_OK;
    }
    if (ok && !strcmp(f[0], "uniform") && nf == 3 && a >= 1 && b >= a && b <= DI_LG_MAX_LEN) {
        out->kind = DI_LG_LEN_UNIFORM;
        out->a = floor(a);
        out->b = floor(b);
        return DI_OK;
    }
    if (ok && !strcmp(f[0], "lognormal") && nf == 3 && a >= 1 && b > a && b <= DI_LG_MAX_LEN) {
        /* mean = exp(mu + s^2/2), p99 = exp(mu + Z99 s)  =>
         * s^2/2 - Z99 s + ln(p99/mean) = 0; the smaller root. */
        double disc = Z99 * Z99 - 2 * log(b / a);
        if (disc < 0)
            return di_error_set(err, DI_ERR_RANGE,
                                "'%s': a lognormal's p99 can be at most %.1f x its mean", spec,
                                exp(Z99 * Z99 / 2));
        out->kind = DI_LG_LEN_LOGNORMAL;
        out->a = a;
        out->b = b;
        out->sigma = Z99 - sqrt(disc);
        out->mu = log(a) - out->sigma * out->sigma / 2;
        return DI_OK;
    }
    return di_error_set(err, DI_ERR_INVALID_ARG,
                        "bad length '%s' (want fixed:N, uniform:LO:HI or lognormal:MEAN:P99, 1 <= N <= %d)",
                        spec, DI_LG_MAX_LEN);
}

int64_t di_lg_len_sample(const di_lg_len *d, uint64_t *rng) {
    double v = d->a;
    if (d->kind == DI_LG_LEN_UNIFORM) {
        v = d->a + floor(di_lg_rng_uniform(rng) * (d->b - d->a + 1));
    } else if (d->kind == DI_LG_LEN_LOGNORMAL) {
        /* Box-Muller; u1 in (0, 1] so log is finite */
        double u1 = 1.0 - di_lg_rng_uniform(rng), u2 = di_lg_rng_uniform(rng);
        double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        v = round(exp(d->mu + d->sigma * z));
    }
    if (v < 1) v = 1;
    if (v > DI_LG_MAX_LEN) v = DI_LG_MAX_LEN;
    return (int64_t)v;
}

void di_lg_len_format(const di_lg_len *d, char *buf, size_t cap) {
    if (d->kind == DI_LG_LEN_FIXED) snprintf(buf, cap, "fixed:%.0f", d->a);
    else if (d->kind == DI_LG_LEN_UNIFORM) snprintf(buf, cap, "uniform:%.0f:%.0f", d->a, d->b);
    else snprintf(buf, cap, "lognormal:%g:%g", d->a, d->b);
}

di_status di_lg_workload_parse(const char *spec, di_lg_workload *w, di_error *err) {
    memset(w, 0, sizeof *w);
    w->turns = 1;
    w->seed = 1;
    di_status st = di_lg_len_parse("fixed:64", &w->input, err);
    if (!st) st = di_lg_len_parse("fixed:64", &w->output, err);
    if (st) return st;
    if (!spec) return DI_OK;
    size_t n = strlen(spec);
    if (n > 4096) return di_error_set(err, DI_ERR_INVALID_ARG, "workload spec too long");
    char *buf = di_strdup(spec);
    if (!buf) return di_error_set(err, DI_ERR_NOMEM, "workload spec");
    for (char *p = buf, *kv; !st && (kv = strsep(&p, ","));) {
        if (!*kv) continue;
        char *eq = strchr(kv, '=');
        if (!eq) {
            st = di_error_set(err, DI_ERR_INVALID_ARG, "workload: '%s' is not key=value", kv);
            break;
        }
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        double x = 0;
        if (!strcmp(k, "turns")) {
            if (!parse_num(v, &x) || x < 1 || x > 1000 || x != floor(x))
                st = di_error_set(err, DI_ERR_INVALID_ARG, "workload: turns=%s (want 1..1000)", v);
            w->turns = (int32_t)x;
        } else if (!strcmp(k, "system")) {
            if (!parse_num(v, &x) || x < 0 || x > DI_LG_MAX_LEN || x != floor(x))
                st = di_error_set(err, DI_ERR_INVALID_ARG, "workload: system=%s (want 0..%d words)", v,
                                  DI_LG_MAX_LEN);
            w->system_words = (int32_t)x;
        } else if (!strcmp(k, "shared")) {
            if (!parse_num(v, &x) || x < 0 || x > 1)
                st = di_error_set(err, DI_ERR_INVALID_ARG, "workload: shared=%s (want 0..1)", v);
            w->shared_fraction = x;
        } else if (!strcmp(k, "seed")) {
            if (!parse_num(v, &x) || x < 0 || x > 9007199254740992.0 || x != floor(x))
                st = di_error_set(err, DI_ERR_INVALID_ARG, "workload: seed=%s", v);
            w->seed = (uint64_t)x;
        } else if (!strcmp(k, "input")) {
            st = di_lg_len_parse(v, &w->input, err);
        } else if (!strcmp(k, "output")) {
            st = di_lg_len_parse(v, &w->output, err);
        } else if (!strcmp(k, "prompts")) {
            if (!*v || strlen(v) >= sizeof w->prompts_path)
                st = di_error_set(err, DI_ERR_INVALID_ARG, "workload: prompts= needs a path");
            else
                strcpy(w->prompts_path, v);
        } else {
            st = di_error_set(err, DI_ERR_INVALID_ARG,
                              "workload: unknown key '%s' (turns, system, shared, input, output, prompts, seed)",
                              k);
        }
    }
    free(buf);
    return st;
}

/* The user text of one JSONL line, or NULL with err set. */
static char *prompt_of_line(const char *line, size_t lineno, di_error *err) {
    json_error_t je;
    json_t *j = json_loads(line, JSON_DECODE_ANY, &je);
    if (!j) {
        di_error_set(err, DI_ERR_FORMAT, "line %zu: not JSON (%s)", lineno, je.text);
        return NULL;
    }
    const char *s = NULL;
    if (json_is_string(j)) {
        s = json_string_value(j);
    } else if (json_is_object(j) && json_is_string(json_object_get(j, "prompt"))) {
        s = json_string_value(json_object_get(j, "prompt"));
    } else if (json_is_object(j) && json_is_array(json_object_get(j, "messages"))) {
        json_t *msgs = json_object_get(j, "messages");
        for (size_t i = json_array_size(msgs); i-- > 0;) {
            json_t *m = json_array_get(msgs, i);
            const char *role = json_string_value(json_object_get(m, "role"));
            if (role && !strcmp(role, "user") && json_is_string(json_object_get(m, "content"))) {
                s = json_string_value(json_object_get(m, "content"));
                break;
            }
        }
    }
    char *out = NULL;
    if (!s || !*s)
        di_error_set(err, DI_ERR_FORMAT,
                     "line %zu: want a string, {\"prompt\": \"...\"} or {\"messages\": [...]} with a user message",
                     lineno);
    else if (!(out = di_strdup(s)))
        di_error_set(err, DI_ERR_NOMEM, "line %zu", lineno);
    json_decref(j);
    return out;
}

di_status di_lg_workload_load(di_lg_workload *w, di_error *err) {
    if (!w->prompts_path[0]) return DI_OK;
    FILE *f = fopen(w->prompts_path, "r");
    if (!f) return di_error_set(err, DI_ERR_IO, "%s: %s", w->prompts_path, strerror(errno));
    char *line = NULL;
    size_t cap = 0, lineno = 0, n_cap = 0;
    ssize_t len;
    di_status st = DI_OK;
    while (!st && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len > MAX_PROMPT_BYTES) {
            st = di_error_set(err, DI_ERR_RANGE, "line %zu: longer than %d bytes", lineno, MAX_PROMPT_BYTES);
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        if ((size_t)len != strlen(line)) {
            st = di_error_set(err, DI_ERR_FORMAT, "line %zu: NUL byte", lineno);
            break;
        }
        char *p = prompt_of_line(line, lineno, err);
        if (!p) {
            st = err ? err->code : DI_ERR_FORMAT;
            break;
        }
        if (w->n_prompts == n_cap) {
            size_t nc = n_cap ? 2 * n_cap : 64;
            char **np = di_realloc_array(w->prompts, nc, sizeof *np);
            if (!np) {
                free(p);
                st = di_error_set(err, DI_ERR_NOMEM, "prompts");
                break;
            }
            w->prompts = np;
            n_cap = nc;
        }
        w->prompts[w->n_prompts++] = p;
    }
    free(line);
    fclose(f);
    if (!st && w->n_prompts == 0) st = di_error_set(err, DI_ERR_FORMAT, "no prompts");
    if (st) di_error_prefix(err, "%s: ", w->prompts_path);
    return st;
}

json_t *di_lg_workload_json(const di_lg_workload *w) {
    char in[64], out[64];
    di_lg_len_format(&w->input, in, sizeof in);
    di_lg_len_format(&w->output, out, sizeof out);
    json_t *j = json_pack("{s:i, s:i, s:f, s:s, s:s, s:I, s:s}", "turns", (int)w->turns, "system_words",
                          (int)w->system_words, "shared_system_fraction", w->shared_fraction, "input_words", in,
                          "output_max_tokens", out, "seed", (json_int_t)w->seed, "length_unit", "words");
    if (j && w->prompts_path[0]) {
        json_object_set_new(j, "prompts_file", json_string(w->prompts_path));
        json_object_set_new(j, "n_prompts", json_integer((json_int_t)w->n_prompts));
    }
    return j;
}

void di_lg_workload_free(di_lg_workload *w) {
    for (size_t i = 0; i < w->n_prompts; i++) free(w->prompts[i]);
    free(w->prompts);
    w->prompts = NULL;
    w->n_prompts = 0;
}

/* n_words words drawn from rng, space-separated (caller frees). */
static char *words_text(uint64_t *rng, int64_t n_words) {
    size_t cap = (size_t)n_words * 10 + 1, len = 0;
    char *s = malloc(cap);
    if (!s) return NULL;
    for (int64_t i = 0; i < n_words; i++) {
        const char *w = WORDS[di_lg_rng_next(rng) % N_WORDS];
        size_t wl = strlen(w);
        if (len + wl + 2 > cap) break; /* cannot happen: words are < 9 bytes */
        if (i) s[len++] = ' ';
        memcpy(s + len, w, wl);
        len += wl;
    }
    s[len] = 0;
    return s;
}

static di_status append_msg(json_t *arr, const char *role, const char *text, di_error *err) {
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", text);
    if (!m || json_array_append_new(arr, m))
        return di_error_set(err, DI_ERR_NOMEM, "message (%s) not valid UTF-8 or out of memory", role);
    return DI_OK;
}

di_status di_lg_conv_start(const di_lg_workload *w, int64_t index, di_lg_conv *c, di_error *err) {
    memset(c, 0, sizeof *c);
    c->index = index;
    c->rng = w->seed * 0x100000001b3ULL ^ (uint64_t)index;
    di_lg_rng_next(&c->rng);
    c->messages = json_array();
    if (!c->messages) return di_error_set(err, DI_ERR_NOMEM, "conversation");
    c->shared_system = di_lg_rng_uniform(&c->rng) < w->shared_fraction;
    if (w->system_words > 0) {
        uint64_t srng = c->shared_system ? w->seed ^ SHARED_SYSTEM_SALT : c->rng ^ SHARED_SYSTEM_SALT;
        char *sys = words_text(&srng, w->system_words);
        if (!sys) return di_error_set(err, DI_ERR_NOMEM, "system prompt");
        di_status st = append_msg(c->messages, "system", sys, err);
        free(sys);
        if (st) return st;
    }
    return DI_OK;
}

bool di_lg_conv_more(const di_lg_workload *w, const di_lg_conv *c) {
    return c->turn < w->turns;
}

di_status di_lg_conv_next(const di_lg_workload *w, di_lg_conv *c, json_t **body, di_error *err) {
    *body = NULL;
    if (!di_lg_conv_more(w, c)) return di_error_set(err, DI_ERR_RANGE, "conversation has no turns left");
    int64_t n_in = di_lg_len_sample(&w->input, &c->rng);
    int64_t n_out = di_lg_len_sample(&w->output, &c->rng);
    char *text;
    if (w->n_prompts) {
        /* file prompts in order: conversation i, turn t takes line (i * turns + t) */
        uint64_t k = ((uint64_t)c->index * (uint64_t)w->turns + (uint64_t)c->turn) % w->n_prompts;
        text = di_strdup(w->prompts[k]);
    } else {
        text = words_text(&c->rng, n_in);
    }
    if (!text) return di_error_set(err, DI_ERR_NOMEM, "user turn");
    di_status st = append_msg(c->messages, "user", text, err);
    free(text);
    if (st) return st;
    c->turn++;
    *body = json_pack("{s:O, s:I}", "messages", c->messages, "max_tokens", (json_int_t)n_out);
    if (!*body) return di_error_set(err, DI_ERR_NOMEM, "request body");
    return DI_OK;
}

di_status di_lg_conv_reply(di_lg_conv *c, const char *text, di_error *err) {
    return append_msg(c->messages, "assistant", text ? text : "", err);
}

void di_lg_conv_free(di_lg_conv *c) {
    json_decref(c->messages);
    c->messages = NULL;
}
