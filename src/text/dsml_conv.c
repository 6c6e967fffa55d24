/* A conversation object (the Chat-Completions-like shape of dsml.h) read into
 * a di_dsml_conv. The JSON is hostile: every field's type is checked, counts
 * are bounded, and errors name the JSON path. */
#include "text/dsml.h"

#include <stdlib.h>
#include <string.h>

static char *dup_str(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Reads an optional string field: absent or null -> *out = NULL (or "" when
 * empty_default). */
static di_status get_str(const json_t *o, const char *key, const char *path, bool empty_default, char **out,
                         di_error *err) {
    const json_t *v = json_object_get(o, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (!empty_default) return DI_OK;
        *out = dup_str("", 0);
    } else if (!json_is_string(v)) {
        return di_error_set(err, DI_ERR_FORMAT, "%s.%s: not a string", path, key);
    } else {
        *out = dup_str(json_string_value(v), json_string_length(v));
    }
    return *out ? DI_OK : di_error_set(err, DI_ERR_NOMEM, "%s.%s: out of memory", path, key);
}

static di_status get_bool(const json_t *o, const char *key, const char *path, bool dflt, bool *out, di_error *err) {
    const json_t *v = json_object_get(o, key);
    *out = dflt;
    if (!v || json_is_null(v)) return DI_OK;
    if (!json_is_boolean(v)) return di_error_set(err, DI_ERR_FORMAT, "%s.%s: not a boolean", path, key);
    *out = json_is_true(v);
    return DI_OK;
}

static bool name_ok(const char *s, size_t n) {
    if (n == 0 || n > DI_DSML_MAX_NAME_BYTES) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == '"' || s[i] == '<' || s[i] == '>') return false;
    return true;
}

static void free_tools(di_dsml_tool *t, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(t[i].name);
        free(t[i].description);
        if (t[i].parameters) json_decref(t[i].parameters);
    }
    free(t);
}

