/* KV records: keys, checksum, write and parse (contract in kv_record.h),
 * and the model identity that versions them. */
#include "kv/kv_record.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'D', 'I', 'K', 'V', 'R', 'E', 'C', 0};

/* Offsets of the header fields (see the table in kv_record.h). */
#define OFF_VERSION 8
#define OFF_HEADER_BYTES 12
#define OFF_MODEL 16
#define OFF_KEY 32
#define OFF_NTOK 48
#define OFF_BLOCK 52
#define OFF_PAYLOAD 56
#define OFF_CHECKSUM 64

/* Files above this are identified by samples, not read whole: a DeepSeek
 * checkpoint is hundreds of GB. */
#define FULL_HASH_MAX_BYTES (256ull << 20)
#define N_SAMPLES 64
#define SAMPLE_BYTES (64u << 10)

static uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    h *= UINT64_C(0xc4ceb9fe1a85ec53);
    h ^= h >> 33;
    return h;
}

di_kv_key di_kv_key_root(void) {
    di_kv_key k = {UINT64_C(0x243f6a8885a308d3), UINT64_C(0x13198a2e03707344)};
    return k;
}

/* Two multiply-xorshift chains with different odd constants, each finished
 * with fmix64; quality affects only how often a lookup misses (the record's
 * tokens are compared on every hit). */
di_kv_key di_kv_key_next(di_kv_key parent, const int32_t *tokens, int32_t n) {
    uint64_t a = parent.lo ^ UINT64_C(0x9e3779b97f4a7c15);
    uint64_t b = parent.hi ^ UINT64_C(0xd1b54a32d192ed03);
    for (int32_t i = 0; i < n; i++) {
        uint64_t t = (uint64_t)(uint32_t)tokens[i];
        a = (a ^ t) * UINT64_C(0xbf58476d1ce4e5b9);
        a ^= a >> 29;
        b = (b ^ (t + 0x51)) * UINT64_C(0x94d049bb133111eb);
        b ^= b >> 31;
    }
    di_kv_key k = {mix64(a), mix64(b ^ (uint64_t)n)};
    return k;
}

uint64_t di_kv_hash_bytes(uint64_t seed, const void *data, size_t n) {
    const uint8_t *p = data;
    uint64_t h = seed ^ UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)n;
    size_t i = 0;
    /* Four independent lanes so the multiply latency overlaps (~GB/s). */
    uint64_t l0 = h, l1 = h + 1, l2 = h + 2, l3 = h + 3;
    for (; i + 32 <= n; i += 32) {
        uint64_t w[4];
        memcpy(w, p + i, 32);
        l0 = (l0 ^ w[0]) * UINT64_C(0xbf58476d1ce4e5b9); l0 ^= l0 >> 31;
        l1 = (l1 ^ w[1]) * UINT64_C(0x94d049bb133111eb); l1 ^= l1 >> 31;
        l2 = (l2 ^ w[2]) * UINT64_C(0xbf58476d1ce4e5b9); l2 ^= l2 >> 29;
        l3 = (l3 ^ w[3]) * UINT64_C(0x94d049bb133111eb); l3 ^= l3 >> 29;
    }
    h = mix64(l0) ^ mix64(l1 + UINT64_C(0x632be59bd9b4e019)) ^ mix64(l2 ^ UINT64_C(0x85ebca77c2b2ae63)) ^
        mix64(l3 * 3 + 1);
    for (; i < n; i++) {
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    }
    return mix64(h);
}

