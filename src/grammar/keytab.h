/* Interning of uint32 arrays: key -> dense id, in insertion order. The
 * grammar's automata (regex_dfa.c: states of a determinized pattern) and
 * the token masks (whole states, local states, structural keys) name
 * their states this way. A leaf of the grammar room: it knows no grammar. */
#ifndef DI_GRAMMAR_KEYTAB_H
#define DI_GRAMMAR_KEYTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mt_keytab {
    uint32_t *slot; /* cap entries: id + 1, 0 = empty */
    uint32_t cap;
    uint32_t *data;
    size_t n_data, cap_data;
    size_t *off; /* (n_ids + 1) */
    uint32_t *hash;
    uint32_t n_ids, cap_ids;
} mt_keytab;

/* Id of key k (n words), added when absent (*added tells); UINT32_MAX on
 * no memory. */
uint32_t mt_kt_intern(mt_keytab *t, const uint32_t *k, uint32_t n, bool *added);
/* Id of k or UINT32_MAX when absent. */
uint32_t mt_kt_find(const mt_keytab *t, const uint32_t *k, uint32_t n);
void mt_kt_free(mt_keytab *t);

#endif
