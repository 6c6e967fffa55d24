#include "engine/constraint.h"

#include "base/alloc.h"
#include "base/status.h"
#include "grammar/grammar_tok.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct di_constraint_entry {
    uint64_t hash;
    di_constraint_kind kind;
    bool flexible, lenient;
    char *text;
    di_grammar *grammar;
    int32_t refs;               /* live matchers using grammar */
    uint64_t last_use;          /* for evicting the least recently used */
    struct di_constraint_entry *next;
};

struct di_constraint_cache {
    const di_tokenizer *tok;
    int32_t n_vocab;
    di_grammar_vocab *vocab;    /* built on first use: most engines never need it */
    pthread_mutex_t mu;
    di_constraint_entry *entries;
    int32_t n_entries;
    uint64_t clock;
    int64_t n_compiled, n_reused;
};

di_status di_constraint_cache_create(const di_tokenizer *tok, int32_t n_vocab,
                                     di_constraint_cache **out, di_error *err) {
    di_constraint_cache *c = calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "constraint cache: out of memory");
    c->tok = tok;
    c->n_vocab = n_vocab;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return DI_OK;
}

static void entry_free(di_constraint_entry *e) {
    di_grammar_free(e->grammar);
    free(e->text);
    free(e);
}

void di_constraint_cache_free(di_constraint_cache *c) {
    if (!c) return;
    for (di_constraint_entry *e = c->entries, *n; e; e = n) {
        n = e->next;
        entry_free(e);
    }
    di_grammar_vocab_free(c->vocab);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* FNV-1a over the fields that change the compiled grammar. */
static uint64_t constraint_hash(const di_constraint *k, const char *text) {
    uint64_t h = 1469598103934665603ull;
    uint8_t head[3] = {(uint8_t)k->kind, k->flexible_whitespace, k->lenient};
    for (size_t i = 0; i < sizeof head; i++) h = (h ^ head[i]) * 1099511628211ull;
    for (const char *p = text; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    return h;
}

static di_status compile(const di_constraint *k, const char *text, di_grammar **g, di_error *err) {
    di_grammar_options opt = di_grammar_options_default();
    opt.whitespace = k->flexible_whitespace ? DI_GRAMMAR_WS_FLEXIBLE : DI_GRAMMAR_WS_COMPACT;
    opt.lenient = k->lenient;
    switch (k->kind) {
    case DI_CONSTRAINT_JSON_SCHEMA: return di_grammar_compile_json_schema(text, strlen(text), &opt, g, err);
    case DI_CONSTRAINT_JSON_OBJECT: return di_grammar_compile_json_object(&opt, g, err);
    case DI_CONSTRAINT_REGEX: return di_grammar_compile_regex(text, strlen(text), g, err);
    case DI_CONSTRAINT_EBNF: return di_grammar_compile_ebnf(text, strlen(text), NULL, g, err);
    case DI_CONSTRAINT_TOOL_CALLS: return di_grammar_compile_tool_calls(text, strlen(text), &opt, g, err);
    case DI_CONSTRAINT_NONE: break;
    }
    return di_error_set(err, DI_ERR_INVALID_ARG, "constraint: unknown kind %d", (int)k->kind);
}

/* Drops unreferenced entries beyond the cache size, oldest first. */
static void evict(di_constraint_cache *c) {
    while (c->n_entries > DI_CONSTRAINT_CACHE_MAX) {
        di_constraint_entry **victim = NULL;
        for (di_constraint_entry **p = &c->entries; *p; p = &(*p)->next)
            if ((*p)->refs == 0 && (!victim || (*p)->last_use < (*victim)->last_use)) victim = p;
        if (!victim) return; /* all in use: keep them until released */
        di_constraint_entry *e = *victim;
        *victim = e->next;
        entry_free(e);
        c->n_entries--;
    }
}

di_status di_constraint_begin(di_constraint_cache *c, const di_constraint *k,
                              di_constraint_state *st, di_error *err) {
    memset(st, 0, sizeof *st);
    if (k->kind == DI_CONSTRAINT_NONE) return DI_OK;
    if ((unsigned)k->kind > DI_CONSTRAINT_TOOL_CALLS)
        return di_error_set(err, DI_ERR_INVALID_ARG, "constraint: unknown kind %d", (int)k->kind);
    const char *text = k->kind == DI_CONSTRAINT_JSON_OBJECT ? "" : k->text;
    if (!text) return di_error_set(err, DI_ERR_INVALID_ARG, "constraint: no grammar text");
    uint64_t h = constraint_hash(k, text);
    di_status s = DI_OK;
    pthread_mutex_lock(&c->mu);
    if (!c->vocab) s = di_grammar_vocab_from_tokenizer(c->tok, &c->vocab, err);
    di_constraint_entry *e = NULL;
    for (di_constraint_entry *p = c->entries; !s && p; p = p->next)
        if (p->hash == h && p->kind == k->kind && p->flexible == k->flexible_whitespace &&
            p->lenient == k->lenient && !strcmp(p->text, text)) {
            e = p;
            break;
        }
    if (!s && e) c->n_reused++;
    if (!s && !e) {
        /* Compiling under the lock keeps the code simple; compiles take
         * about a millisecond and only block other constrained submits. */
        e = calloc(1, sizeof *e);
        if (!e || !(e->text = di_strdup(text))) {
            s = di_error_set(err, DI_ERR_NOMEM, "constraint: out of memory");
        } else {
            s = compile(k, text, &e->grammar, err);
        }
        if (s) {
            if (e) entry_free(e);
            e = NULL;
        } else {
            e->hash = h;
            e->kind = k->kind;
            e->flexible = k->flexible_whitespace;
            e->lenient = k->lenient;
            e->next = c->entries;
            c->entries = e;
            c->n_entries++;
            c->n_compiled++;
        }
    }
    if (!s) {
        s = di_grammar_matcher_create(e->grammar, c->vocab, &st->matcher, err);
        if (!s) {
            e->refs++;
            e->last_use = ++c->clock;
            st->entry = e;
        }
        evict(c);
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

di_status di_constraint_check(di_constraint_cache *c, const di_constraint *k, char *notes, size_t cap,
                              di_error *err) {
    if (cap) notes[0] = 0;
    di_constraint_state st;
    di_status s = di_constraint_begin(c, k, &st, err);
    if (s || !st.entry) return s;
    const char *d = di_grammar_dropped(st.entry->grammar);
    if (d && cap) snprintf(notes, cap, "%s", d);
    di_constraint_end(c, &st);
    return DI_OK;
}

void di_constraint_end(di_constraint_cache *c, di_constraint_state *st) {
    if (!st->matcher) return;
    di_grammar_matcher_free(st->matcher);
    pthread_mutex_lock(&c->mu);
    st->entry->refs--;
    evict(c);
    pthread_mutex_unlock(&c->mu);
    memset(st, 0, sizeof *st);
}

size_t di_constraint_mask_words(const di_constraint_cache *c) { return ((size_t)c->n_vocab + 31) / 32; }

di_status di_constraint_fill_mask(di_constraint_cache *c, di_constraint_state *st, uint32_t *mask,
                                  di_error *err) {
    size_t words = di_constraint_mask_words(c);
    size_t vocab_words = di_grammar_vocab_mask_words(c->vocab);
    /* the model may have more logits than the tokenizer has tokens */
    memset(mask, 0, words * sizeof *mask);
    if (vocab_words > words) return di_error_set(err, DI_ERR_INTERNAL, "constraint: vocabulary larger than logits");
    return di_grammar_matcher_fill_mask(st->matcher, mask, vocab_words, err);
}

void di_constraint_cache_stats(di_constraint_cache *c, int64_t *n_compiled, int64_t *n_reused) {
    pthread_mutex_lock(&c->mu);
    *n_compiled = c->n_compiled;
    *n_reused = c->n_reused;
    pthread_mutex_unlock(&c->mu);
}
