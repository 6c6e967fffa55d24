/* grammar: the official JSON-Schema-Test-Suite (draft2020-12 and draft7).
 *
 * For every schema we compile, every valid instance (serialized compactly by
 * jansson, object keys put in schema order since our grammar writes members
 * in that order) must be accepted byte by byte, and every invalid one
 * rejected. Schemas we refuse to compile are counted, per keyword file, and
 * the share is printed. A few cases are skipped below, each with the reason
 * (semantics a grammar of the text cannot express). */
#include "grammar_test_util.h"

#include <dirent.h>
#include <jansson.h>

/* Known, documented mismatches: file, case description, test description
 * (NULL = every test of the case). */
static const struct { const char *file, *case_desc, *test_desc, *why; } SKIPS[] = {
    {"oneOf.json", NULL, NULL, "oneOf compiles as anyOf: 'more than one branch' is not rejected"},
    {"const.json", "const with object", "same object with different property order is valid",
     "object literals of const/enum are written in schema order"},
    {"format.json", NULL, NULL, "formats are asserted for strings (2020-12 makes them annotations); generation wants them"},
    {"vocabulary.json", NULL, NULL, "custom metaschemas ($vocabulary) are not interpreted"},
};

static bool skipped(const char *file, const char *cdesc, const char *tdesc) {
    for (size_t i = 0; i < sizeof SKIPS / sizeof SKIPS[0]; i++) {
        if (strcmp(SKIPS[i].file, file)) continue;
        if (SKIPS[i].case_desc && strcmp(SKIPS[i].case_desc, cdesc)) continue;
        if (SKIPS[i].test_desc && strcmp(SKIPS[i].test_desc, tdesc)) continue;
        return true;
    }
    return false;
}

/* Resolves "#/a/b" in root (enough for the suite's local refs). */
static json_t *local_ref(json_t *root, const char *ref) {
    if (!ref || ref[0] != '#') return NULL;
    json_t *cur = root;
    char seg[256];
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            char ch = *p++;
            if (ch == '~' && (*p == '0' || *p == '1')) ch = *p++ == '0' ? '~' : '/';
            seg[n++] = ch;
        }
        seg[n] = 0;
        cur = json_is_array(cur) ? json_array_get(cur, strtoul(seg, NULL, 10)) : json_object_get(cur, seg);
    }
    return cur;
}

/* Collects the schemas that constrain one object value: the schema, its
 * $ref target, allOf/anyOf/oneOf members (bounded depth). */
static void collect(json_t *root, json_t *s, json_t *out, int depth) {
    if (!json_is_object(s) || depth > 8) return;
    json_array_append(out, s);
    collect(root, local_ref(root, json_string_value(json_object_get(s, "$ref"))), out, depth + 1);
    const char *kws[] = {"allOf", "anyOf", "oneOf"};
    for (int k = 0; k < 3; k++) {
        size_t i;
        json_t *x;
        json_array_foreach(json_object_get(s, kws[k]), i, x) collect(root, x, out, depth + 1);
    }
}

