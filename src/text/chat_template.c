/* Chat templates: messages -> prompt text.
 *
 * We do not run Jinja. A model ships its template as Jinja text (GGUF
 * tokenizer.chat_template, tokenizer_config.json chat_template); we recognize
 * the family by markers that only that family uses and render it with a
 * small C function that reproduces what the Jinja text produces for
 * system/user/assistant/tool messages with plain string content:
 *
 *   ChatML     "<|im_start|>"                       SmolLM2, Qwen2, many fine-tunes
 *   Llama-3    "<|start_header_id|>"                Llama-3.0
 *   Llama-3.1  the same and "Environment: ipython"  Llama-3.1 / 3.2 / 3.3 (tools:
 *              chat_llama31.c)
 *   DeepSeek   "<｜User｜>" and "<｜Assistant｜>"    DeepSeek V3 / R1 / V4
 *   DeepSeek-V4.1  by name or set by the V4.1 loader  deepseek-recipe's
 *              DeepseekV41Encoding with thinking off: "<｜System｜>" before
 *              the system text, "<｜Assistant｜></think>" opening each reply
 *   Phi-3      "<|user|>" and "<|end|>"             Phi-3
 *   Gemma      "<start_of_turn>"                    Gemma 2 / 3 (also set by the
 *              loader for gemma3 GGUFs without a template)
 *   Mistral    "[INST] " and "[/INST]"              Mistral-7B-Instruct-v0.3 (v3: the
 *              system text goes in front of the last user turn, replies are
 *              " " + trimmed text + EOS)
 *   Mistral v1 " [/INST]"                           Mistral-7B-Instruct-v0.1 / v0.2,
 *              Mixtral-8x7B-Instruct (no system message; replies + EOS)
 *   Mistral v3-tekken  "[INST]" and "[/INST]", neither with a space:
 *              Mistral-Nemo-Instruct-2407 (v3 without the spaces; replies as
 *              they are + EOS)
 *   Mistral v7 "[SYSTEM_PROMPT] " and "[INST] "         Mistral-Large-Instruct-2411
 *              (system messages where they stand; " " + reply + EOS)
 *   Llama 2    "[INST]" and "<<SYS>>"              Llama-2-chat: BOS before every
 *              user turn, the system text in <<SYS>> inside the first one
 *   The Mistral and Llama 2 templates raise on what they refuse (roles that
 *   do not alternate user / assistant, tool messages without their call ids,
 *   a system message where it has no place); so does di_tok_chat_apply, with
 *   DI_ERR_INVALID_ARG. Mistral's v7-tekken templates (Mistral-Small-3.x:
 *   "[SYSTEM_PROMPT]" without the spaces, a dated default system prompt)
 *   are not recognized.
 *
 * ChatML templates that insert a default system prompt when the first
 * message is not a system message (SmolLM2: "You are a helpful AI assistant
 * named SmolLM, ...", Qwen2.5) keep that behaviour: the default text is
 * lifted from the template itself.
 *
 * Unknown templates: di_tok_chat_kind() reports DI_CHAT_UNKNOWN and
 * di_tok_chat_apply(DI_CHAT_UNKNOWN) renders ChatML, the most widely used
 * format and the one instruction-tuned models without a template of their
 * own are usually trained on; callers that know better pick a kind by name
 * (deepinfer --chat-template NAME). Tool calls inside assistant messages
 * (structured tool_calls) are rendered for Llama 3.1 only
 * (di_chat_llama31_render, used by the server); tool results are. */
#include "text/tok_internal.h"

#include "base/alloc.h"
#include "text/chat_llama31.h"

#include <stdlib.h>
#include <string.h>

