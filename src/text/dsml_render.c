/* DeepSeek V4 / V4.1 prompts from a conversation, as deepseek-recipe's
 * DeepseekV4Encoding / DeepseekV41Encoding render them (the golden corpus in
 * tests/data/golden/dsml/ is the specification; the rules below are what it
 * shows):
 *
 *   BOS, then the "head": [effort text "\n\n"] system text ["\n\n" tools]
 *   [response format]. V4 joins every system message into one head right
 *   after BOS (messages stay in order without them); V4.1 writes each system
 *   message in place after <｜System｜>, the head extras going into the first
 *   message when it is a system message, else into a <｜System｜> of their own
 *   in front (none when there are no messages at all).
 *   User and tool messages (a tool result is "<tool_result>C</tool_result>")
 *   that follow each other share one <｜User｜> turn, joined by "\n\n"
 *   (V4: a turn is results then user texts, a result after a user text
 *   starts a new turn, and empty user texts are skipped in the join).
 *   Assistant turns: <｜Assistant｜> + thought + content + DSML tool calls +
 *   <｜end▁of▁sentence｜> (a prefix turn stays open). The thought is
 *   "<think>R</think>" where the recipe keeps reasoning -- V4: R given and
 *   (tools shown or a prefix turn); V4.1: thinking on and (tools shown or a
 *   prefix turn that is not the first message -- V4.1's own system turn for
 *   tools / format counts, one for the effort alone does not), R possibly
 *   empty -- and "</think>"
 *   otherwise. Then the generation prompt <｜Assistant｜> + <think>
 *   (thinking) or </think> (none after a prefix turn), plus the opened
 *   tool-call block when tool_choice is required.
 *   V4.1 keeps only the first of consecutive latest_reminder messages.
 *
 * Not modelled (inputs clients do not send; the corpus leaves them out): V4
 * moves tool results that arrive after a later assistant turn while calls
 * are unanswered; a prefix turn that already holds tool calls (V4 closes or
 * leaves its thought depending on reasoning and tool_choice).
 *
 * Special tokens are recorded as byte ranges: BOS/EOS, role tokens, <think>
 * and </think> written by the renderer (also inside the tools text), the
 * ｜DSML｜ token inside DSML markup, and the first n image placeholders of a
 * message with n images. The same spellings inside message text are plain. */
#include "text/dsml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_BOS "<｜begin▁of▁sentence｜>"
#define TOK_EOS "<｜end▁of▁sentence｜>"
#define TOK_SYSTEM "<｜System｜>"
#define TOK_USER "<｜User｜>"
#define TOK_ASSISTANT "<｜Assistant｜>"
#define TOK_REMINDER "<｜latest_reminder｜>"
#define TOK_THINK "<think>"
#define TOK_THINK_END "</think>"
#define TOK_DSML "｜DSML｜"
#define TOK_IMAGE "<｜image｜>"

typedef struct rnd {
    char *text;
    size_t len, cap;
    size_t (*ranges)[2];
    size_t n_ranges, cap_ranges;
    bool failed;
    di_dsml_version v;
} rnd;

static void txt(rnd *r, const char *s, size_t n) {
    if (r->failed || n == 0) return;
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 256;
        while (cap < r->len + n + 1) cap *= 2;
        char *d = realloc(r->text, cap);
        if (!d) {
            r->failed = true;
            return;
        }
        r->text = d;
        r->cap = cap;
    }
    memcpy(r->text + r->len, s, n);
    r->len += n;
    r->text[r->len] = '\0';
}

static void txts(rnd *r, const char *s) { txt(r, s, strlen(s)); }

static void sp(rnd *r, const char *tok) {
    if (r->failed) return;
    if (r->n_ranges == r->cap_ranges) {
        size_t cap = r->cap_ranges ? 2 * r->cap_ranges : 64;
        size_t(*d)[2] = realloc(r->ranges, cap * sizeof *d);
        if (!d) {
            r->failed = true;
            return;
        }
        r->ranges = d;
        r->cap_ranges = cap;
    }
    size_t start = r->len;
    txts(r, tok);
    r->ranges[r->n_ranges][0] = start;
    r->ranges[r->n_ranges][1] = r->len;
    r->n_ranges++;
}

/* Fixed texts with markers: {D} the DSML token, {T} <think>, {/T} </think>,
 * {C} {I} {P} the version's words for calls / invoke / parameter. */
