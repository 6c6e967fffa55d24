/* deepinfer run: one prompt, streamed to stdout, then a one-line summary.
 * deepinfer chat: interactive multi-turn; every turn resubmits the whole
 * conversation and the prefix cache skips what earlier turns computed. */
#include "chat_images.h"
#include "gen_common.h"
#include "line_input.h"
#include "progress.h"
#include "tools.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* SIGINT presses since chat installed its handler (0 elsewhere). */
static volatile sig_atomic_t g_interrupts;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupts++;
}

typedef struct stream_state {
    bool print_ids;     /* print generated ids instead of text */
    sig_atomic_t interrupts_before; /* g_interrupts when the request began */
    di_request_stats stats;
    di_finish finish;
    char *reply;        /* accumulated text (chat keeps it as history) */
    size_t len, cap;
    /* The final event's error text, copied: ev->error lives only as long
     * as the callback (it points into the engine's stack frame). */
    char error[256];
} stream_state;

static int on_event(const di_event *ev) {
    stream_state *st = ev->user;
    /* Ctrl-C in chat: cancel the reply (its final event still comes) */
    int cancel = g_interrupts != st->interrupts_before;
    if (st->print_ids) {
        /* the last event carries every id: print them once, on one line */
        if (ev->finish != DI_FINISH_REASON_NONE) {
            for (int32_t i = 0; i < ev->n_tokens; i++) printf(i ? " %d" : "%d", ev->tokens[i]);
            printf("\n");
        }
    } else if (ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        if (st->len + ev->text_len + 1 > st->cap) {
            size_t cap = (st->len + ev->text_len + 1) * 2;
            char *p = realloc(st->reply, cap);
            if (!p) return 1; /* cancel: cannot keep the text */
            st->reply = p;
            st->cap = cap;
        }
        memcpy(st->reply + st->len, ev->text, ev->text_len);
        st->len += ev->text_len;
        st->reply[st->len] = '\0';
    }
    if (ev->finish != DI_FINISH_REASON_NONE) {
        st->finish = ev->finish;
        st->stats = ev->stats;
        snprintf(st->error, sizeof st->error, "%s", ev->error ? ev->error : "");
    }
    return cancel;
}

static const char *finish_name(di_finish f) {
    switch (f) {
    case DI_FINISH_REASON_STOP: return "stop";
    case DI_FINISH_REASON_LENGTH: return "length";
    case DI_FINISH_REASON_CANCEL: return "cancel";
    case DI_FINISH_REASON_ERROR: return "error";
    case DI_FINISH_REASON_NONE: break;
    }
    return "none";
}

static void print_summary(const stream_state *st) {
    const di_request_stats *s = &st->stats;
    if (!st->print_ids && st->len && st->reply[st->len - 1] != '\n')
        putchar('\n'); /* end the streamed line */
    fflush(stdout);
    double prefill_ms = s->t_first_token_ms - s->t_queued_ms;
    double decode_ms = s->t_total_ms - s->t_first_token_ms;
    int n_computed = s->n_prompt - s->n_cached;
    fprintf(stderr,
            "[prompt %d tok (%d cached), generated %d tok | prefill %.1f tok/s | decode %.1f tok/s | "
            "finish %s]\n",
            s->n_prompt, s->n_cached, s->n_generated,
            prefill_ms > 0 ? n_computed / (prefill_ms / 1e3) : 0.0,
            decode_ms > 0 && s->n_generated > 1 ? (s->n_generated - 1) / (decode_ms / 1e3) : 0.0,
            finish_name(st->finish));
    if (st->finish == DI_FINISH_REASON_ERROR) fprintf(stderr, "error: %s\n", st->error[0] ? st->error : "generation failed");
}

/* Caps r->max_tokens so that prompt + reply fit the context (-n defaults
 * to more than a small --ctx holds), saying so on stderr. A prompt that
 * alone fills the context is left for submit to refuse. */
static void fit_max_tokens(const char *cmd, di_engine *e, di_request *r) {
    di_model_desc d;
    di_engine_describe(e, &d);
    size_t n_prompt;
    di_error err;
    if (di_engine_count_prompt(e, r, &n_prompt, &err) || n_prompt >= (size_t)d.n_ctx) return;
    int32_t room = d.n_ctx - (int32_t)n_prompt;
    if (r->max_tokens == 0 || r->max_tokens <= room) return;
    fprintf(stderr, "deepinfer %s: -n %d capped to %d: the context holds %d tokens (prompt %zu)\n", cmd,
            r->max_tokens, room, d.n_ctx, n_prompt);
    r->max_tokens = room;
}