di_chat_kind di_tok_chat_detect(const char *tmpl) {
    if (!tmpl) return DI_CHAT_UNKNOWN;
    if (strstr(tmpl, "<|im_start|>")) return DI_CHAT_CHATML;
    if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|end_header_id|>"))
        return strstr(tmpl, "Environment: ipython") ? DI_CHAT_LLAMA31 : DI_CHAT_LLAMA3;
    if (strstr(tmpl, "<｜User｜>") && strstr(tmpl, "<｜Assistant｜>")) return DI_CHAT_DEEPSEEK3;
    if (strstr(tmpl, "<|user|>") && strstr(tmpl, "<|end|>") && strstr(tmpl, "<|assistant|>")) return DI_CHAT_PHI3;
    if (strstr(tmpl, "<start_of_turn>") && strstr(tmpl, "<end_of_turn>")) return DI_CHAT_GEMMA;
    if (strstr(tmpl, "[INST]") && strstr(tmpl, "[/INST]")) {
        if (strstr(tmpl, "<<SYS>>")) return DI_CHAT_LLAMA2;
        if (strstr(tmpl, "[SYSTEM_PROMPT]"))
            return strstr(tmpl, "[SYSTEM_PROMPT] ") && strstr(tmpl, "[INST] ") ? DI_CHAT_MISTRAL_V7 : DI_CHAT_UNKNOWN;
        if (strstr(tmpl, " [/INST]")) return DI_CHAT_MISTRAL_V1;
        return strstr(tmpl, "[INST] ") ? DI_CHAT_MISTRAL : DI_CHAT_MISTRAL_TEKKEN;
    }
    return DI_CHAT_UNKNOWN;
}

static const struct {
    const char *name;
    di_chat_kind kind;
} NAMES[] = {
    {"chatml", DI_CHAT_CHATML},       {"smollm", DI_CHAT_CHATML},         {"qwen2", DI_CHAT_CHATML},
    {"llama3", DI_CHAT_LLAMA3},       {"llama-3", DI_CHAT_LLAMA3},        {"deepseek3", DI_CHAT_DEEPSEEK3},
    {"llama3.1", DI_CHAT_LLAMA31},    {"llama-3.1", DI_CHAT_LLAMA31},
    {"deepseek-v3", DI_CHAT_DEEPSEEK3}, {"deepseek-v4", DI_CHAT_DEEPSEEK3}, {"deepseek", DI_CHAT_DEEPSEEK3},
    {"phi3", DI_CHAT_PHI3},           {"phi-3", DI_CHAT_PHI3},            {"deepseek-v4.1", DI_CHAT_DEEPSEEK41},
    {"deepseek41", DI_CHAT_DEEPSEEK41}, {"gemma", DI_CHAT_GEMMA},       {"gemma3", DI_CHAT_GEMMA},
    {"mistral", DI_CHAT_MISTRAL},     {"mistral-v3", DI_CHAT_MISTRAL},   {"mistral-v1", DI_CHAT_MISTRAL_V1},
    {"mixtral", DI_CHAT_MISTRAL_V1},  {"mistral-v3-tekken", DI_CHAT_MISTRAL_TEKKEN},
    {"mistral-nemo", DI_CHAT_MISTRAL_TEKKEN}, {"tekken", DI_CHAT_MISTRAL_TEKKEN}, {"mistral-v7", DI_CHAT_MISTRAL_V7},
    {"llama2", DI_CHAT_LLAMA2},       {"llama-2", DI_CHAT_LLAMA2},
};

di_chat_kind di_tok_chat_from_name(const char *name) {
    if (!name) return DI_CHAT_UNKNOWN;
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (!strcmp(name, NAMES[i].name)) return NAMES[i].kind;
    return DI_CHAT_UNKNOWN;
}

const char *di_tok_chat_name(di_chat_kind k) {
    switch (k) {
    case DI_CHAT_CHATML: return "chatml";
    case DI_CHAT_LLAMA3: return "llama3";
    case DI_CHAT_DEEPSEEK3: return "deepseek3";
    case DI_CHAT_PHI3: return "phi3";
    case DI_CHAT_DEEPSEEK41: return "deepseek-v4.1";
    case DI_CHAT_GEMMA: return "gemma";
    case DI_CHAT_LLAMA31: return "llama3.1";
    case DI_CHAT_MISTRAL: return "mistral";
    case DI_CHAT_MISTRAL_V1: return "mistral-v1";
    case DI_CHAT_MISTRAL_TEKKEN: return "mistral-v3-tekken";
    case DI_CHAT_MISTRAL_V7: return "mistral-v7";
    case DI_CHAT_LLAMA2: return "llama2";
    default: return "unknown";
    }
}

