/* data: URLs of the OpenAI image_url content part (RFC 2397, base64 form
 * only): "data:<mime>;base64,<payload>". The payload is decoded strictly
 * (RFC 4648 alphabet, '=' padding only at the end, no whitespace); the
 * image decoder then checks the bytes themselves, whatever the MIME says. */
#include "server/server_internal.h"

#include "base/base64.h"

#include <stdlib.h>
#include <string.h>

bool srv_data_url_decode(const char *url, size_t len, size_t max_bytes, uint8_t **out, size_t *n_out,
                         const char **why) {
    *out = NULL;
    *n_out = 0;
    if (len < 5 || strncmp(url, "data:", 5) != 0) {
        *why = "not a data: URL";
        return false;
    }
    const char *comma = memchr(url, ',', len);
    if (!comma) {
        *why = "a data: URL without ','";
        return false;
    }
    const size_t meta = (size_t)(comma - url);
    if (meta < 12 || memcmp(comma - 7, ";base64", 7) != 0) {
        *why = "only base64 data: URLs are accepted";
        return false;
    }
    const char *p = comma + 1;
    size_t n = len - meta - 1;
    while (n && p[n - 1] == '=') n--;
    if (len - meta - 1 - n > 2 || n % 4 == 1) {
        *why = "bad base64 padding";
        return false;
    }
    const size_t bytes = n / 4 * 3 + (n % 4 ? n % 4 - 1 : 0);
    if (bytes == 0 || bytes > max_bytes) {
        *why = bytes ? "the image is over the size limit" : "an empty image";
        return false;
    }
    uint8_t *o = malloc(bytes);
    if (!o) {
        *why = "out of memory";
        return false;
    }
    size_t k, bad;
    if (!di_base64_decode(p, n, o, &k, &bad)) {
        free(o);
        *why = "a character outside the base64 alphabet";
        return false;
    }
    *out = o;
    *n_out = k;
    return true;
}
