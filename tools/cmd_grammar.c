/* deepinfer grammar: compile a JSON Schema / regex / EBNF, walk an instance
 * through the token matcher (--check) or benchmark a folder of schemas
 * (--bench).
 *
 * --tokenizer MODEL is anything the text module loads: a tokenizer.json, a
 * folder holding one, or a (vocab-only) GGUF. --check encodes the instance
 * with that tokenizer (no special tokens) and walks it token by token: mask,
 * bit check, advance; at the end the matcher must accept.
 *
 * Schema keywords a grammar cannot enforce follow the policy of `run` and
 * the server (OpenAI's `strict`): by default they are dropped and named on
 * stderr; --strict refuses the schema instead. --bench counts both. */
#include "tools.h"

#include "base/status.h"
#include "grammar/grammar_tok.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_DEFAULT_TOKENS 256 /* tokens generated per schema in --bench */

typedef struct opts {
    const char *tokenizer, *schema, *regex, *ebnf, *check, *bench;
    bool json_object;
    bool json_out; /* --bench: one JSON line instead of text (for bench/grammar_peers.py) */
    di_grammar_options gopt;
    uint32_t limit;
    uint32_t seed;
    uint32_t tokens; /* --bench walk length; 0: compile only */
    uint32_t sample; /* --sample N: random walks (seeds seed .. seed+N-1) */
    double slow_us;  /* --bench --slow US: report every mask slower than US (0: none) */
} opts;

/* Timings use the thread's CPU clock, not the wall clock: on a shared,
 * loaded machine a wall-clock p99 measures the scheduler (a 3 us mask that
 * is preempted reads as milliseconds). The peer script measures the same
 * way (time.thread_time_ns). */
static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while (buf && (k = fread(buf + len, 1, cap - len, f)) > 0) {
        len += k;
        if (len == cap) {
            char *t = realloc(buf, 2 * cap + 1);
            if (!t) { free(buf); buf = NULL; break; }
            buf = t, cap *= 2;
        }
    }
    fclose(f);
    if (buf) buf[len] = 0, *n = len;
    return buf;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_dbl);
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

typedef struct dvec {
    double *v;
    size_t n, cap;
} dvec;

static void dpush(dvec *d, double x) {
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 1024;
        double *t = realloc(d->v, nc * sizeof *t);
        if (!t) return;
        d->v = t, d->cap = nc;
    }
    d->v[d->n++] = x;
}

/* Compiles the source the options name (schema_path: a --bench file) with
 * gopt (o->gopt, or the other policy for --bench's second count). */
static di_status compile_with(const opts *o, const di_grammar_options *gopt, const char *schema_path, di_grammar **g,
                              di_error *err) {
    if (o->json_object) return di_grammar_compile_json_object(gopt, g, err);
    if (o->regex) return di_grammar_compile_regex(o->regex, strlen(o->regex), g, err);
    const char *path = schema_path ? schema_path : o->schema ? o->schema : o->ebnf;
    size_t n;
    char *text = read_all(path, &n);
    if (!text) return di_error_set(err, DI_ERR_IO, "cannot read %s", path);
    di_status s = o->ebnf && !schema_path ? di_grammar_compile_ebnf(text, n, NULL, g, err)
                                          : di_grammar_compile_json_schema(text, n, gopt, g, err);
    free(text);
    return s;
}

static di_status compile(const opts *o, const char *schema_path, di_grammar **g, di_error *err) {
    return compile_with(o, &o->gopt, schema_path, g, err);
}

/* What the default (non-strict) compile dropped, said once on stderr. */
static void warn_dropped(const di_grammar *g) {
    const char *d = di_grammar_dropped(g);
    if (d) fprintf(stderr, "deepinfer grammar: warning: not enforced (dropped; --strict refuses them): %s\n", d);
}