di_chat_kind di_tok_chat_kind(const di_tokenizer *t) { return t->chat_kind; }
const char *di_tok_chat_template(const di_tokenizer *t) { return t->chat_template; }
void di_tok_set_chat_kind(di_tokenizer *t, di_chat_kind kind) { t->chat_kind = kind; }

static bool put(tok_buf *b, const char *s) { return tok_buf_append(b, s, strlen(s)); }

/* Appends the text of token id (e.g. BOS) when it exists. */
static bool put_token(tok_buf *b, const di_tokenizer *t, int32_t id) {
    if (id < 0) return true;
    size_t n;
    const char *s = di_tok_text(t, id, &n);
    return tok_buf_append(b, s, n);
}

/* The default system prompt a ChatML template inserts, copied into *out
 * (unescaping \n), or false when the template has none. Recognized shape:
 * a string literal "<|im_start|>system\n<text><|im_end|>" whose <text> has no
 * Jinja expressions or quotes in it. */
static bool chatml_default_system(const char *tmpl, tok_buf *out) {
    static const char *const HEADS[] = {"<|im_start|>system\n", "<|im_start|>system\\n"};
    for (size_t h = 0; h < 2 && tmpl; h++) {
        for (const char *p = strstr(tmpl, HEADS[h]); p; p = strstr(p + 1, HEADS[h])) {
            const char *text = p + strlen(HEADS[h]);
            const char *end = strstr(text, "<|im_end|>");
            if (!end || end == text) continue;
            bool plain = true;
            for (const char *q = text; q < end && plain; q++) plain = *q != '\'' && *q != '"' && *q != '{' && *q != '}';
            if (!plain) continue;
            for (const char *q = text; q < end; q++) {
                if (q[0] == '\\' && q + 1 < end && q[1] == 'n') {
                    if (!tok_buf_append(out, "\n", 1)) return false;
                    q++;
                } else if (!tok_buf_append(out, q, 1)) {
                    return false;
                }
            }
            return true;
        }
    }
    return false;
}

static bool render_chatml(const di_tokenizer *t, const di_chat_msg *m, size_t n, bool gen, tok_buf *b) {
    tok_buf dflt = {0};
    bool ok = true;
    if ((n == 0 || strcmp(m[0].role, "system")) && t && t->chat_kind == DI_CHAT_CHATML &&
        chatml_default_system(t->chat_template, &dflt) && n > 0) {
        ok = put(b, "<|im_start|>system\n") && tok_buf_append(b, dflt.data, dflt.len) && put(b, "<|im_end|>\n");
    }
    tok_buf_free(&dflt);
    for (size_t i = 0; i < n && ok; i++)
        ok = put(b, "<|im_start|>") && put(b, m[i].role) && put(b, "\n") && put(b, m[i].content) &&
             put(b, "<|im_end|>\n");
    if (ok && gen) ok = put(b, "<|im_start|>assistant\n");
    return ok;
}

/* Jinja's |trim: strips Python whitespace from both ends. */
static bool put_trimmed(tok_buf *b, const char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && (s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) i++;
    while (n > i && (s[n - 1] == ' ' || (s[n - 1] >= '\t' && s[n - 1] <= '\r'))) n--;
    return tok_buf_append(b, s + i, n - i);
}

static bool render_llama3(const di_tokenizer *t, const di_chat_msg *m, size_t n, bool gen, tok_buf *b) {
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        if (i == 0 && t) ok = put_token(b, t, t->bos);
        ok = ok && put(b, "<|start_header_id|>") && put(b, m[i].role) && put(b, "<|end_header_id|>\n\n") &&
             put_trimmed(b, m[i].content) && put(b, "<|eot_id|>");
    }
    if (ok && gen) ok = put(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return ok;
}

