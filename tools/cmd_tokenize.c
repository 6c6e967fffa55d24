/* deepinfer tokenize -m MODEL [options] (TEXT | --file F)
 *
 * Encodes text and prints the ids on one line, separated by single spaces
 * (no BOS, no special-token parsing unless asked: the convention of the
 * tokenizer .out fixtures). --decode reads ids instead and prints the text.
 * --chat renders TEXT as one user message with the model's chat template.
 * MODEL is a .gguf (vocab-only is enough), a tokenizer.json, or a folder
 * holding tokenizer.json. */
#include "tools.h"
#include "gen_common.h"

#include "text/tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: deepinfer tokenize [-m MODEL] [options] (TEXT | --file F)\n"
            "  -m, --model MODEL   .gguf, tokenizer.json or a folder with tokenizer.json\n"
            "                      (default: the embedded SmolLM2-135M-Instruct)\n"
            "  -f, --file F        read the input from F ('-' = stdin)\n"
            "  --decode            input is ids (spaces/commas/newlines); print the text\n"
            "  --no-special        do not parse special tokens in the text (default)\n"
            "  --parse-special     recognize special tokens such as <|im_start|> in the text\n"
            "  --bos               add BOS/EOS as the model's metadata says\n"
            "  --render-special    with --decode: print control tokens' text\n"
            "  --pieces            print each id with its text, one per line\n"
            "  --chat              wrap the text as a user message in the chat template\n"
            "  --chat-template N   template by name (chatml, llama3, deepseek3, phi3, gemma, mistral, ...)\n"
            "  --system S          with --chat: a system message first\n"
            "  --bench N           encode N times; print the token count and median MB/s\n"
            "  --chunk BYTES       with --bench: encode as documents of about BYTES each\n");
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *nb = realloc(buf, cap *= 2);
        if (!nb) {
            free(buf);
            buf = NULL;
        }
        buf = nb;
    }
    if (f != stdin) fclose(f);
    if (buf) buf[n < cap ? n : cap - 1] = '\0';
    *len = n;
    return buf;
}

static int print_ids(const di_tokenizer *t, const di_tok_ids *ids, bool pieces) {
    for (size_t i = 0; i < ids->n; i++) {
        if (!pieces) {
            printf(i ? " %d" : "%d", ids->data[i]);
            continue;
        }
        size_t n;
        const char *s = di_tok_text(t, ids->data[i], &n);
        printf("%6d  '%.*s'\n", ids->data[i], (int)n, s);
    }
    if (!pieces) printf("\n");
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Times encode only (the tokenizer is already loaded), median of runs. With
 * chunk > 0 the text is encoded as separate documents, each cut at the first
 * newline after chunk bytes (how a server sees prompts). */
static int bench(const di_tokenizer *t, const char *text, size_t len, bool parse_special, int runs, size_t chunk) {
    double *secs = calloc((size_t)runs, sizeof *secs);
    if (!secs) return 1;
    di_tok_ids ids = {0};
    di_error err = {0};
    for (int r = 0; r < runs; r++) {
        ids.n = 0;
        double t0 = now_s();
        for (size_t off = 0; off < len;) {
            size_t n = len - off;
            if (chunk && n > chunk) {
                const char *nl = memchr(text + off + chunk, '\n', len - off - chunk);
                n = nl ? (size_t)(nl - (text + off)) + 1 : len - off;
            }
            if (di_tok_encode(t, text + off, n, false, parse_special, &ids, &err)) {
                fprintf(stderr, "deepinfer tokenize: %s\n", err.msg);
                free(secs);
                di_tok_ids_free(&ids);
                return 1;
            }
            off += n;
        }
        secs[r] = now_s() - t0;
    }
    qsort(secs, (size_t)runs, sizeof *secs, cmp_double);
    double med = secs[runs / 2];
    printf("bytes %zu tokens %zu median_s %.6f MB/s %.2f\n", len, ids.n, med, len / med / 1e6);
    free(secs);
    di_tok_ids_free(&ids);
    return 0;
}

static int decode(const di_tokenizer *t, const char *in, bool render_special) {
    di_tok_ids ids = {0};
    for (const char *p = in; *p;) {
        if (strchr(" ,\t\r\n[]", *p)) {
            p++;
            continue;
        }
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < INT32_MIN || v > INT32_MAX) {
            fprintf(stderr, "deepinfer tokenize: not a token id near '%.10s'\n", p);
            di_tok_ids_free(&ids);
            return 1;
        }
        if (ids.n == ids.cap) {
            ids.cap = ids.cap ? ids.cap * 2 : 64;
            int32_t *nd = realloc(ids.data, ids.cap * sizeof *nd);
            if (!nd) {
                di_tok_ids_free(&ids);
                return 1;
            }
            ids.data = nd;
        }
        ids.data[ids.n++] = (int32_t)v;
        p = end;
    }
    char *text;
    size_t len;
    di_error err = {0};
    int rc = 0;
    if (di_tok_decode(t, ids.data, ids.n, render_special, &text, &len, &err)) {
        fprintf(stderr, "deepinfer tokenize: %s\n", err.msg);
        rc = 1;
    } else {
        fwrite(text, 1, len, stdout);
        printf("\n");
        free(text);
    }
    di_tok_ids_free(&ids);
    return rc;
}

