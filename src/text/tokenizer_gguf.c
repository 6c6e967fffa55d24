/* Tokenizer from GGUF metadata (tokenizer.ggml.*).
 *
 * model "gpt2": byte-level BPE with tokenizer.ggml.merges ranks and the
 * pre-tokenizer regexes named by tokenizer.ggml.pre; model "llama":
 * SentencePiece BPE with tokenizer.ggml.scores, <0xNN> byte tokens and a
 * prefix space (tokenizer.ggml.add_space_prefix, default true). Token types
 * come from tokenizer.ggml.token_type: CONTROL tokens are special (parsed only
 * on request), USER_DEFINED ones are always matched in text. */
#include "text/tok_internal.h"

#include "base/alloc.h"

#include <stdlib.h>
#include <string.h>

static bool get_bool(const di_gguf *g, const char *key, bool dflt) {
    bool v;
    return di_gguf_get_bool(g, key, &v, NULL) == DI_OK ? v : dflt;
}

static int32_t get_id(const di_gguf *g, const char *key, int32_t n_vocab) {
    int64_t v;
    if (di_gguf_get_i64(g, key, &v, NULL) != DI_OK) return DI_TOK_NULL;
    return v >= 0 && v < n_vocab ? (int32_t)v : DI_TOK_NULL;
}