/* Copy of v with object keys in the order our grammar writes them. */
static json_t *canonical(json_t *root, json_t *schema, json_t *v, int depth) {
    json_t *schemas = json_array();
    collect(root, schema, schemas, 0);
    json_t *r;
    size_t i;
    json_t *s, *x;
    if (json_is_object(v) && depth < 32) {
        r = json_object();
        json_array_foreach(schemas, i, s) {
            const char *k;
            json_object_foreach(json_object_get(s, "properties"), k, x) {
                json_t *val = json_object_get(v, k);
                if (val && !json_object_get(r, k)) json_object_set_new(r, k, canonical(root, x, val, depth + 1));
            }
            size_t q;
            json_array_foreach(json_object_get(s, "required"), q, x) {
                const char *k2 = json_string_value(x);
                json_t *val = k2 ? json_object_get(v, k2) : NULL;
                if (val && !json_object_get(r, k2)) json_object_set_new(r, k2, canonical(root, NULL, val, depth + 1));
            }
            /* a present dependency's unlisted names come next: its
             * dependents, then the property itself (json_schema.c) */
            const char *dkw[] = {"dependencies", "dependentRequired"};
            for (int d = 0; d < 2; d++) {
                json_object_foreach(json_object_get(s, dkw[d]), k, x) {
                    if (!json_is_array(x) || !json_object_get(v, k)) continue;
                    json_t *dep;
                    json_array_foreach(x, q, dep) {
                        const char *k2 = json_string_value(dep);
                        json_t *val = k2 ? json_object_get(v, k2) : NULL;
                        if (val && !json_object_get(r, k2)) json_object_set_new(r, k2, canonical(root, NULL, val, depth + 1));
                    }
                    if (!json_object_get(r, k)) json_object_set_new(r, k, canonical(root, NULL, json_object_get(v, k), depth + 1));
                }
            }
        }
        const char *k;
        json_object_foreach(v, k, x) {
            if (json_object_get(r, k)) continue;
            json_t *ap = NULL;
            json_array_foreach(schemas, i, s) if (!ap) ap = json_object_get(s, "additionalProperties");
            json_object_set_new(r, k, canonical(root, ap, x, depth + 1));
        }
    } else if (json_is_array(v) && depth < 32) {
        r = json_array();
        json_array_foreach(v, i, x) {
            json_t *item = NULL;
            size_t q;
            json_array_foreach(schemas, q, s) {
                json_t *pi = json_object_get(s, "prefixItems"), *it = json_object_get(s, "items");
                if (!item && json_is_array(pi)) item = json_array_get(pi, i);
                if (!item && json_is_array(it)) item = json_array_get(it, i);
                if (!item && json_is_object(it)) item = it;
            }
            json_array_append_new(r, canonical(root, item, x, depth + 1));
        }
    } else {
        r = json_incref(v);
    }
    json_decref(schemas);
    return r;
}

/* Compact JSON text as jansson's JSON_COMPACT writes it, except that reals
 * use the shortest digits that read back as the same double (1.1, not
 * 1.1000000000000001), which is how such values are usually written. */
typedef struct textbuf {
    char *s;
    size_t n, cap;
} textbuf;

static void put(textbuf *t, const char *piece) {
    size_t k = strlen(piece);
    if (t->n + k + 1 > t->cap) {
        t->cap = (t->n + k + 1) * 2;
        t->s = realloc(t->s, t->cap);
    }
    memcpy(t->s + t->n, piece, k + 1);
    t->n += k;
}

static void compact_to(json_t *v, textbuf *t) {
    if (json_is_real(v)) {
        char tmp[64];
        double x = json_real_value(v);
        if (x == (double)(long long)x && x > -1e16 && x < 1e16) {
            snprintf(tmp, sizeof tmp, "%.1f", x); /* 300.0, not 3e+02 */
        } else {
            for (int prec = 1; prec <= 17; prec++) {
                snprintf(tmp, sizeof tmp, "%.*g", prec, x);
                if (strtod(tmp, NULL) == x) break;
            }
        }
        put(t, tmp);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        put(t, "[");
        json_array_foreach(v, i, x) {
            if (i) put(t, ",");
            compact_to(x, t);
        }
        put(t, "]");
    } else if (json_is_object(v)) {
        const char *k;
        json_t *x;
        size_t i = 0;
        put(t, "{");
        json_object_foreach(v, k, x) {
            if (i++) put(t, ",");
            json_t *ks = json_string(k);
            compact_to(ks, t);
            json_decref(ks);
            put(t, ":");
            compact_to(x, t);
        }
        put(t, "}");
    } else {
        char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        put(t, d);
        free(d);
    }
}

static char *compact(json_t *v) {
    textbuf t = {0};
    compact_to(v, &t);
    return t.s;
}