/* Prompts at least this long show prefill progress (on a terminal). */
#define PREFILL_PROGRESS_MIN_TOKENS 1024

/* Steps a long prompt's prefill with a progress bar (tokens done / total,
 * tok/s) on a terminal; di_engine_run does the rest. One process only
 * (--ep steps collectively). */
static di_status prefill_with_progress(di_engine *e, const di_request *r, di_error *err) {
    size_t n_prompt = 0;
    if (!isatty(STDERR_FILENO) || di_gen_ranks() > 1 || di_engine_count_prompt(e, r, &n_prompt, err) ||
        n_prompt < PREFILL_PROGRESS_MIN_TOKENS)
        return DI_OK;
    di_engine_stats s0, s;
    di_engine_get_stats(e, &s0);
    di_progress prog;
    di_progress_start(&prog, "prefill", (int64_t)n_prompt, "tok/s");
    int64_t done = 0;
    while (!di_engine_idle(e) && done < (int64_t)n_prompt) {
        di_status rc = di_engine_step(e, err);
        if (rc) return rc;
        di_engine_get_stats(e, &s);
        done = (s.n_prefill_rows - s0.n_prefill_rows) + (s.n_prefix_hit_tokens - s0.n_prefix_hit_tokens);
        di_progress_update(&prog, done, (double)(s.n_prefill_rows - s0.n_prefill_rows));
    }
    di_progress_end(&prog, done, (double)(s.n_prefill_rows - s0.n_prefill_rows));
    return DI_OK;
}

/* Submits r, steps until it is done. Returns 0 ok, 1 on failure. */
static int generate(const char *cmd, di_engine *e, di_request *r, stream_state *st) {
    di_error err;
    fit_max_tokens(cmd, e, r);
    st->interrupts_before = g_interrupts;
    r->on_event = on_event;
    r->user = st;
    if (di_engine_submit(e, r, NULL, &err)) {
        fprintf(stderr, "deepinfer %s: %s\n", cmd, err.msg);
        return 1;
    }
    if (prefill_with_progress(e, r, &err) || di_engine_run(e, &err)) {
        fprintf(stderr, "deepinfer %s: %s\n", cmd, err.msg);
        return 1;
    }
    if (di_gen_rank() == 0) {
        print_summary(st);
        di_gen_print_spec_stats(e);
    }
    return st->finish == DI_FINISH_REASON_ERROR;
}

/* Reads a whole file into a malloc'd NUL-terminated string; NULL on failure. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[4096];
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            char *p = realloc(buf, cap);
            if (!p) {
                free(buf);
                fclose(f);
                return NULL;
            }
            buf = p;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(f);
    if (!buf) buf = calloc(1, 1);
    else buf[len] = '\0';
    return buf;
}

/* Parses "0 15 27" (spaces or commas) into a malloc'd id array. */
static int parse_ids(const char *text, int32_t **ids, size_t *n) {
    size_t cap = 16;
    *n = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return 1;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "deepinfer run: --prompt-ids: bad token id near '%.16s'\n", p);
            return 2;
        }
        if (*n == cap) {
            int32_t *q = realloc(*ids, (cap *= 2) * sizeof **ids);
            if (!q) return 1;
            *ids = q;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
    }
    if (*n == 0) {
        fprintf(stderr, "deepinfer run: --prompt-ids: no ids\n");
        return 2;
    }
    return 0;
}

/* Fills c from the --json-schema / --json / --regex / --grammar flags. */
static int parse_constraint(const char *schema_file, bool json, const char *regex,
                            const char *ebnf_file, di_constraint *c, char **owned) {
    int n = (schema_file != NULL) + json + (regex != NULL) + (ebnf_file != NULL);
    if (n > 1) {
        fprintf(stderr, "deepinfer run: give at most one of --json-schema, --json, --regex, --grammar\n");
        return 2;
    }
    const char *file = schema_file ? schema_file : ebnf_file;
    if (file && !(*owned = slurp(file))) {
        fprintf(stderr, "deepinfer run: cannot read %s\n", file);
        return 1;
    }
    if (schema_file) *c = (di_constraint){DI_CONSTRAINT_JSON_SCHEMA, *owned, false, false};
    if (ebnf_file) *c = (di_constraint){DI_CONSTRAINT_EBNF, *owned, false, false};
    if (json) *c = (di_constraint){DI_CONSTRAINT_JSON_OBJECT, NULL, false, false};
    if (regex) *c = (di_constraint){DI_CONSTRAINT_REGEX, regex, false, false};
    return 0;
}