di_status di_tok_load_gguf(const di_gguf *g, di_tokenizer **out, di_error *err) {
    if (!g || !out) return di_error_set(err, DI_ERR_INVALID_ARG, "tokenizer: NULL argument");
    di_gguf_str model_s;
    di_status s = di_gguf_get_str(g, "tokenizer.ggml.model", &model_s, err);
    if (s) return s;
    char model[32] = {0}, pre[64] = "default";
    if (model_s.len >= sizeof model)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "tokenizer.ggml.model: unsupported value");
    memcpy(model, model_s.ptr, model_s.len);
    di_gguf_str pre_s;
    if (di_gguf_get_str(g, "tokenizer.ggml.pre", &pre_s, NULL) == DI_OK && pre_s.len < sizeof pre) {
        memcpy(pre, pre_s.ptr, pre_s.len);
        pre[pre_s.len] = 0;
    }
    bool spm = !strcmp(model, "llama");
    if (!spm && strcmp(model, "gpt2"))
        return di_error_set(err, DI_ERR_UNSUPPORTED, "tokenizer.ggml.model '%s' is not supported (gpt2, llama)", model);

    const di_gguf_kv *toks = di_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!toks || toks->type != DI_GGUF_ARRAY || toks->arr_type != DI_GGUF_STRING || !toks->arr_str)
        return di_error_set(err, DI_ERR_FORMAT, "tokenizer.ggml.tokens: missing or not a string array");
    if (toks->arr_len == 0 || toks->arr_len > TOK_MAX_VOCAB)
        return di_error_set(err, DI_ERR_FORMAT, "tokenizer.ggml.tokens: %llu tokens is out of range",
                            (unsigned long long)toks->arr_len);
    int32_t n_vocab = (int32_t)toks->arr_len;
    const di_gguf_kv *types = di_gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (types && (types->type != DI_GGUF_ARRAY || types->arr_len != toks->arr_len || types->arr_type == DI_GGUF_STRING))
        return di_error_set(err, DI_ERR_FORMAT, "tokenizer.ggml.token_type: not an integer array of %d", n_vocab);
    const di_gguf_kv *scores = di_gguf_find_kv(g, "tokenizer.ggml.scores");
    if (scores && (scores->type != DI_GGUF_ARRAY || scores->arr_len != toks->arr_len || scores->arr_type == DI_GGUF_STRING))
        return di_error_set(err, DI_ERR_FORMAT, "tokenizer.ggml.scores: not a numeric array of %d", n_vocab);

    di_tokenizer *t;
    if ((s = tok_alloc(n_vocab, &t, err))) return s;
    t->model = spm ? TOK_MODEL_SPM : TOK_MODEL_BPE;
    t->byte_level = !spm;
    t->byte_fallback = spm;
    t->spm_prefix_space = spm && get_bool(g, "tokenizer.ggml.add_space_prefix", true);
    t->strip_first_space = t->spm_prefix_space;
    for (int32_t i = 0; i < n_vocab; i++) {
        int64_t ty = DI_TOK_TYPE_NORMAL;
        double sc = 0;
        if (types) di_gguf_arr_get_i64(types, (uint64_t)i, &ty);
        if (scores) di_gguf_arr_get_f64(scores, (uint64_t)i, &sc);
        if (ty < DI_TOK_TYPE_NORMAL || ty > DI_TOK_TYPE_BYTE) ty = DI_TOK_TYPE_NORMAL;
        const di_gguf_str *str = &toks->arr_str[i];
        if ((s = tok_set_token(t, i, str->ptr, str->len, (di_tok_type)ty, (float)sc, err))) goto fail;
        if (ty == DI_TOK_TYPE_CONTROL) t->tokens[i].attr |= TOK_ATTR_MATCH | TOK_ATTR_SPECIAL;
        if (ty == DI_TOK_TYPE_USER_DEFINED) t->tokens[i].attr |= TOK_ATTR_MATCH;
    }
    t->bos = get_id(g, "tokenizer.ggml.bos_token_id", n_vocab);
    t->eos = get_id(g, "tokenizer.ggml.eos_token_id", n_vocab);
    t->eot = get_id(g, "tokenizer.ggml.eot_token_id", n_vocab);
    t->eom = get_id(g, "tokenizer.ggml.eom_token_id", n_vocab);
    t->unk = get_id(g, "tokenizer.ggml.unknown_token_id", n_vocab);
    /* llama.cpp's defaults: SentencePiece adds BOS, GPT-2 style does not */
    t->add_bos = get_bool(g, "tokenizer.ggml.add_bos_token", spm);
    t->add_eos = get_bool(g, "tokenizer.ggml.add_eos_token", false);
    di_gguf_str tmpl;
    if (di_gguf_get_str(g, "tokenizer.chat_template", &tmpl, NULL) == DI_OK) {
        t->chat_template = di_strndup(tmpl.ptr, tmpl.len);
        if (!t->chat_template) {
            s = di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
    }
    if ((s = tok_finish(t, spm ? "spm" : pre, err))) goto fail;
    /* Gemma GGUFs often carry no tokenizer.chat_template: the family's own
     * turns, not the ChatML fallback */
    di_gguf_str arch;
    if (!t->chat_template && di_gguf_get_str(g, "general.architecture", &arch, NULL) == DI_OK && arch.len >= 5 &&
        !memcmp(arch.ptr, "gemma", 5))
        t->chat_kind = DI_CHAT_GEMMA;
    if (!spm) {
        const di_gguf_kv *merges = di_gguf_find_kv(g, "tokenizer.ggml.merges");
        if (!merges || merges->type != DI_GGUF_ARRAY || merges->arr_type != DI_GGUF_STRING || !merges->arr_str) {
            s = di_error_set(err, DI_ERR_FORMAT, "tokenizer.ggml.merges: missing or not a string array");
            goto fail;
        }
        if (merges->arr_len > INT32_MAX) {
            s = di_error_set(err, DI_ERR_FORMAT, "tokenizer.ggml.merges: too many merges");
            goto fail;
        }
        if (!tok_pair_map_init(&t->merges, merges->arr_len)) {
            s = di_error_set(err, DI_ERR_NOMEM, "tokenizer: out of memory");
            goto fail;
        }
        for (uint64_t i = 0; i < merges->arr_len; i++) {
            const di_gguf_str *m = &merges->arr_str[i];
            /* "left right"; the split is the first space after position 0 */
            const char *sp = m->len > 1 ? memchr(m->ptr + 1, ' ', m->len - 1) : NULL;
            if (!sp) continue;
            size_t ll = (size_t)(sp - m->ptr);
            if ((s = tok_add_merge(t, m->ptr, ll, sp + 1, m->len - ll - 1, (int32_t)i, err))) goto fail;
        }
        if ((s = tok_pre_from_gguf_name(t, pre, err))) goto fail;
    }
    *out = t;
    return DI_OK;
fail:
    di_tok_free(t);
    return s;
}