/* Llama 3.1's template without tools (chat_llama31.c renders it). */
static bool render_llama31(const di_tokenizer *t, const di_chat_msg *m, size_t n, bool gen, tok_buf *b) {
    json_t *msgs = json_array();
    for (size_t i = 0; msgs && i < n; i++)
        if (json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", m[i].role, "content", m[i].content))) {
            json_decref(msgs);
            return false;
        }
    char bos[64] = "";
    size_t bl = 0;
    const char *bt = t && t->bos >= 0 ? di_tok_text(t, t->bos, &bl) : NULL;
    if (bt && bl < sizeof bos) memcpy(bos, bt, bl), bos[bl] = 0;
    char *text = NULL;
    size_t len = 0;
    di_error err;
    bool ok = msgs && !di_chat_llama31_render(msgs, NULL, gen, bos, &text, &len, &err) && tok_buf_append(b, text, len);
    free(text);
    json_decref(msgs);
    return ok;
}

/* The template of DeepSeek-V3's tokenizer_config.json (testdata/tokenizer/deepseek-v3),
 * step by step (system prompts are joined by blank lines and go first). */
static bool render_deepseek(const di_tokenizer *t, const di_chat_msg *m, size_t n, bool gen, tok_buf *b) {
    bool ok = t ? put_token(b, t, t->bos) : true;
    bool first_sys = true, is_tool = false, output_first = true;
    for (size_t i = 0; i < n && ok; i++) {
        if (strcmp(m[i].role, "system")) continue;
        if (!first_sys) ok = put(b, "\n\n");
        ok = ok && put(b, m[i].content);
        first_sys = false;
    }
    for (size_t i = 0; i < n && ok; i++) {
        const char *r = m[i].role, *c = m[i].content;
        if (!strcmp(r, "user")) {
            is_tool = false;
            ok = put(b, "<｜User｜>") && put(b, c);
        } else if (!strcmp(r, "assistant")) {
            ok = put(b, is_tool ? "<｜tool▁outputs▁end｜>" : "<｜Assistant｜>") && put(b, c) &&
                 put(b, "<｜end▁of▁sentence｜>");
            is_tool = false;
        } else if (!strcmp(r, "tool")) {
            is_tool = true;
            ok = put(b, output_first ? "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>" : "\n<｜tool▁output▁begin｜>") &&
                 put(b, c) && put(b, "<｜tool▁output▁end｜>");
            output_first = false;
        }
    }
    if (ok && is_tool) ok = put(b, "<｜tool▁outputs▁end｜>");
    if (ok && gen && !is_tool) ok = put(b, "<｜Assistant｜>");
    return ok;
}

/* deepseek-recipe's DeepseekV41Encoding.render_conversation with
 * thinking_mode False (the tests' strings come from it): BOS, then every
 * message in place -- <｜System｜>, <｜User｜>, or a reply opened with an
 * empty thought and closed by <｜end▁of▁sentence｜>. The engine renders V4.1
 * chats with src/text/dsml_render.c instead (tool results, special tokens
 * only where the renderer writes them); this text form stays for
 * di_engine_apply_chat and tokenizers without DeepSeek's special tokens. */
static bool render_deepseek41(const di_tokenizer *t, const di_chat_msg *m, size_t n, bool gen, tok_buf *b) {
    bool ok = t ? put_token(b, t, t->bos) : true;
    for (size_t i = 0; i < n && ok; i++) {
        const char *r = m[i].role, *c = m[i].content;
        if (!strcmp(r, "system")) ok = put(b, "<｜System｜>") && put(b, c);
        else if (!strcmp(r, "user")) ok = put(b, "<｜User｜>") && put(b, c);
        else if (!strcmp(r, "assistant"))
            ok = put(b, "<｜Assistant｜></think>") && put(b, c) && put(b, "<｜end▁of▁sentence｜>");
    }
    if (ok && gen) ok = put(b, "<｜Assistant｜></think>");
    return ok;
}

