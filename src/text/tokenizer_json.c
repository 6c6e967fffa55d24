/* Tokenizer from HF tokenizer.json (+ tokenizer_config.json), via jansson.
 *
 * Supported: model BPE (byte-level when a ByteLevel pre-tokenizer/decoder is
 * present, else over characters with optional byte_fallback), merges as
 * "a b" strings or ["a", "b"] pairs, ignore_merges, continuing_subword_prefix
 * / end_of_word_suffix only when ""; WordPiece (unk_token, prefix,
 * max_input_chars_per_word); Unigram (unk_id, no byte_fallback);
 * added_tokens with special/lstrip/rstrip; normalizers NFC, NFD, NFKC,
 * NFKD, Lowercase, Replace, Prepend, Strip, BertNormalizer, StripAccents,
 * Precompiled (SentencePiece charsmaps), Sequence; pre-tokenizers Split, ByteLevel, Digits, Metaspace, Whitespace,
 * WhitespaceSplit, Punctuation, BertPreTokenizer, Sequence;
 * TemplateProcessing post-processors for BOS/EOS. Anything else is reported
 * as DI_ERR_UNSUPPORTED naming the component, rather than tokenizing wrongly.
 * tokenizer_config.json (next to tokenizer.json) supplies bos/eos tokens,
 * add_bos_token/add_eos_token and chat_template when present. */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* HF ByteLevel's own regex: GPT-2's plus a final \s+ alternative. */
