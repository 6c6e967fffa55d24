/* HF config.json reader on jansson. See hf_config.h for the contract.
 *
 * A handle is a reference to one JSON object (the root or a section) plus
 * the file name and the section's key path, so every message can name the
 * full path ("text_config.rope_scaling.factor") without the caller having
 * to build it. Sections hold their own jansson reference, which is why they
 * may outlive the handle they came from. */
#include "format/hf_config.h"

#include "base/alloc.h"
#include "base/mapped_file.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct di_hf_config {
    json_t *obj;  /* a JSON object; one reference owned */
    char *name;   /* owned: file name for messages */
    char *prefix; /* owned: key path of this section, "" for the root */
};

/* Key paths in messages are cut to this; keys are short in practice. */
enum { PATH_MAX_SHOWN = 200 };

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL: return "real";
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    case JSON_NULL: return "null";
    }
    return "unknown";
}

/* A short description of what was found, for "got ..." in messages. */
static const char *describe(const json_t *v, char *buf, size_t size) {
    if (json_is_integer(v))
        snprintf(buf, size, "%lld", (long long)json_integer_value(v));
    else if (json_is_real(v))
        snprintf(buf, size, "real %g", json_real_value(v));
    else if (json_is_string(v))
        snprintf(buf, size, "string \"%.40s%s\"", json_string_value(v),
                 strlen(json_string_value(v)) > 40 ? "..." : "");
    else
        snprintf(buf, size, "%s", json_kind(v));
    /* Strings are valid UTF-8 (jansson checks) but may hold control bytes
     * and may have been cut mid-character; keep the message printable. */
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
    return buf;
}

/* "<prefix>.<key>" (or just key at the root), cut to PATH_MAX_SHOWN. */
static void full_path(const di_hf_config *c, const char *key, char *buf, size_t size) {
    if (c->prefix[0])
        snprintf(buf, size, "%.*s.%.*s", PATH_MAX_SHOWN / 2, c->prefix, PATH_MAX_SHOWN / 2, key);
    else
        snprintf(buf, size, "%.*s", PATH_MAX_SHOWN, key);
}

/* Resolves a dotted key. *out is NULL when absent (the caller decides
 * whether that is an error); fails only when an intermediate component
 * exists but is not an object. */
static di_status lookup(const di_hf_config *c, const char *key, json_t **out, di_error *err) {
    *out = NULL;
    json_t *cur = c->obj;
    const char *seg = key;
    for (;;) {
        const char *dot = strchr(seg, '.');
        size_t len = dot ? (size_t)(dot - seg) : strlen(seg);
        json_t *next = json_object_getn(cur, seg, len);
        if (!next) return DI_OK;
        if (!dot) {
            *out = next;
            return DI_OK;
        }
        if (!json_is_object(next)) {
            char path[PATH_MAX_SHOWN + 8], part[PATH_MAX_SHOWN + 8];
            snprintf(part, sizeof part, "%.*s", (int)(dot - key), key);
            full_path(c, part, path, sizeof path);
            return di_error_set(err, DI_ERR_FORMAT, "%s: %s: expected an object, got %s", c->name,
                                path, json_kind(next));
        }
        cur = next;
        seg = dot + 1;
    }
}

/* Looks key up for a required getter: absent and null are errors that say
 * what was expected. */
static di_status need(const di_hf_config *c, const char *key, const char *expected, json_t **out,
                      di_error *err) {
    di_status s = lookup(c, key, out, err);
    if (s != DI_OK) return s;
    char path[PATH_MAX_SHOWN + 8];
    full_path(c, key, path, sizeof path);
    if (!*out)
        return di_error_set(err, DI_ERR_NOT_FOUND, "%s: %s: missing (expected %s)", c->name, path,
                            expected);
    if (json_is_null(*out))
        return di_error_set(err, DI_ERR_FORMAT, "%s: %s: expected %s, got null", c->name, path,
                            expected);
    return DI_OK;
}

/* Looks key up for an _or getter: *out is NULL when absent or null. */
static di_status want(const di_hf_config *c, const char *key, json_t **out, di_error *err) {
    di_status s = lookup(c, key, out, err);
    if (s == DI_OK && *out && json_is_null(*out)) *out = NULL;
    return s;
}

static di_status bad_value(const di_hf_config *c, const char *key, di_status code,
                           const char *expected, const json_t *got, di_error *err) {
    char path[PATH_MAX_SHOWN + 8], desc[96];
    full_path(c, key, path, sizeof path);
    return di_error_set(err, code, "%s: %s: expected %s, got %s", c->name, path, expected,
                        describe(got, desc, sizeof desc));
}

/* ---- open / close ------------------------------------------------------ */