/* tools: [{"type": "function", "function": {"name", "description", "parameters"}}] */
static di_status read_tools(const json_t *arr, const char *path, di_dsml_tool **out, size_t *n_out, di_error *err) {
    *out = NULL;
    *n_out = 0;
    if (!arr || json_is_null(arr)) return DI_OK;
    if (!json_is_array(arr)) return di_error_set(err, DI_ERR_FORMAT, "%s: not an array", path);
    size_t n = json_array_size(arr);
    if (n > DI_DSML_MAX_TOOLS)
        return di_error_set(err, DI_ERR_RANGE, "%s: %zu tools, at most %u", path, n, DI_DSML_MAX_TOOLS);
    if (n == 0) return DI_OK;
    di_dsml_tool *t = calloc(n, sizeof *t);
    if (!t) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    di_status s = DI_OK;
    for (size_t i = 0; i < n && !s; i++) {
        const json_t *e = json_array_get(arr, i), *type = json_object_get(e, "type");
        const json_t *f = json_object_get(e, "function");
        if (!json_is_object(e) || (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function"))))
            s = di_error_set(err, DI_ERR_FORMAT, "%s[%zu]: not a function tool", path, i);
        else if (!json_is_object(f))
            s = di_error_set(err, DI_ERR_FORMAT, "%s[%zu].function: not an object", path, i);
        if (s) break;
        const json_t *name = json_object_get(f, "name"), *params = json_object_get(f, "parameters");
        if (!json_is_string(name) || !name_ok(json_string_value(name), json_string_length(name))) {
            s = di_error_set(err, DI_ERR_FORMAT,
                             "%s[%zu].function.name: must be a string of 1-%u bytes without control characters, "
                             "quotes or angle brackets",
                             path, i, DI_DSML_MAX_NAME_BYTES);
            break;
        }
        if (params && !json_is_null(params) && !json_is_object(params)) {
            s = di_error_set(err, DI_ERR_FORMAT, "%s[%zu].function.parameters: not a JSON Schema object", path, i);
            break;
        }
        t[i].name = dup_str(json_string_value(name), json_string_length(name));
        char sub[64];
        snprintf(sub, sizeof sub, "%s[%zu].function", path, i);
        if (!t[i].name) s = di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", sub);
        else s = get_str(f, "description", sub, false, &t[i].description, err);
        if (!s && params && !json_is_null(params)) t[i].parameters = json_incref((json_t *)params);
    }
    if (s) {
        free_tools(t, n);
        return s;
    }
    *out = t;
    *n_out = n;
    return DI_OK;
}

static di_status read_calls(const json_t *arr, const char *path, di_dsml_msg *m, di_error *err) {
    if (!arr || json_is_null(arr)) return DI_OK;
    if (!json_is_array(arr)) return di_error_set(err, DI_ERR_FORMAT, "%s.tool_calls: not an array", path);
    size_t n = json_array_size(arr);
    if (n > DI_DSML_MAX_CALLS)
        return di_error_set(err, DI_ERR_RANGE, "%s.tool_calls: %zu calls, at most %u", path, n, DI_DSML_MAX_CALLS);
    if (n == 0) return DI_OK;
    m->calls = calloc(n, sizeof *m->calls);
    if (!m->calls) return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    m->n_calls = n;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(arr, i), *f = json_object_get(e, "function");
        char sub[80];
        snprintf(sub, sizeof sub, "%s.tool_calls[%zu]", path, i);
        if (!json_is_object(e) || !json_is_object(f))
            return di_error_set(err, DI_ERR_FORMAT, "%s: needs a \"function\" object", sub);
        const json_t *name = json_object_get(f, "name");
        if (!json_is_string(name) || !name_ok(json_string_value(name), json_string_length(name)))
            return di_error_set(err, DI_ERR_FORMAT, "%s.function.name: not a valid function name", sub);
        di_status s = get_str(e, "id", sub, true, &m->calls[i].id, err);
        if (!s) s = get_str(f, "name", sub, false, &m->calls[i].name, err);
        if (!s) s = get_str(f, "arguments", sub, true, &m->calls[i].arguments, err);
        if (s) return s;
    }
    return DI_OK;
}

static const struct {
    const char *name;
    di_dsml_role role;
} ROLES[] = {{"system", DI_DSML_SYSTEM},
             {"user", DI_DSML_USER},
             {"assistant", DI_DSML_ASSISTANT},
             {"tool", DI_DSML_TOOL},
             {"latest_reminder", DI_DSML_LATEST_REMINDER}};

static di_status read_msg(const json_t *e, size_t i, di_dsml_msg *m, di_error *err) {
    char path[48];
    snprintf(path, sizeof path, "messages[%zu]", i);
    if (!json_is_object(e)) return di_error_set(err, DI_ERR_FORMAT, "%s: not an object", path);
    const json_t *role = json_object_get(e, "role");
    size_t r = 0;
    while (r < sizeof ROLES / sizeof ROLES[0] && !(json_is_string(role) && !strcmp(json_string_value(role), ROLES[r].name)))
        r++;
    if (r == sizeof ROLES / sizeof ROLES[0])
        return di_error_set(err, DI_ERR_FORMAT, "%s.role: must be system, user, assistant, tool or latest_reminder",
                            path);
    m->role = ROLES[r].role;
    di_status s = get_str(e, "content", path, true, &m->content, err);
    if (!s && m->role == DI_DSML_ASSISTANT) s = get_str(e, "reasoning_content", path, false, &m->reasoning, err);
    if (!s && m->role == DI_DSML_ASSISTANT) s = read_calls(json_object_get(e, "tool_calls"), path, m, err);
    if (!s && m->role == DI_DSML_ASSISTANT) s = get_bool(e, "prefix", path, false, &m->prefix, err);
    if (!s && m->role == DI_DSML_TOOL) s = get_str(e, "tool_call_id", path, false, &m->tool_call_id, err);
    if (!s && m->role == DI_DSML_SYSTEM) {
        char sub[64];
        snprintf(sub, sizeof sub, "%s.tools", path);
        s = read_tools(json_object_get(e, "tools"), sub, &m->tools, &m->n_tools, err);
    }
    const json_t *img = json_object_get(e, "images");
    if (!s && img && (m->role == DI_DSML_USER || m->role == DI_DSML_TOOL)) {
        if (!json_is_integer(img) || json_integer_value(img) < 0 || json_integer_value(img) > 4096)
            s = di_error_set(err, DI_ERR_FORMAT, "%s.images: not a count in [0, 4096]", path);
        else m->n_images = (size_t)json_integer_value(img);
    }
    /* the marker of the images in content (default "<｜image｜>"): a
     * caller whose text holds that spelling as text picks another */
    if (!s && m->n_images) s = get_str(e, "image_mark", path, false, &m->image_mark, err);
    if (!s && m->image_mark && !m->image_mark[0])
        s = di_error_set(err, DI_ERR_FORMAT, "%s.image_mark: empty", path);
    return s;
}

static di_status pick(const json_t *v, const char *what, const char *const *names, size_t n, int *out, di_error *err) {
    if (!v || json_is_null(v)) return DI_OK;
    for (size_t i = 0; json_is_string(v) && i < n; i++)
        if (!strcmp(json_string_value(v), names[i])) {
            *out = (int)i;
            return DI_OK;
        }
    return di_error_set(err, DI_ERR_FORMAT, "%s: unknown value", what);
}

static di_status read_format(const json_t *rf, di_dsml_conv *c, di_error *err) {
    if (!rf || json_is_null(rf)) return DI_OK;
    static const char *const KINDS[] = {"text", "json_object", "json_schema", "regex"};
    if (!json_is_object(rf)) return di_error_set(err, DI_ERR_FORMAT, "response_format: not an object");
    int k = 0;
    di_status s = pick(json_object_get(rf, "type"), "response_format.type", KINDS, 4, &k, err);
    if (s) return s;
    c->format = (di_dsml_format)k;
    if (c->format == DI_DSML_FORMAT_JSON_SCHEMA) {
        const json_t *schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
        if (!json_is_object(schema) && !json_is_boolean(schema))
            return di_error_set(err, DI_ERR_FORMAT, "response_format.json_schema.schema: not a JSON Schema");
        c->schema = json_incref((json_t *)schema);
    } else if (c->format == DI_DSML_FORMAT_REGEX) {
        s = get_str(rf, "regex", "response_format", false, &c->regex, err);
        if (!s && !c->regex) s = di_error_set(err, DI_ERR_FORMAT, "response_format.regex: missing");
    }
    return s;
}

di_status di_dsml_conv_from_json(const json_t *root, di_dsml_conv **out, di_error *err) {
    if (!out) return di_error_set(err, DI_ERR_INVALID_ARG, "dsml: NULL out");
    *out = NULL;
    if (!json_is_object(root)) return di_error_set(err, DI_ERR_FORMAT, "conversation: not an object");
    di_dsml_conv *c = calloc(1, sizeof *c);
    if (!c) return di_error_set(err, DI_ERR_NOMEM, "conversation: out of memory");
    const json_t *msgs = json_object_get(root, "messages");
    di_status s = DI_OK;
    if (msgs && !json_is_array(msgs)) s = di_error_set(err, DI_ERR_FORMAT, "messages: not an array");
    size_t n = json_array_size(msgs);
    if (!s && n > DI_DSML_MAX_MESSAGES)
        s = di_error_set(err, DI_ERR_RANGE, "messages: %zu, at most %u", n, DI_DSML_MAX_MESSAGES);
    if (!s && n && !(c->msgs = calloc(n, sizeof *c->msgs))) s = di_error_set(err, DI_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && !s; i++) {
        c->n_msgs = i + 1;
        s = read_msg(json_array_get(msgs, i), i, &c->msgs[i], err);
    }
    for (size_t i = 0; i < c->n_msgs && !s; i++) {
        if (c->msgs[i].prefix && i + 1 < c->n_msgs)
            s = di_error_set(err, DI_ERR_FORMAT, "messages[%zu].prefix: only the last message", i);
        else if (c->msgs[i].prefix && c->msgs[i].n_calls)
            s = di_error_set(err, DI_ERR_UNSUPPORTED, "messages[%zu]: a prefix continuation with tool_calls", i);
    }
    if (!s) s = read_tools(json_object_get(root, "tools"), "tools", &c->tools, &c->n_tools, err);
    if (!s) s = get_bool(root, "thinking", "conversation", true, &c->thinking, err);
    static const char *const EFFORTS[] = {"low", "high", "xhigh", "max"};
    static const char *const CHOICES[] = {"auto", "none", "required"};
    int effort = -1, choice = 0;
    if (!s) s = pick(json_object_get(root, "reasoning_effort"), "reasoning_effort", EFFORTS, 4, &effort, err);
    if (!s && json_is_string(json_object_get(root, "reasoning_effort"))) effort++;
    if (!s) s = pick(json_object_get(root, "tool_choice"), "tool_choice", CHOICES, 3, &choice, err);
    c->effort = effort < 0 ? DI_DSML_EFFORT_DEFAULT : (di_dsml_effort)effort;
    c->tool_choice = (di_dsml_tool_choice)choice;
    if (!s) s = read_format(json_object_get(root, "response_format"), c, err);
    if (s) {
        di_dsml_conv_free(c);
        return s;
    }
    *out = c;
    return DI_OK;
}

di_status di_dsml_conv_from_messages(const char *const *roles, const char *const *contents, size_t n,
                                     bool thinking, di_dsml_conv **out, di_error *err) {
    if (!out || (n && (!roles || !contents))) return di_error_set(err, DI_ERR_INVALID_ARG, "dsml: NULL argument");
    *out = NULL;
    if (n > DI_DSML_MAX_MESSAGES)
        return di_error_set(err, DI_ERR_RANGE, "messages: %zu, at most %u", n, DI_DSML_MAX_MESSAGES);
    di_dsml_conv *c = calloc(1, sizeof *c);
    if (!c || (n && !(c->msgs = calloc(n, sizeof *c->msgs)))) {
        free(c);
        return di_error_set(err, DI_ERR_NOMEM, "conversation: out of memory");
    }
    c->thinking = thinking;
    for (size_t i = 0; i < n; i++) {
        size_t r = 0;
        while (r < sizeof ROLES / sizeof ROLES[0] && !(roles[i] && !strcmp(roles[i], ROLES[r].name))) r++;
        if (r == sizeof ROLES / sizeof ROLES[0] || !contents[i]) {
            di_dsml_conv_free(c);
            return di_error_set(err, DI_ERR_FORMAT, "messages[%zu]: role '%.32s' unknown or no content", i,
                                roles[i] ? roles[i] : "(null)");
        }
        c->n_msgs = i + 1;
        c->msgs[i].role = ROLES[r].role;
        if (!(c->msgs[i].content = dup_str(contents[i], strlen(contents[i])))) {
            di_dsml_conv_free(c);
            return di_error_set(err, DI_ERR_NOMEM, "conversation: out of memory");
        }
    }
    *out = c;
    return DI_OK;
}

void di_dsml_conv_free(di_dsml_conv *c) {
    if (!c) return;
    for (size_t i = 0; i < c->n_msgs; i++) {
        di_dsml_msg *m = &c->msgs[i];
        free(m->content);
        free(m->reasoning);
        for (size_t k = 0; k < m->n_calls; k++) {
            free(m->calls[k].id);
            free(m->calls[k].name);
            free(m->calls[k].arguments);
        }
        free(m->calls);
        free(m->tool_call_id);
        free(m->image_mark);
        free_tools(m->tools, m->n_tools);
    }
    free(c->msgs);
    free_tools(c->tools, c->n_tools);
    if (c->schema) json_decref(c->schema);
    free(c->regex);
    free(c);
}