#define RUN_MAX_IMAGES 16

/* Takes every "--image FILE" (repeatable) out of argv; returns the new argc
 * or -1 (message printed). */
static int take_images(int argc, char **argv, const char **files, int *n_files) {
    int out = 0;
    *n_files = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--image") != 0) {
            argv[out++] = argv[i];
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "deepinfer run: --image needs a file\n");
            return -1;
        }
        if (*n_files == RUN_MAX_IMAGES) {
            fprintf(stderr, "deepinfer run: at most %d --image files\n", RUN_MAX_IMAGES);
            return -1;
        }
        files[(*n_files)++] = argv[++i];
    }
    return out;
}

/* Largest prompt -f / -p - read: far above any context, small enough that
 * a wrong file (a disk image, /dev/zero) is refused instead of read. */
#define PROMPT_FILE_MAX_BYTES (64u << 20)

/* The whole of f (a file, or stdin for -p -) as a malloc'd string; NULL
 * with a message when it cannot be read, holds a NUL or is too large. */
static char *read_prompt(FILE *f, const char *what) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n + 1 >= cap) {
            char *p = cap >= PROMPT_FILE_MAX_BYTES ? NULL : realloc(buf, cap * 2);
            if (!p) {
                fprintf(stderr, "deepinfer run: %s: larger than %u MiB\n", what, PROMPT_FILE_MAX_BYTES >> 20);
                free(buf);
                return NULL;
            }
            buf = p;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    if (!buf) {
        fprintf(stderr, "deepinfer run: %s: out of memory\n", what);
        return NULL;
    }
    if (ferror(f)) {
        fprintf(stderr, "deepinfer run: %s: read error\n", what);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        fprintf(stderr, "deepinfer run: %s: contains a NUL byte (not text)\n", what);
        free(buf);
        return NULL;
    }
    return buf;
}