static bool render_phi3(const di_tokenizer *t, const di_chat_msg *m, size_t n, bool gen, tok_buf *b) {
    bool ok = t ? put_token(b, t, t->bos) : true;
    for (size_t i = 0; i < n && ok; i++)
        ok = put(b, "<|") && put(b, m[i].role) && put(b, "|>\n") && put(b, m[i].content) && put(b, "<|end|>\n");
    if (ok && gen) ok = put(b, "<|assistant|>\n");
    return ok;
}

/* Gemma 3's template (its tokenizer_config.json chat_template, step by
 * step): BOS; the system text, if first, goes in front of the first user
 * turn followed by a blank line; roles are "user" and "model" (for
 * "assistant"); every turn's text is trimmed and closed by
 * <end_of_turn>\n; the prompt ends with an open model turn. */
static bool render_gemma(const di_tokenizer *t, const di_chat_msg *m, size_t n, bool gen, tok_buf *b) {
    bool ok = t ? put_token(b, t, t->bos) : true;
    size_t i = 0;
    const char *sys = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        i = 1;
    }
    for (bool first = true; i < n && ok; i++, first = false) {
        const char *r = m[i].role;
        ok = put(b, "<start_of_turn>") && put(b, !strcmp(r, "assistant") ? "model" : r) && put(b, "\n");
        if (ok && first && sys) ok = put(b, sys) && put(b, "\n\n");
        ok = ok && put_trimmed(b, m[i].content) && put(b, "<end_of_turn>\n");
    }
    if (ok && gen) ok = put(b, "<start_of_turn>model\n");
    return ok;
}

/* What the Mistral templates raise on, checked before rendering: after
 * the optional first system message (v3 only), user and assistant turns
 * alternating from a user turn; nothing else (tool messages need call ids
 * the messages here do not carry). */
static di_status mistral_check(di_chat_kind kind, const di_chat_msg *m, size_t n, di_error *err) {
    bool v1 = kind == DI_CHAT_MISTRAL_V1;
    size_t i0 = !v1 && n > 0 && !strcmp(m[0].role, "system") ? 1 : 0;
    for (size_t i = i0; i < n; i++) {
        bool user = !strcmp(m[i].role, "user");
        bool v7_system = kind == DI_CHAT_MISTRAL_V7 && !strcmp(m[i].role, "system");
        /* Llama 2's template drops other roles, after the alternation check */
        if (!user && strcmp(m[i].role, "assistant") && !v7_system && kind != DI_CHAT_LLAMA2)
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "chat template %s: message %zu has role '%.16s'; only user and assistant turns "
                                "(after an optional system message%s) are supported",
                                di_tok_chat_name(kind), i, m[i].role, v1 ? ": none in v1" : "");
        if (kind == DI_CHAT_MISTRAL_V7) continue; /* v7 does not check the order */
        if (user != ((i - i0) % 2 == 0))
            return di_error_set(err, DI_ERR_INVALID_ARG,
                                "chat template %s: roles must alternate user/assistant/user/... (message %zu)",
                                di_tok_chat_name(kind), i);
    }
    return DI_OK;
}

/* The EOS text closing a reply ("</s>" without a tokenizer) */
static bool put_eos(tok_buf *b, const di_tokenizer *t) { return t && t->eos >= 0 ? put_token(b, t, t->eos) : put(b, "</s>"); }

/* Mistral-7B-Instruct-v0.3's template: BOS; "[INST] text[/INST]" per user
 * turn, the system text and a blank line in front of the user text when
 * that turn is the last message (so a conversation that ends with a reply
 * drops it, as the template does); " " + trimmed reply + EOS. The template
 * ignores add_generation_prompt: the prompt ends at [/INST] either way. */
