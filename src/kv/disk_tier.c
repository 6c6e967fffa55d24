/* Disk tier: one record file per cached block (contract in disk_tier.h). */
#include "kv/disk_tier.h"

#include "base/alloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECORD_SUFFIX ".kvr"
/* A sweep brings the directory down to this share of the cap, so that not
 * every write pays for a directory listing. */
#define SWEEP_TARGET_NUM 9
#define SWEEP_TARGET_DEN 10

struct di_kv_disk {
    char *dir;
    uint64_t max_bytes;
    di_kv_key model_id;
    int32_t block_size;
    uint64_t payload_bytes;
    uint8_t *buf;        /* one record being read or written */
    size_t buf_cap;
    uint64_t tmp_counter;
    di_kv_disk_stats stats;
};

typedef struct file_entry {
    char *name;
    uint64_t bytes;
    int64_t mtime_ns;
} file_entry;

static bool is_record_name(const char *name) {
    size_t n = strlen(name), k = strlen(RECORD_SUFFIX);
    return n > k && name[0] != '.' && strcmp(name + n - k, RECORD_SUFFIX) == 0;
}

static int cmp_mtime(const void *a, const void *b) {
    const file_entry *x = a, *y = b;
    return (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
}

/* Lists the record files of the directory (every model's: the cap is for
 * the directory). *out is malloc'd; names too. */
static di_status list_records(const di_kv_disk *d, file_entry **out, size_t *n_out, uint64_t *total,
                              di_error *err) {
    *out = NULL;
    *n_out = 0;
    *total = 0;
    DIR *dh = opendir(d->dir);
    if (!dh) return di_error_set(err, DI_ERR_IO, "kv disk: %s: %s", d->dir, strerror(errno));
    file_entry *v = NULL;
    size_t n = 0, cap = 0;
    di_status s = DI_OK;
    int dfd = dirfd(dh);
    for (struct dirent *de; (de = readdir(dh));) {
        if (!is_record_name(de->d_name)) continue;
        struct stat st;
        if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            file_entry *nv = realloc(v, nc * sizeof *nv);
            if (!nv) { s = di_error_set(err, DI_ERR_NOMEM, "kv disk: out of memory"); break; }
            v = nv;
            cap = nc;
        }
        v[n].name = strdup(de->d_name);
        if (!v[n].name) { s = di_error_set(err, DI_ERR_NOMEM, "kv disk: out of memory"); break; }
        v[n].bytes = (uint64_t)st.st_size;
        v[n].mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        *total += v[n].bytes;
        n++;
    }
    closedir(dh);
    if (s) {
        for (size_t i = 0; i < n; i++) free(v[i].name);
        free(v);
        return s;
    }
    *out = v;
    *n_out = n;
    return DI_OK;
}

static void free_entries(file_entry *v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i].name);
    free(v);
}

/* Removes least recently used records until the directory plus `incoming`
 * bytes fits SWEEP_TARGET of the cap. Under DIR/.lock so that two engines
 * sweeping at once do not both remove the same share. */
static void sweep(di_kv_disk *d, uint64_t incoming) {
    char lock_path[4096];
    snprintf(lock_path, sizeof lock_path, "%s/.lock", d->dir);
    int lfd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lfd >= 0) (void)flock(lfd, LOCK_EX);
    file_entry *v;
    size_t n;
    uint64_t total;
    if (list_records(d, &v, &n, &total, NULL) == DI_OK) {
        uint64_t target = d->max_bytes / SWEEP_TARGET_DEN * SWEEP_TARGET_NUM;
        qsort(v, n, sizeof *v, cmp_mtime);
        for (size_t i = 0; i < n && total + incoming > target; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", d->dir, v[i].name);
            if (unlink(path) == 0) {
                total -= v[i].bytes;
                d->stats.n_removed++;
            }
        }
        d->stats.bytes_used = total;
        free_entries(v, n);
    }
    if (lfd >= 0) {
        (void)flock(lfd, LOCK_UN);
        close(lfd);
    }
}

