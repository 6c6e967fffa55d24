/* JSON number text within decimal bounds (json_number.c): the lowest
 * layer of the JSON Schema front end, over the builder only. */
#ifndef DI_GRAMMAR_JSON_NUMBER_H
#define DI_GRAMMAR_JSON_NUMBER_H

#include "grammar/ir.h"

/* A bound as exact decimal digits: value = (neg ? -1 : 1) * ip.fp, ip
 * canonical (no leading zeros), fp without trailing zeros. */
typedef struct jn_dec {
    bool neg;
    char ip[24];
    char fp[48];
} jn_dec;

/* Decimal form of a bound; false when it is out of the supported range
 * (|x| >= 1e18, nonzero |x| < 1e-20, or not finite). */
bool jn_parse_bound(double x, jn_dec *d);

/* Node for JSON number text within the bounds (lo/hi NULL: unbounded;
 * *_strict: exclusive). integer: only integral values (I or I.0+). */
uint32_t jn_number(gb *g, bool integer, const jn_dec *lo, bool lo_strict, const jn_dec *hi, bool hi_strict);

#endif
