/* Checked allocation and overflow-safe size arithmetic. Allocation failure is
 * reported as DI_ERR_NOMEM by the caller; these helpers never abort. Sizes
 * that come from files go through di_mul_overflow / di_add_overflow first. */
#ifndef DI_BASE_ALLOC_H
#define DI_BASE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* true when a*b (or a+b) does not fit in the result; *out is set otherwise. */
static inline bool di_mul_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out);
}
static inline bool di_add_overflow_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out);
}

/* calloc of n*size with overflow check; NULL on overflow or no memory. */
void *di_calloc(size_t n, size_t size);
/* malloc of n*size with overflow check; NULL on overflow or no memory. */
void *di_malloc_array(size_t n, size_t size);
/* realloc of n*size with overflow check; on failure p is left untouched. */
void *di_realloc_array(void *p, size_t n, size_t size);
/* strdup / strndup that return NULL on no memory. */
char *di_strdup(const char *s);
char *di_strndup(const char *s, size_t n);

#endif