static void tpl(rnd *r, const char *s) {
    static const char *const WORDS[2][3] = {{"tool_calls", "invoke", "parameter"}, {" calls", " invoke", " parameter"}};
    while (*s && !r->failed) {
        const char *b = strchr(s, '{');
        if (!b) {
            txts(r, s);
            return;
        }
        txt(r, s, (size_t)(b - s));
        const char *e = strchr(b, '}');
        size_t k = (size_t)(e - b - 1);
        if (k == 1 && b[1] == 'D') sp(r, TOK_DSML);
        else if (k == 1 && b[1] == 'T') sp(r, TOK_THINK);
        else if (k == 2 && b[1] == '/') sp(r, TOK_THINK_END);
        else if (k == 1 && b[1] == 'C') txts(r, WORDS[r->v][0]);
        else if (k == 1 && b[1] == 'I') txts(r, WORDS[r->v][1]);
        else if (k == 1 && b[1] == 'P') txts(r, WORDS[r->v][2]);
        else txt(r, b, (size_t)(e - b + 1)); /* not a marker */
        s = e + 1;
    }
}

static const char TOOLS_TEXT[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<{D}{C}>\" block like the following:\n\n<{D}{C}>\n<{D}{I} name=\"$TOOL_NAME\">\n<{D}{P} "
    "name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</{D}{P}>\n...\n</{D}{I}>\n<{D}{I} "
    "name=\"$TOOL_NAME2\">\n...\n</{D}{I}>\n</{D}{C}>\n\nString parameters should be specified as is and set "
    "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format "
    "and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by {T}), you MUST output your complete "
    "reasoning inside {T}...{/T} BEFORE any tool calls or final response.\n\nOtherwise, output directly after "
    "{/T} with tool calls or final response.\n\n### Available Tool Schemas\n\n";
static const char TOOLS_TAIL[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";

static const char V4_EFFORT_HIGH[] =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough in your thinking "
    "and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic "
    "against all potential paths, edge cases, and adversarial scenarios.\nExplicitly write out your entire "
    "deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis "
    "to ensure absolutely no assumption is left unchecked.";
static const char V4_EFFORT_MAX[] =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\nYou MUST reason with the "
    "utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its "
    "most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather "
    "than any surface symptom.\nDo not stop reasoning until you have independently verified the solution from "
    "multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.";

static const char FORMAT_SCHEMA_HEAD[] =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";
static const char V4_FORMAT_JSON[] =
    "\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON object ONLY.";

/* The effort paragraph, or NULL when the version writes none. */
static const char *effort_text(const di_dsml_conv *c, di_dsml_version v, char *buf, size_t size) {
    if (!c->thinking) return NULL;
    if (v == DI_DSML_V4) {
        if (c->effort == DI_DSML_EFFORT_LOW) return NULL;
        return c->effort == DI_DSML_EFFORT_MAX ? V4_EFFORT_MAX : V4_EFFORT_HIGH;
    }
    int level = c->effort == DI_DSML_EFFORT_LOW ? 50 : c->effort == DI_DSML_EFFORT_MAX ? 100 : 75;
    snprintf(buf, size, "Reasoning Effort: %d (range 1-100, the higher the value, the more thorough the reasoning)",
             level);
    return buf;
}

/* One JSON line per tool: {"name", "description", "parameters"}. */
static void tool_schemas(rnd *r, const di_dsml_tool *t, size_t n) {
    for (size_t i = 0; i < n && !r->failed; i++) {
        json_t *o = json_object();
        if (!o || json_object_set_new(o, "name", json_string(t[i].name)) ||
            json_object_set_new(o, "description", json_string(t[i].description ? t[i].description : "")) ||
            json_object_set(o, "parameters", t[i].parameters ? t[i].parameters : json_null())) {
            json_decref(o);
            r->failed = true;
            return;
        }
        char *s = di_dsml_json_dumps(o, r->v);
        json_decref(o);
        if (!s) {
            r->failed = true;
            return;
        }
        if (i) txts(r, "\n");
        txts(r, s);
        free(s);
    }
}

static bool tools_shown(const di_dsml_conv *c) { return c->n_tools > 0 && c->tool_choice != DI_DSML_TOOL_NONE; }

/* [effort "\n\n"] content ["\n\n" tools] [format] */
static void head(rnd *r, const di_dsml_conv *c, const char *content) {
    char buf[160];
    const char *eff = effort_text(c, r->v, buf, sizeof buf);
    if (eff) {
        txts(r, eff);
        txts(r, "\n\n");
    }
    txts(r, content);
    if (tools_shown(c)) {
        txts(r, "\n\n");
        tpl(r, TOOLS_TEXT);
        tool_schemas(r, c->tools, c->n_tools);
        txts(r, TOOLS_TAIL);
    }
    if (c->format == DI_DSML_FORMAT_JSON_OBJECT && r->v == DI_DSML_V4) {
        txts(r, V4_FORMAT_JSON);
    } else if (c->format == DI_DSML_FORMAT_JSON_OBJECT || c->format == DI_DSML_FORMAT_JSON_SCHEMA) {
        txts(r, FORMAT_SCHEMA_HEAD);
        if (c->format == DI_DSML_FORMAT_JSON_OBJECT) {
            txts(r, "{\"type\": \"json_object\"}");
        } else {
            char *s = di_dsml_json_dumps(c->schema, r->v);
            if (!s) r->failed = true;
            else txts(r, s);
            free(s);
        }
    }
}

static bool head_has_extras(const di_dsml_conv *c, di_dsml_version v) {
    char buf[160];
    return effort_text(c, v, buf, sizeof buf) || tools_shown(c) || c->format == DI_DSML_FORMAT_JSON_OBJECT ||
           c->format == DI_DSML_FORMAT_JSON_SCHEMA;
}

/* Message text whose first n image marks (default: the placeholder's own
 * spelling) are image tokens. */
static void content_with_images(rnd *r, const di_dsml_msg *m) {
    const char *s = m->content, *mark = m->image_mark ? m->image_mark : TOK_IMAGE;
    const size_t tl = strlen(mark);
    for (size_t k = 0; k < m->n_images; k++) {
        const char *p = strstr(s, mark);
        if (!p) break;
        txt(r, s, (size_t)(p - s));
        sp(r, TOK_IMAGE);
        s = p + tl;
    }
    txts(r, s);
}

/* One tool call in DSML: "<invoke name>\n", the parameters joined by "\n",
 * "\n</invoke>\n" (V4 writes that "\n" only after a parameter). Arguments
 * that are a JSON object become one parameter per key (strings as is with
 * string="true", other values as JSON with string="false"); anything else is
 * one string parameter "arguments". */
static void param(rnd *r, const char *name, bool is_string, const char *value, size_t n) {
    tpl(r, "<{D}{P} name=\"");
    txts(r, name);
    txts(r, is_string ? "\" string=\"true\">" : "\" string=\"false\">");
    txt(r, value, n);
    tpl(r, "</{D}{P}>");
}

static void render_call(rnd *r, const di_dsml_call *call) {
    tpl(r, "<{D}{I} name=\"");
    txts(r, call->name);
    txts(r, "\">\n");
    json_t *args = json_loads(call->arguments, JSON_DECODE_ANY, NULL);
    size_t n_params = 0;
    if (json_is_object(args)) {
        const char *key;
        json_t *val;
        json_object_foreach(args, key, val) {
            if (n_params++) txts(r, "\n");
            if (json_is_string(val)) {
                param(r, key, true, json_string_value(val), json_string_length(val));
                continue;
            }
            char *s = di_dsml_json_dumps(val, r->v);
            if (!s) r->failed = true;
            else param(r, key, false, s, strlen(s));
            free(s);
        }
    } else {
        param(r, "arguments", true, call->arguments, strlen(call->arguments));
        n_params = 1;
    }
    json_decref(args);
    if (r->v == DI_DSML_V41 || n_params) txts(r, "\n");
    tpl(r, "</{D}{I}>\n");
}

/* not_first: a message (or V4.1's own system turn for tools / format) comes
 * before this one. */
static void render_assistant(rnd *r, const di_dsml_conv *c, const di_dsml_msg *m, bool not_first) {
    sp(r, TOK_ASSISTANT);
    bool keep = r->v == DI_DSML_V4 ? m->reasoning && (tools_shown(c) || m->prefix)
                                   : c->thinking && (tools_shown(c) || (m->prefix && not_first));
    if (keep) {
        sp(r, TOK_THINK);
        if (m->reasoning) txts(r, m->reasoning);
    }
    /* A prefix turn with no answer yet continues its reasoning. */
    bool open_thought = m->prefix && !m->content[0] && (r->v == DI_DSML_V4 ? c->thinking : keep);
    if (!open_thought) {
        sp(r, TOK_THINK_END);
        txts(r, m->content);
    }
    if (m->n_calls) {
        tpl(r, "\n\n<{D}{C}>\n");
        for (size_t k = 0; k < m->n_calls; k++) render_call(r, &m->calls[k]);
        tpl(r, "</{D}{C}>");
    }
    if (!m->prefix) sp(r, TOK_EOS);
}

/* lead_system: V4.1 wrote a system turn of its own (for tools or a response
 * format) in front of the messages. */
static void render_messages(rnd *r, const di_dsml_conv *c, bool lead_system) {
    di_dsml_role prev = DI_DSML_SYSTEM; /* role of the previous rendered message */
    bool any = false;
    bool users_text = false; /* V4: the user messages of the open turn have text (it joins non-empty ones) */
    for (size_t i = 0; i < c->n_msgs && !r->failed; i++) {
        const di_dsml_msg *m = &c->msgs[i];
        bool prev_userish = any && (prev == DI_DSML_USER || prev == DI_DSML_TOOL);
        switch (m->role) {
        case DI_DSML_SYSTEM:
            if (r->v == DI_DSML_V4) continue; /* hoisted into the head */
            sp(r, TOK_SYSTEM);
            if (i == 0) head(r, c, m->content);
            else txts(r, m->content);
            if (m->n_tools) {
                txts(r, "\n\n### Updated Tool Schemas\n\n");
                tool_schemas(r, m->tools, m->n_tools);
            }
            break;
        case DI_DSML_USER:
            if (r->v == DI_DSML_V41) {
                if (prev_userish) txts(r, "\n\n");
                else sp(r, TOK_USER);
            } else if (!prev_userish) {
                sp(r, TOK_USER);
                users_text = false;
            } else if (prev == DI_DSML_TOOL) {
                txts(r, "\n\n"); /* the user text after the results */
                users_text = false;
            } else if (users_text && m->content[0]) {
                txts(r, "\n\n");
            }
            content_with_images(r, m);
            users_text = users_text || m->content[0];
            break;
        case DI_DSML_TOOL:
            /* V4: results open a turn unless they follow results. */
            if (prev_userish && (r->v == DI_DSML_V41 || prev == DI_DSML_TOOL)) txts(r, "\n\n");
            else sp(r, TOK_USER);
            txts(r, "<tool_result>");
            content_with_images(r, m);
            txts(r, "</tool_result>");
            break;
        case DI_DSML_LATEST_REMINDER:
            /* V4.1 keeps the first of consecutive reminders only. */
            if (r->v == DI_DSML_V41 && any && prev == DI_DSML_LATEST_REMINDER) continue;
            sp(r, TOK_REMINDER);
            txts(r, m->content);
            break;
        case DI_DSML_ASSISTANT: render_assistant(r, c, m, i > 0 || lead_system); break;
        }
        prev = m->role;
        any = true;

    }
}

/* V4: the text of every non-empty system message, joined by blank lines. */
static char *v4_system_text(const di_dsml_conv *c) {
    size_t n = 1;
    for (size_t i = 0; i < c->n_msgs; i++)
        if (c->msgs[i].role == DI_DSML_SYSTEM) n += strlen(c->msgs[i].content) + 2;
    char *s = malloc(n), *p = s;
    if (!s) return NULL;
    bool first = true;
    for (size_t i = 0; i < c->n_msgs; i++) {
        if (c->msgs[i].role != DI_DSML_SYSTEM || !c->msgs[i].content[0]) continue;
        if (!first) *p++ = '\n', *p++ = '\n';
        size_t l = strlen(c->msgs[i].content);
        memcpy(p, c->msgs[i].content, l);
        p += l;
        first = false;
    }
    *p = '\0';
    return s;
}

di_status di_dsml_render(const di_dsml_conv *c, di_dsml_version v, di_dsml_prompt *out, di_error *err) {
    if (!c || !out || (v != DI_DSML_V4 && v != DI_DSML_V41))
        return di_error_set(err, DI_ERR_INVALID_ARG, "dsml render: bad argument");
    memset(out, 0, sizeof *out);
    rnd r = {.v = v};
    sp(&r, TOK_BOS);
    if (v == DI_DSML_V4) {
        char *sys = v4_system_text(c);
        if (!sys) r.failed = true;
        else head(&r, c, sys);
        free(sys);
    }
    bool lead_system = false; /* V4.1's own system turn carries tools or a format */
    bool format_in_prompt = c->format == DI_DSML_FORMAT_JSON_OBJECT || c->format == DI_DSML_FORMAT_JSON_SCHEMA;
    if (v == DI_DSML_V41 && (c->n_msgs ? c->msgs[0].role != DI_DSML_SYSTEM && head_has_extras(c, v)
                                       : tools_shown(c) || format_in_prompt)) {
        /* (without messages the effort alone writes no system turn) */
        sp(&r, TOK_SYSTEM);
        head(&r, c, "");
        lead_system = tools_shown(c) || format_in_prompt;
    }
    render_messages(&r, c, lead_system);
    const di_dsml_msg *last = c->n_msgs ? &c->msgs[c->n_msgs - 1] : NULL;
    if (!(last && last->role == DI_DSML_ASSISTANT && last->prefix)) {
        sp(&r, TOK_ASSISTANT);
        sp(&r, c->thinking ? TOK_THINK : TOK_THINK_END);
    }
    if (c->tool_choice == DI_DSML_TOOL_REQUIRED && tools_shown(c)) tpl(&r, "\n\n<{D}{C}>\n");
    if (r.failed) {
        free(r.text);
        free(r.ranges);
        return di_error_set(err, DI_ERR_NOMEM, "dsml render: out of memory");
    }
    out->text = r.text;
    out->len = r.len;
    out->ranges = r.ranges;
    out->n_ranges = r.n_ranges;
    return DI_OK;
}

void di_dsml_prompt_free(di_dsml_prompt *p) {
    if (!p) return;
    free(p->text);
    free(p->ranges);
    memset(p, 0, sizeof *p);
}
