/* Pre-tokenization: cutting text into the pieces BPE runs on.
 *
 * Each step maps a list of pieces (spans over one text buffer) to a new list,
 * the way HF tokenizers' pre-tokenizers do: Split(regex, behavior, invert),
 * ByteLevel (prefix space + the GPT-2 regex; the bytes themselves stay raw,
 * the byte->unicode mapping lives in the vocabulary keys instead), Digits,
 * Metaspace, Whitespace, WhitespaceSplit, Punctuation.
 *
 * GGUF files only name their pre-tokenizer (tokenizer.ggml.pre); the regex
 * lists per name below are the ones llama.cpp uses (llama-vocab.cpp), each
 * applied in turn as an Isolated split, which is also how llama.cpp's
 * unicode_regex_split keeps both matches and the text between them. */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

/* ---- regexes per GGUF pre-tokenizer name (facts from llama.cpp) ---------- */

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                        \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                         \
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Some code points of llama.cpp's list are canonical singletons (U+1FBE,
 * U+1FD3, U+1FDB, U+1F7D, U+2126, U+212A) that editors silently NFC-normalize
 * into other characters, so they are written as escapes. */
#define RE_DEEPSEEK_LLM_LETTERS                                                            \
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\\x{1F7D}ᾀ-ᾴᾶ-ᾼ\\x{1FBE}ῂ-ῄῆ-ῌῐ-\\x{1FD3}ῖ-\\x{1FDB}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\\x{2126}ℨ\\x{212A}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"
#define RE_DEEPSEEK3                                                                       \
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|" \
    " ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

typedef struct pre_kind {
    const char *names; /* space-separated GGUF names */
    const char *regexes[6];
} pre_kind;

/* Names whose pre-tokens are emitted whole when they are vocabulary entries,
 * before any merge (HF's BPE ignore_merges, which Llama 3's tokenizer.json
 * sets; llama.cpp's llama-vocab.cpp sets it for these names). */
static const char *const IGNORE_MERGES = "llama3 llama-bpe llama-v3";

static const pre_kind PRE_KINDS[] = {
    {"default", {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}},
    {"llama3 llama-bpe llama-v3 dbrx smaug-bpe", {RE_LLAMA3}},
    {"deepseek-llm", {"[\\r\\n]", RE_DEEPSEEK_LLM_LETTERS, "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$",
                      "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"}},
    {"deepseek-coder", {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}},
    {"deepseek-v3", {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", RE_DEEPSEEK3}},
    {"falcon", {"[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]"}},
    {"starcoder refact command-r smollm codeshell exaone minerva", {"\\p{N}", RE_GPT2}},
    {"gpt-2 gpt2 mpt olmo jais gpt-neox phi-2 trillion", {RE_GPT2}},
    {"qwen2 qwen2.5 qwen-2.5 deepseek-r1-qwen stablelm2 hunyuan", {RE_QWEN2}},
    {"chatglm-bpe chatglm4", {RE_LLAMA3}},
    {"poro bloom gpt3-finnish", {" ?[^(\\s|.,!?…。，、।۔،)]+"}},
    {"viking", {" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"}},
};

static bool name_in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ' ');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l == n && !memcmp(p, name, n)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

di_status tok_compile_regex(const char *pattern, size_t len, pcre2_code **out, di_error *err) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return di_error_set(err, DI_ERR_FORMAT, "pre-tokenizer regex: %s at offset %zu", (char *)msg,
                            (size_t)eo);
    }
    /* JIT is an optimization: when unavailable, pcre2_match interprets. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return DI_OK;
}

di_status tok_pre_from_gguf_name(di_tokenizer *t, const char *name, di_error *err) {
    const pre_kind *k = NULL;
    for (size_t i = 0; i < sizeof PRE_KINDS / sizeof PRE_KINDS[0] && !k; i++)
        if (name_in_list(PRE_KINDS[i].names, name)) k = &PRE_KINDS[i];
    if (!k)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "unknown pre-tokenizer '%s' (tokenizer.ggml.pre)", name);
    t->ignore_merges = name_in_list(IGNORE_MERGES, name);
    size_t n = 0;
    while (n < 6 && k->regexes[n]) n++;
    t->pre = di_calloc(n, sizeof *t->pre);
    if (!t->pre) return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++) {
        t->pre[i].kind = TOK_PRE_SPLIT;
        t->pre[i].behavior = TOK_SPLIT_ISOLATED;
        di_status s = tok_compile_regex(k->regexes[i], strlen(k->regexes[i]), &t->pre[i].re, err);
        if (s) return s;
        t->n_pre = i + 1;
    }
    return DI_OK;
}

void tok_pre_free(tok_pre_step *steps, size_t n) {
    for (size_t i = 0; i < n; i++) pcre2_code_free(steps[i].re);
    free(steps);
}

/* ---- piece lists -------------------------------------------------------- */