static di_status make_handle(json_t *obj, const char *name, const char *prefix,
                             di_hf_config **out, di_error *err) {
    di_hf_config *c = di_calloc(1, sizeof *c);
    char *nm = di_strdup(name), *px = di_strdup(prefix);
    if (!c || !nm || !px) {
        free(c), free(nm), free(px);
        return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", name);
    }
    c->obj = json_incref(obj);
    c->name = nm;
    c->prefix = px;
    *out = c;
    return DI_OK;
}

di_status di_hf_config_open_memory(const void *data, uint64_t size, const char *name,
                                   di_hf_config **out, di_error *err) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!data && size > 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "%s: NULL data of %llu bytes", name,
                            (unsigned long long)size);
    if (size > DI_HF_CONFIG_MAX_BYTES)
        return di_error_set(err, DI_ERR_FORMAT, "%s: %llu bytes, over the %u-byte limit", name,
                            (unsigned long long)size, DI_HF_CONFIG_MAX_BYTES);
    json_error_t jerr;
    json_t *root = json_loadb(size ? data : "", (size_t)size, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return di_error_set(err, DI_ERR_FORMAT, "%s: not valid JSON: %s (line %d, column %d)",
                            name, jerr.text, jerr.line, jerr.column);
    di_status s;
    if (!json_is_object(root))
        s = di_error_set(err, DI_ERR_FORMAT, "%s: expected a JSON object at the top, got %s",
                         name, json_kind(root));
    else
        s = make_handle(root, name, "", out, err);
    json_decref(root);
    return s;
}

di_status di_hf_config_open(const char *path, di_hf_config **out, di_error *err) {
    *out = NULL;
    di_mapped_file f;
    di_status s = di_mapped_file_open(path, &f, err);
    if (s != DI_OK) return s;
    s = di_hf_config_open_memory(f.data, f.size, path, out, err);
    di_mapped_file_close(&f);
    return s;
}

di_status di_hf_config_section(const di_hf_config *cfg, const char *key, di_hf_config **out,
                               di_error *err) {
    *out = NULL;
    json_t *v;
    di_status s = need(cfg, key, "object", &v, err);
    if (s != DI_OK) return s;
    if (!json_is_object(v)) return bad_value(cfg, key, DI_ERR_FORMAT, "object", v, err);
    char path[PATH_MAX_SHOWN + 8];
    full_path(cfg, key, path, sizeof path);
    return make_handle(v, cfg->name, path, out, err);
}

di_status di_hf_config_text_section(const di_hf_config *cfg, di_hf_config **out, di_error *err) {
    if (di_hf_config_has(cfg, "text_config")) return di_hf_config_section(cfg, "text_config", out, err);
    *out = NULL;
    json_t *v;
    di_status s = lookup(cfg, "text_config", &v, err);
    if (s != DI_OK) return s;
    return make_handle(cfg->obj, cfg->name, cfg->prefix, out, err);
}

void di_hf_config_close(di_hf_config *cfg) {
    if (!cfg) return;
    json_decref(cfg->obj);
    free(cfg->name);
    free(cfg->prefix);
    free(cfg);
}

const char *di_hf_config_name(const di_hf_config *cfg) { return cfg->name; }
const char *di_hf_config_path(const di_hf_config *cfg) { return cfg->prefix; }

bool di_hf_config_has(const di_hf_config *cfg, const char *key) {
    json_t *v;
    return lookup(cfg, key, &v, NULL) == DI_OK && v && !json_is_null(v);
}

/* ---- scalar checks (shared by scalars and array elements) -------------- */

static di_status check_int(const di_hf_config *c, const char *key, const json_t *v, int64_t lo,
                           int64_t hi, int64_t *out, di_error *err) {
    char expected[96];
    snprintf(expected, sizeof expected, "integer in [%lld, %lld]", (long long)lo, (long long)hi);
    if (!json_is_integer(v)) return bad_value(c, key, DI_ERR_FORMAT, expected, v, err);
    int64_t x = (int64_t)json_integer_value(v);
    if (x < lo || x > hi) return bad_value(c, key, DI_ERR_RANGE, expected, v, err);
    *out = x;
    return DI_OK;
}

static di_status check_float(const di_hf_config *c, const char *key, const json_t *v, double lo,
                             double hi, double *out, di_error *err) {
    char expected[96];
    snprintf(expected, sizeof expected, "finite number in [%g, %g]", lo, hi);
    if (!json_is_number(v)) return bad_value(c, key, DI_ERR_FORMAT, expected, v, err);
    double x = json_number_value(v);
    /* !(x >= lo) also catches NaN, which jansson cannot produce today. */
    if (!isfinite(x) || !(x >= lo) || !(x <= hi))
        return bad_value(c, key, DI_ERR_RANGE, expected, v, err);
    *out = x;
    return DI_OK;
}

