/* kv/kv_record + kv/disk_tier: records round-trip; a flipped byte, a
 * truncated file, a record of another model, version or geometry and a
 * record filed under another prefix are refused (and removed); the size cap
 * evicts the least recently used; a failing write (file size limit: the
 * "disk full" case) turns writing off and leaves reads working; two tiers
 * on one directory share records. Hostile files are also kept in
 * tests/data/malformed/kv_records/ (see its README). */
#include "test_util.h"

#include "kv/disk_tier.h"
#include "kv/kv_record.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

enum { BS = 4, PAYLOAD = 256 };

static const di_kv_key MODEL_A = {0x1111, 0x2222}, MODEL_B = {0x3333, 0x4444};

static void make_dir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/di_test_disk_tier_%ld_XXXXXX", (long)getpid());
    assert_non_null(mkdtemp(buf));
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *de; (de = readdir(d));) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    di_test_rng r = {0x9e3779b97f4a7c15ull ^ seed};
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)di_test_rand(&r);
}

static int count_records(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        if (strstr(de->d_name, ".kvr") && de->d_name[0] != '.') n++;
    if (d) closedir(d);
    return n;
}

static void record_roundtrip_and_every_field_is_checked(void **state) {
    (void)state;
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint8_t payload[PAYLOAD];
    fill(payload, sizeof payload, 1);
    size_t n = di_kv_record_size(8, PAYLOAD);
    assert_int_equal(n, DI_KV_RECORD_HEADER_BYTES + 32 + PAYLOAD);
    uint8_t *rec = malloc(n);
    di_kv_record_write(rec, MODEL_A, toks, 8, BS, payload, PAYLOAD);
    assert_int_equal(di_kv_record_peek_size(rec, n), n);
    di_kv_record_view v;
    di_error err;
    assert_int_equal(di_kv_record_parse(rec, n, MODEL_A, BS, PAYLOAD, &v, &err), DI_OK);
    assert_int_equal(v.n_prefix_tokens, 8);
    assert_memory_equal(v.tokens, toks, sizeof toks);
    assert_memory_equal(v.payload, payload, PAYLOAD);
    /* Another model, block size or payload size: refused as foreign. */
    assert_int_equal(di_kv_record_parse(rec, n, MODEL_B, BS, PAYLOAD, &v, &err), DI_ERR_UNSUPPORTED);
    assert_int_equal(di_kv_record_parse(rec, n, MODEL_A, 8, PAYLOAD, &v, &err), DI_ERR_UNSUPPORTED);
    assert_int_equal(di_kv_record_parse(rec, n, MODEL_A, BS, PAYLOAD + 1, &v, &err), DI_ERR_UNSUPPORTED);
    /* Every single flipped bit anywhere is caught. */
    for (size_t i = 0; i < n; i += 7) {
        rec[i] ^= 0x10;
        assert_int_not_equal(di_kv_record_parse(rec, n, MODEL_A, BS, PAYLOAD, &v, &err), DI_OK);
        rec[i] ^= 0x10;
    }
    /* Every truncation, and trailing garbage. */
    for (size_t k = 0; k < n; k += 13)
        assert_int_equal(di_kv_record_parse(rec, k, MODEL_A, BS, PAYLOAD, &v, &err), DI_ERR_FORMAT);
    uint8_t *longer = malloc(n + 1);
    memcpy(longer, rec, n);
    longer[n] = 0;
    assert_int_equal(di_kv_record_parse(longer, n + 1, MODEL_A, BS, PAYLOAD, &v, &err), DI_ERR_FORMAT);
    free(longer);
    assert_int_equal(di_kv_record_parse(rec, n, MODEL_A, BS, PAYLOAD, &v, &err), DI_OK);
    free(rec);
}

