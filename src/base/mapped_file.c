#include "base/mapped_file.h"
#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

di_status di_mapped_file_open(const char *path, di_mapped_file *out, di_error *err) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return di_error_set(err, DI_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return di_error_set(err, DI_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return di_error_set(err, DI_ERR_IO, "%s: not a regular file", path);
    }
    out->path = di_strdup(path);
    if (!out->path) {
        close(fd);
        return di_error_set(err, DI_ERR_NOMEM, "%s: out of memory", path);
    }
    out->size = (size_t)st.st_size;
    if (out->size > 0) {
        void *p = mmap(NULL, out->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            free(out->path);
            memset(out, 0, sizeof *out);
            return di_error_set(err, DI_ERR_IO, "%s: mmap failed: %s", path, strerror(e));
        }
        out->data = p;
    }
    close(fd);
    return DI_OK;
}

void di_mapped_file_close(di_mapped_file *f) {
    if (!f) return;
    if (f->data) munmap((void *)f->data, f->size);
    free(f->path);
    memset(f, 0, sizeof *f);
}

/* Half the machine's physical memory, in bytes (0 when the OS will not
 * say). Not the free memory: a model file already in the page cache is
 * not free memory, and touching it costs none. */
static uint64_t pretouch_budget_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    return (uint64_t)pages * (uint64_t)page / 2;
}

bool di_mapped_pretouch(const void *data, size_t size, di_load_progress_fn fn, void *user) {
    long page_l = sysconf(_SC_PAGESIZE);
    size_t page = page_l > 0 ? (size_t)page_l : 4096;
    if (!data || size == 0 || (uint64_t)size > pretouch_budget_bytes()) return false;
    const volatile uint8_t *p = data;
    if (fn) fn(0, size, user);
    unsigned sink = 0;
    for (size_t off = 0; off < size; off += DI_PRETOUCH_CHUNK_BYTES) {
        size_t n = size - off < DI_PRETOUCH_CHUNK_BYTES ? size - off : DI_PRETOUCH_CHUNK_BYTES;
        /* read-ahead of this chunk and the next one (from the page start:
         * madvise wants it aligned); an error only loses the hint */
        uintptr_t a = ((uintptr_t)data + off) & ~(uintptr_t)(page - 1);
        size_t ahead = size - off < 2 * DI_PRETOUCH_CHUNK_BYTES ? size - off : 2 * DI_PRETOUCH_CHUNK_BYTES;
        (void)madvise((void *)a, (uintptr_t)data + off + ahead - a, MADV_WILLNEED);
        /* a byte in every page the chunk overlaps: one per page-sized step, and its last */
        for (size_t i = off; i < off + n; i += page) sink += p[i];
        sink += p[off + n - 1];
        if (fn && off + n < size) fn(off + n, size, user);
    }
    (void)sink;
    if (fn) fn(size, size, user);
    return true;
}

void di_memory_release_hint(const void *data, size_t size) {
#ifdef MADV_PAGEOUT
    long page_l = sysconf(_SC_PAGESIZE);
    uintptr_t page = page_l > 0 ? (uintptr_t)page_l : 4096;
    uintptr_t a = ((uintptr_t)data + page - 1) & ~(page - 1), b = ((uintptr_t)data + size) & ~(page - 1);
    if (data && b > a) (void)madvise((void *)a, b - a, MADV_PAGEOUT);
#else
    (void)data, (void)size;
#endif
}
