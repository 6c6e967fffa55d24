/* deepinfer perplexity -m MODEL -f TEXT [--ctx N] [--chunks N] [--score-all]
 *                      [--top1-out FILE]
 *
 * Teacher-forced perplexity, computed the way llama.cpp's llama-perplexity
 * does it, so the two engines can be compared number for number:
 *
 *  1. The whole file is tokenized once: BOS (and EOS) as the model's metadata
 *     says (add_special), special tokens not parsed (they are plain text).
 *  2. The tokens are cut into non-overlapping windows of --ctx tokens
 *     (default 512); a short tail is dropped; --chunks N keeps the first N
 *     windows. When the model adds BOS, each window's first token is
 *     replaced by BOS (llama-perplexity does the same).
 *  3. Each window is evaluated on its own, from an empty context (a request
 *     with prompt_logprobs, see include/deepinfer.h). The logits at window
 *     position j predict token j + 1.
 *  4. Scored predictions: j in [ctx/2, ctx - 1) by default, the second half
 *     of each window as llama-perplexity scores it, so every scored token has
 *     at least ctx/2 tokens of context; --score-all scores j in [0, ctx - 1)
 *     (every token of the window after the first).
 *  5. PPL = exp(mean over scored predictions of -log p(token)), log-softmax
 *     of the raw logits in double.
 *
 * stdout gets one line: "PPL <value> <n scored> <windows> <ctx> <first j>"
 * preceded by a human-readable line on stderr; progress goes to stderr.
 * --top1-out writes one line per scored prediction:
 *   <index of the predicted token in the text's token list> <that token>
 *   <our argmax there> <its logprob>
 * which tests/cli/perplexity.sh compares with llama.cpp's
 * (tests/data/golden/llamacpp/, scripts/gen_goldens_llamacpp.py).
 *
 * All windows are submitted at once and the engine batches them as it
 * likes; the kernels are batch-invariant, so the result does not depend on
 * that (nor on --threads or --batch-tokens). */
#include "args.h"
#include "progress.h"
#include "gen_common.h"
#include "tools.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#define DEFAULT_PPL_CTX 512           /* llama-perplexity's default n_ctx */
#define MAX_TEXT_BYTES (256u << 20)   /* refuse absurd inputs before tokenizing */

typedef struct window {
    float *logprob;   /* (ctx - 1) log p(token j + 1 | tokens 0..j) */
    int32_t *argmax;  /* (ctx - 1) */
    bool done;
} window;

typedef struct ppl_state {
    window *win;      /* (n_windows) */
    int32_t n_windows, ctx, first;
    int32_t n_done;
    double nll_sum;   /* over the scored predictions of finished windows */
    int64_t n_scored;
    double t_start_ms;
    di_progress prog; /* on a terminal: the bar instead of a line per window */
    const char *error; /* first request error, if any */
    char error_buf[512];
} ppl_state;

typedef struct window_ref {
    ppl_state *st;
    int32_t index;
} window_ref;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Reads a whole text file into a malloc'd NUL-terminated string. The text
 * must not contain NUL bytes (the tokenizer takes a C string). */
static char *read_text(const char *path, char *why, size_t why_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, why_len, "%s: cannot open", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        if (cap >= MAX_TEXT_BYTES) {
            snprintf(why, why_len, "%s: larger than %u bytes", path, MAX_TEXT_BYTES);
            free(buf);
            buf = NULL;
            break;
        }
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            snprintf(why, why_len, "%s: out of memory", path);
            free(buf);
        }
        buf = nb;
    }
    bool read_error = ferror(f);
    fclose(f);
    if (!buf) return NULL;
    if (read_error) {
        snprintf(why, why_len, "%s: read error", path);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n)) {
        snprintf(why, why_len, "%s: contains a NUL byte", path);
        free(buf);
        return NULL;
    }
    return buf;
}

/* Collects one window's prompt logprobs from its final event. */
static int on_event(const di_event *ev) {
    window_ref *ref = ev->user;
    ppl_state *st = ref->st;
    if (ev->finish == DI_FINISH_REASON_NONE) return 0;
    window *w = &st->win[ref->index];
    if (ev->finish == DI_FINISH_REASON_ERROR || ev->finish == DI_FINISH_REASON_CANCEL ||
        ev->n_prompt_logprobs != st->ctx - 1) {
        if (!st->error) {
            snprintf(st->error_buf, sizeof st->error_buf, "window %d: %s", (int)ref->index,
                     ev->error ? ev->error : "no prompt logprobs");
            st->error = st->error_buf;
        }
        return 0;
    }
    memcpy(w->logprob, ev->prompt_logprobs, (size_t)(st->ctx - 1) * sizeof *w->logprob);
    memcpy(w->argmax, ev->prompt_argmax, (size_t)(st->ctx - 1) * sizeof *w->argmax);
    w->done = true;
    for (int32_t j = st->first; j < st->ctx - 1; j++) st->nll_sum -= w->logprob[j];
    st->n_scored += st->ctx - 1 - st->first;
    st->n_done++;
    double s = (now_ms() - st->t_start_ms) / 1e3;
    if (st->prog.tty)
        di_progress_update(&st->prog, st->n_done, (double)st->n_done * st->ctx);
    else
        fprintf(stderr, "perplexity: window %d/%d done, PPL so far %.4f, %.1f tok/s\n", (int)st->n_done,
                (int)st->n_windows, exp(st->nll_sum / (double)st->n_scored),
                s > 0 ? (double)st->n_done * st->ctx / s : 0.0);
    return 0;
}