static void keys_chain_and_differ(void **state) {
    (void)state;
    int32_t a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {1, 2, 3, 4, 5, 6, 7, 9};
    di_kv_key r = di_kv_key_root();
    di_kv_key ka = di_kv_key_next(r, a, 8), kb = di_kv_key_next(r, b, 8);
    assert_false(ka.lo == kb.lo && ka.hi == kb.hi);
    di_kv_key k4 = di_kv_key_next(r, a, 4), k8 = di_kv_key_next(k4, a + 4, 4);
    assert_false(k4.lo == ka.lo && k4.hi == ka.hi);
    (void)k8;
}

static void put_get_and_damaged_files_are_refused(void **state) {
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    di_kv_disk *d;
    di_error err;
    assert_int_equal(di_kv_disk_open(dir, 1u << 20, MODEL_A, BS, PAYLOAD, &d, &err), DI_OK);
    int32_t p1[4] = {10, 11, 12, 13}, p2[8] = {10, 11, 12, 13, 20, 21, 22, 23};
    uint8_t pay1[PAYLOAD], pay2[PAYLOAD];
    fill(pay1, PAYLOAD, 2);
    fill(pay2, PAYLOAD, 3);
    const uint8_t *got;
    assert_false(di_kv_disk_get(d, p1, 4, &got));
    assert_int_equal(di_kv_disk_put(d, p1, 4, pay1, &err), DI_OK);
    assert_int_equal(di_kv_disk_put(d, p2, 8, pay2, &err), DI_OK);
    assert_int_equal(di_kv_disk_put(d, p2, 8, pay2, &err), DI_OK); /* already there: left alone */
    assert_true(di_kv_disk_get(d, p1, 4, &got));
    assert_memory_equal(got, pay1, PAYLOAD);
    assert_true(di_kv_disk_get(d, p2, 8, &got));
    assert_memory_equal(got, pay2, PAYLOAD);
    /* Not whole blocks: refused. */
    assert_int_equal(di_kv_disk_put(d, p2, 6, pay2, &err), DI_ERR_INVALID_ARG);

    /* A flipped byte in the payload. */
    char path[4096];
    di_kv_disk_record_path(d, p2, 8, path, sizeof path);
    size_t n;
    char *bytes = di_test_read_file(path, &n);
    assert_non_null(bytes);
    bytes[n - 5] ^= 1;
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
    assert_false(di_kv_disk_get(d, p2, 8, &got));
    assert_int_equal(access(path, F_OK), -1); /* removed */
    /* Truncated. */
    bytes[n - 5] ^= 1;
    f = fopen(path, "wb");
    fwrite(bytes, 1, n - 100, f);
    fclose(f);
    assert_false(di_kv_disk_get(d, p2, 8, &got));
    /* The record of p1 filed under p2's name (another prefix). */
    char path1[4096];
    di_kv_disk_record_path(d, p1, 4, path1, sizeof path1);
    assert_int_equal(link(path1, path), 0);
    assert_false(di_kv_disk_get(d, p2, 8, &got));
    free(bytes);

    /* A record of model B under model A's name: foreign. */
    di_kv_disk *db;
    assert_int_equal(di_kv_disk_open(dir, 1u << 20, MODEL_B, BS, PAYLOAD, &db, &err), DI_OK);
    assert_int_equal(di_kv_disk_put(db, p2, 8, pay2, &err), DI_OK);
    char pathb[4096];
    di_kv_disk_record_path(db, p2, 8, pathb, sizeof pathb);
    assert_int_equal(rename(pathb, path), 0);
    assert_false(di_kv_disk_get(d, p2, 8, &got));
    /* A record of another block geometry (same model id) is refused too. */
    di_kv_disk *dg;
    assert_int_equal(di_kv_disk_open(dir, 1u << 20, MODEL_A, BS, PAYLOAD * 2, &dg, &err), DI_OK);
    assert_false(di_kv_disk_get(dg, p1, 4, &got));
    di_kv_disk_stats st;
    di_kv_disk_get_stats(d, &st);
    assert_int_equal(st.n_rejected, 4);
    assert_int_equal(st.n_hits, 2);
    di_kv_disk_get_stats(dg, &st);
    assert_int_equal(st.n_rejected, 1);
    /* p1 is still good for model A. */
    di_kv_disk_free(dg);
    assert_int_equal(di_kv_disk_put(d, p1, 4, pay1, &err), DI_OK);
    assert_true(di_kv_disk_get(d, p1, 4, &got));
    di_kv_disk_free(db);
    di_kv_disk_free(d);
    remove_dir(dir);
}

