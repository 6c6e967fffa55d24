/* Prompts -> token ids for di_engine_submit and di_engine_count_prompt:
 * token ids as given, text encoded, chat messages through the text room's
 * one call (di_tok_chat_encode: the tokenizer's chat kind picks the
 * rendering, so the engine never names a model family); image
 * placeholders expanded into the model's image positions, their rows from
 * the image cache or the vision tower, keyed by the image bytes. Plus the
 * public text helpers (tokenize, detokenize, pieces, apply_chat). The
 * tokenizer is read-only after load, so none of this takes the engine
 * lock. */
#include "engine/engine_internal.h"

#include "base/alloc.h"
#include "base/status.h"
#include "engine/engine_text.h"
#include "vision/image.h"

#include <stdlib.h>
#include <string.h>

/* The kind a chat_template name asks for (NULL: DI_CHAT_UNKNOWN, the
 * tokenizer's own) and the messages in the text room's shape, *m
 * (malloc'd, the caller frees; pointers borrowed from msgs, unchecked). */
static di_status chat_input(const char *chat_template, const di_message *msgs, size_t n_msgs, di_chat_kind *kind,
                            di_chat_msg **m, di_error *err) {
    *kind = DI_CHAT_UNKNOWN;
    *m = NULL;
    if (chat_template) {
        *kind = di_tok_chat_from_name(chat_template);
        if (*kind == DI_CHAT_UNKNOWN)
            return di_error_set(err, DI_ERR_INVALID_ARG, "unknown chat template '%s'", chat_template);
    }
    *m = di_malloc_array(n_msgs ? n_msgs : 1, sizeof **m);
    if (!*m) return di_error_set(err, DI_ERR_NOMEM, "chat: out of memory");
    for (size_t i = 0; i < n_msgs; i++) {
        (*m)[i].role = msgs[i].role;
        (*m)[i].content = msgs[i].content;
    }
    return DI_OK;
}

di_status eng_build_prompt(di_engine *e, const di_request *r, di_tok_ids *ids, di_error *err) {
    int n_sources = (r->messages != NULL) + (r->text != NULL) + (r->tokens != NULL);
    if (n_sources != 1)
        return di_error_set(err, DI_ERR_INVALID_ARG,
                            "request: give exactly one of messages, text or tokens");
    if (r->tokens) {
        int32_t nv = di_tok_vocab_size(e->tok);
        for (size_t i = 0; i < r->n_tokens; i++)
            if (r->tokens[i] < 0 || r->tokens[i] >= nv)
                return di_error_set(err, DI_ERR_RANGE, "request: prompt token %zu (%d) outside the vocabulary of %d",
                                    i, r->tokens[i], nv);
        ids->data = di_malloc_array(r->n_tokens ? r->n_tokens : 1, sizeof(int32_t));
        if (!ids->data) return di_error_set(err, DI_ERR_NOMEM, "request: out of memory");
        memcpy(ids->data, r->tokens, r->n_tokens * sizeof(int32_t));
        ids->n = ids->cap = r->n_tokens;
        return DI_OK;
    }
    if (r->text) return di_tok_encode(e->tok, r->text, strlen(r->text), true, true, ids, err);
    di_chat_kind kind;
    di_chat_msg *m;
    di_status s = chat_input(r->chat_template, r->messages, r->n_messages, &kind, &m, err);
    if (s) return s;
    s = di_tok_chat_encode(e->tok, kind, m, r->n_messages, ids, err);
    free(m);
    return s;
}

di_status di_engine_count_prompt(di_engine *e, const di_request *r, size_t *n_tokens, di_error *err) {
    *n_tokens = 0;
    if (!e || !r) return di_error_set(err, DI_ERR_INVALID_ARG, "request: NULL argument");
    di_tok_ids ids = {0};
    di_status s = eng_build_prompt(e, r, &ids, err);
    size_t n = ids.n;
    /* each image placeholder counts the positions it expands to (no tower) */
    const int32_t ph = r->n_images ? di_model_image_token(e->model) : -1;
    for (size_t i = 0; !s && ph >= 0 && i < ids.n; i++) n -= ids.data[i] == ph;
    for (size_t k = 0; !s && ph >= 0 && k < r->n_images; k++) {
        int32_t nt = 0;
        if (!r->images[k].data) s = di_error_set(err, DI_ERR_INVALID_ARG, "request: image %zu has no data", k);
        else s = di_model_image_n_tokens(e->model, r->images[k].data, r->images[k].n_bytes, &nt, err);
        if (s) di_error_prefix(err, "image %zu: ", k);
        n += (size_t)nt;
    }
    if (!s) *n_tokens = n;
    di_tok_ids_free(&ids);
    return s;
}

