/* deepinfer run: one prompt, streamed to stdout, then a one-line summary.
 * deepinfer chat: interactive multi-turn; every turn resubmits the whole
 * conversation and the prefix cache skips what earlier turns computed. */
#include "gen_common.h"
#include "tools.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct stream_state {
    bool print_ids;     /* print the generated ids at the end instead of text */
    di_request_stats stats;
    di_finish finish;
    char *reply;        /* accumulated text (chat keeps it as history) */
    size_t len, cap;
    const char *error;
} stream_state;

static int on_event(const di_event *ev) {
    stream_state *st = ev->user;
    if (st->print_ids) {
        if (ev->finish != DI_FINISH_REASON_NONE) {
            for (int32_t i = 0; i < ev->n_tokens; i++) printf("%s%d", i ? " " : "", (int)ev->tokens[i]);
            printf("\n");
            st->finish = ev->finish;
            st->stats = ev->stats;
            st->error = ev->error;
        }
        return 0;
    }
    if (ev->text_len) {
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
        st->error = ev->error;
    }
    return 0;
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
    double prefill_ms = s->t_first_token_ms - s->t_queued_ms;
    double decode_ms = s->t_total_ms - s->t_first_token_ms;
    int n_computed = s->n_prompt - s->n_cached;
    fprintf(stderr,
            "\n[prompt %d tok (%d cached), generated %d tok | prefill %.1f tok/s | decode %.1f tok/s | "
            "finish %s]\n",
            s->n_prompt, s->n_cached, s->n_generated,
            prefill_ms > 0 ? n_computed / (prefill_ms / 1e3) : 0.0,
            decode_ms > 0 && s->n_generated > 1 ? (s->n_generated - 1) / (decode_ms / 1e3) : 0.0,
            finish_name(st->finish));
    if (st->finish == DI_FINISH_REASON_ERROR) fprintf(stderr, "error: %s\n", st->error ? st->error : "?");
}

/* Submits r, steps until it is done. Returns 0 ok, 1 on failure. */
static int generate(const char *cmd, di_engine *e, di_request *r, stream_state *st) {
    di_error err;
    r->on_event = on_event;
    r->user = st;
    if (di_engine_submit(e, r, NULL, &err)) {
        fprintf(stderr, "deepinfer %s: %s\n", cmd, err.msg);
        return 1;
    }
    if (di_engine_run(e, &err)) {
        fprintf(stderr, "deepinfer %s: %s\n", cmd, err.msg);
        return 1;
    }
    print_summary(st);
    return st->finish == DI_FINISH_REASON_ERROR;
}