static di_status check_enum(const di_hf_config *c, const char *key, const json_t *v,
                            const char *const *names, int n_names, int *out, di_error *err) {
    char expected[256];
    size_t used = (size_t)snprintf(expected, sizeof expected, "one of");
    for (int i = 0; i < n_names && used < sizeof expected; i++)
        used += (size_t)snprintf(expected + used, sizeof expected - used, "%s \"%s\"",
                                 i ? "," : "", names[i]);
    if (!json_is_string(v)) return bad_value(c, key, DI_ERR_FORMAT, expected, v, err);
    for (int i = 0; i < n_names; i++) {
        if (strcmp(json_string_value(v), names[i]) == 0) {
            *out = i;
            return DI_OK;
        }
    }
    return bad_value(c, key, DI_ERR_RANGE, expected, v, err);
}

/* ---- scalar getters ---------------------------------------------------- */

di_status di_hf_config_get_int(const di_hf_config *cfg, const char *key, int64_t lo, int64_t hi,
                               int64_t *out, di_error *err) {
    char expected[96];
    snprintf(expected, sizeof expected, "integer in [%lld, %lld]", (long long)lo, (long long)hi);
    json_t *v;
    di_status s = need(cfg, key, expected, &v, err);
    return s != DI_OK ? s : check_int(cfg, key, v, lo, hi, out, err);
}

di_status di_hf_config_get_int_or(const di_hf_config *cfg, const char *key, int64_t lo,
                                  int64_t hi, int64_t def, int64_t *out, di_error *err) {
    json_t *v;
    di_status s = want(cfg, key, &v, err);
    if (s != DI_OK) return s;
    if (!v) {
        *out = def;
        return DI_OK;
    }
    return check_int(cfg, key, v, lo, hi, out, err);
}

di_status di_hf_config_get_float(const di_hf_config *cfg, const char *key, double lo, double hi,
                                 double *out, di_error *err) {
    char expected[96];
    snprintf(expected, sizeof expected, "finite number in [%g, %g]", lo, hi);
    json_t *v;
    di_status s = need(cfg, key, expected, &v, err);
    return s != DI_OK ? s : check_float(cfg, key, v, lo, hi, out, err);
}

di_status di_hf_config_get_float_or(const di_hf_config *cfg, const char *key, double lo,
                                    double hi, double def, double *out, di_error *err) {
    json_t *v;
    di_status s = want(cfg, key, &v, err);
    if (s != DI_OK) return s;
    if (!v) {
        *out = def;
        return DI_OK;
    }
    return check_float(cfg, key, v, lo, hi, out, err);
}

di_status di_hf_config_get_bool(const di_hf_config *cfg, const char *key, bool *out,
                                di_error *err) {
    json_t *v;
    di_status s = need(cfg, key, "true or false", &v, err);
    if (s != DI_OK) return s;
    if (!json_is_boolean(v)) return bad_value(cfg, key, DI_ERR_FORMAT, "true or false", v, err);
    *out = json_is_true(v);
    return DI_OK;
}

di_status di_hf_config_get_bool_or(const di_hf_config *cfg, const char *key, bool def, bool *out,
                                   di_error *err) {
    json_t *v;
    di_status s = want(cfg, key, &v, err);
    if (s != DI_OK) return s;
    if (!v) {
        *out = def;
        return DI_OK;
    }
    if (!json_is_boolean(v)) return bad_value(cfg, key, DI_ERR_FORMAT, "true or false", v, err);
    *out = json_is_true(v);
    return DI_OK;
}

di_status di_hf_config_get_string(const di_hf_config *cfg, const char *key, const char **out,
                                  di_error *err) {
    json_t *v;
    di_status s = need(cfg, key, "string", &v, err);
    if (s != DI_OK) return s;
    if (!json_is_string(v)) return bad_value(cfg, key, DI_ERR_FORMAT, "string", v, err);
    *out = json_string_value(v);
    return DI_OK;
}

di_status di_hf_config_get_string_or(const di_hf_config *cfg, const char *key, const char *def,
                                     const char **out, di_error *err) {
    json_t *v;
    di_status s = want(cfg, key, &v, err);
    if (s != DI_OK) return s;
    if (!v) {
        *out = def;
        return DI_OK;
    }
    if (!json_is_string(v)) return bad_value(cfg, key, DI_ERR_FORMAT, "string", v, err);
    *out = json_string_value(v);
    return DI_OK;
}

di_status di_hf_config_get_enum(const di_hf_config *cfg, const char *key,
                                const char *const *names, int n_names, int *out, di_error *err) {
    json_t *v;
    di_status s = need(cfg, key, "string", &v, err);
    return s != DI_OK ? s : check_enum(cfg, key, v, names, n_names, out, err);
}

