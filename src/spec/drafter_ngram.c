/* The n-gram (prompt lookup) drafter: finds the latest earlier occurrence
 * of the sequence's last n tokens (n = NGRAM_MAX down to NGRAM_MIN) and
 * proposes the tokens that followed it. No model, no state: the drafts are
 * a pure function of the tokens, and q is one-hot. It pays where output
 * repeats input (editing, summarizing, code completion over a file). */
#include "spec/spec.h"

#include <stdlib.h>

#define NGRAM_MAX 4 /* longest suffix matched: long enough to be specific */
#define NGRAM_MIN 1 /* a single-token match still beats no draft at all */
/* Tokens searched back from the end at most: bounds the cost per step on
 * long contexts (O(window * n) compares). */
#define NGRAM_WINDOW 8192

typedef struct ngram_drafter {
    di_drafter base;
} ngram_drafter;

/* Drafts for one sequence: the continuation of the latest match of the
 * longest suffix that occurs earlier. */
static int32_t ngram_draft(const int32_t *t, int32_t n, int32_t k, int32_t *out) {
    int32_t lo = n > NGRAM_WINDOW ? n - NGRAM_WINDOW : 0;
    for (int32_t g = NGRAM_MAX; g >= NGRAM_MIN; g--) {
        if (n < g + 1) continue;
        const int32_t *suffix = t + n - g;
        /* start i of an earlier copy: t[i..i+g) == suffix, i + g < n */
        for (int32_t i = n - g - 1; i >= lo; i--) {
            int32_t j = 0;
            while (j < g && t[i + j] == suffix[j]) j++;
            if (j < g) continue;
            int32_t m = 0;
            while (m < k && i + g + m < n) {
                out[m] = t[i + g + m];
                m++;
            }
            return m;
        }
    }
    return 0;
}

static di_status ngram_propose(di_drafter *d, const di_spec_seq *seqs, int32_t n, di_spec_drafts *out,
                               di_threadpool *pool, di_error *err) {
    (void)d;
    (void)pool;
    (void)err;
    for (int32_t i = 0; i < n; i++) {
        out[i].has_q = false;
        out[i].n = ngram_draft(seqs[i].tokens, seqs[i].n_tokens, seqs[i].k_max, out[i].tokens);
        for (int32_t j = 0; j < out[i].n; j++) out[i].confidence[j] = 1.0f;
    }
    return DI_OK;
}

static void ngram_free(di_drafter *d) { free(d); }

static const di_drafter_ops NGRAM_OPS = {"ngram", ngram_propose, NULL, ngram_free};

di_status di_spec_ngram_create(const di_spec_env *env, di_drafter **out, di_error *err) {
    (void)env;
    ngram_drafter *g = calloc(1, sizeof *g);
    if (!g) return di_error_set(err, DI_ERR_NOMEM, "spec: out of memory");
    g->base.ops = &NGRAM_OPS;
    *out = &g->base;
    return DI_OK;
}
