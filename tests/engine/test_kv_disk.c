/* The disk KV tier end to end on the default model: an engine restarted on
 * the same directory finds the prompt's blocks again and produces the same
 * tokens as an engine without the tier; blocks evicted from a small RAM pool
 * come back from disk; damaged records and another KV flavor are never
 * used. The oracle is the engine without any cache (batch-invariant
 * kernels make a cached block bit-identical to a recomputed one). */
#include "test_util.h"

#include "deepinfer.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Prompts of ~5-6 blocks: enough for several records, cheap to prefill. */
/* SMALL_POOL_TOKENS: a pool that holds one prompt but not two, so the
 * second evicts part of the first. */
#ifdef DI_SANITIZE_BUILD
#define N_GEN 3
#define N_SENTENCES 4
#define SMALL_POOL_TOKENS 96
#else
#define N_GEN 4
#define N_SENTENCES 6
#define SMALL_POOL_TOKENS 128
#endif

typedef struct trace {
    int32_t tokens[64];
    int n;
    di_request_stats stats;
} trace;

static int record(const di_event *ev) {
    trace *t = ev->user;
    if (ev->token >= 0 && t->n < 64) t->tokens[t->n++] = ev->token;
    if (ev->finish) t->stats = ev->stats;
    return 0;
}

static char g_dir[256];

static void prompt_text(char *buf, size_t n, int variant) {
    size_t at = 0;
    for (int i = 0; i < N_SENTENCES && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "Sentence %d of story %d: the river ran past the old mill. ", i,
                               variant);
}

static di_engine *open_engine(const char *dir, int kv_tokens, bool kv_f32) {
    const char *model = di_test_default_model();
    if (!model) return NULL;
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = 2;
    p.n_ctx = 512;
    p.kv_tokens = kv_tokens;
    p.kv_disk_dir = dir;
    p.kv_f32 = kv_f32;
    p.check_integrity = true;
    di_engine *e = NULL;
    di_error err;
    di_status s = di_engine_create(&p, &e, &err);
    if (s) fprintf(stderr, "engine: %s\n", err.msg);
    assert_int_equal(s, DI_OK);
    return e;
}

static void generate(di_engine *e, const char *prompt, trace *t) {
    memset(t, 0, sizeof *t);
    di_request r;
    memset(&r, 0, sizeof r);
    r.text = prompt;
    r.max_tokens = N_GEN;
    r.ignore_eos = true;
    r.sampling = di_sampling_params_default();
    r.sampling.temperature = 0;
    r.on_event = record;
    r.user = t;
    int64_t id;
    di_error err;
    assert_int_equal(di_engine_submit(e, &r, &id, &err), DI_OK);
    assert_int_equal(di_engine_run(e, &err), DI_OK);
    assert_int_equal(t->n, N_GEN);
    assert_int_equal(di_engine_check_integrity(e, &err), DI_OK);
}

static int for_each_record(const char *dir, void (*fn)(const char *path)) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.' || !strstr(de->d_name, ".kvr")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (fn) fn(p);
        n++;
    }
    if (d) closedir(d);
    return n;
}

static void flip_a_byte(const char *path) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, -7, SEEK_END);
    int c = fgetc(f);
    fseek(f, -7, SEEK_END);
    fputc(c ^ 0x20, f);
    fclose(f);
}

static void remove_file(const char *path) { unlink(path); }

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/di_test_kv_disk_%ld_XXXXXX", (long)getpid());
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    for_each_record(g_dir, remove_file);
    char lock[300];
    snprintf(lock, sizeof lock, "%s/.lock", g_dir);
    unlink(lock);
    rmdir(g_dir);
    return 0;
}

/* The reference: no prefix cache at all. */
static void reference(const char *prompt, trace *t) {
    const char *model = di_test_default_model();
    di_engine_params p = di_engine_params_default();
    p.model_path = model;
    p.n_threads = 2;
    p.n_ctx = 512;
    p.kv_tokens = 1024;
    p.no_prefix_cache = true;
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_OK);
    generate(e, prompt, t);
    di_engine_free(e);
}