/* ---- images -------------------------------------------------------------- */

const char *di_engine_image_placeholder(di_engine *e) {
    if (!e) return NULL;
    if (!e->image_placeholder) {
        int32_t ph = di_model_image_token(e->model);
        size_t len = 0;
        const char *t = ph >= 0 ? di_tok_text(e->tok, ph, &len) : NULL;
        if (t) e->image_placeholder = di_strndup(t, len);
    }
    return e->image_placeholder;
}

/* The preprocessing settings an image's rows depend on besides its bytes
 * and the engine's model: the decode limits (the defaults: requests carry
 * none). Part of the image cache's key. */
static uint64_t image_cfg_key(void) {
    di_image_limits lim;
    di_image_limits_default(&lim);
    uint64_t v[3] = {lim.max_bytes, lim.max_pixels, (uint64_t)lim.max_side}, h = 1469598103934665603ull;
    for (int i = 0; i < 3; i++) h = (h ^ v[i]) * 1099511628211ull;
    return h;
}

/* One image's ids and rows: from the image cache, else the tower (and
 * then into the cache). */
static di_status encode_image(di_engine *e, const uint8_t *data, size_t n, int32_t **ids, float **rows,
                              int32_t *n_tokens, di_error *err) {
    const uint64_t cfg = image_cfg_key();
    if (e->image_cache && di_image_cache_get(e->image_cache, cfg, data, n, ids, rows, n_tokens)) return DI_OK;
    __atomic_fetch_add(&e->n_image_encodes, 1, __ATOMIC_RELAXED);
    di_status s = di_model_encode_image(e->model, data, n, ids, rows, n_tokens, e->pool, err);
    if (!s && e->image_cache)
        di_image_cache_put(e->image_cache, cfg, data, n, *ids, *rows, *n_tokens, e->facts.n_embd);
    return s;
}

/* FNV-1a 64 of the image bytes: the prefix-cache key of its positions */
static uint64_t image_hash(const uint8_t *d, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ d[i]) * 1099511628211ull;
    return h ^ (uint64_t)n;
}