static const char RE_BYTELEVEL[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static const char *jstr(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool jbool(const json_t *o, const char *key, bool dflt) {
    const json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* A regex that matches s literally. */
static di_status literal_regex(const char *s, size_t n, pcre2_code **out, di_error *err) {
    tok_buf b = {0};
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool meta = (c >= 0x20 && c < 0x7F) && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == ' ');
        if ((meta && !tok_buf_append(&b, "\\", 1)) || !tok_buf_append(&b, &c, 1)) {
            tok_buf_free(&b);
            return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        }
    }
    di_status s2 = tok_compile_regex(b.data ? b.data : "", b.len, out, err);
    tok_buf_free(&b);
    return s2;
}

/* pattern: {"String": "..."} or {"Regex": "..."}. */
static di_status pattern_regex(const json_t *pat, pcre2_code **out, char **literal, size_t *literal_len,
                               di_error *err) {
    const char *s;
    if ((s = jstr(pat, "Regex"))) return tok_compile_regex(s, strlen(s), out, err);
    if ((s = jstr(pat, "String"))) {
        if (literal) {
            *literal = di_strdup(s);
            *literal_len = strlen(s);
            return *literal ? DI_OK : di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        }
        return literal_regex(s, strlen(s), out, err);
    }
    return di_error_set(err, DI_ERR_FORMAT, "pattern is neither String nor Regex");
}

static di_status parse_behavior(const char *b, tok_split_behavior *out, di_error *err) {
    if (!b || !strcmp(b, "Isolated")) *out = TOK_SPLIT_ISOLATED;
    else if (!strcmp(b, "Removed")) *out = TOK_SPLIT_REMOVED;
    else if (!strcmp(b, "MergedWithPrevious")) *out = TOK_SPLIT_MERGED_PREV;
    else if (!strcmp(b, "MergedWithNext")) *out = TOK_SPLIT_MERGED_NEXT;
    else if (!strcmp(b, "Contiguous")) *out = TOK_SPLIT_CONTIGUOUS;
    else return di_error_set(err, DI_ERR_UNSUPPORTED, "split behavior '%s' not supported", b);
    return DI_OK;
}

/* ---- normalizers ------------------------------------------------------------ */

static di_status add_norm(di_tokenizer *t, const json_t *n, di_error *err) {
    if (!n || json_is_null(n)) return DI_OK;
    const char *type = jstr(n, "type");
    if (!type) return di_error_set(err, DI_ERR_FORMAT, "normalizer without type");
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(n, "normalizers");
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v) {
            di_status s = add_norm(t, v, err);
            if (s) return s;
        }
        return DI_OK;
    }
    tok_norm_step st = {0};
    di_status s = DI_OK;
    if (!strcmp(type, "NFC")) st.kind = TOK_NORM_NFC;
    else if (!strcmp(type, "NFD")) st.kind = TOK_NORM_NFD;
    else if (!strcmp(type, "NFKC")) st.kind = TOK_NORM_NFKC;
    else if (!strcmp(type, "NFKD")) st.kind = TOK_NORM_NFKD;
    else if (!strcmp(type, "Lowercase")) st.kind = TOK_NORM_LOWERCASE;
    else if (!strcmp(type, "StripAccents")) st.kind = TOK_NORM_STRIP_ACCENTS;
    else if (!strcmp(type, "Precompiled")) {
        const json_t *cm = json_object_get(n, "precompiled_charsmap");
        if (json_is_null(cm) || (json_is_string(cm) && json_string_length(cm) == 0)) return DI_OK; /* no rules */
        if (!json_is_string(cm)) return di_error_set(err, DI_ERR_FORMAT, "Precompiled without precompiled_charsmap");
        st.kind = TOK_NORM_PRECOMPILED;
        s = tok_precompiled_load(json_string_value(cm), json_string_length(cm), &st.content, &st.content_len, err);
        if (s) return s;
    }
    else if (!strcmp(type, "BertNormalizer")) {
        st.kind = TOK_NORM_BERT;
        st.bert_clean = jbool(n, "clean_text", true);
        st.bert_chinese = jbool(n, "handle_chinese_chars", true);
        st.bert_lowercase = jbool(n, "lowercase", true);
        /* strip_accents: null follows lowercase (HF) */
        st.bert_strip_accents = jbool(n, "strip_accents", st.bert_lowercase);
    }
    else if (!strcmp(type, "Strip")) {
        st.kind = TOK_NORM_STRIP;
        st.strip_left = jbool(n, "strip_left", true);
        st.strip_right = jbool(n, "strip_right", true);
    } else if (!strcmp(type, "Prepend") || !strcmp(type, "Replace")) {
        const char *c = jstr(n, !strcmp(type, "Prepend") ? "prepend" : "content");
        if (!c) return di_error_set(err, DI_ERR_FORMAT, "normalizer %s without text", type);
        st.kind = !strcmp(type, "Prepend") ? TOK_NORM_PREPEND : TOK_NORM_REPLACE;
        st.content = di_strdup(c);
        st.content_len = strlen(c);
        if (!st.content) return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        if (st.kind == TOK_NORM_REPLACE)
            s = pattern_regex(json_object_get(n, "pattern"), &st.re, &st.pattern, &st.pattern_len, err);
    } else {
        return di_error_set(err, DI_ERR_UNSUPPORTED, "normalizer '%s' not supported", type);
    }
    tok_norm_step *p = s ? NULL : di_realloc_array(t->norm, t->n_norm + 1, sizeof *p);
    if (!p) {
        pcre2_code_free(st.re);
        free(st.pattern);
        free(st.content);
        return s ? s : di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    }
    t->norm = p;
    t->norm[t->n_norm++] = st;
    return DI_OK;
}

/* ---- pre-tokenizers ----------------------------------------------------------- */

