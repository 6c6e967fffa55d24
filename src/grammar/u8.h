/* Strict UTF-8 (RFC 3629: no overlongs, no surrogates, at most U+10FFFF)
 * as a byte automaton: the regex automata (regex_dfa.c) and the
 * vocabulary's tables (vocab.c, token_mask*.c) step it one byte at a time.
 * Header only; a leaf of the grammar room. */
#ifndef DI_GRAMMAR_U8_H
#define DI_GRAMMAR_U8_H

#include <stdint.h>

/* Strict UTF-8 decoder states (RFC 3629: no overlongs, no surrogates, at
 * most U+10FFFF): what the next byte must be. */
enum {
    MT_U8_START = 0, /* at a character boundary */
    MT_U8_CONT1,     /* one continuation byte 80..BF left */
    MT_U8_CONT2,     /* two continuation bytes left, next 80..BF */
    MT_U8_E0,        /* after E0: next A0..BF */
    MT_U8_ED,        /* after ED: next 80..9F */
    MT_U8_CONT3,     /* after F1..F3: next 80..BF */
    MT_U8_F0,        /* after F0: next 90..BF */
    MT_U8_F4,        /* after F4: next 80..8F */
    MT_U8_N,
    MT_U8_BAD = 0xFF
};

/* Next decoder state after byte b in state q, or MT_U8_BAD. */
static inline uint8_t mt_u8_next(uint8_t q, uint8_t b) {
    switch (q) {
    case MT_U8_START:
        if (b < 0x80) return MT_U8_START;
        if (b >= 0xC2 && b <= 0xDF) return MT_U8_CONT1;
        if (b == 0xE0) return MT_U8_E0;
        if (b == 0xED) return MT_U8_ED;
        if (b >= 0xE1 && b <= 0xEF) return MT_U8_CONT2;
        if (b == 0xF0) return MT_U8_F0;
        if (b >= 0xF1 && b <= 0xF3) return MT_U8_CONT3;
        if (b == 0xF4) return MT_U8_F4;
        return MT_U8_BAD;
    case MT_U8_CONT1: return b >= 0x80 && b <= 0xBF ? MT_U8_START : MT_U8_BAD;
    case MT_U8_CONT2: return b >= 0x80 && b <= 0xBF ? MT_U8_CONT1 : MT_U8_BAD;
    case MT_U8_E0: return b >= 0xA0 && b <= 0xBF ? MT_U8_CONT1 : MT_U8_BAD;
    case MT_U8_ED: return b >= 0x80 && b <= 0x9F ? MT_U8_CONT1 : MT_U8_BAD;
    case MT_U8_CONT3: return b >= 0x80 && b <= 0xBF ? MT_U8_CONT2 : MT_U8_BAD;
    case MT_U8_F0: return b >= 0x90 && b <= 0xBF ? MT_U8_CONT2 : MT_U8_BAD;
    case MT_U8_F4: return b >= 0x80 && b <= 0x8F ? MT_U8_CONT2 : MT_U8_BAD;
    default: return MT_U8_BAD;
    }
}

#endif