di_status eng_expand_images(di_engine *e, const di_request *r, request *q, di_tok_ids *ids, int32_t **key_out,
                            di_error *err) {
    *key_out = NULL;
    const int32_t ph = di_model_image_token(e->model);
    if (ph < 0) return di_error_set(err, DI_ERR_UNSUPPORTED, "request: this model takes no images");
    if (r->n_images > DI_IMAGE_DEFAULT_MAX_IMAGES)
        return di_error_set(err, DI_ERR_RANGE, "request: %zu images, at most %d", r->n_images,
                            DI_IMAGE_DEFAULT_MAX_IMAGES);
    if (r->prompt_logprobs) return di_error_set(err, DI_ERR_INVALID_ARG, "request: prompt_logprobs with images");
    size_t n_ph = 0;
    for (size_t i = 0; i < ids->n; i++) n_ph += ids->data[i] == ph;
    if (n_ph != r->n_images)
        return di_error_set(err, DI_ERR_INVALID_ARG, "request: %zu images but the prompt has %zu image placeholders",
                            r->n_images, n_ph);
    const int64_t D = e->facts.n_embd;
    int32_t *img_ids[DI_IMAGE_DEFAULT_MAX_IMAGES] = {0};
    float *img_rows[DI_IMAGE_DEFAULT_MAX_IMAGES] = {0};
    int32_t img_n[DI_IMAGE_DEFAULT_MAX_IMAGES] = {0};
    di_status s = DI_OK;
    size_t total = ids->n - n_ph, n_rows = 0;
    for (size_t k = 0; k < r->n_images && !s; k++) {
        if (!r->images[k].data) s = di_error_set(err, DI_ERR_INVALID_ARG, "request: image %zu has no data", k);
        else s = encode_image(e, r->images[k].data, r->images[k].n_bytes, &img_ids[k], &img_rows[k], &img_n[k], err);
        if (s) di_error_prefix(err, "image %zu: ", k);
        total += (size_t)img_n[k];
        n_rows += (size_t)img_n[k];
    }
    int32_t *out = NULL, *key = NULL;
    if (!s) {
        out = di_malloc_array(total, sizeof(int32_t));
        key = di_malloc_array(total, sizeof(int32_t));
        q->img_index = di_malloc_array(total, sizeof(int32_t));
        q->img_rows = di_malloc_array(n_rows * (size_t)D, sizeof(float));
        if (!out || !key || !q->img_index || !q->img_rows) s = di_error_set(err, DI_ERR_NOMEM, "request: out of memory");
    }
    if (!s) {
        size_t o = 0, row = 0, k = 0;
        for (size_t i = 0; i < ids->n; i++) {
            if (ids->data[i] != ph) {
                out[o] = key[o] = ids->data[i];
                q->img_index[o++] = -1;
                continue;
            }
            const uint64_t h = image_hash(r->images[k].data, r->images[k].n_bytes);
            memcpy(q->img_rows + row * (size_t)D, img_rows[k], (size_t)img_n[k] * (size_t)D * sizeof(float));
            for (int32_t j = 0; j < img_n[k]; j++, o++, row++) {
                out[o] = img_ids[k][j];
                /* any int32 keys the cache: mix the content hash with the offset, off the vocab */
                key[o] = (int32_t)(((h + (uint64_t)j * 0x9e3779b97f4a7c15ull) >> 33) | 0x40000000u);
                q->img_index[o] = (int32_t)row;
            }
            k++;
        }
        free(ids->data);
        ids->data = out;
        ids->n = ids->cap = total;
        out = NULL;
        *key_out = key;
        key = NULL;
    }
    free(out);
    free(key);
    for (size_t k = 0; k < r->n_images; k++) {
        free(img_ids[k]);
        free(img_rows[k]);
    }
    return s;
}

/* ---- text helpers ---------------------------------------------------------- */

di_status di_engine_tokenize(di_engine *e, const char *text, bool add_special, bool parse_special,
                             int32_t **ids, size_t *n_ids, di_error *err) {
    di_tok_ids v = {0};
    di_status s = di_tok_encode(e->tok, text, strlen(text), add_special, parse_special, &v, err);
    if (s) {
        di_tok_ids_free(&v);
        return s;
    }
    *ids = v.data;
    *n_ids = v.n;
    return DI_OK;
}

di_status di_engine_detokenize(di_engine *e, const int32_t *ids, size_t n_ids, char **text,
                               di_error *err) {
    size_t len;
    return di_tok_decode(e->tok, ids, n_ids, false, text, &len, err);
}

int64_t di_engine_token_piece(di_engine *e, int32_t id, char *buf, size_t size) {
    /* The vocabulary is read-only after load, so no lock is needed. */
    return di_tok_piece(e->tok, id, true, buf, size);
}

const di_tokenizer *di_engine_tokenizer(const di_engine *e) { return e ? e->tok : NULL; }

di_status di_engine_apply_chat(di_engine *e, const char *chat_template, const di_message *msgs,
                               size_t n_msgs, bool add_generation_prompt, char **text,
                               di_error *err) {
    di_chat_kind kind;
    di_chat_msg *m;
    di_status s = chat_input(chat_template, msgs, n_msgs, &kind, &m, err);
    for (size_t i = 0; !s && i < n_msgs; i++)
        if (!m[i].role || !m[i].content)
            s = di_error_set(err, DI_ERR_INVALID_ARG, "chat: message %zu has no role or content", i);
    size_t len;
    if (!s) s = di_tok_chat_apply(e->tok, kind, m, n_msgs, add_generation_prompt, text, &len, err);
    free(m);
    return s;
}