static void a_second_tier_on_the_directory_sees_the_records(void **state) {
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    di_kv_disk *w, *r;
    di_error err;
    assert_int_equal(di_kv_disk_open(dir, 1u << 20, MODEL_A, BS, PAYLOAD, &w, &err), DI_OK);
    assert_int_equal(di_kv_disk_open(dir, 1u << 20, MODEL_A, BS, PAYLOAD, &r, &err), DI_OK);
    int32_t p[4] = {7, 7, 7, 7};
    uint8_t pay[PAYLOAD];
    fill(pay, PAYLOAD, 4);
    assert_int_equal(di_kv_disk_put(w, p, 4, pay, &err), DI_OK);
    const uint8_t *got;
    assert_true(di_kv_disk_get(r, p, 4, &got));
    assert_memory_equal(got, pay, PAYLOAD);
    di_kv_disk_free(w);
    di_kv_disk_free(r);
    /* Reopened (a restart): the record is still found. */
    assert_int_equal(di_kv_disk_open(dir, 1u << 20, MODEL_A, BS, PAYLOAD, &r, &err), DI_OK);
    assert_true(di_kv_disk_get(r, p, 4, &got));
    di_kv_disk_stats st;
    di_kv_disk_get_stats(r, &st);
    assert_true(st.bytes_used >= di_kv_record_size(4, PAYLOAD));
    di_kv_disk_free(r);
    remove_dir(dir);
}

static void the_cap_evicts_the_least_recently_used(void **state) {
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    size_t rec = di_kv_record_size(4, PAYLOAD);
    di_kv_disk *d;
    di_error err;
    /* Room for 5 records: the sixth write sweeps down to 90% = 4. */
    assert_int_equal(di_kv_disk_open(dir, 5 * rec + 10, MODEL_A, BS, PAYLOAD, &d, &err), DI_OK);
    uint8_t pay[PAYLOAD];
    fill(pay, PAYLOAD, 5);
    int32_t p[6][4];
    for (int i = 0; i < 6; i++) {
        for (int j = 0; j < 4; j++) p[i][j] = 100 * i + j;
        assert_int_equal(di_kv_disk_put(d, p[i], 4, pay, &err), DI_OK);
        /* Distinct mtimes; record 0 is read (touched) so it is kept. */
        struct timespec ts[2] = {{0, UTIME_OMIT}, {1000000 + i, 0}};
        char path[4096];
        di_kv_disk_record_path(d, p[i], 4, path, sizeof path);
        if (i < 5) assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
        if (i == 4) {
            const uint8_t *got;
            assert_true(di_kv_disk_get(d, p[0], 4, &got));
        }
    }
    di_kv_disk_stats st;
    di_kv_disk_get_stats(d, &st);
    assert_true(st.n_removed >= 1);
    assert_true(st.bytes_used <= 5 * rec + 10);
    assert_true(count_records(dir) <= 5);
    assert_true(di_kv_disk_has(d, p[0], 4));  /* recently read */
    assert_false(di_kv_disk_has(d, p[1], 4)); /* oldest untouched */
    assert_true(di_kv_disk_has(d, p[5], 4));  /* just written */
    di_kv_disk_free(d);
    remove_dir(dir);
}