static void a_restarted_engine_reuses_the_prompt_from_disk(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    char prompt[2048];
    prompt_text(prompt, sizeof prompt, 1);
    trace ref, first, again;
    reference(prompt, &ref);
    di_engine *e = open_engine(g_dir, 1024, false);
    generate(e, prompt, &first);
    assert_int_equal(first.stats.n_cached, 0);
    di_engine_free(e); /* flushes the RAM cache to disk */
    int n_records = for_each_record(g_dir, NULL);
    assert_true(n_records >= first.stats.n_prompt / 16);

    e = open_engine(g_dir, 1024, false); /* the restart */
    generate(e, prompt, &again);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    di_engine_free(e);
    /* Every full block before the last prompt token came from disk. */
    int32_t want = (first.stats.n_prompt - 1) / 16 * 16;
    assert_int_equal(again.stats.n_cached, want);
    assert_int_equal(st.n_disk_hit_tokens, want);
    assert_int_equal(st.kv_disk_rejected, 0);
    assert_memory_equal(first.tokens, ref.tokens, sizeof ref.tokens);
    assert_memory_equal(again.tokens, ref.tokens, sizeof ref.tokens);
}

static void blocks_evicted_from_ram_come_back_from_disk(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    char p1[2048], p2[2048];
    prompt_text(p1, sizeof p1, 2);
    prompt_text(p2, sizeof p2, 3);
    trace ref, t;
    reference(p1, &ref);
    /* A pool barely larger than one request: p2 evicts p1's blocks. */
    di_engine *e = open_engine(g_dir, SMALL_POOL_TOKENS, false);
    generate(e, p1, &t);
    generate(e, p2, &t);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    assert_true(st.kv_disk_writes > 0);
    generate(e, p1, &t);
    di_engine_get_stats(e, &st);
    assert_true(t.stats.n_cached > 0);
    assert_true(st.n_disk_hit_tokens > 0);
    assert_memory_equal(t.tokens, ref.tokens, sizeof ref.tokens);
    di_engine_free(e);
}

static void damaged_records_and_another_flavor_are_never_used(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    char prompt[2048];
    prompt_text(prompt, sizeof prompt, 4);
    trace ref, t;
    reference(prompt, &ref);
    di_engine *e = open_engine(g_dir, 1024, false);
    generate(e, prompt, &t);
    di_engine_free(e);
    /* Another KV dtype is another flavor: its engine finds nothing. */
    e = open_engine(g_dir, 1024, true);
    generate(e, prompt, &t);
    assert_int_equal(t.stats.n_cached, 0);
    di_engine_free(e);
    /* Every record damaged: refused, output still the reference. */
    assert_true(for_each_record(g_dir, flip_a_byte) > 0);
    e = open_engine(g_dir, 1024, false);
    generate(e, prompt, &t);
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    assert_int_equal(t.stats.n_cached, 0);
    assert_true(st.kv_disk_rejected >= 1);
    assert_memory_equal(t.tokens, ref.tokens, sizeof ref.tokens);
    di_engine_free(e);
}

static void bad_disk_parameters_are_refused(void **state) {
    (void)state;
    if (!di_test_default_model()) skip();
    di_engine_params p = di_engine_params_default();
    p.model_path = di_test_default_model();
    p.kv_disk_dir = "/dev/null/x";
    di_engine *e = NULL;
    di_error err;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_ERR_IO);
    p.kv_disk_dir = g_dir;
    p.no_prefix_cache = true;
    assert_int_equal(di_engine_create(&p, &e, &err), DI_ERR_INVALID_ARG);
    assert_null(e);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_restarted_engine_reuses_the_prompt_from_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(blocks_evicted_from_ram_come_back_from_disk, setup, teardown),
        cmocka_unit_test_setup_teardown(damaged_records_and_another_flavor_are_never_used, setup, teardown),
        cmocka_unit_test_setup_teardown(bad_disk_parameters_are_refused, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