static int write_top1(const char *path, const ppl_state *st, const int32_t *tokens) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "deepinfer perplexity: %s: cannot write\n", path);
        return 1;
    }
    fprintf(f, "# index target argmax logprob (ctx %d, first scored j %d)\n", (int)st->ctx,
            (int)st->first);
    for (int32_t w = 0; w < st->n_windows; w++)
        for (int32_t j = st->first; j < st->ctx - 1; j++) {
            int64_t idx = (int64_t)w * st->ctx + j + 1;
            fprintf(f, "%lld %d %d %.6f\n", (long long)idx, (int)tokens[idx],
                    (int)st->win[w].argmax[j], (double)st->win[w].logprob[j]);
        }
    if (fclose(f)) {
        fprintf(stderr, "deepinfer perplexity: %s: write failed\n", path);
        return 1;
    }
    return 0;
}

/* Tokenizes text as llama-perplexity does; *bos is the BOS id when the
 * model adds one, else -1 (found by tokenizing "" with add_special). */
static di_status tokenize_text(di_engine *e, const char *text, int32_t **ids, size_t *n, int32_t *bos,
                               di_error *err) {
    int32_t *empty = NULL;
    size_t n_empty = 0;
    di_status s = di_engine_tokenize(e, "", true, false, &empty, &n_empty, err);
    if (s) return s;
    s = di_engine_tokenize(e, text, true, false, ids, n, err);
    *bos = (!s && n_empty > 0 && *n > 0 && (*ids)[0] == empty[0]) ? empty[0] : -1;
    free(empty);
    return s;
}

static int run_windows(di_engine *e, ppl_state *st, int32_t *tokens, int32_t bos) {
    di_error err;
    window_ref *refs = calloc((size_t)st->n_windows, sizeof *refs);
    if (!refs) {
        fprintf(stderr, "deepinfer perplexity: out of memory\n");
        return 1;
    }
    int rc = 0;
    st->t_start_ms = now_ms();
    if (isatty(STDERR_FILENO)) di_progress_start(&st->prog, "perplexity", st->n_windows, "tok/s");
    for (int32_t w = 0; w < st->n_windows && !rc; w++) {
        int32_t *toks = tokens + (size_t)w * (size_t)st->ctx;
        int32_t saved = toks[0];
        if (bos >= 0) toks[0] = bos; /* as llama-perplexity; the request copies it */
        refs[w] = (window_ref){st, w};
        di_request r;
        memset(&r, 0, sizeof r);
        r.tokens = toks;
        r.n_tokens = (size_t)st->ctx;
        r.max_tokens = 1;
        r.sampling = di_sampling_params_default();
        r.sampling.temperature = 0;
        r.ignore_eos = true;
        r.prompt_logprobs = true;
        r.on_event = on_event;
        r.user = &refs[w];
        if (di_engine_submit(e, &r, NULL, &err)) {
            fprintf(stderr, "deepinfer perplexity: window %d: %s\n", (int)w, err.msg);
            rc = 1;
        }
        toks[0] = saved;
    }
    if (!rc && di_engine_run(e, &err)) {
        fprintf(stderr, "deepinfer perplexity: %s\n", err.msg);
        rc = 1;
    }
    if (st->prog.tty) di_progress_end(&st->prog, st->n_done, (double)st->n_done * st->ctx);
    if (!rc && st->error) {
        fprintf(stderr, "deepinfer perplexity: %s\n", st->error);
        rc = 1;
    }
    free(refs);
    return rc;
}