int di_cmd_run(int argc, char **argv) {
    const char *image_files[RUN_MAX_IMAGES];
    int n_images = 0;
    if ((argc = take_images(argc, argv, image_files, &n_images)) < 0) return 2;
    di_gen_opts o;
    di_gen_opts_defaults(&o);
    const char *prompt = NULL, *system = NULL, *tmpl = NULL;
    const char *schema_file = NULL, *regex = NULL, *ebnf_file = NULL, *prompt_ids = NULL, *prompt_file = NULL;
    bool raw = false, json = false, print_ids = false, strict = false, verbose = false;
    di_arg specs[DI_GEN_MAX_SPECS];
    int n = di_gen_opts_specs(&o, specs, 0);
    specs[n++] = (di_arg){"-p", "--prompt", DI_ARG_STR, &prompt, 0, 0, "the prompt ('-' = read it from stdin)"};
    specs[n++] = (di_arg){"-f", "--file", DI_ARG_STR, &prompt_file, 0, 0, "read the prompt from this file"};
    specs[n++] = (di_arg){"-v", "--verbose", DI_ARG_FLAG, &verbose, 0, 0, "print the seed and settings used"};
    specs[n++] = (di_arg){"--system", NULL, DI_ARG_STR, &system, 0, 0, "system message"};
    specs[n++] = (di_arg){"--raw", NULL, DI_ARG_FLAG, &raw, 0, 0, "do not apply the chat template"};
    specs[n++] = (di_arg){"--chat-template", NULL, DI_ARG_STR, &tmpl, 0, 0, "chatml, llama3, llama2, deepseek3, phi3, gemma, mistral, mistral-v1, mistral-v3-tekken, ..."};
    specs[n++] = (di_arg){"--prompt-ids", NULL, DI_ARG_STR, &prompt_ids, 0, 0, "prompt as token ids (\"0 15 27\")"};
    specs[n++] = (di_arg){"--print-ids", NULL, DI_ARG_FLAG, &print_ids, 0, 0, "print generated token ids, not text"};
    specs[n++] = (di_arg){"--json-schema", NULL, DI_ARG_STR, &schema_file, 0, 0, "constrain output to this JSON Schema file"};
    specs[n++] = (di_arg){"--strict", NULL, DI_ARG_FLAG, &strict, 0, 0,
                          "--json-schema: refuse what cannot be enforced (default: drop it with a warning)"};
    specs[n++] = (di_arg){"--json", NULL, DI_ARG_FLAG, &json, 0, 0, "constrain output to a JSON object"};
    specs[n++] = (di_arg){"--regex", NULL, DI_ARG_STR, &regex, 0, 0, "constrain output to match this regex"};
    specs[n++] = (di_arg){"--grammar", NULL, DI_ARG_STR, &ebnf_file, 0, 0, "constrain output to this GBNF grammar file"};
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("run", "-m MODEL -p PROMPT [options]", specs, n, argc, argv, pos, 1, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    if (!prompt && npos) prompt = pos[0];
    if ((prompt != NULL) + (prompt_ids != NULL) + (prompt_file != NULL) != 1) {
        fprintf(stderr, "deepinfer run: give one of -p PROMPT, -f FILE or --prompt-ids IDS\n");
        return 2;
    }
    char *prompt_text = NULL; /* owned: -f FILE or -p - */
    if (prompt_file || (prompt && !strcmp(prompt, "-"))) {
        FILE *f = prompt_file ? fopen(prompt_file, "rb") : stdin;
        if (!f) {
            fprintf(stderr, "deepinfer run: %s: cannot open\n", prompt_file);
            return 1;
        }
        prompt_text = read_prompt(f, prompt_file ? prompt_file : "stdin");
        if (prompt_file) fclose(f);
        if (!prompt_text) return 1;
        prompt = prompt_text;
    }
    di_gen_resolve_seed(&o);
    if (verbose)
        fprintf(stderr, "deepinfer run: seed %lld (--seed %lld repeats this run), temperature %g, top-p %g\n",
                (long long)o.seed, (long long)o.seed, o.temp, o.top_p);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (prompt_ids && (rc = parse_ids(prompt_ids, &ids, &n_ids))) {
        free(ids);
        free(prompt_text);
        return rc;
    }
    di_request r;
    memset(&r, 0, sizeof r);
    char *grammar_text = NULL;
    rc = parse_constraint(schema_file, json, regex, ebnf_file, &r.constraint, &grammar_text);
    /* OpenAI's policy, as the server applies it: strict refuses what the
     * grammar cannot enforce, non-strict drops it and says so */
    r.constraint.lenient = !strict;
    di_engine *e = rc ? NULL : di_gen_engine_open("run", &o);
    if (!e) {
        free(grammar_text);
        free(ids);
        free(prompt_text);
        return rc ? rc : 1;
    }
    di_message msgs[2];
    size_t nm = 0;
    char notes[512];
    di_image_input images[RUN_MAX_IMAGES] = {{0}};
    char *image_prompt = NULL;
    if (n_images) {
        if (ids) {
            fprintf(stderr, "deepinfer run: --image needs -p (the placeholders go into the prompt text)\n");
            rc = 2;
        } else if (!(image_prompt = di_gen_images_prompt(e, image_files, (size_t)n_images, prompt, images, notes,
                                                         sizeof notes))) {
            fprintf(stderr, "deepinfer run: --image: %s\n", notes);
            rc = 1;
        } else {
            prompt = image_prompt;
            r.images = images;
            r.n_images = (size_t)n_images;
        }
    }
    if (ids) {
        r.tokens = ids;
        r.n_tokens = n_ids;
    } else if (raw) {
        r.text = prompt;
    } else {
        if (system) msgs[nm++] = (di_message){"system", system};
        msgs[nm++] = (di_message){"user", prompt};
        r.messages = msgs;
        r.n_messages = nm;
        r.chat_template = tmpl;
    }
    r.max_tokens = (int32_t)o.max_tokens;
    r.sampling = di_gen_sampling(&o);
    stream_state st = {.print_ids = print_ids};
    /* --ep: every rank runs the request (data-parallel replicas, one
     * expert slice each); rank 0 prints it */
    if (di_gen_rank() > 0 && !freopen("/dev/null", "w", stdout)) rc = 1;
    di_error err;
    if (rc) {
    } else if (r.constraint.kind != DI_CONSTRAINT_NONE &&
        di_engine_check_constraint(e, &r.constraint, notes, sizeof notes, &err)) {
        fprintf(stderr, "deepinfer run: %s\n", err.msg);
        rc = 1;
    } else {
        if (r.constraint.kind != DI_CONSTRAINT_NONE && notes[0])
            fprintf(stderr, "deepinfer run: warning: not enforced (dropped; --strict refuses them): %s\n", notes);
        rc = generate("run", e, &r, &st);
    }
    free(st.reply);
    free(grammar_text);
    free(ids);
    free(image_prompt);
    di_gen_images_free(images, (size_t)n_images);
    free(prompt_text);
    di_gen_engine_close(e);
    return rc;
}

/* The conversation: hist[i] borrows owned[i] (NULL for the system
 * message, which the caller owns). */
typedef struct chat_history {
    di_message *hist;
    char **owned;
    di_chat_images *imgs; /* (cap) the images of each message (/image) */
    size_t n, cap;
    size_t first; /* index of the first turn: 1 with a system message */
} chat_history;

static bool history_push(chat_history *h, const char *role, char *text) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 16;
        di_message *m = realloc(h->hist, cap * sizeof *m);
        if (m) h->hist = m;
        char **o = realloc(h->owned, cap * sizeof *o);
        if (o) h->owned = o;
        di_chat_images *im = realloc(h->imgs, cap * sizeof *im);
        if (im) h->imgs = im;
        if (!m || !o || !im) return false;
        h->cap = cap;
    }
    h->imgs[h->n].n = 0;
    h->owned[h->n] = text;
    h->hist[h->n++] = (di_message){role, text};
    return true;
}

