/* <think> reasoning split (think_out.h). A small state machine over the
 * output as it arrives:
 *   START   nothing decided: "<think>" (or a prefix of it) is held;
 *   REASON  inside the tags: text up to "</think>" is reasoning;
 *   CONTENT after them (or no opening tag): everything is content.
 * pending holds the bytes not yet given to a side (at most a tag's length
 * while streaming). */
#include "server/think_out.h"

#include "base/strbuf.h"
#include "engine/engine_text.h"
#include "text/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

typedef enum { START, REASON, CONTENT } mode;

struct srv_think_out {
    mode m;
    bool thinking, saw_open;
    bool skip_nl;              /* drop newlines that open the current side */
    di_strbuf pending;         /* undecided bytes */
    di_strbuf reasoning, content;
    size_t sent_reasoning, sent_content;
};

srv_think_out *srv_think_out_new(bool thinking) {
    srv_think_out *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->thinking = thinking;
    o->m = thinking ? START : CONTENT;
    return o;
}

void srv_think_out_free(srv_think_out *o) {
    if (!o) return;
    di_strbuf_free(&o->pending);
    di_strbuf_free(&o->reasoning);
    di_strbuf_free(&o->content);
    free(o);
}

/* Appends text to side sb, first dropping the newlines that open it. */
static void emit(srv_think_out *o, di_strbuf *sb, const char *p, size_t n) {
    while (o->skip_nl && n && *p == '\n') p++, n--;
    if (n) o->skip_nl = false;
    di_strbuf_put(sb, p, n);
}

/* First occurrence of tag in p (n), or NULL. */
static const char *find_tag(const char *p, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t i = 0; i + t <= n; i++)
        if (!memcmp(p + i, tag, t)) return p + i;
    return NULL;
}

/* Drops the first used bytes of pending. */
static void consume(di_strbuf *b, size_t used) {
    memmove(b->data, b->data + used, b->len - used);
    b->len -= used;
    b->data[b->len] = 0;
}

/* Longest suffix of p (n) that is a proper prefix of tag. */
static size_t partial_tag(const char *p, size_t n, const char *tag) {
    size_t t = strlen(tag);
    for (size_t len = n < t - 1 ? n : t - 1; len > 0; len--)
        if (!memcmp(p + n - len, tag, len)) return len;
    return 0;
}

/* Moves what can be decided out of pending. */
static void drain(srv_think_out *o, bool final) {
    for (;;) {
        const char *p = o->pending.data;
        size_t n = o->pending.len, used;
        if (n == 0) return;
        if (o->m == START) {
            size_t k = strlen(OPEN);
            if (n >= k && !memcmp(p, OPEN, k)) {
                o->m = REASON;
                o->saw_open = o->skip_nl = true;
                used = k;
            } else if (!final && n < k && !memcmp(p, OPEN, n)) {
                return; /* may still be the tag */
            } else {
                o->m = CONTENT;
                continue;
            }
        } else if (o->m == REASON) {
            const char *end = find_tag(p, n, CLOSE);
            if (end) {
                emit(o, &o->reasoning, p, (size_t)(end - p));
                o->m = CONTENT;
                o->skip_nl = true;
                used = (size_t)(end - p) + strlen(CLOSE);
            } else {
                size_t hold = final ? 0 : partial_tag(p, n, CLOSE);
                emit(o, &o->reasoning, p, n - hold);
                used = n - hold;
                if (hold) {
                    consume(&o->pending, used);
                    return;
                }
            }
        } else {
            emit(o, &o->content, p, n);
            used = n;
        }
        consume(&o->pending, used);
    }
}

bool srv_think_out_push(srv_think_out *o, const char *text, size_t n, bool final) {
    if (!di_strbuf_put(&o->pending, text, n)) return false;
    drain(o, final);
    return !o->reasoning.failed && !o->content.failed;
}

json_t *srv_think_out_deltas(srv_think_out *o) {
    json_t *arr = json_array();
    size_t nr = o->reasoning.len, nc = o->content.len;
    if (nr > o->sent_reasoning)
        json_array_append_new(arr, json_pack("{s:o}", "reasoning_content",
                                             srv_json_string(o->reasoning.data + o->sent_reasoning, nr - o->sent_reasoning)));
    if (nc > o->sent_content)
        json_array_append_new(arr, json_pack("{s:o}", "content",
                                             srv_json_string(o->content.data + o->sent_content, nc - o->sent_content)));
    o->sent_reasoning = nr;
    o->sent_content = nc;
    return arr;
}

json_t *srv_think_out_message(srv_think_out *o) {
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content",
                          srv_json_string(o->content.len ? o->content.data : "", o->content.len));
    if (o->thinking)
        json_object_set_new(m, "reasoning_content",
                            o->saw_open ? srv_json_string(o->reasoning.len ? o->reasoning.data : "", o->reasoning.len)
                                        : json_null());
    return m;
}

bool srv_think_out_thinking(const srv_think_out *o) { return o->thinking; }

/* Qwen3's template: "<think>" in a ChatML template (QwQ's and Qwen3's
 * both write it; a plain ChatML one never does). */
static bool think_template(di_server *s) {
    const di_tokenizer *t = di_engine_tokenizer(s->engine);
    const char *tmpl = di_tok_chat_template(t);
    return di_tok_chat_kind(t) == DI_CHAT_CHATML && tmpl && strstr(tmpl, OPEN) && strstr(tmpl, CLOSE);
}

bool srv_think_chat(di_server *s, const json_t *root, char **text, bool *is_think, bool *thinking, srv_reply *r) {
    *is_think = think_template(s);
    *thinking = true;
    if (!*is_think) return true;
    const json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw)) {
            srv_reply_error(r, 400, "invalid_request_error", "chat_template_kwargs", "invalid_type",
                            "'chat_template_kwargs' must be an object.");
            return false;
        }
        const json_t *on = json_object_get(kw, "enable_thinking");
        if (on && !json_is_boolean(on)) {
            srv_reply_error(r, 400, "invalid_request_error", "chat_template_kwargs.enable_thinking", "invalid_type",
                            "'chat_template_kwargs.enable_thinking' must be a boolean.");
            return false;
        }
        if (on) *thinking = json_is_true(on);
    }
    if (*thinking) return true;
    static const char EMPTY[] = "<think>\n\n</think>\n\n";
    size_t n = strlen(*text);
    char *t = realloc(*text, n + sizeof EMPTY);
    if (!t) {
        srv_reply_error(r, 503, "server_error", NULL, NULL, "Out of memory.");
        return false;
    }
    memcpy(t + n, EMPTY, sizeof EMPTY);
    *text = t;
    return true;
}