int di_cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *top1 = NULL;
    int64_t ctx = DEFAULT_PPL_CTX, chunks = 0, threads = 0, batch_tokens = 0;
    bool score_all = false, kv_f32 = false;
    const char *kernels = NULL;
    const di_arg specs[] = {
        {"-m", "--model", DI_ARG_STR, &model, 0, 0, "model file (default: the embedded SmolLM2-135M-Instruct)"},
        {"-f", "--file", DI_ARG_STR, &file, 0, 0, "text file to score"},
        {"-c", "--ctx", DI_ARG_INT, &ctx, 16, 1 << 20, "tokens per window (default 512)"},
        {"--chunks", NULL, DI_ARG_INT, &chunks, 0, 1 << 30, "score only the first N windows (0 = all)"},
        {"--score-all", NULL, DI_ARG_FLAG, &score_all, 0, 0,
         "score every prediction of a window, not only its second half"},
        {"--top1-out", NULL, DI_ARG_STR, &top1, 0, 0, "write index, token, argmax, logprob per scored token"},
        {"-t", "--threads", DI_ARG_INT, &threads, 0, 1024, "threads (0 = one per CPU)"},
        {"--batch-tokens", NULL, DI_ARG_INT, &batch_tokens, 0, 1 << 20, "rows per forward (0 = the engine's 512)"},
        {"--kv-f32", NULL, DI_ARG_FLAG, &kv_f32, 0, 0, "keep the KV cache in f32"},
        {"--kernels", NULL, DI_ARG_STR, &kernels, 0, 0, "kernel table: exact, q8 (int8 activations), ggml (llama.cpp's CPU numerics); default q8 for "
         "quantized GGUF, else exact"},
    };
    const char *pos[1];
    int npos = 0;
    int rc = di_args_parse("perplexity", "-m MODEL -f TEXT [options]", specs,
                           (int)(sizeof specs / sizeof specs[0]), argc, argv, pos, 1, &npos);
    if (rc) return rc == 1 ? 0 : 2;
    if (!file && npos) file = pos[0];
    if (!file) {
        fprintf(stderr, "deepinfer perplexity: no text file (-f)\n");
        return 2;
    }
    if (!model && !(model = di_gen_resolve_model("perplexity"))) return 1;
    char why[600];
    char *text = read_text(file, why, sizeof why);
    if (!text) {
        fprintf(stderr, "deepinfer perplexity: %s\n", why);
        return 1;
    }
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = di_gen_cap_threads("perplexity", threads);
    p.n_ctx = (int32_t)ctx + 1; /* the window plus the one token each request samples */
    p.max_batch_tokens = (int32_t)batch_tokens;
    p.kv_f32 = kv_f32;
    p.kernels = kernels;
    di_progress load;
    di_progress_load_hook(&p, &load);
    di_engine *e = NULL;
    di_error err;
    if (di_engine_create(&p, &e, &err)) {
        fprintf(stderr, "deepinfer perplexity: %s\n", err.msg);
        free(text);
        return 1;
    }
    int32_t *tokens = NULL, bos = -1;
    size_t n_tokens = 0;
    if (tokenize_text(e, text, &tokens, &n_tokens, &bos, &err)) {
        fprintf(stderr, "deepinfer perplexity: %s: %s\n", file, err.msg);
        free(text);
        di_engine_free(e);
        return 1;
    }
    free(text);
    int64_t n_windows = (int64_t)n_tokens / ctx;
    if (chunks > 0 && chunks < n_windows) n_windows = chunks;
    if (n_windows < 1) {
        fprintf(stderr, "deepinfer perplexity: %s has %zu tokens, fewer than one window of %lld\n", file,
                n_tokens, (long long)ctx);
        free(tokens);
        di_engine_free(e);
        return 1;
    }
    ppl_state st;
    memset(&st, 0, sizeof st);
    st.n_windows = (int32_t)n_windows;
    st.ctx = (int32_t)ctx;
    st.first = score_all ? 0 : st.ctx / 2;
    st.win = calloc((size_t)n_windows, sizeof *st.win);
    for (int32_t w = 0; st.win && w < st.n_windows; w++) {
        st.win[w].logprob = malloc((size_t)(ctx - 1) * sizeof(float));
        st.win[w].argmax = malloc((size_t)(ctx - 1) * sizeof(int32_t));
        if (!st.win[w].logprob || !st.win[w].argmax) rc = 1;
    }
    if (!st.win || rc) {
        fprintf(stderr, "deepinfer perplexity: out of memory\n");
        rc = 1;
    } else {
        di_model_desc d;
        di_engine_describe(e, &d);
        fprintf(stderr,
                "perplexity: %zu tokens (BOS %s), %d windows of %d, scoring positions %d..%d of each, "
                "%d threads\n",
                n_tokens, bos >= 0 ? "added" : "not added", (int)st.n_windows, (int)st.ctx,
                (int)st.first, (int)st.ctx - 2, (int)d.n_threads);
        rc = run_windows(e, &st, tokens, bos);
    }
    if (!rc) {
        double ppl = exp(st.nll_sum / (double)st.n_scored);
        fprintf(stderr, "perplexity: PPL = %.4f over %lld scored tokens\n", ppl, (long long)st.n_scored);
        printf("PPL %.6f %lld %d %d %d\n", ppl, (long long)st.n_scored, (int)st.n_windows, (int)st.ctx,
               (int)st.first);
        if (top1) rc = write_top1(top1, &st, tokens);
    }
    for (int32_t w = 0; st.win && w < st.n_windows; w++) {
        free(st.win[w].logprob);
        free(st.win[w].argmax);
    }
    free(st.win);
    free(tokens);
    di_engine_free(e);
    return rc;
}