/* Drops the messages [first, first + k) (the oldest turns). */
static void history_drop(chat_history *h, size_t k) {
    for (size_t i = h->first; i < h->first + k; i++) {
        free(h->owned[i]);
        di_chat_images_free(&h->imgs[i]);
    }
    memmove(h->hist + h->first, h->hist + h->first + k, (h->n - h->first - k) * sizeof *h->hist);
    memmove(h->imgs + h->first, h->imgs + h->first + k, (h->n - h->first - k) * sizeof *h->imgs);
    memmove(h->owned + h->first, h->owned + h->first + k, (h->n - h->first - k) * sizeof *h->owned);
    h->n -= k;
}

static size_t history_images(const chat_history *h, di_image_input *out) {
    size_t n = 0;
    for (size_t i = 0; i < h->n; i++)
        for (size_t j = 0; j < h->imgs[i].n && n < DI_CHAT_MAX_IMAGES; j++) out[n++] = h->imgs[i].in[j];
    return n;
}

/* Forgets the last message (a turn that failed), its images too. */
static void history_pop(chat_history *h) {
    h->n--;
    free(h->owned[h->n]);
    di_chat_images_free(&h->imgs[h->n]);
}

/* Room the reply needs at least: a quarter of the context, or -n when
 * smaller. Turns are dropped until the prompt leaves that much. */
#define CHAT_REPLY_SHARE 4

/* Drops the oldest user/assistant turns (never the system message nor the
 * new user message) until the conversation leaves room for a reply, and
 * says so. Returns false when even the new message alone does not fit. */
static bool history_fit(di_engine *e, chat_history *h, di_request *r, int32_t max_tokens, di_image_input *imgs) {
    di_model_desc d;
    di_engine_describe(e, &d);
    int32_t reserve = d.n_ctx / CHAT_REPLY_SHARE;
    if (max_tokens > 0 && max_tokens < reserve) reserve = max_tokens;
    if (reserve < 1) reserve = 1;
    size_t dropped = 0;
    for (;;) {
        r->messages = h->hist;
        r->n_messages = h->n;
        r->n_images = history_images(h, imgs); /* counted as the positions they expand to */
        r->images = r->n_images ? imgs : NULL;
        size_t n_prompt;
        di_error err;
        if (di_engine_count_prompt(e, r, &n_prompt, &err)) return true; /* submit reports it */
        if (n_prompt + (size_t)reserve <= (size_t)d.n_ctx) break;
        if (h->n - h->first < 3) {
            fprintf(stderr, "deepinfer chat: the message (%zu tokens with the history kept) does not fit the context "
                            "of %d tokens; it was not sent\n", n_prompt, d.n_ctx);
            return false;
        }
        history_drop(h, 2); /* one user message and its reply */
        dropped++;
    }
    if (dropped)
        fprintf(stderr, "[context of %d tokens full: dropped the oldest %zu turn%s%s]\n", d.n_ctx, dropped,
                dropped == 1 ? "" : "s", h->first ? "; the system prompt stays" : "");
    return true;
}

/* deepinfer chat. Ctrl-C stops the reply being generated (what came so far
 * stays in the history); Ctrl-C at the prompt, a second one during a
 * reply, Ctrl-D or an empty line quit. */