static void a_failed_write_degrades_to_ram_only(void **state) {
    (void)state;
    char dir[256];
    make_dir(dir, sizeof dir);
    di_kv_disk *d;
    di_error err;
    assert_int_equal(di_kv_disk_open(dir, 1u << 20, MODEL_A, BS, PAYLOAD, &d, &err), DI_OK);
    int32_t p[4] = {1, 2, 3, 4}, q[4] = {5, 6, 7, 8};
    uint8_t pay[PAYLOAD];
    fill(pay, PAYLOAD, 6);
    assert_int_equal(di_kv_disk_put(d, p, 4, pay, &err), DI_OK);
    /* A file size limit below one record: every write fails (EFBIG), as on
     * a full disk. The test ignores SIGXFSZ so the write returns an error. */
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 100;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    di_status s = di_kv_disk_put(d, q, 4, pay, &err);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    assert_int_equal(s, DI_ERR_IO);
    assert_non_null(strstr(err.msg, "RAM only"));
    di_kv_disk_stats st;
    di_kv_disk_get_stats(d, &st);
    assert_true(st.writes_disabled);
    assert_int_equal(st.n_write_errors, 1);
    assert_false(di_kv_disk_has(d, q, 4));
    /* No temp file left behind, later puts are quiet no-ops, reads work. */
    assert_int_equal(di_kv_disk_put(d, q, 4, pay, &err), DI_OK);
    assert_false(di_kv_disk_has(d, q, 4));
    const uint8_t *got;
    assert_true(di_kv_disk_get(d, p, 4, &got));
    DIR *dh = opendir(dir);
    for (struct dirent *de; (de = readdir(dh));) assert_null(strstr(de->d_name, ".tmp-"));
    closedir(dh);
    di_kv_disk_free(d);
    remove_dir(dir);
}

static void bad_arguments_are_refused(void **state) {
    (void)state;
    di_kv_disk *d = NULL;
    di_error err;
    assert_int_equal(di_kv_disk_open("", 1, MODEL_A, BS, PAYLOAD, &d, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_kv_disk_open("/tmp", 0, MODEL_A, BS, PAYLOAD, &d, &err), DI_ERR_INVALID_ARG);
    assert_int_equal(di_kv_disk_open("/proc/self/nonexistent/x", 1, MODEL_A, BS, PAYLOAD, &d, &err), DI_ERR_IO);
    assert_int_equal(di_kv_disk_open("/dev/null", 1, MODEL_A, BS, PAYLOAD, &d, &err), DI_ERR_IO);
    assert_null(d);
    di_kv_key id;
    assert_int_equal(di_kv_model_id("/nonexistent/model.gguf", "x", &id, &err), DI_ERR_IO);
}

static void committed_malformed_records_are_refused(void **state) {
    (void)state;
    /* Each file in the corpus is a record of 2 blocks of 4 tokens with a
     * 64-byte payload for model id (1, 2), damaged as its name says. */
    char dir[4096];
    di_test_path(dir, sizeof dir, "tests/data/malformed/kv_records");
    DIR *dh = opendir(dir);
    assert_non_null(dh);
    int n_files = 0;
    di_kv_key model = {1, 2};
    for (struct dirent *de; (de = readdir(dh));) {
        if (!strstr(de->d_name, ".kvr")) continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        size_t n;
        char *bytes = di_test_read_file(p, &n);
        assert_non_null(bytes);
        uint8_t *al = malloc(n ? n : 1); /* 4-byte aligned copy */
        memcpy(al, bytes, n);
        di_kv_record_view v;
        di_error err;
        di_status s = di_kv_record_parse(al, n, model, 4, 64, &v, &err);
        if (!strncmp(de->d_name, "ok_", 3)) assert_int_equal(s, DI_OK);
        else assert_int_not_equal(s, DI_OK);
        free(al);
        free(bytes);
        n_files++;
    }
    closedir(dh);
    assert_true(n_files >= 6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(record_roundtrip_and_every_field_is_checked),
        cmocka_unit_test(keys_chain_and_differ),
        cmocka_unit_test(put_get_and_damaged_files_are_refused),
        cmocka_unit_test(a_second_tier_on_the_directory_sees_the_records),
        cmocka_unit_test(the_cap_evicts_the_least_recently_used),
        cmocka_unit_test(a_failed_write_degrades_to_ram_only),
        cmocka_unit_test(bad_arguments_are_refused),
        cmocka_unit_test(committed_malformed_records_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