static di_status add_pre(di_tokenizer *t, const json_t *n, bool *byte_level, di_error *err) {
    if (!n || json_is_null(n)) return DI_OK;
    const char *type = jstr(n, "type");
    if (!type) return di_error_set(err, DI_ERR_FORMAT, "pre_tokenizer without type");
    if (!strcmp(type, "Sequence")) {
        const json_t *arr = json_object_get(n, "pretokenizers");
        size_t i;
        json_t *v;
        json_array_foreach(arr, i, v) {
            di_status s = add_pre(t, v, byte_level, err);
            if (s) return s;
        }
        return DI_OK;
    }
    tok_pre_step st = {0};
    st.behavior = TOK_SPLIT_ISOLATED;
    di_status s = DI_OK;
    if (!strcmp(type, "Split")) {
        st.kind = TOK_PRE_SPLIT;
        st.invert = jbool(n, "invert", false);
        if (!(s = parse_behavior(jstr(n, "behavior"), &st.behavior, err)))
            s = pattern_regex(json_object_get(n, "pattern"), &st.re, NULL, NULL, err);
    } else if (!strcmp(type, "ByteLevel")) {
        st.kind = TOK_PRE_BYTELEVEL;
        st.add_prefix_space = jbool(n, "add_prefix_space", true);
        *byte_level = true;
        if (jbool(n, "use_regex", true)) s = tok_compile_regex(RE_BYTELEVEL, strlen(RE_BYTELEVEL), &st.re, err);
    } else if (!strcmp(type, "Digits")) {
        st.kind = TOK_PRE_DIGITS;
        const char *re = jbool(n, "individual_digits", false) ? "\\p{N}" : "\\p{N}+";
        s = tok_compile_regex(re, strlen(re), &st.re, err);
    } else if (!strcmp(type, "Metaspace")) {
        st.kind = TOK_PRE_METASPACE;
        const char *r = jstr(n, "replacement");
        if (!r) r = "\xE2\x96\x81";
        st.replacement_len = strlen(r);
        if (st.replacement_len == 0 || st.replacement_len >= sizeof st.replacement)
            return di_error_set(err, DI_ERR_FORMAT, "Metaspace replacement must be one character");
        memcpy(st.replacement, r, st.replacement_len);
        const char *ps = jstr(n, "prepend_scheme");
        if (ps) st.prepend = !strcmp(ps, "first") ? TOK_PREPEND_FIRST : !strcmp(ps, "never") ? TOK_PREPEND_NEVER
                                                                                              : TOK_PREPEND_ALWAYS;
        else st.prepend = jbool(n, "add_prefix_space", true) ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
        st.split = jbool(n, "split", true);
        if (st.split) {
            st.behavior = TOK_SPLIT_MERGED_NEXT;
            s = literal_regex(st.replacement, st.replacement_len, &st.re, err);
        }
    } else if (!strcmp(type, "Whitespace")) {
        st.kind = TOK_PRE_WHITESPACE;
        st.behavior = TOK_SPLIT_REMOVED;
        st.invert = true;
        s = tok_compile_regex("\\w+|[^\\w\\s]+", 14, &st.re, err);
    } else if (!strcmp(type, "WhitespaceSplit")) {
        st.kind = TOK_PRE_WHITESPACE_SPLIT;
        st.behavior = TOK_SPLIT_REMOVED;
        s = tok_compile_regex("\\s+", 3, &st.re, err);
    } else if (!strcmp(type, "BertPreTokenizer")) {
        /* = WhitespaceSplit then Punctuation (Isolated): two steps */
        json_t *ws = json_pack("{s:s}", "type", "WhitespaceSplit");
        json_t *pu = json_pack("{s:s, s:s}", "type", "Punctuation", "behavior", "Isolated");
        s = ws && pu ? add_pre(t, ws, byte_level, err) : di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        if (!s) s = add_pre(t, pu, byte_level, err);
        json_decref(ws);
        json_decref(pu);
        return s;
    } else if (!strcmp(type, "Punctuation")) {
        st.kind = TOK_PRE_PUNCTUATION;
        static const char RE[] = "[\\p{P}\\x21-\\x2F\\x3A-\\x40\\x5B-\\x60\\x7B-\\x7E]";
        if (!(s = parse_behavior(jstr(n, "behavior"), &st.behavior, err)))
            s = tok_compile_regex(RE, strlen(RE), &st.re, err);
    } else {
        return di_error_set(err, DI_ERR_UNSUPPORTED, "pre_tokenizer '%s' not supported", type);
    }
    tok_pre_step *p = s ? NULL : di_realloc_array(t->pre, t->n_pre + 1, sizeof *p);
    if (!p) {
        pcre2_code_free(st.re);
        return s ? s : di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    }
    t->pre = p;
    t->pre[t->n_pre++] = st;
    return DI_OK;
}