int di_cmd_chat(int argc, char **argv) {
    di_gen_opts o;
    di_gen_opts_defaults(&o);
    const char *system = NULL, *tmpl = NULL;
    bool verbose = false;
    di_arg specs[DI_GEN_MAX_SPECS];
    int n = di_gen_opts_specs(&o, specs, 0);
    specs[n++] = (di_arg){"--system", NULL, DI_ARG_STR, &system, 0, 0, "system message"};
    specs[n++] = (di_arg){"--chat-template", NULL, DI_ARG_STR, &tmpl, 0, 0, "chatml, llama3, llama2, deepseek3, phi3, gemma, mistral, mistral-v1, mistral-v3-tekken, ..."};
    specs[n++] = (di_arg){"-v", "--verbose", DI_ARG_FLAG, &verbose, 0, 0, "print the seed and settings used"};
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("chat", "-m MODEL [options]", specs, n, argc, argv, pos, 0, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    di_gen_resolve_seed(&o);
    if (verbose)
        fprintf(stderr, "deepinfer chat: seed %lld (--seed %lld repeats this session), temperature %g, top-p %g\n",
                (long long)o.seed, (long long)o.seed, o.temp, o.top_p);
    di_engine *e = di_gen_engine_open("chat", &o);
    if (!e) return 1;
    chat_history h = {0};
    if (system && !history_push(&h, "system", NULL)) rc = 1;
    if (system && !rc) h.hist[0].content = system, h.first = 1;
    /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_sa);
    di_line_input *input = di_line_input_open("deepinfer");
    if (!input) rc = 1;
    fprintf(stderr, "chat: type a message; Ctrl-C stops a reply; Ctrl-D, Ctrl-C or an empty line quits%s%s\n",
            input && di_line_input_edits(input) ? " (arrows recall earlier lines)" : "",
            di_engine_image_placeholder(e) ? "; /image FILE attaches an image to the next message" : "");
    di_chat_images pending = {0};
    while (!rc) {
        sig_atomic_t before = g_interrupts;
        char *line = di_line_input_read(input, "> ");
        if (!line || !line[0] || g_interrupts != before) {
            if (line || g_interrupts != before) fprintf(stderr, "\n");
            free(line);
            break;
        }
        if (!strncmp(line, "/image", 6) && (!line[6] || line[6] == ' ' || line[6] == '\t')) {
            di_image_input all[DI_CHAT_MAX_IMAGES];
            char msg[512];
            di_chat_image_attach(e, line + 6, history_images(&h, all), &pending, msg, sizeof msg);
            fprintf(stderr, "%s\n", msg);
            free(line);
            continue;
        }
        char *content = di_chat_image_content(e, pending.n, line);
        free(line);
        if (!content || !history_push(&h, "user", content)) {
            free(content);
            rc = 1;
            break;
        }
        h.imgs[h.n - 1] = pending; /* the message owns them now */
        pending.n = 0;
        di_request r;
        memset(&r, 0, sizeof r);
        r.chat_template = tmpl;
        r.max_tokens = (int32_t)o.max_tokens;
        r.sampling = di_gen_sampling(&o);
        di_image_input imgs[DI_CHAT_MAX_IMAGES];
        bool sent = history_fit(e, &h, &r, r.max_tokens, imgs);
        stream_state st = {0};
        before = g_interrupts;
        if (sent && generate("chat", e, &r, &st)) {
            free(st.reply);
            sent = false;
        }
        if (!sent) {
            /* the session survives a failed turn: forget its message (and images) */
            history_pop(&h);
            continue;
        }
        if (st.finish == DI_FINISH_REASON_CANCEL) fprintf(stderr, "[stopped]\n");
        char *reply = st.reply ? st.reply : calloc(1, 1);
        if (!reply || !history_push(&h, "assistant", reply)) {
            free(reply);
            rc = 1;
            break;
        }
        if (g_interrupts - before >= 2) break; /* a second Ctrl-C during the reply */
    }
    sigaction(SIGINT, &old_sa, NULL);
    di_line_input_close(input);
    for (size_t i = 0; i < h.n; i++) {
        free(h.owned[i]);
        di_chat_images_free(&h.imgs[i]);
    }
    di_chat_images_free(&pending);
    free(h.owned);
    free(h.imgs);
    free(h.hist);
    di_engine_free(e);
    return rc;
}