/* "0 15 27" (spaces or commas) -> ids; 0 ok, else prints why. */
static int parse_ids(const char *text, int32_t **out, size_t *n_out) {
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    const char *p = text;
    while (ids) {
        while (*p == ' ' || *p == ',' || *p == '\t') p++;
        if (!*p) break;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "deepinfer run: --prompt-ids: bad id at '%.16s'\n", p);
            free(ids);
            return 1;
        }
        if (n == cap) {
            int32_t *g = realloc(ids, 2 * cap * sizeof *ids);
            if (!g) break;
            ids = g;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    if (!ids || !n) {
        fprintf(stderr, "deepinfer run: --prompt-ids: %s\n", ids ? "no ids" : "out of memory");
        free(ids);
        return 1;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

int di_cmd_run(int argc, char **argv) {
    di_gen_opts o;
    di_gen_opts_defaults(&o);
    const char *prompt = NULL, *system = NULL, *tmpl = NULL;
    const char *prompt_ids = NULL;
    bool raw = false, print_ids = false;
    di_arg specs[32];
    int n = di_gen_opts_specs(&o, specs, 0);
    specs[n++] = (di_arg){"-p", "--prompt", DI_ARG_STR, &prompt, 0, 0, "the prompt"};
    specs[n++] = (di_arg){"--system", NULL, DI_ARG_STR, &system, 0, 0, "system message"};
    specs[n++] = (di_arg){"--raw", NULL, DI_ARG_FLAG, &raw, 0, 0, "do not apply the chat template"};
    specs[n++] = (di_arg){"--chat-template", NULL, DI_ARG_STR, &tmpl, 0, 0, "chatml, llama3, deepseek3, phi3"};
    specs[n++] = (di_arg){"--prompt-ids", NULL, DI_ARG_STR, &prompt_ids, 0, 0,
                          "the prompt as token ids (\"0 15 27\"), no template"};
    specs[n++] = (di_arg){"--print-ids", NULL, DI_ARG_FLAG, &print_ids, 0, 0,
                          "print the generated token ids on one line instead of text"};
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("run", "-m MODEL -p PROMPT [options]", specs, n, argc, argv, pos, 1, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    if (!prompt && npos) prompt = pos[0];
    if (!prompt && !prompt_ids) {
        fprintf(stderr, "deepinfer run: no prompt (-p or --prompt-ids)\n");
        return 2;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if (prompt_ids && parse_ids(prompt_ids, &ids, &n_ids)) return 2;
    di_engine *e = di_gen_engine_open("run", &o);
    if (!e) {
        free(ids);
        return 1;
    }
    di_request r;
    memset(&r, 0, sizeof r);
    di_message msgs[2];
    size_t nm = 0;
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
    rc = generate("run", e, &r, &st);
    free(st.reply);
    free(ids);
    di_engine_free(e);
    return rc;
}

/* Reads one line from stdin into a malloc'd string without the newline;
 * NULL at end of input. */
static char *read_line(void) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    return line;
}

int di_cmd_chat(int argc, char **argv) {
    di_gen_opts o;
    di_gen_opts_defaults(&o);
    const char *system = NULL, *tmpl = NULL;
    di_arg specs[32];
    int n = di_gen_opts_specs(&o, specs, 0);
    specs[n++] = (di_arg){"--system", NULL, DI_ARG_STR, &system, 0, 0, "system message"};
    specs[n++] = (di_arg){"--chat-template", NULL, DI_ARG_STR, &tmpl, 0, 0, "chatml, llama3, deepseek3, phi3"};
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("chat", "-m MODEL [options]", specs, n, argc, argv, pos, 0, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    di_engine *e = di_gen_engine_open("chat", &o);
    if (!e) return 1;
    /* history[i] owns its content strings */
    size_t cap = 16, nm = 0;
    di_message *hist = malloc(cap * sizeof *hist);
    char **owned = malloc(cap * sizeof *owned);
    if (!hist || !owned) {
        free(hist);
        free(owned);
        di_engine_free(e);
        return 1;
    }
    if (system) {
        owned[nm] = NULL;
        hist[nm++] = (di_message){"system", system};
    }
    fprintf(stderr, "chat: type a message, empty line or end of input to quit\n");
    rc = 0;
    for (;;) {
        fprintf(stderr, "> ");
        char *line = read_line();
        if (!line || !line[0]) {
            free(line);
            break;
        }
        if (nm + 2 > cap) {
            cap *= 2;
            di_message *h2 = realloc(hist, cap * sizeof *hist);
            if (h2) hist = h2;
            char **o2 = realloc(owned, cap * sizeof *owned);
            if (o2) owned = o2;
            if (!h2 || !o2) {
                free(line);
                rc = 1;
                break;
            }
        }
        owned[nm] = line;
        hist[nm++] = (di_message){"user", line};
        di_request r;
        memset(&r, 0, sizeof r);
        r.messages = hist;
        r.n_messages = nm;
        r.chat_template = tmpl;
        r.max_tokens = (int32_t)o.max_tokens;
        r.sampling = di_gen_sampling(&o);
        stream_state st = {0};
        if (generate("chat", e, &r, &st)) {
            free(st.reply);
            rc = 1;
            break;
        }
        char *reply = st.reply ? st.reply : calloc(1, 1);
        owned[nm] = reply;
        hist[nm] = (di_message){"assistant", reply ? reply : ""};
        nm++;
    }
    for (size_t i = 0; i < nm; i++) free(owned[i]);
    free(owned);
    free(hist);
    di_engine_free(e);
    return rc;
}