/* Decoder facts we need: byte-level or not, and whether the first space goes. */
static void scan_decoder(const json_t *d, bool *byte_level, bool *strip_first) {
    if (!d || json_is_null(d)) return;
    const char *type = jstr(d, "type");
    if (!type) return;
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(d, "decoders"), i, v) scan_decoder(v, byte_level, strip_first);
    } else if (!strcmp(type, "ByteLevel")) {
        *byte_level = true;
    } else if (!strcmp(type, "Metaspace")) {
        const char *ps = jstr(d, "prepend_scheme");
        *strip_first = ps ? strcmp(ps, "never") != 0 : jbool(d, "add_prefix_space", true);
    } else if (!strcmp(type, "Strip")) {
        const json_t *st = json_object_get(d, "start");
        if (json_is_integer(st) && json_integer_value(st) >= 1) *strip_first = true;
    }
}

/* ---- the model ---------------------------------------------------------------- */

static di_status max_id(const json_t *vocab, const json_t *added, int32_t *out, di_error *err) {
    int64_t m = -1;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vocab, k, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= TOK_MAX_VOCAB)
            return di_error_set(err, DI_ERR_FORMAT, "model.vocab: bad id for '%s'", k);
        if (json_integer_value(v) > m) m = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v) {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= TOK_MAX_VOCAB)
            return di_error_set(err, DI_ERR_FORMAT, "added_tokens[%zu]: bad id", i);
        if (json_integer_value(id) > m) m = json_integer_value(id);
    }
    if (m < 0) return di_error_set(err, DI_ERR_FORMAT, "empty vocabulary");
    *out = (int32_t)(m + 1);
    return DI_OK;
}

/* "bos_token": "..." or {"content": "..."} in tokenizer_config.json. */
static const char *config_token(const json_t *cfg, const char *key) {
    const json_t *v = json_object_get(cfg, key);
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) return jstr(v, "content");
    return NULL;
}

/* chat_template.jinja beside tokenizer_config.json (where transformers
 * 4.50+ saves the template instead of the config's chat_template):
 * malloc'd text, or NULL when absent, unreadable or over 1 MiB. */
#define TEMPLATE_FILE_MAX (1u << 20)
static char *read_template_file(const char *cfg_path) {
    const char *slash = strrchr(cfg_path, '/');
    size_t dl = slash ? (size_t)(slash - cfg_path) + 1 : 0;
    char *path = malloc(dl + sizeof "chat_template.jinja");
    if (!path) return NULL;
    memcpy(path, cfg_path, dl);
    memcpy(path + dl, "chat_template.jinja", sizeof "chat_template.jinja");
    FILE *f = fopen(path, "rb");
    free(path);
    if (!f) return NULL;
    char *buf = malloc(TEMPLATE_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, TEMPLATE_FILE_MAX + 1, f) : 0;
    fclose(f);
    if (!buf || n > TEMPLATE_FILE_MAX || memchr(buf, 0, n)) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    return buf;
}

static di_status load_config(di_tokenizer *t, const char *cfg_path, di_error *err) {
    struct stat st;
    if (stat(cfg_path, &st) != 0) return DI_OK; /* optional */
    json_error_t je;
    /* integers as reals: transformers writes model_max_length as 1e30
     * spelled out (VERY_LARGE_INTEGER), past what jansson's integers
     * hold; nothing read here is an integer */
    json_t *cfg = json_load_file(cfg_path, JSON_DECODE_INT_AS_REAL, &je);
    if (!cfg) return di_error_set(err, DI_ERR_FORMAT, "%s:%d: %s", cfg_path, je.line, je.text);
    const char *b = config_token(cfg, "bos_token"), *e = config_token(cfg, "eos_token");
    if (b) t->bos = di_tok_find(t, b, strlen(b));
    if (e) t->eos = di_tok_find(t, e, strlen(e));
    t->add_bos = jbool(cfg, "add_bos_token", t->add_bos);
    t->add_eos = jbool(cfg, "add_eos_token", t->add_eos);
    const json_t *ct = json_object_get(cfg, "chat_template");
    const char *tmpl = json_is_string(ct) ? json_string_value(ct) : NULL;
    if (json_is_array(ct)) { /* [{"name": "default", "template": "..."}, ...] */
        size_t i;
        json_t *v;
        json_array_foreach(ct, i, v) {
            const char *name = jstr(v, "name");
            if (!tmpl || (name && !strcmp(name, "default"))) tmpl = jstr(v, "template");
        }
    }
    di_status s = DI_OK;
    char *file_tmpl = tmpl ? NULL : read_template_file(cfg_path);
    if (tmpl || file_tmpl) {
        free(t->chat_template);
        t->chat_template = file_tmpl ? file_tmpl : di_strdup(tmpl);
        if (!t->chat_template) s = di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        t->chat_kind = di_tok_chat_detect(t->chat_template);
    }
    json_decref(cfg);
    return s;
}

