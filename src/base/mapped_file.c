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