int di_cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *text = NULL, *tmpl = NULL, *system = NULL;
    int bench_runs = 0;
    long bench_chunk = 0;
    bool do_decode = false, parse_special = false, bos = false, render_special = false, pieces = false, chat = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_next = i + 1 < argc;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has_next) model = argv[++i];
        else if ((!strcmp(a, "-f") || !strcmp(a, "--file")) && has_next) file = argv[++i];
        else if (!strcmp(a, "--chat-template") && has_next) tmpl = argv[++i];
        else if (!strcmp(a, "--system") && has_next) system = argv[++i];
        else if (!strcmp(a, "--chunk") && has_next) bench_chunk = atol(argv[++i]);
        else if (!strcmp(a, "--bench") && has_next) {
            bench_runs = atoi(argv[++i]);
            if (bench_runs < 1 || bench_runs > 1000) {
                fprintf(stderr, "deepinfer tokenize: --bench takes 1..1000\n");
                return 2;
            }
        }
        else if (!strcmp(a, "--decode")) do_decode = true;
        else if (!strcmp(a, "--no-special")) parse_special = false;
        else if (!strcmp(a, "--parse-special")) parse_special = true;
        else if (!strcmp(a, "--bos")) bos = true;
        else if (!strcmp(a, "--render-special")) render_special = true;
        else if (!strcmp(a, "--pieces")) pieces = true;
        else if (!strcmp(a, "--chat")) chat = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (a[0] == '-' && a[1] && !text) {
            fprintf(stderr, "deepinfer tokenize: unknown option '%s'\n", a);
            usage(stderr);
            return 2;
        } else if (!text) text = a;
        else {
            fprintf(stderr, "deepinfer tokenize: more than one TEXT argument\n");
            return 2;
        }
    }
    if (!!text == !!file) {
        usage(stderr);
        return 2;
    }
    if (!model && !(model = di_gen_resolve_model("tokenize"))) return 1;
    di_chat_kind kind = DI_CHAT_UNKNOWN;
    if (tmpl && (kind = di_tok_chat_from_name(tmpl)) == DI_CHAT_UNKNOWN) {
        fprintf(stderr, "deepinfer tokenize: unknown chat template '%s'\n", tmpl);
        return 2;
    }
    size_t len = 0;
    char *owned = NULL;
    if (file) {
        owned = read_all(file, &len);
        if (!owned) {
            fprintf(stderr, "deepinfer tokenize: cannot read '%s': %s\n", file, strerror(errno));
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text);
    }
    di_tokenizer *t;
    di_error err = {0};
    if (di_tok_load(model, &t, &err)) {
        fprintf(stderr, "deepinfer tokenize: %s\n", err.msg);
        free(owned);
        return 1;
    }
    int rc;
    if (bench_runs) {
        rc = bench(t, text, len, parse_special, bench_runs, bench_chunk > 0 ? (size_t)bench_chunk : 0);
    } else if (do_decode) {
        rc = decode(t, text, render_special);
    } else {
        char *prompt = NULL;
        if (chat) {
            di_chat_msg m[2] = {{"system", system}, {"user", text}};
            size_t off = system ? 0 : 1;
            if (di_tok_chat_apply(t, kind, m + off, 2 - off, true, &prompt, &len, &err)) {
                fprintf(stderr, "deepinfer tokenize: %s\n", err.msg);
                di_tok_free(t);
                free(owned);
                return 1;
            }
            text = prompt;
            parse_special = true; /* the template's markers are special tokens */
        }
        di_tok_ids ids = {0};
        if (di_tok_encode(t, text, len, bos, parse_special, &ids, &err)) {
            fprintf(stderr, "deepinfer tokenize: %s\n", err.msg);
            rc = 1;
        } else {
            rc = print_ids(t, &ids, pieces);
        }
        di_tok_ids_free(&ids);
        free(prompt);
    }
    di_tok_free(t);
    free(owned);
    return rc;
}
