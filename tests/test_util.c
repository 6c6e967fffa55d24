#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

const char *di_test_src_dir(void) {
    const char *s = getenv("DI_SRC");
    return s && *s ? s : ".";
}

char *di_test_path(char *buf, size_t size, const char *rel) {
    snprintf(buf, size, "%s/%s", di_test_src_dir(), rel);
    return buf;
}

char *di_test_data(char *buf, size_t size, const char *rel) {
    snprintf(buf, size, "%s/testdata/%s", di_test_src_dir(), rel);
    return buf;
}

const char *di_test_default_model(void) {
    static char buf[4096];
    di_test_path(buf, sizeof buf, "models/SmolLM2-135M-Instruct.Q4_1.gguf");
    return access(buf, R_OK) == 0 ? buf : NULL;
}

char *di_test_read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    long n = ftell(f);
    if (n < 0) { fclose(f); return NULL; }
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = '\0'; if (size) *size = (size_t)n; }
    return buf;
}

uint32_t di_test_rand(di_test_rng *r) {
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return (uint32_t)((r->s * 0x2545F4914F6CDD1Dull) >> 32);
}