di_status di_hf_config_get_enum_or(const di_hf_config *cfg, const char *key,
                                   const char *const *names, int n_names, int def, int *out,
                                   di_error *err) {
    json_t *v;
    di_status s = want(cfg, key, &v, err);
    if (s != DI_OK) return s;
    if (!v) {
        *out = def;
        return DI_OK;
    }
    return check_enum(cfg, key, v, names, n_names, out, err);
}

/* ---- arrays ------------------------------------------------------------ */

/* The array at key, checked to fit cap. */
static di_status need_array(const di_hf_config *cfg, const char *key, size_t cap, json_t **out,
                            di_error *err) {
    di_status s = need(cfg, key, "array", out, err);
    if (s != DI_OK) return s;
    if (!json_is_array(*out)) return bad_value(cfg, key, DI_ERR_FORMAT, "array", *out, err);
    if (json_array_size(*out) > cap) {
        char path[PATH_MAX_SHOWN + 8];
        full_path(cfg, key, path, sizeof path);
        return di_error_set(err, DI_ERR_RANGE, "%s: %s: expected at most %zu elements, got %zu",
                            cfg->name, path, cap, json_array_size(*out));
    }
    return DI_OK;
}

/* "key[i]" for element messages. */
static void element_key(const char *key, size_t i, char *buf, size_t size) {
    snprintf(buf, size, "%.*s[%zu]", PATH_MAX_SHOWN / 2, key, i);
}

di_status di_hf_config_array_len(const di_hf_config *cfg, const char *key, size_t *n,
                                 di_error *err) {
    json_t *v;
    di_status s = need_array(cfg, key, SIZE_MAX, &v, err);
    if (s == DI_OK) *n = json_array_size(v);
    return s;
}

di_status di_hf_config_get_int_array(const di_hf_config *cfg, const char *key, int64_t lo,
                                     int64_t hi, int64_t *out, size_t cap, size_t *n,
                                     di_error *err) {
    json_t *arr;
    di_status s = need_array(cfg, key, cap, &arr, err);
    if (s != DI_OK) return s;
    size_t len = json_array_size(arr);
    for (size_t i = 0; i < len; i++) {
        char ek[PATH_MAX_SHOWN + 32];
        element_key(key, i, ek, sizeof ek);
        if ((s = check_int(cfg, ek, json_array_get(arr, i), lo, hi, &out[i], err)) != DI_OK)
            return s;
    }
    *n = len;
    return DI_OK;
}

di_status di_hf_config_get_float_array(const di_hf_config *cfg, const char *key, double lo,
                                       double hi, double *out, size_t cap, size_t *n,
                                       di_error *err) {
    json_t *arr;
    di_status s = need_array(cfg, key, cap, &arr, err);
    if (s != DI_OK) return s;
    size_t len = json_array_size(arr);
    for (size_t i = 0; i < len; i++) {
        char ek[PATH_MAX_SHOWN + 32];
        element_key(key, i, ek, sizeof ek);
        if ((s = check_float(cfg, ek, json_array_get(arr, i), lo, hi, &out[i], err)) != DI_OK)
            return s;
    }
    *n = len;
    return DI_OK;
}

di_status di_hf_config_get_string_array(const di_hf_config *cfg, const char *key,
                                        const char **out, size_t cap, size_t *n, di_error *err) {
    json_t *arr;
    di_status s = need_array(cfg, key, cap, &arr, err);
    if (s != DI_OK) return s;
    size_t len = json_array_size(arr);
    for (size_t i = 0; i < len; i++) {
        const json_t *v = json_array_get(arr, i);
        if (!json_is_string(v)) {
            char ek[PATH_MAX_SHOWN + 32];
            element_key(key, i, ek, sizeof ek);
            return bad_value(cfg, ek, DI_ERR_FORMAT, "string", v, err);
        }
        out[i] = json_string_value(v);
    }
    *n = len;
    return DI_OK;
}

di_status di_hf_config_get_token_ids(const di_hf_config *cfg, const char *key, int64_t lo,
                                     int64_t hi, int64_t *out, size_t cap, size_t *n,
                                     di_error *err) {
    json_t *v;
    char expected[128];
    snprintf(expected, sizeof expected, "integer in [%lld, %lld] or an array of them",
             (long long)lo, (long long)hi);
    di_status s = need(cfg, key, expected, &v, err);
    if (s != DI_OK) return s;
    if (json_is_array(v)) return di_hf_config_get_int_array(cfg, key, lo, hi, out, cap, n, err);
    if (!json_is_integer(v)) return bad_value(cfg, key, DI_ERR_FORMAT, expected, v, err);
    if (cap < 1) {
        char path[PATH_MAX_SHOWN + 8];
        full_path(cfg, key, path, sizeof path);
        return di_error_set(err, DI_ERR_RANGE, "%s: %s: no room for a token id", cfg->name, path);
    }
    if ((s = check_int(cfg, key, v, lo, hi, &out[0], err)) != DI_OK) return s;
    *n = 1;
    return DI_OK;
}