size_t di_kv_record_size(int32_t n_prefix_tokens, uint64_t payload_bytes) {
    if (n_prefix_tokens < 0) return 0;
    uint64_t t = (uint64_t)n_prefix_tokens * 4u;
    uint64_t total = DI_KV_RECORD_HEADER_BYTES + t;
    if (payload_bytes > (uint64_t)SIZE_MAX - total) return 0;
    return (size_t)(total + payload_bytes);
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Checksum of a whole record, computed as if its checksum field were zero. */
static uint64_t record_checksum(const uint8_t *buf, size_t n) {
    uint8_t head[DI_KV_RECORD_HEADER_BYTES];
    memcpy(head, buf, sizeof head);
    put64(head + OFF_CHECKSUM, 0);
    uint64_t h = di_kv_hash_bytes(UINT64_C(0x6b76726563), head, sizeof head);
    return di_kv_hash_bytes(h, buf + sizeof head, n - sizeof head);
}

void di_kv_record_write(uint8_t *out, di_kv_key model_id, const int32_t *tokens,
                        int32_t n_prefix_tokens, int32_t block_size, const void *payload,
                        uint64_t payload_bytes) {
    size_t n = di_kv_record_size(n_prefix_tokens, payload_bytes);
    size_t tok_bytes = (size_t)n_prefix_tokens * 4u;
    memmove(out + DI_KV_RECORD_HEADER_BYTES + tok_bytes, payload, (size_t)payload_bytes);
    memcpy(out + DI_KV_RECORD_HEADER_BYTES, tokens, tok_bytes);
    memcpy(out, MAGIC, 8);
    put32(out + OFF_VERSION, DI_KV_RECORD_VERSION);
    put32(out + OFF_HEADER_BYTES, DI_KV_RECORD_HEADER_BYTES);
    put64(out + OFF_MODEL, model_id.lo);
    put64(out + OFF_MODEL + 8, model_id.hi);
    di_kv_key key = di_kv_key_next(di_kv_key_root(), tokens, n_prefix_tokens);
    put64(out + OFF_KEY, key.lo);
    put64(out + OFF_KEY + 8, key.hi);
    put32(out + OFF_NTOK, (uint32_t)n_prefix_tokens);
    put32(out + OFF_BLOCK, (uint32_t)block_size);
    put64(out + OFF_PAYLOAD, payload_bytes);
    put64(out + OFF_CHECKSUM, 0);
    put64(out + OFF_CHECKSUM, record_checksum(out, n));
}

size_t di_kv_record_peek_size(const uint8_t *buf, size_t n) {
    if (n < DI_KV_RECORD_HEADER_BYTES || memcmp(buf, MAGIC, 8) != 0) return 0;
    uint32_t ntok = get32(buf + OFF_NTOK);
    if (ntok > (uint32_t)INT32_MAX) return 0;
    return di_kv_record_size((int32_t)ntok, get64(buf + OFF_PAYLOAD));
}

di_status di_kv_record_parse(const uint8_t *buf, size_t n, di_kv_key model_id, int32_t block_size,
                             uint64_t payload_bytes, di_kv_record_view *view, di_error *err) {
    memset(view, 0, sizeof *view);
    if (n < DI_KV_RECORD_HEADER_BYTES)
        return di_error_set(err, DI_ERR_FORMAT, "kv record: %zu bytes, shorter than its header", n);
    if (memcmp(buf, MAGIC, 8) != 0) return di_error_set(err, DI_ERR_FORMAT, "kv record: bad magic");
    uint32_t version = get32(buf + OFF_VERSION);
    if (version != DI_KV_RECORD_VERSION || get32(buf + OFF_HEADER_BYTES) != DI_KV_RECORD_HEADER_BYTES)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "kv record: version %u, expected %u", version,
                            DI_KV_RECORD_VERSION);
    uint32_t ntok = get32(buf + OFF_NTOK), bs = get32(buf + OFF_BLOCK);
    uint64_t pay = get64(buf + OFF_PAYLOAD);
    size_t want = ntok <= (uint32_t)INT32_MAX ? di_kv_record_size((int32_t)ntok, pay) : 0;
    if (want == 0 || want != n)
        return di_error_set(err, DI_ERR_FORMAT, "kv record: %zu bytes, its header says %zu", n, want);
    if (record_checksum(buf, n) != get64(buf + OFF_CHECKSUM))
        return di_error_set(err, DI_ERR_FORMAT, "kv record: checksum mismatch");
    /* Only now is the header known intact: the rest are questions of
     * whether this record is ours, not of corruption. */
    view->model_id.lo = get64(buf + OFF_MODEL);
    view->model_id.hi = get64(buf + OFF_MODEL + 8);
    if (view->model_id.lo != model_id.lo || view->model_id.hi != model_id.hi)
        return di_error_set(err, DI_ERR_UNSUPPORTED, "kv record: made by another model or numerics");
    if ((int32_t)bs != block_size || pay != payload_bytes)
        return di_error_set(err, DI_ERR_UNSUPPORTED,
                            "kv record: block of %u tokens / %llu bytes, expected %d / %llu", bs,
                            (unsigned long long)pay, (int)block_size,
                            (unsigned long long)payload_bytes);
    if (ntok == 0 || ntok % bs != 0)
        return di_error_set(err, DI_ERR_FORMAT, "kv record: %u tokens is not whole blocks of %u", ntok, bs);
    view->key.lo = get64(buf + OFF_KEY);
    view->key.hi = get64(buf + OFF_KEY + 8);
    view->n_prefix_tokens = (int32_t)ntok;
    view->block_size = (int32_t)bs;
    view->tokens = (const int32_t *)(const void *)(buf + DI_KV_RECORD_HEADER_BYTES);
    view->payload = buf + DI_KV_RECORD_HEADER_BYTES + (size_t)ntok * 4u;
    view->payload_bytes = pay;
    di_kv_key k = di_kv_key_next(di_kv_key_root(), view->tokens, view->n_prefix_tokens);
    if (k.lo != view->key.lo || k.hi != view->key.hi)
        return di_error_set(err, DI_ERR_FORMAT, "kv record: key does not match its tokens");
    return DI_OK;
}