typedef struct totals {
    uint32_t cases, compiled, tests, checked, failures, skipped;
} totals;

static void run_file(const char *dir, const char *name, di_grammar_draft draft, totals *all) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    json_error_t je;
    json_t *cases = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!cases) fail_msg("%s: %s", path, je.text);
    totals t = {0};
    size_t ci;
    json_t *cs;
    json_array_foreach(cases, ci, cs) {
        t.cases++;
        json_t *schema = json_object_get(cs, "schema");
        const char *cdesc = json_string_value(json_object_get(cs, "description"));
        char *text = json_dumps(schema, JSON_ENCODE_ANY | JSON_COMPACT);
        di_grammar_options opt = di_grammar_options_default();
        opt.draft = draft;
        di_grammar *g = NULL;
        di_error err = {0};
        di_status st = di_grammar_compile_json_schema(text, strlen(text), &opt, &g, &err);
        free(text);
        size_t n_tests = json_array_size(json_object_get(cs, "tests"));
        t.tests += (uint32_t)n_tests;
        if (st != DI_OK) {
            if (getenv("DI_SUITE_VERBOSE")) printf("  not compiled: %s / %s: %s\n", name, cdesc, err.msg);
            continue;
        }
        t.compiled++;
        size_t ti;
        json_t *tc;
        json_array_foreach(json_object_get(cs, "tests"), ti, tc) {
            const char *tdesc = json_string_value(json_object_get(tc, "description"));
            bool valid = json_is_true(json_object_get(tc, "valid"));
            json_t *inst = canonical(schema, schema, json_object_get(tc, "data"), 0);
            char *it = compact(inst);
            json_decref(inst);
            bool got = gt_accepts(g, it, strlen(it));
            t.checked++;
            if (got != valid) {
                if (skipped(name, cdesc, tdesc)) t.skipped++;
                else {
                    t.failures++;
                    printf("  MISMATCH %s / %s / %s: %s expected %s\n", name, cdesc, tdesc, it,
                           valid ? "accept" : "reject");
                }
            }
            free(it);
        }
        di_grammar_free(g);
    }
    json_decref(cases);
    printf("  %-28s compiled %3u/%3u (%5.1f%%)  tests checked %4u, mismatches %u, skipped %u\n", name, t.compiled,
           t.cases, t.cases ? 100.0 * t.compiled / t.cases : 0, t.checked, t.failures, t.skipped);
    all->cases += t.cases, all->compiled += t.compiled, all->tests += t.tests;
    all->checked += t.checked, all->failures += t.failures, all->skipped += t.skipped;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void run_draft(const char *sub, di_grammar_draft draft) {
    char dir[1024];
    di_test_data(dir, sizeof dir, sub);
    DIR *d = opendir(dir);
    if (!d) fail_msg("%s: not found (scripts/fetch-testdata.sh fetches it)", dir);
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 256) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json")) names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof names[0], cmp_str);
    totals all = {0};
    printf("%s:\n", sub);
    for (size_t i = 0; i < n; i++) {
        run_file(dir, names[i], draft, &all);
        free(names[i]);
    }
    printf("%s total: compiled %u/%u schemas (%.1f%%), %u instance checks, %u mismatches, %u skipped\n", sub,
           all.compiled, all.cases, 100.0 * all.compiled / (all.cases ? all.cases : 1), all.checked, all.failures,
           all.skipped);
    assert_int_equal(all.failures, 0);
}

static void suite_draft2020_12_compiled_schemas_are_exact(void **state) {
    (void)state;
    run_draft("json-schema-test-suite/draft2020-12", DI_GRAMMAR_DRAFT_2020_12);
}

static void suite_draft7_compiled_schemas_are_exact(void **state) {
    (void)state;
    run_draft("json-schema-test-suite/draft7", DI_GRAMMAR_DRAFT_7);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(suite_draft2020_12_compiled_schemas_are_exact),
        cmocka_unit_test(suite_draft7_compiled_schemas_are_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