/* BOS/EOS from a TemplateProcessing post-processor ("single" template). */
static void scan_post(di_tokenizer *t, const json_t *pp) {
    if (!pp || json_is_null(pp)) return;
    const char *type = jstr(pp, "type");
    if (type && !strcmp(type, "Sequence")) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(pp, "processors"), i, v) scan_post(t, v);
        return;
    }
    if (!type || strcmp(type, "TemplateProcessing")) return;
    const json_t *single = json_object_get(pp, "single");
    size_t n = json_array_size(single);
    for (size_t i = 0; i < n; i++) {
        const json_t *sp = json_object_get(json_array_get(single, i), "SpecialToken");
        const char *id = sp ? jstr(sp, "id") : NULL;
        if (!id) continue;
        int32_t tid = di_tok_find(t, id, strlen(id));
        if (i == 0) t->bos = tid, t->add_bos = tid >= 0;
        else if (i == n - 1) t->eos = tid, t->add_eos = tid >= 0;
    }
}

/* Unigram's vocab: [[piece, score], ...], ids in order. */
static di_status unigram_vocab(di_tokenizer *t, const json_t *vocab, di_error *err) {
    size_t i;
    json_t *v;
    double min = DBL_MAX;
    t->uni_score = di_malloc_array((size_t)t->n_vocab, sizeof *t->uni_score);
    if (!t->uni_score) return di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
    for (int32_t k = 0; k < t->n_vocab; k++) t->uni_score[k] = 0.0;
    json_array_foreach(vocab, i, v) {
        const json_t *p = json_array_get(v, 0), *sc = json_array_get(v, 1);
        if (json_array_size(v) != 2 || !json_is_string(p) || !json_is_number(sc))
            return di_error_set(err, DI_ERR_FORMAT, "model.vocab[%zu]: not [piece, score]", i);
        double score = json_number_value(sc);
        if (!isfinite(score)) return di_error_set(err, DI_ERR_FORMAT, "model.vocab[%zu]: score not finite", i);
        t->uni_score[i] = score;
        if (score < min) min = score;
        if (json_string_length(p) > t->uni_max_bytes) t->uni_max_bytes = (uint32_t)json_string_length(p);
        di_status s = tok_set_token(t, (int32_t)i, json_string_value(p), json_string_length(p), DI_TOK_TYPE_NORMAL,
                                    (float)score, err);
        if (s) return s;
    }
    t->uni_unk_score = (min == DBL_MAX ? 0.0 : min) - 10.0;
    return DI_OK;
}