bool tok_pieces_push(tok_pieces *p, size_t off, size_t len) {
    if (len == 0) return true;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        tok_span *s = di_realloc_array(p->spans, cap, sizeof *s);
        if (!s) return false;
        p->spans = s;
        p->cap = cap;
    }
    p->spans[p->n].off = (uint32_t)off;
    p->spans[p->n].len = (uint32_t)len;
    p->n++;
    return true;
}

void tok_pieces_free(tok_pieces *p) {
    tok_buf_free(&p->own);
    free(p->spans);
    memset(p, 0, sizeof *p);
}

static di_status nomem(di_error *err) {
    return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
}

/* Lazily creates the match data and a JIT stack big enough for long pieces. */
static di_status scratch_regex(tok_scratch *s, di_error *err) {
    if (s->md) return DI_OK;
    s->md = pcre2_match_data_create(1, NULL);
    s->mctx = pcre2_match_context_create(NULL);
    s->jit = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    if (!s->md || !s->mctx || !s->jit) return nomem(err);
    pcre2_jit_stack_assign(s->mctx, NULL, s->jit);
    return DI_OK;
}

/* Split each piece of in by re (matches vs the text between them), keeping
 * what behavior says; appends to out (same base text). */
static di_status split_regex(const tok_pre_step *st, const pcre2_code *re, const tok_pieces *in,
                             tok_pieces *out, tok_scratch *s, di_error *err) {
    di_status rc = scratch_regex(s, err);
    if (rc) return rc;
    for (size_t p = 0; p < in->n; p++) {
        const char *txt = in->base + in->spans[p].off;
        size_t n = in->spans[p].len, base = in->spans[p].off;
        size_t pos = 0, last = 0;
        /* pieces of this span: (start, end, is_match), folded on the fly */
        size_t cur_s = 0, cur_e = 0;
        bool have = false, prev_match = false;
#define EMIT(S, E, M)                                                                    \
    do {                                                                                 \
        size_t s_ = (S), e_ = (E);                                                       \
        bool m_ = (M) != st->invert;                                                     \
        if (s_ == e_) break;                                                             \
        switch (st->behavior) {                                                          \
        case TOK_SPLIT_ISOLATED:                                                         \
            if (!tok_pieces_push(out, base + s_, e_ - s_)) return nomem(err);            \
            break;                                                                       \
        case TOK_SPLIT_REMOVED:                                                          \
            if (!m_ && !tok_pieces_push(out, base + s_, e_ - s_)) return nomem(err);     \
            break;                                                                       \
        case TOK_SPLIT_MERGED_PREV:                                                      \
            if (m_ && !prev_match && have) {                                             \
                cur_e = e_;                                                              \
            } else {                                                                     \
                if (have && !tok_pieces_push(out, base + cur_s, cur_e - cur_s))          \
                    return nomem(err);                                                   \
                cur_s = s_, cur_e = e_, have = true;                                     \
            }                                                                            \
            break;                                                                       \
        case TOK_SPLIT_MERGED_NEXT:                                                      \
        case TOK_SPLIT_CONTIGUOUS: {                                                     \
            bool join = st->behavior == TOK_SPLIT_MERGED_NEXT ? prev_match               \
                                                              : (m_ == prev_match);      \
            if (join && have) {                                                          \
                cur_e = e_;                                                              \
            } else {                                                                     \
                if (have && !tok_pieces_push(out, base + cur_s, cur_e - cur_s))          \
                    return nomem(err);                                                   \
                cur_s = s_, cur_e = e_, have = true;                                     \
            }                                                                            \
            break;                                                                       \
        }                                                                                \
        }                                                                                \
        prev_match = m_;                                                                 \
    } while (0)
        while (pos <= n) {
            int r = pcre2_match(re, (PCRE2_SPTR)txt, n, pos, PCRE2_NO_UTF_CHECK, s->md, s->mctx);
            if (r == PCRE2_ERROR_NOMATCH) break;
            if (r < 0) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(r, msg, sizeof msg);
                return di_error_set(err, DI_ERR_INTERNAL, "pre-tokenizer regex: %s", (char *)msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            size_t ms = ov[0], me = ov[1];
            if (me == ms) { /* empty match: step over one character */
                if (ms >= n) break;
                pos = ms + tok_utf8_len((uint8_t)txt[ms]);
                continue;
            }
            EMIT(last, ms, false);
            EMIT(ms, me, true);
            last = pos = me;
        }
        EMIT(last, n, false);
#undef EMIT
        if (have && !tok_pieces_push(out, base + cur_s, cur_e - cur_s)) return nomem(err);
    }
    return DI_OK;
}

/* Prefix space (ByteLevel) or Metaspace rewriting: builds new text. */
static di_status rewrite(const tok_pre_step *st, const tok_pieces *in, tok_pieces *out,
                         bool first_segment, di_error *err) {
    tok_buf nb = {0};
    tok_pieces tmp = {0};
    for (size_t p = 0; p < in->n; p++) {
        const char *txt = in->base + in->spans[p].off;
        size_t n = in->spans[p].len, start = nb.len;
        if (st->kind == TOK_PRE_BYTELEVEL) {
            if (st->add_prefix_space && txt[0] != ' ' && !tok_buf_append(&nb, " ", 1)) goto fail;
            if (!tok_buf_append(&nb, txt, n)) goto fail;
        } else { /* METASPACE */
            const char *r = st->replacement;
            size_t rl = st->replacement_len;
            bool starts = n >= rl && !memcmp(txt, r, rl);
            bool prepend = st->prepend == TOK_PREPEND_ALWAYS ||
                           (st->prepend == TOK_PREPEND_FIRST && first_segment && in->spans[p].off == 0);
            if (prepend && !starts && txt[0] != ' ' && !tok_buf_append(&nb, r, rl)) goto fail;
            for (size_t i = 0; i < n; i++)
                if (!(txt[i] == ' ' ? tok_buf_append(&nb, r, rl) : tok_buf_append(&nb, txt + i, 1))) goto fail;
        }
        if (!tok_pieces_push(&tmp, start, nb.len - start)) goto fail;
    }
    /* install: nb becomes out's text */
    tok_buf_free(&out->own);
    out->own = nb;
    out->base = nb.data;
    free(out->spans);
    out->spans = tmp.spans, out->n = tmp.n, out->cap = tmp.cap;
    return DI_OK;
fail:
    tok_buf_free(&nb);
    free(tmp.spans);
    return nomem(err);
}

/* Regexes for the fixed HF pre-tokenizers, compiled once per tokenizer at
 * load (the loader stores them in step->re). */
di_status tok_pretokenize(const di_tokenizer *t, const char *text, size_t len, bool first_segment,
                          tok_scratch *s, tok_pieces **out, di_error *err) {
    tok_pieces *cur = &s->a, *nxt = &s->b;
    cur->n = 0;
    cur->base = text;
    if (len && !tok_pieces_push(cur, 0, len)) return nomem(err);
    for (size_t i = 0; i < t->n_pre; i++) {
        const tok_pre_step *st = &t->pre[i];
        di_status rc = DI_OK;
        nxt->n = 0;
        switch (st->kind) {
        case TOK_PRE_BYTELEVEL:
        case TOK_PRE_METASPACE:
            if ((st->kind == TOK_PRE_BYTELEVEL && st->add_prefix_space) || st->kind == TOK_PRE_METASPACE) {
                if ((rc = rewrite(st, cur, nxt, first_segment, err))) return rc;
                tok_pieces *x = cur;
                cur = nxt, nxt = x;
                nxt->n = 0;
            }
            if (!st->re) continue;
            nxt->base = cur->base;
            rc = split_regex(st, st->re, cur, nxt, s, err);
            break;
        default:
            nxt->base = cur->base;
            rc = split_regex(st, st->re, cur, nxt, s, err);
            break;
        }
        if (rc) return rc;
        tok_pieces *x = cur;
        cur = nxt, nxt = x;
    }
    *out = cur;
    return DI_OK;
}
