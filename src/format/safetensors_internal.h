/* Helpers shared by safetensors.c and safetensors_checkpoint.c only. */
#ifndef DI_FORMAT_SAFETENSORS_INTERNAL_H
#define DI_FORMAT_SAFETENSORS_INTERNAL_H

#include "format/safetensors.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Open-addressing name -> index table over an array of tensors that the
 * caller owns and keeps in place. Slots hold index + 1 (0 = empty). */
typedef struct di_st_name_table {
    uint64_t *slots;
    uint64_t cap; /* power of two, at least 2x the item count */
} di_st_name_table;

/* Sizes the table for n items; DI_ERR_NOMEM on failure. */
di_status di_st_table_init(di_st_name_table *t, uint64_t n);
void di_st_table_free(di_st_name_table *t);
/* Inserts items[i]; when a tensor of that name is already present, returns
 * false and sets *existing to its index. */
bool di_st_table_insert(di_st_name_table *t, const di_safetensors_tensor *items, uint64_t i,
                        uint64_t *existing);
/* Index of the tensor named name, or UINT64_MAX. */
uint64_t di_st_table_find(const di_st_name_table *t, const di_safetensors_tensor *items,
                          const char *name);

/* Writes a printable, length-limited copy of a (possibly hostile) name into
 * buf for error messages; returns buf. */
const char *di_st_short_name(char *buf, size_t size, const char *name);

#endif