static di_status build(const json_t *root, const char *cfg_path, di_tokenizer **out, di_error *err) {
    const json_t *model = json_object_get(root, "model");
    const char *mtype = jstr(model, "type");
    tok_model kind = TOK_MODEL_BPE;
    if (!model) return di_error_set(err, DI_ERR_FORMAT, "no model");
    if (mtype && !strcmp(mtype, "WordPiece")) kind = TOK_MODEL_WORDPIECE;
    else if (mtype && !strcmp(mtype, "Unigram")) kind = TOK_MODEL_UNIGRAM;
    else if (mtype && strcmp(mtype, "BPE"))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "model type '%s' not supported (BPE, WordPiece, Unigram)", mtype);
    const json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    const json_t *added = json_object_get(root, "added_tokens");
    if (kind == TOK_MODEL_BPE && (!json_is_object(vocab) || !json_is_array(merges)))
        return di_error_set(err, DI_ERR_FORMAT, "model.vocab / model.merges missing");
    if (kind == TOK_MODEL_WORDPIECE && !json_is_object(vocab))
        return di_error_set(err, DI_ERR_FORMAT, "model.vocab missing");
    if (kind == TOK_MODEL_UNIGRAM && (!json_is_array(vocab) || json_array_size(vocab) == 0 ||
                                      json_array_size(vocab) >= TOK_MAX_VOCAB))
        return di_error_set(err, DI_ERR_FORMAT, "model.vocab is not a list of [piece, score]");
    if (kind == TOK_MODEL_UNIGRAM && jbool(model, "byte_fallback", false))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "Unigram byte_fallback not supported");
    if (added && !json_is_array(added)) return di_error_set(err, DI_ERR_FORMAT, "added_tokens is not an array");
    /* Qwen2/2.5/3 and many others write both as "": the same as absent. */
    const char *csp = jstr(model, "continuing_subword_prefix"), *eow = jstr(model, "end_of_word_suffix");
    if (kind == TOK_MODEL_BPE && ((csp && csp[0]) || (eow && eow[0])))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "BPE continuing_subword_prefix / end_of_word_suffix '%s' not supported",
                            csp && csp[0] ? csp : eow);
    int32_t n_vocab = 0;
    di_status s;
    if (kind == TOK_MODEL_UNIGRAM) {
        /* ids are the list positions; added tokens may only name them */
        json_t *none = json_object();
        s = none ? max_id(none, added, &n_vocab, err) : di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        json_decref(none);
        if (s && (!none || json_array_size(added))) return s;
        if (n_vocab < (int32_t)json_array_size(vocab)) n_vocab = (int32_t)json_array_size(vocab);
        s = DI_OK;
    } else if ((s = max_id(vocab, added, &n_vocab, err))) {
        return s;
    }
    di_tokenizer *t;
    if ((s = tok_alloc(n_vocab, &t, err))) return s;
    bool byte_level = false, strip_first = false;
    if ((s = add_norm(t, json_object_get(root, "normalizer"), err))) goto fail;
    if ((s = add_pre(t, json_object_get(root, "pre_tokenizer"), &byte_level, err))) goto fail;
    scan_decoder(json_object_get(root, "decoder"), &byte_level, &strip_first);
    t->model = kind;
    t->byte_level = byte_level && kind == TOK_MODEL_BPE;
    t->byte_fallback = kind == TOK_MODEL_BPE && jbool(model, "byte_fallback", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    t->strip_first_space = (strip_first && !byte_level) || kind == TOK_MODEL_WORDPIECE;
    if (kind == TOK_MODEL_WORDPIECE) {
        const char *pfx = csp ? csp : "##";
        if (strlen(pfx) >= sizeof t->wp_prefix) {
            s = di_error_set(err, DI_ERR_FORMAT, "WordPiece continuing_subword_prefix too long");
            goto fail;
        }
        memcpy(t->wp_prefix, pfx, strlen(pfx) + 1);
        t->wp_prefix_len = strlen(pfx);
        const json_t *mc = json_object_get(model, "max_input_chars_per_word");
        t->wp_max_chars = json_is_integer(mc) && json_integer_value(mc) > 0 && json_integer_value(mc) < INT32_MAX
                              ? (int32_t)json_integer_value(mc) : 100;
    }
    const char *k;
    json_t *v;
    if (kind == TOK_MODEL_UNIGRAM) {
        if ((s = unigram_vocab(t, vocab, err))) goto fail;
    } else {
        json_object_foreach((json_t *)vocab, k, v) {
            int32_t id = (int32_t)json_integer_value(v);
            if (t->tokens[id].type != DI_TOK_TYPE_UNDEFINED) continue; /* duplicate id: first wins */
            if ((s = tok_set_token(t, id, k, strlen(k), DI_TOK_TYPE_NORMAL, 0, err))) goto fail;
        }
    }
    size_t i;
    json_array_foreach(added, i, v) {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        const char *content = jstr(v, "content");
        if (!content) {
            s = di_error_set(err, DI_ERR_FORMAT, "added_tokens[%zu]: no content", i);
            goto fail;
        }
        bool special = jbool(v, "special", false);
        tok_entry *e = &t->tokens[id];
        if (e->type == DI_TOK_TYPE_UNDEFINED || e->text_len != strlen(content) ||
            memcmp(t->strings.data + e->text_off, content, e->text_len)) {
            if ((s = tok_set_token(t, id, content, strlen(content), DI_TOK_TYPE_NORMAL, 0, err))) goto fail;
        }
        e->type = special ? DI_TOK_TYPE_CONTROL : DI_TOK_TYPE_USER_DEFINED;
        e->attr = TOK_ATTR_MATCH | (special ? TOK_ATTR_SPECIAL : 0) | (jbool(v, "lstrip", false) ? TOK_ATTR_LSTRIP : 0) |
                  (jbool(v, "rstrip", false) ? TOK_ATTR_RSTRIP : 0);
    }
    if ((s = tok_finish(t, kind == TOK_MODEL_BPE && !t->byte_level ? "tokenizer.json/chars" : "tokenizer.json", err)))
        goto fail;
    if (kind == TOK_MODEL_UNIGRAM) {
        const json_t *u = json_object_get(model, "unk_id");
        if (json_is_integer(u) && json_integer_value(u) >= 0 && json_integer_value(u) < t->n_vocab)
            t->unk = (int32_t)json_integer_value(u);
    } else {
        const char *unk = jstr(model, "unk_token");
        if (unk) t->unk = tok_find_key(t, unk, strlen(unk));
    }
    if (kind != TOK_MODEL_BPE) merges = NULL;
    if (merges && !tok_pair_map_init(&t->merges, json_array_size(merges))) {
        s = di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    json_array_foreach(merges, i, v) {
        const char *l = NULL, *r = NULL;
        size_t ll = 0, rl = 0;
        if (json_is_string(v)) {
            const char *m = json_string_value(v);
            size_t ml = json_string_length(v);
            const char *sp = ml > 1 ? memchr(m + 1, ' ', ml - 1) : NULL;
            if (!sp) continue;
            l = m, ll = (size_t)(sp - m), r = sp + 1, rl = ml - ll - 1;
        } else if (json_is_array(v) && json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                   json_is_string(json_array_get(v, 1))) {
            l = json_string_value(json_array_get(v, 0)), ll = json_string_length(json_array_get(v, 0));
            r = json_string_value(json_array_get(v, 1)), rl = json_string_length(json_array_get(v, 1));
        } else {
            s = di_error_set(err, DI_ERR_FORMAT, "model.merges[%zu]: not a merge", i);
            goto fail;
        }
        if (i > INT32_MAX) break;
        if ((s = tok_add_merge(t, l, ll, r, rl, (int32_t)i, err))) goto fail;
    }
    scan_post(t, json_object_get(root, "post_processor"));
    if (cfg_path && (s = load_config(t, cfg_path, err))) goto fail;
    /* tok_finish ran before BOS/EOS were known: mark them now */
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    *out = t;
    return DI_OK;
fail:
    di_tok_free(t);
    return s;
}

di_status di_tok_load_json(const char *path, di_tokenizer **out, di_error *err) {
    if (!path || !out) return di_error_set(err, DI_ERR_INVALID_ARG, "tokenizer: NULL argument");
    struct stat st;
    if (stat(path, &st) != 0) return di_error_set(err, DI_ERR_IO, "%s: cannot open", path);
    size_t n = strlen(path);
    char *json_path = malloc(n + 32), *cfg_path = malloc(n + 32);
    if (!json_path || !cfg_path) {
        free(json_path);
        free(cfg_path);
        return di_error_set(err, DI_ERR_NOMEM, "out of memory");
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(json_path, n + 32, "%s/tokenizer.json", path);
        snprintf(cfg_path, n + 32, "%s/tokenizer_config.json", path);
    } else {
        snprintf(json_path, n + 32, "%s", path);
        const char *slash = strrchr(path, '/');
        size_t dl = slash ? (size_t)(slash - path) + 1 : 0;
        snprintf(cfg_path, n + 32, "%.*stokenizer_config.json", (int)dl, path);
    }
    json_error_t je;
    json_t *root = json_load_file(json_path, JSON_REJECT_DUPLICATES, &je);
    di_status s;
    if (!root) {
        s = di_error_set(err, DI_ERR_FORMAT, "%s:%d: %s", json_path, je.line, je.text);
    } else {
        s = build(root, cfg_path, out, err);
        if (s) di_error_prefix(err, "%s: ", json_path);
        json_decref(root);
    }
    free(json_path);
    free(cfg_path);
    return s;
}