di_status di_kv_disk_open(const char *dir, uint64_t max_bytes, di_kv_key model_id,
                          int32_t block_size, uint64_t payload_bytes, di_kv_disk **out,
                          di_error *err) {
    *out = NULL;
    if (!dir || !dir[0] || max_bytes < 1 || block_size < 1 || payload_bytes < 1)
        return di_error_set(err, DI_ERR_INVALID_ARG, "kv disk: needs a directory, a cap and a block geometry");
    if (strlen(dir) > 3000) return di_error_set(err, DI_ERR_INVALID_ARG, "kv disk: directory path too long");
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return di_error_set(err, DI_ERR_IO, "kv disk: cannot create %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return di_error_set(err, DI_ERR_IO, "kv disk: %s is not a directory", dir);
    if (access(dir, R_OK | W_OK | X_OK) != 0)
        return di_error_set(err, DI_ERR_IO, "kv disk: %s: %s", dir, strerror(errno));
    di_kv_disk *d = di_calloc(1, sizeof *d);
    if (!d) return di_error_set(err, DI_ERR_NOMEM, "kv disk: out of memory");
    d->dir = strdup(dir);
    d->max_bytes = max_bytes;
    d->model_id = model_id;
    d->block_size = block_size;
    d->payload_bytes = payload_bytes;
    d->stats.max_bytes = max_bytes;
    if (!d->dir) {
        di_kv_disk_free(d);
        return di_error_set(err, DI_ERR_NOMEM, "kv disk: out of memory");
    }
    file_entry *v;
    size_t n;
    uint64_t total;
    di_status s = list_records(d, &v, &n, &total, err);
    if (s) {
        di_kv_disk_free(d);
        return s;
    }
    free_entries(v, n);
    d->stats.bytes_used = total;
    *out = d;
    return DI_OK;
}

void di_kv_disk_free(di_kv_disk *d) {
    if (!d) return;
    free(d->dir);
    free(d->buf);
    free(d);
}

static int record_name(const di_kv_disk *d, const int32_t *prefix, int32_t n_prefix, char *buf, size_t cap) {
    di_kv_key k = di_kv_key_next(di_kv_key_root(), prefix, n_prefix);
    return snprintf(buf, cap, "%016llx-%016llx%016llx" RECORD_SUFFIX, (unsigned long long)d->model_id.lo,
                    (unsigned long long)k.lo, (unsigned long long)k.hi);
}

int di_kv_disk_record_path(const di_kv_disk *d, const int32_t *prefix, int32_t n_prefix, char *buf,
                           size_t cap) {
    char name[128];
    record_name(d, prefix, n_prefix, name, sizeof name);
    return snprintf(buf, cap, "%s/%s", d->dir, name);
}

bool di_kv_disk_has(const di_kv_disk *d, const int32_t *prefix, int32_t n_prefix) {
    char path[4096];
    di_kv_disk_record_path(d, prefix, n_prefix, path, sizeof path);
    return access(path, F_OK) == 0;
}

static bool grow_buf(di_kv_disk *d, size_t n) {
    if (n <= d->buf_cap) return true;
    uint8_t *nb = realloc(d->buf, n);
    if (!nb) return false;
    d->buf = nb;
    d->buf_cap = n;
    return true;
}

static bool write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

di_status di_kv_disk_put(di_kv_disk *d, const int32_t *prefix, int32_t n_prefix,
                         const void *payload, di_error *err) {
    if (d->stats.writes_disabled) return DI_OK;
    if (n_prefix < d->block_size || n_prefix % d->block_size != 0)
        return di_error_set(err, DI_ERR_INVALID_ARG, "kv disk: prefix of %d tokens is not whole blocks",
                            (int)n_prefix);
    size_t n = di_kv_record_size(n_prefix, d->payload_bytes);
    if (n == 0 || n > d->max_bytes) return DI_OK; /* can never fit: not an error */
    if (di_kv_disk_has(d, prefix, n_prefix)) return DI_OK;
    if (!grow_buf(d, n)) return di_error_set(err, DI_ERR_NOMEM, "kv disk: out of memory for a record");
    di_kv_record_write(d->buf, d->model_id, prefix, n_prefix, d->block_size, payload, d->payload_bytes);
    if (d->stats.bytes_used + n > d->max_bytes) sweep(d, n);
    char name[128], path[4096], tmp[4096];
    record_name(d, prefix, n_prefix, name, sizeof name);
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%ld-%llu-%s", d->dir, (long)getpid(),
             (unsigned long long)d->tmp_counter++, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    bool ok = fd >= 0;
    int saved = errno;
    if (ok) {
        ok = write_all(fd, d->buf, n);
        saved = errno;
        if (close(fd) != 0 && ok) {
            ok = false;
            saved = errno;
        }
    }
    if (ok && rename(tmp, path) != 0) {
        ok = false;
        saved = errno;
    }
    if (!ok) {
        unlink(tmp);
        d->stats.n_write_errors++;
        d->stats.writes_disabled = true;
        return di_error_set(err, DI_ERR_IO, "kv disk: writing %s failed (%s); going on with RAM only",
                            path, strerror(saved));
    }
    d->stats.n_writes++;
    d->stats.bytes_used += n;
    return DI_OK;
}

/* Reads a whole file into d->buf; false when absent or unreadable. */
static bool read_file(di_kv_disk *d, const char *path, size_t *n_out) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    struct stat st;
    size_t want = di_kv_record_size(0, d->payload_bytes);
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 0 &&
              (uint64_t)st.st_size <= (uint64_t)want + (uint64_t)INT32_MAX * 4u && grow_buf(d, (size_t)st.st_size);
    size_t got = 0;
    while (ok && got < (size_t)st.st_size) {
        ssize_t r = read(fd, d->buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    *n_out = got;
    return ok;
}

bool di_kv_disk_get(di_kv_disk *d, const int32_t *prefix, int32_t n_prefix, const uint8_t **payload) {
    *payload = NULL;
    char path[4096];
    di_kv_disk_record_path(d, prefix, n_prefix, path, sizeof path);
    size_t n = 0;
    if (!read_file(d, path, &n)) {
        d->stats.n_misses++;
        return false;
    }
    di_kv_record_view v;
    bool ok = di_kv_record_parse(d->buf, n, d->model_id, d->block_size, d->payload_bytes, &v, NULL) == DI_OK &&
              v.n_prefix_tokens == n_prefix &&
              memcmp(v.tokens, prefix, (size_t)n_prefix * sizeof *prefix) == 0;
    if (!ok) {
        /* Corrupt, truncated, foreign or another prefix under a colliding
         * key: never used; removed so it is not read again. */
        d->stats.n_rejected++;
        unlink(path);
        return false;
    }
    d->stats.n_hits++;
    (void)utimensat(AT_FDCWD, path, NULL, 0); /* recently used: last to be swept */
    *payload = v.payload;
    return true;
}

void di_kv_disk_get_stats(const di_kv_disk *d, di_kv_disk_stats *out) { *out = d->stats; }
