/* What one request streamed, for the engine tests that compare runs bit
 * for bit (alone vs batched, threads, speculation on and off, the overlap
 * on and off): tokens, their logprobs and top alternatives, the text, the
 * finish and its stats. trace_record is the request's on_event (user = the
 * trace; it asks to cancel once cancel_after tokens came, when set). A
 * trace must start zeroed: unused top columns then compare equal. */
#ifndef DI_TEST_ENGINE_TRACE_H
#define DI_TEST_ENGINE_TRACE_H

#include "test_util.h"

#include "deepinfer.h"

#include <string.h>

#define TRACE_MAX 64 /* tokens kept */
#define TRACE_TOP 5  /* top alternatives kept per token */

typedef struct trace {
    int32_t tokens[TRACE_MAX];
    float logprob[TRACE_MAX];
    di_token_prob top[TRACE_MAX][TRACE_TOP];
    int n;
    di_finish finish;
    di_request_stats stats;
    char text[2048];
    size_t text_len;
    int cancel_after; /* cancel from the callback after this many tokens (0 = never) */
} trace;

static inline int trace_record(const di_event *ev) {
    trace *t = ev->user;
    if (ev->token >= 0 && t->n < TRACE_MAX) {
        t->tokens[t->n] = ev->token;
        t->logprob[t->n] = ev->logprob;
        for (int i = 0; i < ev->n_top && i < TRACE_TOP; i++) t->top[t->n][i] = ev->top[i];
        t->n++;
    }
    if (ev->text_len && t->text_len + ev->text_len < sizeof t->text) {
        memcpy(t->text + t->text_len, ev->text, ev->text_len);
        t->text_len += ev->text_len;
    }
    if (ev->finish) {
        t->finish = ev->finish;
        t->stats = ev->stats;
    }
    return t->cancel_after && t->n >= t->cancel_after;
}

/* Tokens, logprobs and top alternatives bit for bit: logprobs are
 * functions of the logits rows, so equality means every row saw the same
 * KV and the same arithmetic. */
static inline void assert_same_trace(const trace *a, const trace *b) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->tokens, b->tokens, sizeof(int32_t) * (size_t)a->n);
    assert_memory_equal(a->logprob, b->logprob, sizeof(float) * (size_t)a->n);
    assert_memory_equal(a->top, b->top, sizeof a->top[0] * (size_t)a->n);
}

#endif