/* ---- model identity ------------------------------------------------------ */

/* Hash of one regular file: whole when small, else size + samples. */
static di_status hash_file(const char *path, uint64_t *h, di_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return di_error_set(err, DI_ERR_IO, "kv model id: %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return di_error_set(err, DI_ERR_IO, "kv model id: %s is not a regular file", path);
    }
    uint64_t size = (uint64_t)st.st_size;
    *h = di_kv_hash_bytes(*h, &size, sizeof size);
    size_t cap = 1u << 20;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return di_error_set(err, DI_ERR_NOMEM, "kv model id: out of memory");
    }
    di_status s = DI_OK;
    if (size <= FULL_HASH_MAX_BYTES) {
        for (;;) {
            ssize_t got = read(fd, buf, cap);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) { s = di_error_set(err, DI_ERR_IO, "kv model id: %s: %s", path, strerror(errno)); break; }
            if (got == 0) break;
            *h = di_kv_hash_bytes(*h, buf, (size_t)got);
        }
    } else {
        for (int i = 0; i < N_SAMPLES && !s; i++) {
            uint64_t off = (size - SAMPLE_BYTES) / (N_SAMPLES - 1) * (uint64_t)i;
            ssize_t got = pread(fd, buf, SAMPLE_BYTES, (off_t)off);
            if (got < 0) s = di_error_set(err, DI_ERR_IO, "kv model id: %s: %s", path, strerror(errno));
            else *h = di_kv_hash_bytes(*h, buf, (size_t)got);
        }
    }
    free(buf);
    close(fd);
    return s;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A checkpoint folder: every regular file in name order. */
static di_status hash_dir(const char *path, uint64_t *h, di_error *err) {
    DIR *d = opendir(path);
    if (!d) return di_error_set(err, DI_ERR_IO, "kv model id: %s: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0, cap = 0;
    di_status s = DI_OK;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 32;
            char **nn = realloc(names, nc * sizeof *nn);
            if (!nn) { s = di_error_set(err, DI_ERR_NOMEM, "kv model id: out of memory"); break; }
            names = nn;
            cap = nc;
        }
        if (!(names[n] = strdup(de->d_name))) { s = di_error_set(err, DI_ERR_NOMEM, "kv model id: out of memory"); break; }
        n++;
    }
    closedir(d);
    if (!s) qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n && !s; i++) {
        char full[4096];
        struct stat st;
        if (snprintf(full, sizeof full, "%s/%s", path, names[i]) >= (int)sizeof full) continue;
        if (stat(full, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        *h = di_kv_hash_bytes(*h, names[i], strlen(names[i]));
        s = hash_file(full, h, err);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return s;
}

di_status di_kv_model_id(const char *path, const char *flavor, di_kv_key *out, di_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return di_error_set(err, DI_ERR_IO, "kv model id: %s: %s", path, strerror(errno));
    uint64_t a = UINT64_C(0x6d6f64656c), b = UINT64_C(0x666c61766f72);
    di_status s = S_ISDIR(st.st_mode) ? hash_dir(path, &a, err) : hash_file(path, &a, err);
    if (s) return s;
    b = di_kv_hash_bytes(a, flavor, strlen(flavor));
    out->lo = a;
    out->hi = b;
    return DI_OK;
}