static bool json_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* A JSON instance as the grammar spells it: the whitespace JSON allows
 * around the value is dropped (a file's trailing newline), and with the
 * compact grammar also the whitespace between tokens (outside strings,
 * where it carries no meaning). In place; returns the new length and
 * writes to orig[i] (room for n + 1) where byte i came from. */
static size_t json_normalize(char *s, size_t n, bool compact, size_t *orig) {
    size_t a = 0, b = n;
    while (a < b && json_ws(s[a])) a++;
    while (b > a && json_ws(s[b - 1])) b--;
    size_t o = 0;
    bool in_str = false, esc = false;
    for (size_t i = a; i < b; i++) {
        char c = s[i];
        if (in_str) {
            if (esc) esc = false;
            else if (c == '\\') esc = true;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (compact && json_ws(c)) {
            continue;
        }
        orig[o] = i;
        s[o++] = c;
    }
    orig[o] = b;
    s[o] = 0;
    return o;
}

/* Appends byte b to a message the way a reader wants to see it. */
static size_t put_byte(char *out, size_t cap, size_t n, int b) {
    if (n >= cap) return n;
    if (b >= 0x21 && b < 0x7f) return n + (size_t)snprintf(out + n, cap - n, "'%c'", b);
    if (b == ' ') return n + (size_t)snprintf(out + n, cap - n, "' '");
    return n + (size_t)snprintf(out + n, cap - n, "0x%02x", b);
}

/* Explains a reject: walks the bytes through a byte matcher to the first
 * one the grammar refuses and prints where it is in the file (file, orig:
 * see json_normalize; orig NULL when the bytes are the file's) and which
 * bytes the grammar would take there (ranges, at most a few dozen). */
static void explain_reject(const di_grammar *g, const char *inst, size_t n, const char *file,
                           const size_t *orig) {
    di_grammar_matcher *m = NULL;
    di_error err;
    if (di_grammar_matcher_create(g, NULL, &m, &err)) return;
    size_t i = 0;
    while (i < n && di_grammar_matcher_advance_bytes(m, (const uint8_t *)inst + i, 1)) i++;
    size_t at = orig ? orig[i] : i, line = 1, col = 1;
    for (size_t j = 0; j < at; j++) {
        if (file[j] == '\n') line++, col = 1;
        else col++;
    }
    bool next[256];
    di_grammar_matcher_next_bytes(m, next);
    char exp[400];
    size_t k = 0;
    int shown = 0;
    for (int b = 0; b < 256 && k < sizeof exp; b++) {
        if (!next[b]) continue;
        int e = b;
        while (e + 1 < 256 && next[e + 1]) e++;
        if (shown++ == 24) {
            k += (size_t)snprintf(exp + k, sizeof exp - k, ", ...");
            break;
        }
        if (shown > 1) k += (size_t)snprintf(exp + k, sizeof exp - k, ", ");
        k = put_byte(exp, sizeof exp, k, b);
        if (e > b) {
            if (k < sizeof exp) k += (size_t)snprintf(exp + k, sizeof exp - k, "-");
            k = put_byte(exp, sizeof exp, k, e);
        }
        b = e;
    }
    if (!shown) snprintf(exp, sizeof exp, "nothing more");
    if (i < n) {
        char got[16];
        put_byte(got, sizeof got, 0, (uint8_t)inst[i]);
        printf("at byte %zu (line %zu, column %zu): got %s, expected %s\n", at, line, col, got, exp);
    } else if (!di_grammar_matcher_is_accepting(m)) {
        printf("at byte %zu (line %zu, column %zu): the instance ends too early, expected %s\n", at, line, col, exp);
    } else {
        printf("the bytes match, but the tokenizer's split of them does not\n");
    }
    di_grammar_matcher_free(m);
}

/* --check: tokenize, then per token: mask, check the bit, advance. */
static int run_check(const opts *o, const di_tokenizer *tok, const di_grammar_vocab *v) {
    di_error err = {0};
    di_grammar *g = NULL;
    double t0 = now_us();
    if (compile(o, NULL, &g, &err)) {
        fprintf(stderr, "deepinfer grammar: cannot compile: %s\n", err.msg);
        return 2;
    }
    double compile_us = now_us() - t0;
    warn_dropped(g);
    size_t n;
    char *inst = read_all(o->check, &n);
    if (!inst) {
        fprintf(stderr, "deepinfer grammar: cannot read %s\n", o->check);
        di_grammar_free(g);
        return 2;
    }
    /* the file as written, for positions in messages */
    char *file = malloc(n + 1);
    size_t *orig = NULL;
    if (file) memcpy(file, inst, n + 1);
    if (!o->regex && !o->ebnf && file && (orig = malloc((n + 1) * sizeof *orig)))
        n = json_normalize(inst, n, o->gopt.whitespace == DI_GRAMMAR_WS_COMPACT, orig);
    di_tok_ids enc = {0};
    if (di_tok_encode(tok, inst, n, false, false, &enc, &err)) {
        fprintf(stderr, "deepinfer grammar: cannot tokenize %s: %s\n", o->check, err.msg);
        free(inst);
        free(file);
        free(orig);
        di_grammar_free(g);
        return 2;
    }
    int64_t nt = (int64_t)enc.n;
    uint32_t *ids = malloc((enc.n + 1) * sizeof *ids);
    for (size_t i = 0; ids && i < enc.n; i++) ids[i] = (uint32_t)enc.data[i];
    di_tok_ids_free(&enc);
    if (!ids) nt = -1;
    di_grammar_matcher *m = NULL;
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t *mask = malloc(words * sizeof *mask);
    dvec times = {0};
    bool ok = nt >= 0 && mask && di_grammar_matcher_create(g, v, &m, &err) == DI_OK;
    for (int64_t i = 0; ok && i < nt; i++) {
        double a = now_us();
        if (di_grammar_matcher_fill_mask(m, mask, words, &err)) ok = false;
        dpush(&times, now_us() - a);
        uint32_t t = ids[i];
        if (!ok || !((mask[t >> 5] >> (t & 31)) & 1) || !di_grammar_matcher_advance_token(m, t)) ok = false;
    }
    if (ok) ok = di_grammar_matcher_is_accepting(m);
    printf("%s\n", ok ? "accept" : "reject");
    if (!ok && nt >= 0 && file) explain_reject(g, inst, n, file, orig);
    printf("compile %.1f us, %lld tokens, mask p50 %.1f us, p99 %.1f us\n", compile_us, (long long)nt,
           pct(times.v, times.n, 0.5), pct(times.v, times.n, 0.99));
    free(times.v);
    free(mask);
    free(ids);
    free(inst);
    free(file);
    free(orig);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
    return ok ? 0 : 1;
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Generates up to max_tokens tokens by sampling allowed tokens (with
 * a bias towards tokens that close strings, so walks move through the
 * structure instead of staying in one string), timing every mask. */
/* Bytes kept of a walk's output for --slow reports (the tail is printed). */
#define SLOW_TAIL 48

static void bench_walk(di_grammar_matcher *m, const di_grammar_vocab *v, uint32_t *mask, size_t words, uint64_t *seed,
                       dvec *times, uint32_t *allowed, uint32_t max_tokens, const char *name, double slow_us) {
    di_error err;
    char tail[SLOW_TAIL + 1] = {0};
    for (uint32_t step = 0; step < max_tokens; step++) {
        double a = now_us();
        if (di_grammar_matcher_fill_mask(m, mask, words, &err)) return;
        double dt = now_us() - a;
        dpush(times, dt);
        if (slow_us > 0 && dt >= slow_us) {
            printf("slow %8.1f us  %s step %u after ...", dt, name, step);
            for (const char *p = tail; *p; p++) putchar(*p >= 0x20 && *p < 0x7f ? *p : '?');
            putchar('\n');
        }
        uint32_t n = 0, n_struct = 0;
        for (size_t w = 0; w < words; w++)
            for (uint32_t bits = mask[w]; bits; bits &= bits - 1) allowed[n++] = (uint32_t)(w * 32 + (uint32_t)__builtin_ctz(bits));
        if (!n) return;
        /* prefer structural tokens half of the time */
        uint32_t pick = allowed[rng(seed) % n];
        if (rng(seed) & 1) {
            for (uint32_t i = 0; i < n; i++) {
                uint32_t len;
                const uint8_t *b = di_grammar_vocab_token(v, allowed[i], &len);
                if (b && len && memchr(b, '"', len)) allowed[n_struct++] = allowed[i];
            }
            if (n_struct) pick = allowed[rng(seed) % n_struct];
        }
        if (!di_grammar_matcher_advance_token(m, pick)) return;
        if (slow_us > 0) { /* keep the output's tail for the report */
            uint32_t len;
            const uint8_t *b = di_grammar_vocab_token(v, pick, &len);
            size_t have = strlen(tail);
            for (uint32_t j = 0; b && j < len; j++) {
                if (have == SLOW_TAIL) memmove(tail, tail + 1, SLOW_TAIL - 1), have--;
                tail[have++] = b[j] ? (char)b[j] : '?';
            }
            tail[have] = 0;
        }
        if (di_grammar_matcher_is_terminated(m)) return;
    }
}

static int run_bench(const opts *o, const di_grammar_vocab *v) {
    DIR *d = opendir(o->bench);
    if (!d) {
        fprintf(stderr, "deepinfer grammar: cannot open %s\n", o->bench);
        return 2;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 6 || strcmp(e->d_name + l - 5, ".json")) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            names = realloc(names, cap * sizeof *names);
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    for (size_t i = 1; i < n; i++) /* sorted: reproducible subsets */
        for (size_t j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char *t = names[j];
            names[j] = names[j - 1], names[j - 1] = t;
        }
    size_t n_all = n;
    if (o->limit && o->limit < n) n = o->limit;
    size_t words = di_grammar_vocab_mask_words(v);
    uint32_t *mask = malloc(words * sizeof *mask), *allowed = malloc(words * 32 * sizeof *allowed);
    dvec compile_t = {0}, mask_t = {0};
    size_t compiled = 0, compiled_other = 0;
    /* Coverage under both policies in one run: the walks and times use the
     * run's own (the default, or --strict), the other is only counted */
    di_grammar_options other = o->gopt;
    other.lenient = !o->gopt.lenient;
    uint64_t seed = 0x2545F4914F6CDD1Dull ^ o->seed;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", o->bench, names[i]);
        di_grammar *g = NULL;
        di_error err = {0};
        double a = now_us();
        di_status s = compile(o, path, &g, &err);
        double c_us = now_us() - a;
        di_grammar *g_other = NULL;
        di_error err_other = {0};
        if (compile_with(o, &other, path, &g_other, &err_other) == DI_OK) compiled_other++;
        di_grammar_free(g_other);
        if (s) {
            if (getenv("DI_BENCH_VERBOSE")) printf("  %s: %s\n", names[i], err.msg);
            continue;
        }
        compiled++;
        dpush(&compile_t, c_us);
        di_grammar_matcher *m = NULL;
        if (di_grammar_matcher_create(g, v, &m, &err) == DI_OK) bench_walk(m, v, mask, words, &seed, &mask_t, allowed, o->tokens, names[i], o->slow_us);
        di_grammar_matcher_free(m);
        di_grammar_free(g);
    }
    double c50 = pct(compile_t.v, compile_t.n, 0.5), c99 = pct(compile_t.v, compile_t.n, 0.99);
    double m50 = pct(mask_t.v, mask_t.n, 0.5), m99 = pct(mask_t.v, mask_t.n, 0.99), mmax = pct(mask_t.v, mask_t.n, 1.0);
    size_t n_default = o->gopt.lenient ? compiled : compiled_other;
    size_t n_strict = o->gopt.lenient ? compiled_other : compiled;
    if (o->json_out) {
        printf("{\"schemas\": %zu, \"compiled\": %zu, \"compiled_default\": %zu, \"compiled_strict\": %zu, "
               "\"compile_p50_us\": %.2f, \"compile_p99_us\": %.2f, "
               "\"masks\": %zu, \"mask_p50_us\": %.2f, \"mask_p99_us\": %.2f, \"mask_max_us\": %.2f}\n",
               n, compiled, n_default, n_strict, c50, c99, mask_t.n, m50, m99, mmax);
    } else {
        double per = n ? 100.0 / (double)n : 0;
        printf("schemas %zu, compiled %zu (%.1f%%) by default, %zu (%.1f%%) with --strict\n", n, n_default,
               per * (double)n_default, n_strict, per * (double)n_strict);
        printf("walks and times: the %s grammars\n", o->gopt.lenient ? "default" : "--strict");
        printf("compile p50 %.1f us, p99 %.1f us\n", c50, c99);
        printf("mask %zu masks, p50 %.1f us, p99 %.1f us, max %.1f us\n", mask_t.n, m50, m99, mmax);
    }
    for (size_t i = 0; i < n_all; i++) free(names[i]);
    free(names);
    free(mask), free(allowed), free(compile_t.v), free(mask_t.v);
    return 0;
}

/* --sample: N seeded random walks through the mask (di_grammar_random_walk),
 * one JSON line each: seed, token ids, whether it ended with EOS, and the
 * output bytes in hex (they need not be UTF-8 when the walk was cut off).
 * scripts/gen_goldens_grammar.py validates the complete ones. */
static int run_sample(const opts *o, const di_grammar_vocab *v) {
    di_error err = {0};
    di_grammar *g = NULL;
    if (compile(o, NULL, &g, &err)) {
        fprintf(stderr, "deepinfer grammar: cannot compile: %s\n", err.msg);
        return 2;
    }
    warn_dropped(g);
    uint32_t max = o->tokens ? o->tokens : BENCH_DEFAULT_TOKENS;
    uint32_t *ids = malloc(max * sizeof *ids);
    di_grammar_matcher *m = NULL;
    int rc = 0;
    if (!ids || di_grammar_matcher_create(g, v, &m, &err)) rc = 2;
    for (uint32_t i = 0; !rc && i < o->sample; i++) {
        uint32_t n;
        bool complete;
        uint64_t seed = (uint64_t)o->seed + i;
        di_grammar_matcher_reset(m);
        if (di_grammar_random_walk(m, seed, max, ids, &n, &complete, &err)) {
            fprintf(stderr, "deepinfer grammar: %s\n", err.msg);
            rc = 2;
            break;
        }
        printf("{\"seed\": %llu, \"complete\": %s, \"ids\": [", (unsigned long long)seed, complete ? "true" : "false");
        for (uint32_t k = 0; k < n; k++) printf("%s%u", k ? ", " : "", ids[k]);
        printf("], \"hex\": \"");
        for (uint32_t k = 0; k < n; k++) {
            uint32_t len;
            const uint8_t *b = di_grammar_vocab_token(v, ids[k], &len);
            if (k + 1 == n && complete) break; /* EOS has no output bytes */
            for (uint32_t j = 0; b && j < len; j++) printf("%02x", b[j]);
        }
        printf("\"}\n");
    }
    free(ids);
    di_grammar_matcher_free(m);
    di_grammar_free(g);
    return rc;
}

static void usage(FILE *f) {
    fprintf(f, "usage: deepinfer grammar --tokenizer MODEL\n"
               "         (--schema F.json | --regex R | --ebnf F | --json-object) --check INSTANCE_FILE\n"
               "       deepinfer grammar --tokenizer MODEL --bench DIR [--limit N] [--tokens N (0: compile only)] [--slow US]\n"
               "       deepinfer grammar --tokenizer MODEL (--schema F.json | ...) --sample N [--seed S] [--tokens MAX]\n"
               "MODEL: tokenizer.json, a folder with one, or a GGUF file\n"
               "options: --ws compact|flexible  --strict  --draft7  --seed N  --json (bench: one JSON line)\n"
               "--strict: refuse a schema with keywords or formats the grammar cannot enforce; by default they\n"
               "  are dropped and named on stderr (as in run and serve); --lenient says the default\n"
               "--check: JSON whitespace around the value (and, with --ws compact, between tokens) is ignored;\n"
               "  a reject says at which byte, line and column and which bytes the grammar expected there\n"
               "exit: 0 accept, 1 reject, 2 usage error or schema that does not compile\n");
}

int di_cmd_grammar(int argc, char **argv) {
    opts o = {0};
    o.gopt = di_grammar_options_default();
    o.gopt.lenient = true; /* OpenAI's non-strict default, as run and the server */
    o.tokens = BENCH_DEFAULT_TOKENS;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        if (!strcmp(a, "--json-object")) { o.json_object = true; continue; }
        if (!strcmp(a, "--lenient")) { o.gopt.lenient = true; continue; }
        if (!strcmp(a, "--strict")) { o.gopt.lenient = false; continue; }
        if (!strcmp(a, "--draft7")) { o.gopt.draft = DI_GRAMMAR_DRAFT_7; continue; }
        if (!strcmp(a, "--json")) { o.json_out = true; continue; }
        if (!val) { usage(stderr); return 2; }
        i++;
        if (!strcmp(a, "--tokenizer")) o.tokenizer = val;
        else if (!strcmp(a, "--schema")) o.schema = val;
        else if (!strcmp(a, "--regex")) o.regex = val;
        else if (!strcmp(a, "--ebnf")) o.ebnf = val;
        else if (!strcmp(a, "--check")) o.check = val;
        else if (!strcmp(a, "--bench")) o.bench = val;
        else if (!strcmp(a, "--limit")) o.limit = (uint32_t)strtoul(val, NULL, 10);
        else if (!strcmp(a, "--seed")) o.seed = (uint32_t)strtoul(val, NULL, 10);
        else if (!strcmp(a, "--tokens")) o.tokens = (uint32_t)strtoul(val, NULL, 10);
        else if (!strcmp(a, "--slow")) o.slow_us = strtod(val, NULL);
        else if (!strcmp(a, "--sample")) o.sample = (uint32_t)strtoul(val, NULL, 10);
        else if (!strcmp(a, "--ws")) o.gopt.whitespace = !strcmp(val, "flexible") ? DI_GRAMMAR_WS_FLEXIBLE : DI_GRAMMAR_WS_COMPACT;
        else { usage(stderr); return 2; }
    }
    int n_src = !!o.schema + !!o.regex + !!o.ebnf + o.json_object;
    if (!o.tokenizer || ((o.check || o.sample) && n_src != 1) || (!o.check && !o.bench && !o.sample)) {
        usage(stderr);
        return 2;
    }
    di_tokenizer *tok = NULL;
    di_grammar_vocab *v = NULL;
    di_error err = {0};
    if (di_tok_load(o.tokenizer, &tok, &err) || di_grammar_vocab_from_tokenizer(tok, &v, &err)) {
        fprintf(stderr, "deepinfer grammar: %s\n", err.msg);
        di_tok_free(tok);
        return 2;
    }
    int rc = o.check ? run_check(&o, tok, v) : o.sample ? run_sample(&o, v) : run_bench(&o, v);
    di_grammar_vocab_free(v);
    di_tok_free(tok);
    return rc;
}