static bool render_mistral(const di_tokenizer *t, const di_chat_msg *m, size_t n, tok_buf *b) {
    bool ok = t ? put_token(b, t, t->bos) : put(b, "<s>");
    const char *sys = n > 0 && !strcmp(m[0].role, "system") ? m[0].content : NULL;
    for (size_t i = sys ? 1 : 0; i < n && ok; i++) {
        if (!strcmp(m[i].role, "user")) {
            ok = put(b, "[INST] ");
            if (ok && sys && i == n - 1) ok = put(b, sys) && put(b, "\n\n");
            ok = ok && put(b, m[i].content) && put(b, "[/INST]");
        } else {
            ok = put(b, " ") && put_trimmed(b, m[i].content) && put_eos(b, t);
        }
    }
    return ok;
}

/* Mistral-Nemo-Instruct-2407's (v3-tekken): v3's turns without the spaces
 * and the replies untrimmed: BOS; "[INST]text[/INST]"; reply + EOS. */
static bool render_mistral_tekken(const di_tokenizer *t, const di_chat_msg *m, size_t n, tok_buf *b) {
    bool ok = t ? put_token(b, t, t->bos) : put(b, "<s>");
    const char *sys = n > 0 && !strcmp(m[0].role, "system") ? m[0].content : NULL;
    for (size_t i = sys ? 1 : 0; i < n && ok; i++) {
        if (!strcmp(m[i].role, "user")) {
            ok = put(b, "[INST]");
            if (ok && sys && i == n - 1) ok = put(b, sys) && put(b, "\n\n");
            ok = ok && put(b, m[i].content) && put(b, "[/INST]");
        } else {
            ok = put(b, m[i].content) && put_eos(b, t);
        }
    }
    return ok;
}

/* Mistral-Large-Instruct-2411's (v7): BOS; each message where it stands:
 * "[SYSTEM_PROMPT] text[/SYSTEM_PROMPT]", "[INST] text[/INST]",
 * " " + reply + EOS. */
static bool render_mistral_v7(const di_tokenizer *t, const di_chat_msg *m, size_t n, tok_buf *b) {
    bool ok = t ? put_token(b, t, t->bos) : put(b, "<s>");
    for (size_t i = 0; i < n && ok; i++) {
        const char *r = m[i].role;
        if (!strcmp(r, "user")) ok = put(b, "[INST] ") && put(b, m[i].content) && put(b, "[/INST]");
        else if (!strcmp(r, "system"))
            ok = put(b, "[SYSTEM_PROMPT] ") && put(b, m[i].content) && put(b, "[/SYSTEM_PROMPT]");
        else ok = put(b, " ") && put(b, m[i].content) && put_eos(b, t);
    }
    return ok;
}

/* Llama-2-chat's: per user turn BOS + "[INST] " + stripped text + " [/INST]",
 * the first turn's text being "<<SYS>>\n" + system + "\n<</SYS>>\n\n" +
 * text when a system message leads (stripped as a whole, as the template
 * does); replies " " + stripped text + " " + EOS; other roles dropped. */
static bool render_llama2(const di_tokenizer *t, const di_chat_msg *m, size_t n, tok_buf *b) {
    const char *sys = n > 0 && !strcmp(m[0].role, "system") ? m[0].content : NULL;
    size_t i0 = sys ? 1 : 0;
    bool ok = true;
    for (size_t i = i0; i < n && ok; i++) {
        bool user = !strcmp(m[i].role, "user");
        if (!user && strcmp(m[i].role, "assistant")) continue;
        tok_buf c = {0};
        if (i == i0 && sys) ok = put(&c, "<<SYS>>\n") && put(&c, sys) && put(&c, "\n<</SYS>>\n\n");
        ok = ok && put(&c, m[i].content) && tok_buf_append(&c, "", 1); /* NUL-terminated */
        if (user) ok = ok && (t ? put_token(b, t, t->bos) : put(b, "<s>")) && put(b, "[INST] ") &&
                       put_trimmed(b, c.data) && put(b, " [/INST]");
        else ok = ok && put(b, " ") && put_trimmed(b, c.data) && put(b, " ") && put_eos(b, t);
        tok_buf_free(&c);
    }
    return ok;
}

