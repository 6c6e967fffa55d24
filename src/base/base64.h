/* Base64 (RFC 4648 standard alphabet) decoding of a run of alphabet
 * characters; padding, prefixes and size limits are the callers' (data:
 * URLs, tokenizer.json's Precompiled charsmap). */
#ifndef DI_BASE_BASE64_H
#define DI_BASE_BASE64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes s[0..n) (no '=' in it) into out, which has room for n * 3 / 4
 * bytes (rounded down: *n_out, the trailing partial bits dropped).
 * false on a byte outside the alphabet, *bad = its index. */
bool di_base64_decode(const char *s, size_t n, uint8_t *out, size_t *n_out, size_t *bad);

#endif