/* Mixtral-8x7B-Instruct-v0.1's (Mistral-7B-Instruct-v0.2's) template:
 * BOS; "[INST] text [/INST]"; the reply as it is + EOS. */
static bool render_mistral_v1(const di_tokenizer *t, const di_chat_msg *m, size_t n, tok_buf *b) {
    bool ok = t ? put_token(b, t, t->bos) : put(b, "<s>");
    for (size_t i = 0; i < n && ok; i++)
        ok = !strcmp(m[i].role, "user") ? put(b, "[INST] ") && put(b, m[i].content) && put(b, " [/INST]")
                                        : put(b, m[i].content) && put_eos(b, t);
    return ok;
}

di_status di_tok_chat_apply(const di_tokenizer *t, di_chat_kind kind, const di_chat_msg *msgs,
                            size_t n_msgs, bool add_generation_prompt, char **out, size_t *out_len,
                            di_error *err) {
    if (!out || (!msgs && n_msgs)) return di_error_set(err, DI_ERR_INVALID_ARG, "chat template: NULL argument");
    for (size_t i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].content)
            return di_error_set(err, DI_ERR_INVALID_ARG, "chat template: message %zu has no role or content", i);
    if (kind == DI_CHAT_UNKNOWN && t) kind = t->chat_kind;
    if (kind == DI_CHAT_UNKNOWN) kind = DI_CHAT_CHATML;
    if (kind == DI_CHAT_MISTRAL || kind == DI_CHAT_MISTRAL_V1 || kind == DI_CHAT_MISTRAL_TEKKEN ||
        kind == DI_CHAT_MISTRAL_V7 || kind == DI_CHAT_LLAMA2) {
        di_status s = mistral_check(kind, msgs, n_msgs, err);
        if (s) return s;
    }
    tok_buf b = {0};
    bool ok;
    switch (kind) {
    case DI_CHAT_MISTRAL: ok = render_mistral(t, msgs, n_msgs, &b); break;
    case DI_CHAT_MISTRAL_V1: ok = render_mistral_v1(t, msgs, n_msgs, &b); break;
    case DI_CHAT_MISTRAL_TEKKEN: ok = render_mistral_tekken(t, msgs, n_msgs, &b); break;
    case DI_CHAT_MISTRAL_V7: ok = render_mistral_v7(t, msgs, n_msgs, &b); break;
    case DI_CHAT_LLAMA2: ok = render_llama2(t, msgs, n_msgs, &b); break;
    case DI_CHAT_LLAMA3: ok = render_llama3(t, msgs, n_msgs, add_generation_prompt, &b); break;
    case DI_CHAT_DEEPSEEK3: ok = render_deepseek(t, msgs, n_msgs, add_generation_prompt, &b); break;
    case DI_CHAT_PHI3: ok = render_phi3(t, msgs, n_msgs, add_generation_prompt, &b); break;
    case DI_CHAT_DEEPSEEK41: ok = render_deepseek41(t, msgs, n_msgs, add_generation_prompt, &b); break;
    case DI_CHAT_GEMMA: ok = render_gemma(t, msgs, n_msgs, add_generation_prompt, &b); break;
    case DI_CHAT_LLAMA31: ok = render_llama31(t, msgs, n_msgs, add_generation_prompt, &b); break;
    default: ok = render_chatml(t, msgs, n_msgs, add_generation_prompt, &b); break;
    }
    if (ok && !b.data) ok = tok_buf_reserve(&b, 0);
    if (!ok) {
        tok_buf_free(&b);
        return di_error_set(err, DI_ERR_NOMEM, "chat template: out of memory");
    }
    *out = b.data;
    if (out_len) *out_len = b.len;
    return DI_OK;
}
